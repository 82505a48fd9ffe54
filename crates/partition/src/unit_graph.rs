use cleave_assign::Assignment;
use cleave_ir::{Graph, NodeId};

use crate::union_find::UnionFind;

/// The graph partitioning works on: units with one device each and deduplicated edges.
#[derive(Clone, Debug, Default)]
pub struct UnitGraph {
    pub device: Vec<u16>,
    pub succ: Vec<Vec<u32>>,
    pub pred: Vec<Vec<u32>>,
    /// The IR nodes of each unit (empty for graphs built directly, as in tests).
    pub nodes: Vec<Vec<NodeId>>,
    /// For each unit, its position in a topological order.
    pub topo: Vec<u32>,
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
        Partition { part_of: (0..g.len() as u32).collect(), count: g.len() }
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
        Partition { part_of, count: count as usize }
    }
}

/// A bare Kahn topological sort over the unit graph's adjacency: the floor a partitioner is
/// measured against, one pass over the edges. A shorter result means a cycle.
pub fn kahn_order(g: &UnitGraph) -> Vec<u32> {
    let mut indeg: Vec<u32> = g.pred.iter().map(|p| p.len() as u32).collect();
    let mut stack: Vec<u32> = (0..g.len() as u32).filter(|&u| indeg[u as usize] == 0).collect();
    let mut order = Vec::with_capacity(g.len());
    while let Some(u) = stack.pop() {
        order.push(u);
        for &s in &g.succ[u as usize] {
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

    /// A unit graph from explicit edges (`from`, `to`), which must form a DAG.
    pub fn from_edges(device: Vec<u16>, edges: &[(u32, u32)]) -> UnitGraph {
        let n = device.len();
        let mut succ = vec![Vec::new(); n];
        let mut pred = vec![Vec::new(); n];
        for &(a, b) in edges {
            // Edges arrive grouped by reader, whose inputs are few: check those.
            if a != b && !pred[b as usize].contains(&a) {
                succ[a as usize].push(b);
                pred[b as usize].push(a);
            }
        }
        let mut g = UnitGraph { device, succ, pred, nodes: vec![Vec::new(); n], topo: Vec::new() };
        g.topo = g.topological_positions();
        g
    }

    /// Units from an assigned IR graph: every node placed on a device is a unit, except that
    /// the node pairs in `glue` (same device) become one unit. Reads of constants are not edges.
    pub fn from_assignment(g: &Graph, a: &Assignment, glue: &[(NodeId, NodeId)]) -> UnitGraph {
        let mut unit_of = vec![u32::MAX; g.nodes.len()];
        let mut nodes: Vec<Vec<NodeId>> = Vec::new();
        let mut device = Vec::new();
        for &n in g.topo_order() {
            if let Some(d) = a.placement[n.index()].device() {
                unit_of[n.index()] = nodes.len() as u32;
                nodes.push(vec![n]);
                device.push(d);
            }
        }
        for &(x, y) in glue {
            let (ux, uy) = (unit_of[x.index()], unit_of[y.index()]);
            if ux == u32::MAX || uy == u32::MAX || ux == uy || device[ux as usize] != device[uy as usize] {
                continue;
            }
            let moved = std::mem::take(&mut nodes[uy as usize]);
            for m in &moved {
                unit_of[m.index()] = ux;
            }
            nodes[ux as usize].extend(moved);
        }
        // Drop emptied units and renumber.
        let mut renumber = vec![u32::MAX; nodes.len()];
        let mut kept_nodes = Vec::new();
        let mut kept_dev = Vec::new();
        for (u, ns) in nodes.into_iter().enumerate() {
            if !ns.is_empty() {
                renumber[u] = kept_nodes.len() as u32;
                kept_nodes.push(ns);
                kept_dev.push(device[u]);
            }
        }
        for u in unit_of.iter_mut().filter(|u| **u != u32::MAX) {
            *u = renumber[*u as usize];
        }
        let mut edges = Vec::new();
        for (u, ns) in kept_nodes.iter().enumerate() {
            for &n in ns {
                for v in g.node(n).all_inputs() {
                    if let Some(p) = g.value(v).producer() {
                        let pu = unit_of[p.index()];
                        if pu != u32::MAX && pu != u as u32 {
                            edges.push((pu, u as u32));
                        }
                    }
                }
            }
        }
        let mut ug = UnitGraph::from_edges(kept_dev, &edges);
        ug.nodes = kept_nodes;
        ug
    }

    /// Kahn's algorithm, lowest unit first among the ready ones.
    fn topological_positions(&self) -> Vec<u32> {
        let n = self.len();
        let mut indeg: Vec<usize> = self.pred.iter().map(Vec::len).collect();
        let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<u32>> =
            (0..n as u32).filter(|&u| indeg[u as usize] == 0).map(std::cmp::Reverse).collect();
        let mut pos = vec![u32::MAX; n];
        let mut next = 0;
        while let Some(std::cmp::Reverse(u)) = ready.pop() {
            pos[u as usize] = next;
            next += 1;
            for &s in &self.succ[u as usize] {
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
            for &s in &self.succ[u] {
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
            for &s in &self.succ[u] {
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
