use std::collections::{BTreeMap, HashMap, HashSet};

use cleave_ir::{Graph, NodeId, ValueDef, ValueId};
use cleave_partition::Plan;
use cleave_workdir::ConnFile;

/// A tensor as the views show it: its name and its bytes per inference, when its shape is static.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tensor {
    pub name: String,
    pub bytes: Option<u64>,
}

/// A placed node (constant-computing nodes are weights, and left out of the views).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeView {
    pub label: String,
    pub op: String,
    pub part: usize,
    /// The node's record in the source file (see `cleave_ir::SourceRef`).
    pub source: Option<usize>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartView {
    /// The part's file, as the connection file names it.
    pub file: String,
    /// Index into [`Report::devices`].
    pub device: usize,
    /// Indices into [`Report::nodes`].
    pub nodes: Vec<usize>,
    /// Op type → count, most frequent first.
    pub ops: Vec<(String, usize)>,
    /// Bytes of the weights the part's nodes read (stored, or computed by constant nodes).
    pub param_bytes: u64,
    pub constant_nodes: usize,
    pub inputs: Vec<Tensor>,
    pub outputs: Vec<Tensor>,
}

/// Tensors flowing from one part to another; `None` is the model's inputs (as `from`) or
/// outputs (as `to`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartEdge {
    pub from: Option<usize>,
    pub to: Option<usize>,
    pub tensors: Vec<Tensor>,
}

impl PartEdge {
    /// Total bytes, and whether some tensor has a dynamic size (not counted).
    pub fn bytes(&self) -> (u64, bool) {
        (
            self.tensors.iter().filter_map(|t| t.bytes).sum(),
            self.tensors.iter().any(|t| t.bytes.is_none()),
        )
    }
}

/// Nodes one fused kernel runs. The fusion stage fills these in; the views show them when
/// present.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FusedGroup {
    pub name: String,
    /// Indices into [`Report::nodes`].
    pub nodes: Vec<usize>,
}

/// What the cost model predicts for the plan, when there are figures.
#[derive(Clone, Debug, PartialEq)]
pub struct LatencyView {
    /// Predicted milliseconds per part, in part order.
    pub part_ms: Vec<f64>,
    /// The prediction's lines: total, how the placement was chosen, the alternatives' totals
    /// and the units moved and why.
    pub lines: Vec<String>,
}

/// Everything the views show, gathered once from a graph and its plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The source model's file name.
    pub model: String,
    /// The devices the parts run on, in order of first use.
    pub devices: Vec<String>,
    pub parts: Vec<PartView>,
    /// Placed nodes in topological order.
    pub nodes: Vec<NodeView>,
    /// Edges between placed nodes (deduplicated), with the bytes they carry.
    pub edges: Vec<(usize, usize, Option<u64>)>,
    pub part_edges: Vec<PartEdge>,
    pub inputs: Vec<Tensor>,
    pub outputs: Vec<Tensor>,
    /// (model input, node reading it), indices into `inputs` and `nodes`.
    pub input_uses: Vec<(usize, usize)>,
    /// (node, model output it makes), indices into `nodes` and `outputs`.
    pub output_from: Vec<(usize, usize)>,
    /// Fused groups: `None` until a fusion stage provides them; the views then add a section.
    pub fused: Option<Vec<FusedGroup>>,
    /// Predicted latency, when the caller has cost figures; the page then adds a section.
    pub latency: Option<LatencyView>,
    /// Source record and op of each node in no part (constants, copied where read).
    pub unplaced: Vec<(usize, String)>,
}

