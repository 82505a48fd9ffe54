//! Linear-time constructions: two references the default must never do worse than (ONE's
//! merge rule, the epoch greedy of TFLite/ORT) and device-switch levels.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::dag::Dag;
use crate::union_find::UnionFind;
use crate::unit_graph::{Partition, UnitGraph};

/// ONE's rule: in topological order, a unit joins its producers' group only when all its
/// inputs come from that one group on its own device; otherwise it starts a group.
pub fn one_rule(g: &UnitGraph) -> Partition {
    let d = Dag::new(g, true);
    d.expand(&one_rule_labels(&d))
}

/// The epoch greedy: take every ready unit of one device (the device of the earliest ready
/// unit), keep taking units of that device as they become ready, then switch; finally split
/// each epoch into its connected components.
pub fn epoch_greedy(g: &UnitGraph) -> Partition {
    let d = Dag::new(g, true);
    d.expand(&epoch_greedy_labels(&d))
}

/// Levels that rise by one at each device switch along any path (forwards from the inputs,
/// or backwards from the outputs); each same-device, same-level connected region is a part.
/// Edges between parts always climb a level, so the part graph has no cycle.
pub fn device_levels(g: &UnitGraph, forward: bool) -> Partition {
    let d = Dag::new(g, true);
    d.expand(&device_levels_labels(&d, forward))
}

// The same on the compact graph, whose vertices are numbered in topological order; each
// returns a part label per vertex.

pub(crate) fn one_rule_labels(d: &Dag) -> Vec<u32> {
    let mut group = vec![u32::MAX; d.len()];
    let mut group_dev = Vec::new();
    for v in 0..d.len() as u32 {
        let preds = d.pred(v);
        let dev = d.device[v as usize];
        let joined = match preds.first().map(|&p| group[p as usize]) {
            Some(f) if group_dev[f as usize] == dev && preds.iter().all(|&p| group[p as usize] == f) => Some(f),
            _ => None,
        };
        group[v as usize] = joined.unwrap_or_else(|| {
            group_dev.push(dev);
            (group_dev.len() - 1) as u32
        });
    }
    group
}

pub(crate) fn epoch_greedy_labels(d: &Dag) -> Vec<u32> {
    let mut indeg: Vec<u32> = (0..d.len() as u32).map(|v| d.pred(v).len() as u32).collect();
    // Ready vertices per device, earliest first: the next epoch's device is that of the
    // earliest ready vertex, and the epoch takes every ready vertex of that device.
    let devices = d.device.iter().copied().max().map_or(0, |m| m as usize + 1);
    let mut ready: Vec<BinaryHeap<Reverse<u32>>> = vec![BinaryHeap::new(); devices];
    for v in 0..d.len() as u32 {
        if indeg[v as usize] == 0 {
            ready[d.device[v as usize] as usize].push(Reverse(v));
        }
    }
    let mut epoch = vec![0u32; d.len()];
    let mut current = 0;
    let mut queue = Vec::new();
    while let Some(dev) = (0..devices).filter_map(|x| ready[x].peek().map(|r| (r.0, x))).min().map(|(_, x)| x) {
        queue.extend(ready[dev].drain().map(|r| r.0));
        while let Some(v) = queue.pop() {
            epoch[v as usize] = current;
            for &s in d.succ(v) {
                indeg[s as usize] -= 1;
                if indeg[s as usize] == 0 {
                    if d.device[s as usize] as usize == dev {
                        queue.push(s);
                    } else {
                        ready[d.device[s as usize] as usize].push(Reverse(s));
                    }
                }
            }
        }
        current += 1;
    }
    components(d, &epoch)
}

pub(crate) fn device_levels_labels(d: &Dag, forward: bool) -> Vec<u32> {
    let n = d.len() as u32;
    let mut level = vec![0u32; d.len()];
    let step = |level: &[u32], v: u32, before: &[u32]| {
        before.iter().map(|&p| level[p as usize] + u32::from(d.device[p as usize] != d.device[v as usize])).max().unwrap_or(0)
    };
    if forward {
        for v in 0..n {
            level[v as usize] = step(&level, v, d.pred(v));
        }
    } else {
        for v in (0..n).rev() {
            level[v as usize] = step(&level, v, d.succ(v));
        }
    }
    components(d, &level)
}

/// Connected components of edges whose ends share a label and a device.
fn components(d: &Dag, label: &[u32]) -> Vec<u32> {
    let mut uf = UnionFind::new(d.len());
    for v in 0..d.len() as u32 {
        for &s in d.succ(v) {
            if label[v as usize] == label[s as usize] && d.device[v as usize] == d.device[s as usize] {
                uf.union(v, s);
            }
        }
    }
    (0..d.len() as u32).map(|v| uf.find(v)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ONE's Net_InstanceNorm_003 with ADD on acl_cl (device 1): mean, sub, sq, var, add_eps,
    /// pow, div, mul, add_beta.
    fn instance_norm_add() -> UnitGraph {
        let dev = vec![0, 0, 0, 0, 1, 0, 0, 0, 1];
        UnitGraph::from_edges(dev, &[(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (1, 6), (6, 7), (7, 8)])
    }

    #[test]
    fn one_rule_gives_one_five_parts_where_the_default_gives_four() {
        let g = instance_norm_add();
        assert_eq!(one_rule(&g).count, 5);
        let best = crate::partition_default(&g, Default::default());
        assert_eq!(best.count, 4);
        assert!(g.is_valid(&best, true));
    }

    #[test]
    fn references_are_valid() {
        let g = instance_norm_add();
        for p in [one_rule(&g), epoch_greedy(&g), device_levels(&g, true), device_levels(&g, false)] {
            assert!(g.is_valid(&p, true), "{p:?}");
        }
    }
}
