use std::collections::HashSet;

use cleave_assign::{Assignment, Placement};
use cleave_ir::{Graph, Node, NodeId, ValueDef, ValueId};

use crate::unit_graph::{Partition, UnitGraph};

/// One part: a device and the nodes it runs, with its boundary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    pub device: u16,
    /// Nodes placed in this part, in source order.
    pub nodes: Vec<NodeId>,
    /// Constant-computing nodes copied into this part because it reads their outputs.
    pub constant_nodes: Vec<NodeId>,
    /// Weights (initializers) the part reads, directly or through its constant nodes.
    pub weights: Vec<ValueId>,
    /// Tensors the part receives: graph inputs or other parts' outputs.
    pub inputs: Vec<ValueId>,
    /// Tensors the part hands on: graph outputs or reads of later parts.
    pub outputs: Vec<ValueId>,
    /// Where a copied node reads the first tensor, it reads the second here: a decoder's
    /// stage takes the past length from the shape of a cache it holds, not from layer 0's
    /// ([`Plan::read_own_shapes`]).
    pub reads_instead: Vec<(ValueId, ValueId)>,
}

impl Part {
    /// What node `n` reads in this part as its input `v`.
    pub fn reads(&self, n: NodeId, v: ValueId) -> ValueId {
        match self.reads_instead.iter().find(|(from, _)| *from == v) {
            Some(&(_, to)) if self.constant_nodes.contains(&n) => to,
            _ => v,
        }
    }
}

/// A partition mapped onto the IR graph, parts numbered in dependency order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub devices: Vec<String>,
    pub parts: Vec<Part>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("the parts depend on each other in a cycle")]
    Cycle,
    #[error("part {part} reads the shape of the cache '{tensor}' but holds no cache declared with that shape")]
    NoOwnCache { part: usize, tensor: String },
}

impl Plan {
    pub fn device_name(&self, part: &Part) -> &str {
        &self.devices[part.device as usize]
    }

    /// Points each copied node that only reads a tensor's shape (`shape_only`) at a tensor
    /// the part takes anyway, declared with that very shape, where the part would otherwise
    /// take the tensor for that read alone: a decoder's stage reads the past length from its
    /// own cache rather than layer 0's, and the sequence length from the hidden state it
    /// receives rather than the embedding, so neither crosses a hop. A cache with no such
    /// substitute is an error (a stage holds only its own layers' caches); another tensor is
    /// taken as before. Outputs are then what the parts still read.
    pub fn read_own_shapes(
        &mut self,
        g: &Graph,
        caches: &[ValueId],
        shape_only: impl Fn(&Node) -> bool,
    ) -> Result<(), PlanError> {
        for (k, part) in self.parts.iter_mut().enumerate() {
            let inputs: HashSet<ValueId> = part.inputs.iter().copied().collect();
            let shape_copy =
                |n: NodeId| part.constant_nodes.binary_search(&n).is_ok() && shape_only(g.node(n));
            let mut needed: Vec<ValueId> = part
                .nodes
                .iter()
                .chain(&part.constant_nodes)
                .filter(|&&n| !shape_copy(n))
                .flat_map(|&n| g.node(n).all_inputs())
                .filter(|v| inputs.contains(v))
                .collect();
            needed.sort_unstable();
            needed.dedup();
            let mut instead = Vec::new();
            for &c in part.constant_nodes.iter().filter(|&&c| shape_copy(c)) {
                for v in g.node(c).all_inputs() {
                    if !inputs.contains(&v)
                        || needed.contains(&v)
                        || instead.iter().any(|&(from, _)| from == v)
                    {
                        continue;
                    }
                    match g.same_shape_input(&needed, v) {
                        Some(own) => instead.push((v, own)),
                        None if caches.contains(&v) => {
                            return Err(PlanError::NoOwnCache {
                                part: k + 1,
                                tensor: g.value(v).name.to_string(),
                            })
                        }
                        None => needed.push(v),
                    }
                }
            }
            part.inputs
                .retain(|v| !instead.iter().any(|&(from, _)| from == *v));
            part.reads_instead = instead;
        }
        let read: HashSet<ValueId> = self
            .parts
            .iter()
            .flat_map(|p| p.inputs.iter().copied())
            .collect();
        let graph_outputs: HashSet<ValueId> = g.outputs.iter().copied().collect();
        for part in &mut self.parts {
            fill_outputs(g, part, &read, &graph_outputs);
        }
        Ok(())
    }

