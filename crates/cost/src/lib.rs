//! Cost-aware placement: a latency model of a split and the search for the fastest one.
//!
//! A [`Problem`] holds units (nodes, or nodes that never part), what each costs on each
//! device that may run it, the tensors between them, and per device the cost of one call
//! of a part and of moving its inputs and outputs, plus the links between devices. A
//! placement's [`Estimate`] cuts it with the default partitioner and sums its parts, run one
//! after another. [`cheapest_placement`] minimises that sum, exactly on small problems; the figures
//! come from a [`CostFile`] (measured by `cleave measure`) or from figures a device profile
//! declares.

mod file;
mod problem;
mod search;
mod stages;

pub use file::{
    fingerprint, CostFile, DeviceEntry, LinkEntry, ModelStamp, Profiling, UnitEntry, FORMAT,
};
pub use problem::{DeviceCosts, Estimate, Flow, Link, PartEstimate, Problem};
pub use search::{
    chain, cheapest_placement, exact, scalable, search_space, settle_parts, Method, Placed,
    EXACT_LIMIT, SETTLE_BUDGET,
};
pub use stages::{
    plan_stages, stage_figures, StageDevice, StageError, StageFigures, StagePlan, StageProblem,
    StageTensor,
};

#[cfg(test)]
mod tests;
