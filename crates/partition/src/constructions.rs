//! Linear-time constructions: two references the default must never do worse than (ONE's
//! merge rule, the epoch greedy of TFLite/ORT) and device-switch levels.

use crate::dag::Dag;
use crate::start_partition::Start;
use crate::unit_graph::{Partition, UnitGraph};

/// ONE's rule: in topological order, a unit joins its producers' group only when all its
/// inputs come from that one group on its own device; otherwise it starts a group.
pub fn one_rule(g: &UnitGraph) -> Partition {
    on_units(g, |d| Start::from_labels(d, &one_rule_groups(d).0))
}

/// The epoch greedy: take every ready unit of one device (the device of the earliest ready
/// unit), keep taking units of that device as they become ready, then switch; finally split
/// each epoch into its connected components.
pub fn epoch_greedy(g: &UnitGraph) -> Partition {
    on_units(g, epochs)
}

/// Levels that rise by one at each device switch along any path (forwards from the inputs,
/// or backwards from the outputs); each same-device, same-level connected region is a part.
/// Edges between parts always climb a level, so the part graph has no cycle.
pub fn device_levels(g: &UnitGraph, forward: bool) -> Partition {
    on_units(g, |d| {
        if forward {
            forward_levels(d)
        } else {
            backward_levels(d)
        }
    })
}

fn on_units(g: &UnitGraph, construct: impl Fn(&Dag) -> Start) -> Partition {
    let d = Dag::new(g, true);
    let start = construct(&d);
    d.expand(|v| start.part_of[v as usize], start.count())
}

// The same on the compact graph, whose vertices are numbered in topological order. Each is a
// pass or two over the producer lists.

/// ONE's groups: a group per vertex, and the number of groups.
pub(crate) fn one_rule_groups(d: &Dag) -> (Vec<u32>, usize) {
    let mut group = vec![0u32; d.len()];
    let mut group_dev = Vec::new();
    for v in 0..d.len() as u32 {
        let preds = d.pred(v);
        let dev = d.device[v as usize];
        let joined = match preds.first().map(|&p| group[p as usize]) {
            Some(f)
                if group_dev[f as usize] == dev
                    && preds.iter().all(|&p| group[p as usize] == f) =>
            {
                Some(f)
            }
            _ => None,
        };
        group[v as usize] = joined.unwrap_or_else(|| {
            group_dev.push(dev);
            (group_dev.len() - 1) as u32
        });
    }
    let count = group_dev.len();
    (group, count)
}

pub(crate) fn forward_levels(d: &Dag) -> Start {
    Start::climbing(d, &|_| 0)
}

pub(crate) fn backward_levels(d: &Dag) -> Start {
    // From the outputs: in reverse order a vertex's level is final when it is reached (its
    // readers came before), and it raises its producers' levels.
    let mut level = vec![0u32; d.len()];
    for v in (0..d.len() as u32).rev() {
        let (lv, dev) = (level[v as usize], d.device[v as usize]);
        for &p in d.pred(v) {
            let up = lv + u32::from(d.device[p as usize] != dev);
            let slot = &mut level[p as usize];
            *slot = (*slot).max(up);
        }
    }
    Start::regions(d, level)
}

/// The epoch greedy's parts.
pub(crate) fn epochs(d: &Dag) -> Start {
    match two_device_epochs(d) {
        Some(root) => Start::climbing(d, &root),
        None => Start::regions(d, simulated_epochs(d)),
    }
}

/// With two devices (or one), epochs alternate between them, starting with vertex 0's: a
/// vertex is taken in the epoch its last producer finished in when it shares that producer's
/// device, or else in the next one, its device's. That is a level climbing at each device
/// switch, with roots on the other device starting at 1; the result is how roots start.
fn two_device_epochs(d: &Dag) -> Option<impl Fn(u16) -> u32> {
    let first = *d.device.first()?;
    let other = d.device.iter().copied().find(|&x| x != first);
    d.device
        .iter()
        .all(|&x| x == first || Some(x) == other)
        .then_some(move |dev| u32::from(dev != first))
}

/// Whether the epoch greedy's parts are the forward levels' (two devices at most, every root
/// on the first epoch's device), so it need not be run.
pub(crate) fn epochs_are_forward_levels(d: &Dag) -> bool {
    d.roots_on_first_device && two_device_epochs(d).is_some()
}

