use cleave_assign::Assignment;
use cleave_ir::{Graph, NodeId};

use crate::union_find::UnionFind;

/// The graph partitioning works on: units with one device each and deduplicated edges, held
/// as flat adjacency arrays (one allocation per direction, read in order by every pass).
#[derive(Clone, Debug, Default)]
pub struct UnitGraph {
    pub device: Vec<u16>,
    /// Readers of unit `u`: `succ[succ_at[u]..succ_at[u + 1]]`, in unit order.
    succ_at: Vec<u32>,
    succ: Vec<u32>,
    /// Producers of unit `u`, in the order the edges were given.
    pred_at: Vec<u32>,
    pred: Vec<u32>,
    /// The IR nodes of unit `u`: `unit_nodes[unit_nodes_at[u]..unit_nodes_at[u + 1]]`, one
    /// flat list rather than a vector per unit (a million-unit graph would make a million
    /// allocations). Both empty for graphs built directly, as in tests.
    unit_nodes_at: Vec<u32>,
    unit_nodes: Vec<NodeId>,
    /// For each unit, its position in a topological order.
    pub topo: Vec<u32>,
    /// Whether `topo` is the identity (units numbered in a topological order), which spares
    /// the passes a reordering.
    ordered: bool,
}

/// Units grouped into parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    /// Part index of each unit, `0..count`.
    pub part_of: Vec<u32>,
    pub count: usize,
}

impl Partition {
    pub fn singletons(g: &UnitGraph) -> Partition {
        Partition {
            part_of: (0..g.len() as u32).collect(),
            count: g.len(),
        }
    }

    /// Renumbers arbitrary labels to `0..count` in order of first appearance.
    pub fn from_labels(labels: &[u32]) -> Partition {
        let mut part_of = Vec::with_capacity(labels.len());
        let mut count = 0u32;
        if labels.iter().all(|&l| (l as usize) < labels.len()) {
            // Labels are mostly indices (union-find roots, group numbers): a table, no hashing.
            let mut map = vec![u32::MAX; labels.len()];
            for &l in labels {
                let slot = &mut map[l as usize];
                if *slot == u32::MAX {
                    *slot = count;
                    count += 1;
                }
                part_of.push(*slot);
            }
        } else {
            let mut map = std::collections::HashMap::new();
            for &l in labels {
                part_of.push(*map.entry(l).or_insert_with(|| {
                    count += 1;
                    count - 1
                }));
            }
        }
        Partition {
            part_of,
            count: count as usize,
        }
    }
}

/// A bare Kahn topological sort over the unit graph's adjacency: the floor a partitioner is
/// measured against, one pass over the edges. A shorter result means a cycle.
pub fn kahn_order(g: &UnitGraph) -> Vec<u32> {
    let mut indeg: Vec<u32> = g.pred_at.windows(2).map(|w| w[1] - w[0]).collect();
    let mut stack: Vec<u32> = (0..g.len() as u32)
        .filter(|&u| indeg[u as usize] == 0)
        .collect();
    let mut order = Vec::with_capacity(g.len());
    while let Some(u) = stack.pop() {
        order.push(u);
        for &s in g.succ(u) {
            indeg[s as usize] -= 1;
            if indeg[s as usize] == 0 {
                stack.push(s);
            }
        }
    }
    order
}

impl UnitGraph {
    pub fn len(&self) -> usize {
        self.device.len()
    }

    pub fn is_empty(&self) -> bool {
        self.device.is_empty()
    }

    /// Whether every edge goes from a lower unit to a higher one.
    pub fn is_ordered(&self) -> bool {
        self.ordered
    }

    pub fn succ(&self, u: u32) -> &[u32] {
        &self.succ[self.succ_at[u as usize] as usize..self.succ_at[u as usize + 1] as usize]
    }

    pub fn pred(&self, u: u32) -> &[u32] {
        &self.pred[self.pred_at[u as usize] as usize..self.pred_at[u as usize + 1] as usize]
    }

    /// Number of (deduplicated) edges.
    pub fn edge_count(&self) -> usize {
        self.succ.len()
    }

