//! A construction's partition in the form the merge pass takes: a dense part per vertex,
//! each part's device, and the edges between parts, found in the same pass as the parts.

use crate::dag::Dag;
use crate::union_find::UnionFind;

pub(crate) struct Start {
    /// Part of each vertex, `0..count`, numbered in order of their first vertex.
    pub part_of: Vec<u32>,
    /// Device of each part.
    pub device: Vec<u16>,
    /// Edges between parts, as `(from, to)` parts (repeats allowed).
    pub cross: Vec<(u32, u32)>,
}

impl Start {
    pub fn count(&self) -> usize {
        self.device.len()
    }

    /// The regions of vertices joined by edges whose ends share a device and a `level` (a
    /// level, an epoch).
    pub fn regions(d: &Dag, mut level: Vec<u32>) -> Start {
        Start::scan(d, &mut level, None)
    }

    /// The regions of levels that rise by one at each device switch along any path from the
    /// inputs, a root starting at `root(device)`: each level is found in the same pass, its
    /// producers' being final when a vertex is reached.
    pub fn climbing(d: &Dag, root: &dyn Fn(u16) -> u32) -> Start {
        Start::scan(d, &mut vec![0u32; d.len()], Some(root))
    }

    /// One pass in vertex order, computing the levels first where `climb` says how roots
    /// start.
    fn scan(d: &Dag, level: &mut [u32], climb: Option<&dyn Fn(u16) -> u32>) -> Start {
        let mut sets = UnionFind::new(d.len());
        // At most one entry per edge; pages never touched cost nothing, regrowth copies.
        let mut cross = Vec::with_capacity(d.edge_count());
        for v in 0..d.len() as u32 {
            let dev = d.device[v as usize];
            let preds = d.pred(v);
            if let Some(root) = climb {
                level[v as usize] = preds
                    .iter()
                    .map(|&p| level[p as usize] + u32::from(d.device[p as usize] != dev))
                    .max()
                    .unwrap_or_else(|| root(dev));
            }
            let lv = level[v as usize];
            let mut joined = false;
            for &p in preds {
                if level[p as usize] == lv && d.device[p as usize] == dev {
                    // `v` is alone until its first join, and later than any root found.
                    if joined {
                        sets.union_min(p, v);
                    } else {
                        sets.adopt(v, p);
                        joined = true;
                    }
                } else {
                    cross.push((p, v));
                }
            }
        }
        Start::from_sets(d, sets, cross)
    }

    /// Parts given by a label per vertex (any labels); every edge is looked at.
    pub fn from_labels(d: &Dag, labels: &[u32]) -> Start {
        let mut part_of = vec![u32::MAX; d.len()];
        let mut map = vec![u32::MAX; d.len()];
        let mut device = Vec::new();
        let mut cross = Vec::new();
        for v in 0..d.len() {
            let l = labels[v] as usize;
            if map[l] == u32::MAX {
                map[l] = device.len() as u32;
                device.push(d.device[v]);
            }
            part_of[v] = map[l];
            for &p in d.pred(v as u32) {
                if part_of[p as usize] != part_of[v] {
                    cross.push((part_of[p as usize], part_of[v]));
                }
            }
        }
        Start {
            part_of,
            device,
            cross,
        }
    }

    /// Dense parts from sets joined by `union_min` (every set's root is its least vertex),
    /// and the crossing edges (vertex pairs) turned into part pairs.
    fn from_sets(d: &Dag, sets: UnionFind, mut cross: Vec<(u32, u32)>) -> Start {
        let mut part_of = sets.into_parents();
        let mut device = Vec::new();
        // In increasing order a vertex's parent is itself (a root: a new part) or an earlier
        // vertex, whose part is already known.
        for v in 0..part_of.len() {
            let p = part_of[v] as usize;
            if p == v {
                part_of[v] = device.len() as u32;
                device.push(d.device[v]);
            } else {
                part_of[v] = part_of[p];
            }
        }
        for (a, b) in &mut cross {
            (*a, *b) = (part_of[*a as usize], part_of[*b as usize]);
        }
        Start {
            part_of,
            device,
            cross,
        }
    }
}