/// The epoch of each vertex, by running the greedy.
fn simulated_epochs(d: &Dag) -> Vec<u32> {
    let devices = d.device.iter().copied().max().map_or(0, |m| m as usize + 1);
    let (at, succ) = d.readers();
    let mut indeg: Vec<u32> = (0..d.len() as u32)
        .map(|v| d.pred(v).len() as u32)
        .collect();
    // Ready vertices per device and the earliest of them: the next epoch's device is that
    // of the earliest ready vertex, and the epoch takes every ready vertex of that device,
    // so no order within a device's ready set is ever needed, only its least element.
    let mut ready: Vec<(Vec<u32>, u32)> = vec![(Vec::new(), u32::MAX); devices];
    let make_ready = |ready: &mut Vec<(Vec<u32>, u32)>, v: u32| {
        let (set, least) = &mut ready[d.device[v as usize] as usize];
        set.push(v);
        *least = (*least).min(v);
    };
    for v in 0..d.len() as u32 {
        if indeg[v as usize] == 0 {
            make_ready(&mut ready, v);
        }
    }
    let mut epoch = vec![0u32; d.len()];
    let mut current = 0;
    let mut queue = Vec::new();
    while let Some(dev) = (0..devices)
        .filter(|&x| !ready[x].0.is_empty())
        .min_by_key(|&x| ready[x].1)
    {
        queue.append(&mut ready[dev].0);
        ready[dev].1 = u32::MAX;
        while let Some(v) = queue.pop() {
            epoch[v as usize] = current;
            for &s in &succ[at[v as usize] as usize..at[v as usize + 1] as usize] {
                indeg[s as usize] -= 1;
                if indeg[s as usize] == 0 {
                    if d.device[s as usize] as usize == dev {
                        queue.push(s);
                    } else {
                        make_ready(&mut ready, s);
                    }
                }
            }
        }
        current += 1;
    }
    epoch
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ONE's Net_InstanceNorm_003 with ADD on acl_cl (device 1): mean, sub, sq, var, add_eps,
    /// pow, div, mul, add_beta.
    fn instance_norm_add() -> UnitGraph {
        let dev = vec![0, 0, 0, 0, 1, 0, 0, 0, 1];
        UnitGraph::from_edges(
            dev,
            &[
                (0, 1),
                (1, 2),
                (2, 3),
                (3, 4),
                (4, 5),
                (5, 6),
                (1, 6),
                (6, 7),
                (7, 8),
            ],
        )
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
        for p in [
            one_rule(&g),
            epoch_greedy(&g),
            device_levels(&g, true),
            device_levels(&g, false),
        ] {
            assert!(g.is_valid(&p, true), "{p:?}");
        }
    }

    /// Random DAGs with `devices` devices and several roots: the epochs found as levels (two
    /// devices) must be the simulated greedy's, part for part.
    #[test]
    fn two_device_epochs_are_the_simulated_greedy() {
        let mut rng = cleave_ir::XorShift64::raw(0x9E37_79B9_7F4A_7C15);
        let mut next = move || rng.next_u64();
        let mut shortcuts = 0;
        for _ in 0..3000 {
            let n = 2 + (next() % 40) as u32;
            let devices = 1 + (next() % 2) as u16;
            let device: Vec<u16> = (0..n)
                .map(|_| (next() % u64::from(devices)) as u16)
                .collect();
            let edges: Vec<(u32, u32)> = (1..n)
                .flat_map(|j| (0..j).map(move |i| (i, j)))
                .filter(|_| next() % 100 < 12)
                .collect();
            let g = UnitGraph::from_edges(device, &edges);
            let d = Dag::new(&g, true);
            let root = two_device_epochs(&d).expect("two devices at most");
            let fast = Start::climbing(&d, &root);
            let slow = Start::regions(&d, simulated_epochs(&d));
            assert_eq!(fast.part_of, slow.part_of, "{edges:?}");
            if epochs_are_forward_levels(&d) {
                shortcuts += 1;
                assert_eq!(forward_levels(&d).part_of, slow.part_of);
            }
        }
        assert!(
            (100..2900).contains(&shortcuts),
            "{shortcuts}: both cases must be seen"
        );
    }
}