    /// A unit graph from explicit edges (`from`, `to`), which must form a DAG. Self-loops and
    /// repeated edges are dropped.
    pub fn from_edges(device: Vec<u16>, edges: &[(u32, u32)]) -> UnitGraph {
        let n = device.len();
        // Producers grouped by reader (a stable counting sort), then each list deduplicated.
        let mut pred_at = vec![0u32; n + 1];
        for &(_, b) in edges {
            pred_at[b as usize + 1] += 1;
        }
        for u in 0..n {
            pred_at[u + 1] += pred_at[u];
        }
        let mut fill = pred_at.clone();
        let mut pred = vec![0u32; edges.len()];
        for &(a, b) in edges {
            pred[fill[b as usize] as usize] = a;
            fill[b as usize] += 1;
        }
        let mut seen = vec![u32::MAX; n];
        let mut w = 0usize;
        let mut start = 0usize;
        for b in 0..n {
            let end = pred_at[b + 1] as usize;
            pred_at[b] = w as u32;
            for i in start..end {
                let a = pred[i];
                if a as usize != b && seen[a as usize] != b as u32 {
                    seen[a as usize] = b as u32;
                    pred[w] = a;
                    w += 1;
                }
            }
            start = end;
        }
        pred_at[n] = w as u32;
        pred.truncate(w);
        // Readers: the transpose, so each list comes out in unit order.
        let mut succ_at = vec![0u32; n + 1];
        for &a in &pred {
            succ_at[a as usize + 1] += 1;
        }
        for u in 0..n {
            succ_at[u + 1] += succ_at[u];
        }
        let mut fill = succ_at.clone();
        let mut succ = vec![0u32; pred.len()];
        for b in 0..n {
            for &a in &pred[pred_at[b] as usize..pred_at[b + 1] as usize] {
                succ[fill[a as usize] as usize] = b as u32;
                fill[a as usize] += 1;
            }
        }
        let mut g = UnitGraph {
            device,
            succ_at,
            succ,
            pred_at,
            pred,
            unit_nodes_at: Vec::new(),
            unit_nodes: Vec::new(),
            topo: Vec::new(),
            ordered: false,
        };
        g.ordered = (0..n as u32).all(|u| g.pred(u).iter().all(|&p| p < u));
        g.topo = if g.ordered {
            (0..n as u32).collect()
        } else {
            g.topological_positions()
        };
        g
    }

    /// Units from an assigned IR graph: every node placed on a device is a unit, except that
    /// the node pairs in `glue` (same device) become one unit. Reads of copied constants are not
    /// edges, but what those constants read from placed units is.
    pub fn from_assignment(g: &Graph, a: &Assignment, glue: &[(NodeId, NodeId)]) -> UnitGraph {
        // Each unit's nodes are a linked list through `next` until the glue is applied, so
        // merging two units is a relabelling of one and a splice.
        const NONE: u32 = u32::MAX;
        let mut unit_of = vec![NONE; g.nodes.len()];
        let mut next = vec![NONE; g.nodes.len()];
        let (mut first, mut last, mut device) = (Vec::new(), Vec::new(), Vec::new());
        for &n in g.topo_order() {
            if let Some(d) = a.placement[n.index()].device() {
                unit_of[n.index()] = first.len() as u32;
                first.push(n.0);
                last.push(n.0);
                device.push(d);
            }
        }
        for &(x, y) in glue {
            let (ux, uy) = (unit_of[x.index()], unit_of[y.index()]);
            if ux == NONE || uy == NONE || ux == uy || device[ux as usize] != device[uy as usize] {
                continue;
            }
            let (ux, uy) = (ux as usize, uy as usize);
            let mut m = first[uy];
            while m != NONE {
                unit_of[m as usize] = ux as u32;
                m = next[m as usize];
            }
            next[last[ux] as usize] = first[uy];
            last[ux] = last[uy];
            first[uy] = NONE;
        }
        // Drop emptied units, renumber, and lay the lists out flat.
        let mut renumber = vec![NONE; first.len()];
        let mut unit_nodes_at = Vec::with_capacity(first.len() + 1);
        let mut unit_nodes = Vec::with_capacity(g.nodes.len());
        let mut kept_dev = Vec::new();
        for (u, &head) in first.iter().enumerate() {
            if head == NONE {
                continue;
            }
            renumber[u] = kept_dev.len() as u32;
            kept_dev.push(device[u]);
            unit_nodes_at.push(unit_nodes.len() as u32);
            let mut m = head;
            while m != NONE {
                unit_nodes.push(NodeId(m));
                m = next[m as usize];
            }
        }
        unit_nodes_at.push(unit_nodes.len() as u32);
        drop((next, first, last, device));
        for u in unit_of.iter_mut().filter(|u| **u != NONE) {
            *u = renumber[*u as usize];
        }
        let placed_above = through_copies(g, &unit_of);
        let mut edges = Vec::new();
        for u in 0..kept_dev.len() {
            let me = u as u32;
            for &n in &unit_nodes[unit_nodes_at[u] as usize..unit_nodes_at[u + 1] as usize] {
                for v in g.node(n).all_inputs() {
                    let Some(p) = g.value(v).producer() else {
                        continue;
                    };
                    match unit_of[p.index()] {
                        u32::MAX => edges.extend(
                            placed_above[p.index()]
                                .iter()
                                .filter(|&&pu| pu != me)
                                .map(|&pu| (pu, me)),
                        ),
                        pu if pu != me => edges.push((pu, me)),
                        _ => {}
                    }
                }
            }
        }
        let mut ug = UnitGraph::from_edges(kept_dev, &edges);
        ug.unit_nodes_at = unit_nodes_at;
        ug.unit_nodes = unit_nodes;
        ug
    }

