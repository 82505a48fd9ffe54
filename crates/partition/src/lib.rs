//! Partitioning: cut an assigned graph into single-device parts.
//!
//! The algorithms work on a [`UnitGraph`]: the nodes that run on a device (constants are
//! copied, not placed), contracted where nodes must stay together, with deduplicated edges.
//! A [`Partition`] maps units to parts; [`Plan`] maps it back onto the IR graph, numbered in
//! dependency order, and [`validate`] proves a plan sound.
//!
//! The default algorithm ([`partition_default`]) is a portfolio of linear-time constructions
//! (device-switch levels forwards and backwards, ONE's merge rule, the epoch greedy of
//! TFLite/ORT), each followed by a pass that merges same-device neighbours while the part
//! graph stays acyclic; it keeps the one with the fewest parts, so it never does worse than
//! either reference. [`openvino`] is the seed's subgraph-selection algorithm, with a trace.

mod dag;
mod merge;
mod openvino_algo;
mod plan;
mod reference;
mod stages;
mod union_find;
mod unit_graph;
mod validate;

pub use merge::merge_neighbours;
pub use openvino_algo::{openvino, OpenVinoError, OpenVinoOptions};
pub use plan::{Part, Plan, PlanError};
pub use reference::{device_levels, epoch_greedy, one_rule};
pub use stages::stage_partition;
pub use unit_graph::{kahn_order, Partition, UnitGraph};
pub use validate::{validate, ValidationError};

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
pub fn partition_default(g: &UnitGraph, opts: Options) -> Partition {
    let d = dag::Dag::new(g, true);
    let candidates = [
        reference::device_levels_labels(&d, true),
        reference::device_levels_labels(&d, false),
        reference::one_rule_labels(&d),
        reference::epoch_greedy_labels(&d),
    ];
    let starts: Vec<Partition> = candidates.iter().map(|labels| Partition::from_labels(labels)).collect();
    starts
        .iter()
        .enumerate()
        // Constructions often agree (levels and epochs on layered nets): merge each start once.
        .filter(|&(i, p)| !starts[..i].contains(p))
        .map(|(_, p)| Partition::from_labels(&merge::merge_labels(&d, p, opts.allow_disconnected)))
        .min_by_key(|p| p.count)
        .map_or_else(|| Partition::singletons(g), |best| d.expand(&best.part_of))
}

/// What ONE's rule and the epoch greedy would give on the same graph (for reports).
pub fn reference_counts(g: &UnitGraph) -> References {
    let d = dag::Dag::new(g, true);
    let count = |labels: Vec<u32>| Partition::from_labels(&labels).count;
    References { one_rule: count(reference::one_rule_labels(&d)), epoch_greedy: count(reference::epoch_greedy_labels(&d)) }
}