impl Report {
    /// `conn` lists the parts in the plan's order (as `emit` writes and `check_conn` reads them).
    pub fn build(g: &Graph, plan: &Plan, conn: &ConnFile, model: &str) -> Report {
        let tensor = |v: ValueId| Tensor {
            name: g.value(v).name.to_string(),
            bytes: g.value(v).ty.byte_size(),
        };
        let mut part_of: HashMap<NodeId, usize> = HashMap::new();
        for (k, p) in plan.parts.iter().enumerate() {
            for &n in &p.nodes {
                part_of.insert(n, k);
            }
        }
        let mut index: HashMap<NodeId, usize> = HashMap::new();
        let mut nodes = Vec::new();
        let mut unplaced = Vec::new();
        for &n in g.topo_order() {
            if let Some(&k) = part_of.get(&n) {
                index.insert(n, nodes.len());
                nodes.push(NodeView {
                    label: g.node_label(n).to_string(),
                    op: g.node(n).op_type.to_string(),
                    part: k,
                    source: g.node(n).source.map(|s| s.index()),
                });
            } else if let Some(s) = g.node(n).source {
                unplaced.push((s.index(), g.node(n).op_type.to_string()));
            }
        }
        let mut edges: BTreeMap<(usize, usize), Option<u64>> = BTreeMap::new();
        for (&n, &to) in &index {
            for v in g.node(n).all_inputs() {
                let Some(p) = g.value(v).producer() else {
                    continue;
                };
                let Some(&from) = index.get(&p) else { continue };
                let b = g.value(v).ty.byte_size();
                edges
                    .entry((from, to))
                    .and_modify(|x| *x = x.zip(b).map(|(a, b)| a + b))
                    .or_insert(b);
            }
        }
        let edges = edges
            .into_iter()
            .map(|((a, b), bytes)| (a, b, bytes))
            .collect();

        // Devices in order of first use: a plan read back from files knows only those, and
        // the colours must not depend on where the plan came from.
        let mut used: Vec<u16> = Vec::new();
        for p in &plan.parts {
            if !used.contains(&p.device) {
                used.push(p.device);
            }
        }
        let devices: Vec<String> = used
            .iter()
            .map(|&d| plan.devices[d as usize].clone())
            .collect();
        let mut parts = Vec::new();
        for (k, p) in plan.parts.iter().enumerate() {
            let mut hist: BTreeMap<&str, usize> = BTreeMap::new();
            for &n in &p.nodes {
                *hist.entry(g.node(n).op_type.as_str()).or_default() += 1;
            }
            let mut ops: Vec<(String, usize)> =
                hist.into_iter().map(|(o, c)| (o.to_string(), c)).collect();
            ops.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            let mut node_idx: Vec<usize> = p
                .nodes
                .iter()
                .filter_map(|n| index.get(n).copied())
                .collect();
            node_idx.sort_unstable();
            parts.push(PartView {
                file: conn
                    .parts
                    .get(k)
                    .map_or_else(|| format!("part {}", k + 1), |c| c.file.clone()),
                device: used.iter().position(|&d| d == p.device).unwrap_or(0),
                nodes: node_idx,
                ops,
                param_bytes: param_bytes(g, &p.nodes, &part_of),
                constant_nodes: p.constant_nodes.len(),
                inputs: sorted(&p.inputs).into_iter().map(tensor).collect(),
                outputs: sorted(&p.outputs).into_iter().map(tensor).collect(),
            });
        }

        // Which part produces each boundary tensor.
        let mut made_by: HashMap<ValueId, usize> = HashMap::new();
        for (k, p) in plan.parts.iter().enumerate() {
            for &v in &p.outputs {
                made_by.insert(v, k);
            }
        }
        let mut grouped: BTreeMap<(Option<usize>, Option<usize>), Vec<Tensor>> = BTreeMap::new();
        for (k, p) in plan.parts.iter().enumerate() {
            for v in sorted(&p.inputs) {
                grouped
                    .entry((made_by.get(&v).copied(), Some(k)))
                    .or_default()
                    .push(tensor(v));
            }
        }
        for &v in &g.outputs {
            grouped
                .entry((made_by.get(&v).copied(), None))
                .or_default()
                .push(tensor(v));
        }
        // `None → None` would be a model input that is also an output: no part involved.
        let part_edges = grouped
            .into_iter()
            .filter(|((a, b), _)| a.is_some() || b.is_some())
            .map(|((from, to), tensors)| PartEdge { from, to, tensors })
            .collect();

        let mut input_uses = Vec::new();
        for (i, &v) in g.inputs.iter().enumerate() {
            let mut readers: Vec<usize> = g
                .consumers(v)
                .iter()
                .filter_map(|c| index.get(c).copied())
                .collect();
            readers.sort_unstable();
            readers.dedup();
            input_uses.extend(readers.into_iter().map(|n| (i, n)));
        }
        let output_from = g
            .outputs
            .iter()
            .enumerate()
            .filter_map(|(o, &v)| {
                g.value(v)
                    .producer()
                    .and_then(|p| index.get(&p))
                    .map(|&n| (n, o))
            })
            .collect();

        Report {
            model: model.to_string(),
            devices,
            parts,
            nodes,
            edges,
            part_edges,
            inputs: g.inputs.iter().map(|&v| tensor(v)).collect(),
            outputs: g.outputs.iter().map(|&v| tensor(v)).collect(),
            input_uses,
            output_from,
            fused: None,
            latency: None,
            unplaced,
        }
    }

