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

mod dag;
mod merge;
mod openvino_algo;
mod plan;
mod reference;
mod start;
mod union_find;
mod unit_graph;
mod validate;

pub use merge::merge_neighbours;
pub use openvino_algo::{openvino, OpenVinoError, OpenVinoOptions};
pub use plan::{Part, Plan, PlanError};
pub use reference::{device_levels, epoch_greedy, one_rule};
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
/// it is the forward levels, see [`reference`]). ONE's rule needs no run: its groups never
/// straddle two forward-level parts (a unit joins a group only when all its producers are in
/// it, on its device, hence on its level), so the forward levels never have more parts, and
/// merging only removes parts. So the result never has more parts than either reference.
pub fn partition_default(g: &UnitGraph, opts: Options) -> Partition {
    let d = dag::Dag::new(g, true);
    let mut starts = vec![reference::forward_levels(&d)];
    let mut add = |s: start::Start| {
        // Constructions often agree (levels and epochs on layered nets): merge each once.
        if !starts.iter().any(|t| t.part_of == s.part_of) {
            starts.push(s);
        }
    };
    add(reference::backward_levels(&d));
    if !reference::epochs_are_forward_levels(&d) {
        add(reference::epochs(&d));
    }
    let best = starts
        .iter()
        .map(|s| (s, merge::merge(s, opts.allow_disconnected)))
        .min_by_key(|(_, m)| m.count);
    match best {
        Some((s, m)) => d.expand(|v| m.part_of[s.part_of[v as usize] as usize], m.count),
        None => Partition::singletons(g),
    }
}

/// What ONE's rule and the epoch greedy would give on the same graph (for reports).
pub fn reference_counts(g: &UnitGraph) -> References {
    let d = dag::Dag::new(g, true);
    References {
        one_rule: reference::one_rule_groups(&d).1,
        epoch_greedy: reference::epochs(&d).count(),
    }
}
