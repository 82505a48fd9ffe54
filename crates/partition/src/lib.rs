//! Partitioning: cut an assigned graph into single-device parts.
//!
//! The algorithms work on a [`UnitGraph`]: the nodes that run on a device (constants are
//! copied, not placed), contracted where nodes must stay together, with deduplicated edges.
//! A [`Partition`] maps units to parts; [`Plan`] maps it back onto the IR graph, numbered in
//! dependency order, and [`validate`] proves a plan sound and seals it as a [`ValidatedPlan`],
//! the only kind of plan the front-ends write parts from.
//!
//! The default algorithm ([`partition_default`]) is a portfolio of linear-time constructions
//! (device-switch levels forwards and backwards, the epoch greedy of TFLite/ORT), each
//! followed by a pass that merges same-device neighbours while the part graph stays acyclic;
//! it keeps the one with the fewest parts, so it never does worse than the epoch greedy or
//! ONE's merge rule (whose groups always lie inside forward-level parts). Each construction
//! is one pass over the producer lists of a flat copy of the graph, and finds the edges
//! between its parts as it goes, so the merge pass starts from the part graph directly.
//! [`openvino`] is the seed's subgraph-selection algorithm, with a trace.

mod constructions;
mod dag;
mod merge;
mod openvino_algo;
mod plan;
mod start_partition;
mod union_find;
mod unit_graph;
mod validate;

pub use constructions::{device_levels, epoch_greedy, one_rule};
pub use merge::merge_neighbours;
pub use openvino_algo::{openvino, OpenVinoError, OpenVinoOptions};
pub use plan::{Part, Plan, PlanError};
pub use unit_graph::{kahn_order, Partition, UnitGraph};
pub use validate::{check_plan, validate, ValidatedPlan, ValidationError};

/// Options of the default algorithm.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Allow a part to hold same-device regions that no tensor joins, when the part graph
    /// stays acyclic.
    pub allow_disconnected: bool,
}

/// Part counts of the two references the default must never exceed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct References {
    pub one_rule: usize,
    pub epoch_greedy: usize,
}

/// The default partitioner: best of several linear constructions, each merged greedily.
/// All run on one compact copy of the graph with same-device chains contracted (which
/// changes none of their results), so the whole costs a few passes over the edges.
///
/// The portfolio is device levels forwards and backwards and the epoch greedy (skipped where
/// it is the forward levels, see `constructions.rs`). ONE's rule needs no run: its groups never
/// straddle two forward-level parts (a unit joins a group only when all its producers are in
/// it, on its device, hence on its level), so the forward levels never have more parts, and
/// merging only removes parts. So the result never has more parts than either reference.
pub fn partition_default(g: &UnitGraph, opts: Options) -> Partition {
    let d = dag::Dag::new(g, true);
    // Run costliest first, so that on two threads the epochs run beside both level passes;
    // ties go to the forward levels, then the backward levels, then the epochs, as always.
    let mut starts: Vec<fn(&dag::Dag) -> start_partition::Start> = Vec::new();
    let mut preference = Vec::new();
    if !constructions::epochs_are_forward_levels(&d) {
        starts.push(constructions::epochs);
        preference.push(2);
    }
    starts.extend([
        constructions::forward_levels as fn(&dag::Dag) -> start_partition::Start,
        constructions::backward_levels,
    ]);
    preference.extend([0, 1]);
    let threads = if d.len() < PARALLEL_FROM {
        1
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    };
    let tried = construct_and_merge(&d, &starts, opts.allow_disconnected, threads);
    // The fewest parts, ties by preference, whatever finished first: the same plan on any
    // machine and with any number of threads.
    let best = tried
        .iter()
        .zip(&preference)
        .min_by_key(|((_, m), &rank)| (m.count, rank))
        .map(|(t, _)| t);
    match best {
        Some((s, m)) => d.expand(|v| m.part_of[s.part_of[v as usize] as usize], m.count),
        None => Partition::singletons(g),
    }
}

/// Graphs from this many vertices up build and merge their constructions on several
/// threads; below it a thread costs more than it saves.
const PARALLEL_FROM: usize = 50_000;

/// Each construction with its merge, in the order given. The constructions are independent,
/// so they run side by side on up to `threads` threads.
fn construct_and_merge(
    d: &dag::Dag,
    starts: &[fn(&dag::Dag) -> start_partition::Start],
    allow_disconnected: bool,
    threads: usize,
) -> Vec<(start_partition::Start, merge::Merged)> {
    let one = |c: &fn(&dag::Dag) -> start_partition::Start| {
        let s = c(d);
        let m = merge::merge(&s, allow_disconnected);
        (s, m)
    };
    let threads = threads.min(starts.len());
    if threads <= 1 {
        return starts.iter().map(one).collect();
    }
    // The first construction has a worker to itself; the rest are shared out in turn.
    let work = |w: usize| -> Vec<(usize, (start_partition::Start, merge::Merged))> {
        let mine = |i: &usize| match threads {
            2 => (*i == 0) == (w == 0),
            _ => i % threads == w,
        };
        (0..starts.len())
            .filter(mine)
            .map(|i| (i, one(&starts[i])))
            .collect()
    };
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads).map(|w| scope.spawn(move || work(w))).collect();
        let mut done = work(0);
        for h in helpers {
            match h.join() {
                Ok(r) => done.extend(r),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        done.sort_unstable_by_key(|(i, _)| *i);
        done.into_iter().map(|(_, r)| r).collect()
    })
}

/// What ONE's rule and the epoch greedy would give on the same graph (for reports).
pub fn reference_counts(g: &UnitGraph) -> References {
    let d = dag::Dag::new(g, true);
    References {
        one_rule: constructions::one_rule_groups(&d).1,
        epoch_greedy: constructions::epochs(&d).count(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A layered random graph over three devices, `n` units, numbered in topological order.
    fn random_graph(n: u32, seed: u64) -> UnitGraph {
        let mut x = seed;
        let mut next = move || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as u32
        };
        let device: Vec<u16> = (0..n).map(|_| (next() % 3) as u16).collect();
        let mut edges = Vec::new();
        for v in 1..n {
            edges.push((v - 1 - next() % v.min(8), v));
            if next() % 4 == 0 {
                edges.push((v - 1 - next() % v.min(200), v));
            }
        }
        UnitGraph::from_edges(device, &edges)
    }

    #[test]
    fn threads_change_nothing_in_the_result() {
        let g = random_graph(20_000, 7);
        let d = dag::Dag::new(&g, true);
        let all = [
            constructions::epochs,
            constructions::forward_levels as fn(&dag::Dag) -> start_partition::Start,
            constructions::backward_levels,
        ];
        let counts = |threads| -> Vec<(Vec<u32>, Vec<u32>)> {
            construct_and_merge(&d, &all, false, threads)
                .into_iter()
                .map(|(s, m)| (s.part_of, m.part_of))
                .collect()
        };
        let serial = counts(1);
        assert_eq!(serial.len(), 3);
        assert_eq!(serial, counts(2));
        assert_eq!(serial, counts(3));
        let p = partition_default(&g, Options::default());
        assert!(g.is_valid(&p, true));
    }
}
