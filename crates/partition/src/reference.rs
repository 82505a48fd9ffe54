//! Linear-time constructions: two references the default must never do worse than (ONE's
//! merge rule, the epoch greedy of TFLite/ORT) and device-switch levels.

use std::collections::BTreeSet;

use crate::union_find::UnionFind;
use crate::unit_graph::{Partition, UnitGraph};

/// ONE's rule: in topological order, a unit joins its producers' group only when all its
/// inputs come from that one group on its own device; otherwise it starts a group.
pub fn one_rule(g: &UnitGraph) -> Partition {
    let mut group = vec![u32::MAX; g.len()];
    let mut group_dev = Vec::new();
    for u in g.order() {
        let preds = &g.pred[u as usize];
        let first = preds.first().map(|&p| group[p as usize]);
        let joined = match first {
            Some(f) if group_dev[f as usize] == g.device[u as usize] && preds.iter().all(|&p| group[p as usize] == f) => Some(f),
            _ => None,
        };
        group[u as usize] = joined.unwrap_or_else(|| {
            group_dev.push(g.device[u as usize]);
            (group_dev.len() - 1) as u32
        });
    }
    Partition::from_labels(&group)
}

/// The epoch greedy: take every ready unit of one device (the device of the earliest ready
/// unit), keep taking units of that device as they become ready, then switch; finally split
/// each epoch into its connected components.
pub fn epoch_greedy(g: &UnitGraph) -> Partition {
    let mut indeg: Vec<usize> = g.pred.iter().map(Vec::len).collect();
    let mut ready: BTreeSet<(u32, u32)> = (0..g.len() as u32).filter(|&u| indeg[u as usize] == 0).map(|u| (g.topo[u as usize], u)).collect();
    let mut epoch = vec![0u32; g.len()];
    let mut current = 0;
    while let Some(&(_, first)) = ready.iter().next() {
        let d = g.device[first as usize];
        let mut queue: Vec<u32> = ready.iter().filter(|(_, u)| g.device[*u as usize] == d).map(|&(_, u)| u).collect();
        for u in &queue {
            ready.remove(&(g.topo[*u as usize], *u));
        }
        while let Some(u) = queue.pop() {
            epoch[u as usize] = current;
            for &s in &g.succ[u as usize] {
                indeg[s as usize] -= 1;
                if indeg[s as usize] == 0 {
                    if g.device[s as usize] == d {
                        queue.push(s);
                    } else {
                        ready.insert((g.topo[s as usize], s));
                    }
                }
            }
        }
        current += 1;
    }
    components(g, &epoch)
}

/// Levels that rise by one at each device switch along any path (forwards from the inputs,
/// or backwards from the outputs); each same-device, same-level connected region is a part.
/// Edges between parts always climb a level, so the part graph has no cycle.
pub fn device_levels(g: &UnitGraph, forward: bool) -> Partition {
    let mut level = vec![0u32; g.len()];
    let mut order = g.order();
    if !forward {
        order.reverse();
    }
    for &u in &order {
        let before = if forward { &g.pred[u as usize] } else { &g.succ[u as usize] };
        level[u as usize] = before
            .iter()
            .map(|&p| level[p as usize] + u32::from(g.device[p as usize] != g.device[u as usize]))
            .max()
            .unwrap_or(0);
    }
    components(g, &level)
}

/// Connected components of edges whose ends share a label (and so a device, for callers
/// whose labels never mix devices across an edge of equal label).
fn components(g: &UnitGraph, label: &[u32]) -> Partition {
    let mut uf = UnionFind::new(g.len());
    for u in 0..g.len() {
        for &s in &g.succ[u] {
            if label[u] == label[s as usize] && g.device[u] == g.device[s as usize] {
                uf.union(u as u32, s);
            }
        }
    }
    let labels: Vec<u32> = (0..g.len() as u32).map(|u| uf.find(u)).collect();
    Partition::from_labels(&labels)
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