    /// Maps a partition of `ug` (built from `g` and `a`) to parts of `g`.
    pub fn build(
        g: &Graph,
        a: &Assignment,
        ug: &UnitGraph,
        p: &Partition,
    ) -> Result<Plan, PlanError> {
        let mut part_of_node = vec![u32::MAX; g.nodes.len()];
        for (u, nodes) in ug.unit_nodes().enumerate() {
            for n in nodes {
                part_of_node[n.index()] = p.part_of[u];
            }
        }
        let k = p.count;
        // Part dependencies, then a topological numbering, earliest source node first.
        let mut deps: Vec<HashSet<u32>> = vec![HashSet::new(); k];
        let mut first_pos = vec![usize::MAX; k];
        let above = crate::unit_graph::through_copies(g, &part_of_node);
        for (pos, &n) in g.topo_order().iter().enumerate() {
            let me = part_of_node[n.index()];
            if me == u32::MAX {
                continue;
            }
            first_pos[me as usize] = first_pos[me as usize].min(pos);
            for v in g.node(n).all_inputs() {
                let Some(pn) = g.value(v).producer() else {
                    continue;
                };
                match part_of_node[pn.index()] {
                    u32::MAX => {
                        deps[me as usize].extend(above[pn.index()].iter().filter(|&&o| o != me))
                    }
                    other if other != me => {
                        deps[me as usize].insert(other);
                    }
                    _ => {}
                }
            }
        }
        let mut indeg: Vec<usize> = deps.iter().map(HashSet::len).collect();
        let mut users: Vec<Vec<u32>> = vec![Vec::new(); k];
        for (me, ds) in deps.iter().enumerate() {
            for &d in ds {
                users[d as usize].push(me as u32);
            }
        }
        let mut ready: std::collections::BTreeSet<(usize, u32)> = (0..k as u32)
            .filter(|&x| indeg[x as usize] == 0)
            .map(|x| (first_pos[x as usize], x))
            .collect();
        let mut number = vec![u32::MAX; k];
        let mut next = 0;
        while let Some(&(pos, x)) = ready.iter().next() {
            ready.remove(&(pos, x));
            number[x as usize] = next;
            next += 1;
            for &y in &users[x as usize] {
                indeg[y as usize] -= 1;
                if indeg[y as usize] == 0 {
                    ready.insert((first_pos[y as usize], y));
                }
            }
        }
        if next as usize != k {
            return Err(PlanError::Cycle);
        }
        for x in part_of_node.iter_mut().filter(|x| **x != u32::MAX) {
            *x = number[*x as usize];
        }
        let mut parts: Vec<Part> = (0..k)
            .map(|_| Part {
                device: 0,
                nodes: Vec::new(),
                constant_nodes: Vec::new(),
                weights: Vec::new(),
                inputs: Vec::new(),
                outputs: Vec::new(),
                reads_instead: Vec::new(),
            })
            .collect();
        for (i, &x) in part_of_node.iter().enumerate() {
            if x != u32::MAX {
                let part = &mut parts[x as usize];
                part.nodes.push(NodeId(i as u32));
                if let Placement::Device(d, _) = a.placement[i] {
                    part.device = d;
                }
            }
        }
        let graph_outputs: HashSet<ValueId> = g.outputs.iter().copied().collect();
        for (x, part) in parts.iter_mut().enumerate() {
            fill_inputs(g, &part_of_node, x as u32, part);
        }
        // A part's outputs are what other parts take as inputs (directly, or through the
        // constants they copy) and graph outputs: never a value only a copy inside the same
        // part reads.
        let read: HashSet<ValueId> = parts
            .iter()
            .flat_map(|p| p.inputs.iter().copied())
            .collect();
        for part in &mut parts {
            fill_outputs(g, part, &read, &graph_outputs);
        }
        Ok(Plan {
            devices: a.devices.clone(),
            parts,
        })
    }
}

fn fill_inputs(g: &Graph, part_of_node: &[u32], me: u32, part: &mut Part) {
    let mut consts: HashSet<NodeId> = HashSet::new();
    let mut weights: Vec<ValueId> = Vec::new();
    let mut inputs: Vec<ValueId> = Vec::new();
    // Reads of the placed nodes, then of the constant nodes they pull in (transitively).
    let mut work: Vec<NodeId> = part.nodes.clone();
    while let Some(n) = work.pop() {
        for v in g.node(n).all_inputs() {
            let value = g.value(v);
            match value.def {
                ValueDef::Weight(_) => weights.push(v),
                ValueDef::Input | ValueDef::Outer => inputs.push(v),
                ValueDef::Node(p, _) => {
                    let owner = part_of_node[p.index()];
                    if owner == u32::MAX {
                        if consts.insert(p) {
                            work.push(p);
                        }
                    } else if owner != me {
                        inputs.push(v);
                    }
                }
            }
        }
    }
    let mut constant_nodes: Vec<NodeId> = consts.into_iter().collect();
    constant_nodes.sort_unstable();
    // Duplicates are dropped once at the end: a part may read thousands of tensors.
    weights.sort_unstable();
    weights.dedup();
    inputs.sort_unstable();
    inputs.dedup();
    part.constant_nodes = constant_nodes;
    part.weights = weights;
    part.inputs = inputs;
}

fn fill_outputs(
    g: &Graph,
    part: &mut Part,
    read: &HashSet<ValueId>,
    graph_outputs: &HashSet<ValueId>,
) {
    let mut outputs = Vec::new();
    for &n in &part.nodes {
        for &v in g.node(n).outputs.iter().flatten() {
            // A part never takes its own values as inputs, so `read` is other parts' reads.
            if read.contains(&v) || graph_outputs.contains(&v) {
                outputs.push(v);
            }
        }
    }
    if outputs.is_empty() {
        // Only dead ends here (a Constant a quantizer left unused, say): their results become
        // the part's outputs, because an engine refuses a model that computes nothing.
        outputs = part
            .nodes
            .iter()
            .flat_map(|&n| g.node(n).outputs.iter().flatten().copied())
            .filter(|&v| g.consumers(v).is_empty())
            .collect();
    }
    part.outputs = outputs;
}
