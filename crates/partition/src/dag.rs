//! The compact graph the algorithms run on: flat adjacency arrays, vertices numbered in
//! topological order, and same-device chains contracted.
//!
//! A unit whose only producer is on its device and feeds nothing else always ends in that
//! producer's part: device levels (both directions) give both the same level, ONE's rule
//! joins them, the epoch greedy takes them in one epoch, and merging never splits. So every
//! construction gives the same partition on the contracted graph, in a fraction of the
//! time on real networks, where most nodes sit in such chains.

use crate::unit_graph::{Partition, UnitGraph};

pub(crate) struct Dag {
    pub device: Vec<u16>,
    succ_at: Vec<(u32, u32)>,
    succ: Vec<u32>,
    pred_at: Vec<u32>,
    pred: Vec<u32>,
    /// Vertex of each unit of the source unit graph.
    pub vertex_of: Vec<u32>,
}

impl Dag {
    /// The graph of `g` with vertices numbered in `g`'s topological order; with `contract`,
    /// each same-device chain becomes one vertex.
    pub fn new(g: &UnitGraph, contract: bool) -> Dag {
        let n = g.len();
        let mut order = vec![0u32; n];
        for (u, &t) in g.topo.iter().enumerate() {
            order[t as usize] = u as u32;
        }
        let mut vertex_of = vec![u32::MAX; n];
        let mut device = Vec::new();
        // A unit joins its producer's vertex when it is that producer's only reader.
        let joins = |u: usize| -> Option<u32> {
            match g.pred[u].as_slice() {
                [p] if contract && g.succ[*p as usize].len() == 1 && g.device[*p as usize] == g.device[u] => Some(*p),
                _ => None,
            }
        };
        let mut pred_at = Vec::with_capacity(n + 1);
        let mut pred = Vec::new();
        for &u in &order {
            let u = u as usize;
            match joins(u) {
                Some(p) => vertex_of[u] = vertex_of[p as usize],
                None => {
                    vertex_of[u] = device.len() as u32;
                    device.push(g.device[u]);
                    pred_at.push(pred.len() as u32);
                    // Producers come earlier in the order: their vertices are known.
                    pred.extend(g.pred[u].iter().map(|&p| vertex_of[p as usize]));
                }
            }
        }
        pred_at.push(pred.len() as u32);
        // A vertex's readers are those of its chain's last unit, the one that is not joined
        // by its only reader.
        let mut succ_at = vec![(0, 0); device.len()];
        let mut succ = Vec::with_capacity(pred.len());
        for &u in &order {
            let u = u as usize;
            let tail = match g.succ[u].as_slice() {
                [s] => joins(*s as usize).is_none(),
                _ => true,
            };
            if tail {
                let start = succ.len() as u32;
                succ.extend(g.succ[u].iter().map(|&s| vertex_of[s as usize]));
                succ_at[vertex_of[u] as usize] = (start, succ.len() as u32);
            }
        }
        Dag { device, succ_at, succ, pred_at, pred, vertex_of }
    }

    pub fn len(&self) -> usize {
        self.device.len()
    }

    pub fn succ(&self, v: u32) -> &[u32] {
        let (a, b) = self.succ_at[v as usize];
        &self.succ[a as usize..b as usize]
    }

    pub fn pred(&self, v: u32) -> &[u32] {
        &self.pred[self.pred_at[v as usize] as usize..self.pred_at[v as usize + 1] as usize]
    }

    /// A partition of the vertices as one of the source units.
    pub fn expand(&self, labels: &[u32]) -> Partition {
        let units: Vec<u32> = self.vertex_of.iter().map(|&v| labels[v as usize]).collect();
        Partition::from_labels(&units)
    }

    /// A partition of the source units as one of the vertices (units of one vertex must
    /// share a part, as they do when the vertices are contracted chains of a partition's
    /// own making, or when nothing was contracted).
    pub fn restrict(&self, p: &Partition) -> Partition {
        let mut labels = vec![0u32; self.len()];
        for (u, &v) in self.vertex_of.iter().enumerate() {
            labels[v as usize] = p.part_of[u];
        }
        Partition::from_labels(&labels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_contract_and_branches_stay() {
        // 0→1→2 on one device is a chain; 2 forks to 3 and 4, joined at 5; 6 is on another device.
        let g = UnitGraph::from_edges(vec![0, 0, 0, 0, 0, 0, 1], &[(0, 1), (1, 2), (2, 3), (2, 4), (3, 5), (4, 5), (5, 6)]);
        let d = Dag::new(&g, true);
        assert_eq!(d.len(), 5);
        assert_eq!(d.vertex_of, vec![0, 0, 0, 1, 2, 3, 4]);
        assert_eq!(d.succ(0), &[1, 2]);
        assert_eq!(d.pred(3), &[1, 2]);
        assert_eq!(d.succ(3), &[4]);
        let flat = Dag::new(&g, false);
        assert_eq!(flat.len(), 7);
        assert_eq!(flat.succ(2), &[3, 4]);
    }
}