    /// Records the assignment's fused groups, in source order however they were found:
    /// each named by its anchor node and rule, its nodes as indices into [`Report::nodes`].
    pub fn set_fused_groups(&mut self, g: &Graph, groups: &[(u16, cleave_fuse::Group)]) {
        let index: HashMap<&str, usize> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.label.as_str(), i))
            .collect();
        let mut sorted: Vec<&cleave_fuse::Group> = groups.iter().map(|(_, grp)| grp).collect();
        sorted.sort_by_key(|grp| grp.anchor());
        let fused = sorted
            .into_iter()
            .map(|grp| FusedGroup {
                name: format!("{} ({})", g.node_label(grp.anchor()), grp.rule.name()),
                nodes: grp
                    .nodes
                    .iter()
                    .filter_map(|&n| index.get(g.node_label(n)).copied())
                    .collect(),
            })
            .collect();
        self.fused = Some(fused);
    }

    pub fn placed_nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Tensors crossing between parts (model inputs and outputs excluded), each once.
    pub fn boundary(&self) -> Vec<&Tensor> {
        let mut seen = HashSet::new();
        self.part_edges
            .iter()
            .filter(|e| e.from.is_some() && e.to.is_some())
            .flat_map(|e| &e.tensors)
            .filter(|t| seen.insert(t.name.as_str()))
            .collect()
    }

    /// Parts per device, in device order.
    pub fn parts_per_device(&self) -> Vec<(&str, usize)> {
        self.devices
            .iter()
            .enumerate()
            .map(|(d, name)| {
                (
                    name.as_str(),
                    self.parts.iter().filter(|p| p.device == d).count(),
                )
            })
            .collect()
    }
}

/// A plan read back from files lists boundaries in the connection file's order, a fresh plan
/// in its own: the views use one order.
fn sorted(vs: &[ValueId]) -> Vec<ValueId> {
    let mut vs = vs.to_vec();
    vs.sort_unstable();
    vs
}

/// Bytes of the constants the nodes read: weights, and outputs of constant-computing nodes
/// (nodes in no part), each counted once.
fn param_bytes(g: &Graph, nodes: &[NodeId], part_of: &HashMap<NodeId, usize>) -> u64 {
    let mut seen = HashSet::new();
    let mut total = 0;
    for &n in nodes {
        for v in g.node(n).all_inputs() {
            let value = g.value(v);
            let constant = match value.def {
                ValueDef::Weight(_) => true,
                ValueDef::Node(p, _) => !part_of.contains_key(&p),
                ValueDef::Input | ValueDef::Outer => false,
            };
            if constant && seen.insert(v) {
                total += value
                    .ty
                    .byte_size()
                    .or_else(|| value.weight().map(|w| w.byte_len()))
                    .unwrap_or(0);
            }
        }
    }
    total
}