    /// The IR nodes of unit `u` (none for a graph built from edges alone).
    pub fn nodes_of(&self, u: usize) -> &[NodeId] {
        match (self.unit_nodes_at.get(u), self.unit_nodes_at.get(u + 1)) {
            (Some(&a), Some(&b)) => &self.unit_nodes[a as usize..b as usize],
            _ => &[],
        }
    }

    /// Each unit's IR nodes, in unit order.
    pub fn unit_nodes(&self) -> impl ExactSizeIterator<Item = &[NodeId]> + '_ {
        (0..self.len()).map(|u| self.nodes_of(u))
    }

    /// Kahn's algorithm, lowest unit first among the ready ones.
    fn topological_positions(&self) -> Vec<u32> {
        let n = self.len();
        let mut indeg: Vec<usize> = (0..n as u32).map(|u| self.pred(u).len()).collect();
        let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<u32>> = (0..n as u32)
            .filter(|&u| indeg[u as usize] == 0)
            .map(std::cmp::Reverse)
            .collect();
        let mut pos = vec![u32::MAX; n];
        let mut next = 0;
        while let Some(std::cmp::Reverse(u)) = ready.pop() {
            pos[u as usize] = next;
            next += 1;
            for &s in self.succ(u) {
                indeg[s as usize] -= 1;
                if indeg[s as usize] == 0 {
                    ready.push(std::cmp::Reverse(s));
                }
            }
        }
        pos
    }

    /// Units in topological order.
    pub fn order(&self) -> Vec<u32> {
        let mut o = vec![0u32; self.len()];
        for (u, &t) in self.topo.iter().enumerate() {
            o[t as usize] = u as u32;
        }
        o
    }

    /// Whether the parts of `p` form a DAG and each part is single-device.
    pub fn is_valid(&self, p: &Partition, require_connected: bool) -> bool {
        let k = p.count;
        let mut dev = vec![u16::MAX; k];
        for u in 0..self.len() {
            let part = p.part_of[u] as usize;
            if dev[part] != u16::MAX && dev[part] != self.device[u] {
                return false;
            }
            dev[part] = self.device[u];
        }
        let mut qsucc: Vec<Vec<usize>> = vec![Vec::new(); k];
        for u in 0..self.len() {
            for &s in self.succ(u as u32) {
                let (a, b) = (p.part_of[u] as usize, p.part_of[s as usize] as usize);
                if a != b {
                    qsucc[a].push(b);
                }
            }
        }
        let mut indeg = vec![0usize; k];
        for list in &mut qsucc {
            list.sort_unstable();
            list.dedup();
            for &b in list.iter() {
                indeg[b] += 1;
            }
        }
        let mut stack: Vec<usize> = (0..k).filter(|&x| indeg[x] == 0).collect();
        let mut seen = 0;
        while let Some(x) = stack.pop() {
            seen += 1;
            for &s in &qsucc[x] {
                indeg[s] -= 1;
                if indeg[s] == 0 {
                    stack.push(s);
                }
            }
        }
        if seen != k {
            return false;
        }
        !require_connected || self.parts_connected(p)
    }

    /// Whether every part is connected through edges inside it (ignoring direction).
    pub fn parts_connected(&self, p: &Partition) -> bool {
        let mut uf = UnionFind::new(self.len());
        for u in 0..self.len() {
            for &s in self.succ(u as u32) {
                if p.part_of[u] == p.part_of[s as usize] {
                    uf.union(u as u32, s);
                }
            }
        }
        let mut root_of_part = vec![u32::MAX; p.count];
        for u in 0..self.len() {
            let r = uf.find(u as u32);
            let part = p.part_of[u] as usize;
            if root_of_part[part] == u32::MAX {
                root_of_part[part] = r;
            } else if root_of_part[part] != r {
                return false;
            }
        }
        true
    }
}

/// For each node no unit or part owns (a copied constant), the owners of the placed nodes it
/// reads through other copies. A copied constant may read a placed one (a constant graph
/// output, or a constant an [OPNAME] rule pins), and whatever copies it then depends on that
/// owner. `owner[n]` is `u32::MAX` for unplaced nodes.
pub(crate) fn through_copies(g: &Graph, owner: &[u32]) -> Vec<Vec<u32>> {
    let mut above: Vec<Vec<u32>> = vec![Vec::new(); g.nodes.len()];
    for &n in g.topo_order() {
        if owner[n.index()] != u32::MAX {
            continue;
        }
        let mut mine = Vec::new();
        for v in g.node(n).all_inputs() {
            if let Some(p) = g.value(v).producer() {
                match owner[p.index()] {
                    u32::MAX => mine.extend_from_slice(&above[p.index()]),
                    o => mine.push(o),
                }
            }
        }
        mine.sort_unstable();
        mine.dedup();
        above[n.index()] = mine;
    }
    above
}
