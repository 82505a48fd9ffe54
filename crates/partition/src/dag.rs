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
    pred_at: Vec<u32>,
    pred: Vec<u32>,
    /// Vertex of each unit of the source unit graph.
    pub vertex_of: Vec<u32>,
    /// Whether every root (vertex without producers) is on vertex 0's device.
    pub roots_on_first_device: bool,
}

impl Dag {
    /// The graph of `g` with vertices numbered in `g`'s topological order; with `contract`,
    /// each same-device chain becomes one vertex. One pass over the units' producers; only
    /// producers are kept (passes that need readers build them with [`Dag::readers`]).
    pub fn new(g: &UnitGraph, contract: bool) -> Dag {
        let n = g.len();
        let order = if g.is_ordered() {
            None
        } else {
            Some(g.order())
        };
        let mut vertex_of = vec![u32::MAX; n];
        let mut device = Vec::with_capacity(n);
        // Capacities are upper bounds: untouched pages of a vector cost nothing.
        let mut pred_at = Vec::with_capacity(n + 1);
        let mut pred = Vec::with_capacity(g.edge_count());
        let mut roots_on_first_device = true;
        for i in 0..n {
            let u = order.as_ref().map_or(i as u32, |o| o[i]);
            let producers = g.pred(u);
            // A unit joins its producer's vertex when it is that producer's only reader.
            if let [p] = producers {
                if contract
                    && g.succ(*p).len() == 1
                    && g.device[*p as usize] == g.device[u as usize]
                {
                    vertex_of[u as usize] = vertex_of[*p as usize];
                    continue;
                }
            }
            vertex_of[u as usize] = device.len() as u32;
            device.push(g.device[u as usize]);
            roots_on_first_device &= !producers.is_empty() || device[0] == g.device[u as usize];
            pred_at.push(pred.len() as u32);
            // Producers come earlier in the order: their vertices are known, and distinct
            // (only a chain's last unit has readers outside it).
            pred.extend(producers.iter().map(|&p| vertex_of[p as usize]));
        }
        pred_at.push(pred.len() as u32);
        Dag {
            device,
            pred_at,
            pred,
            vertex_of,
            roots_on_first_device,
        }
    }

    pub fn len(&self) -> usize {
        self.device.len()
    }

    pub fn edge_count(&self) -> usize {
        self.pred.len()
    }

    pub fn pred(&self, v: u32) -> &[u32] {
        &self.pred[self.pred_at[v as usize] as usize..self.pred_at[v as usize + 1] as usize]
    }

    /// Readers of each vertex, in increasing order: `(at, list)` with vertex `v`'s readers in
    /// `list[at[v]..at[v + 1]]`.
    pub fn readers(&self) -> (Vec<u32>, Vec<u32>) {
        let (at, adj) = (&self.pred_at, &self.pred);
        let n = self.len();
        let mut rat = vec![0u32; n + 1];
        for &x in adj {
            rat[x as usize + 1] += 1;
        }
        for v in 0..n {
            rat[v + 1] += rat[v];
        }
        let mut fill: Vec<u32> = rat[..n].to_vec();
        let mut radj = vec![0u32; adj.len()];
        for v in 0..n {
            for &x in &adj[at[v] as usize..at[v + 1] as usize] {
                radj[fill[x as usize] as usize] = v as u32;
                fill[x as usize] += 1;
            }
        }
        (rat, radj)
    }

    /// A partition of the vertices (`part(v)` dense in `0..count`) as one of the source units.
    pub fn expand(&self, part: impl Fn(u32) -> u32, count: usize) -> Partition {
        Partition {
            part_of: self.vertex_of.iter().map(|&v| part(v)).collect(),
            count,
        }
    }

    /// Labels of the source units as labels of the vertices (units of one vertex must
    /// share a label, as they do when nothing was contracted).
    pub fn restrict(&self, labels: &[u32]) -> Vec<u32> {
        let mut out = vec![0u32; self.len()];
        for (u, &v) in self.vertex_of.iter().enumerate() {
            out[v as usize] = labels[u];
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_contract_and_branches_stay() {
        // 0→1→2 on one device is a chain; 2 forks to 3 and 4, joined at 5; 6 is on another device.
        let g = UnitGraph::from_edges(
            vec![0, 0, 0, 0, 0, 0, 1],
            &[(0, 1), (1, 2), (2, 3), (2, 4), (3, 5), (4, 5), (5, 6)],
        );
        let d = Dag::new(&g, true);
        assert_eq!(d.len(), 5);
        assert_eq!(d.vertex_of, vec![0, 0, 0, 1, 2, 3, 4]);
        let (at, succ) = d.readers();
        assert_eq!(&succ[at[0] as usize..at[1] as usize], &[1, 2]);
        assert_eq!(d.pred(3), &[1, 2]);
        assert_eq!(&succ[at[3] as usize..at[4] as usize], &[4]);
        let flat = Dag::new(&g, false);
        assert_eq!(flat.len(), 7);
        let (at, succ) = flat.readers();
        assert_eq!(&succ[at[2] as usize..at[3] as usize], &[3, 4]);
    }
}
