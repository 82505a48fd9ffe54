//! Cutting an assigned model: the unit graph the partitioners see (placed nodes, inseparable
//! pairs and fused groups contracted), the cut by either algorithm, and the plan mapped back
//! onto the nodes and proven, the only way to a [`ValidatedPlan`]. [`crate::Assigned`] calls
//! these for its next step; benches and tests call them one at a time.

use std::time::{Duration, Instant};

use cleave_assign::Assignment;
use cleave_ir::phases::phase;
use cleave_partition::{
    openvino, partition_default, reference_counts, validate, OpenVinoOptions, Options, Partition,
    Plan, References, UnitGraph, ValidatedPlan,
};

use crate::{Error, LoadedModel};

/// How to cut the assigned graph.
#[derive(Clone, Copy, Debug)]
pub enum Algorithm {
    /// Fewest connected parts (never more than ONE's rule or the epoch greedy).
    Default { allow_disconnected: bool },
    /// OpenVINO's hetero subgraph selection as its design page states it.
    OpenVino { budget: Duration },
}

/// A partition of the unit graph, before it is mapped back to nodes.
pub struct UnitPartition {
    pub units: UnitGraph,
    pub partition: Partition,
    /// Part counts of the references (none for pipeline stages).
    pub references: Option<References>,
    /// Time the algorithm took.
    pub elapsed: Duration,
}

impl LoadedModel {
    /// The graph the partitioners see: placed nodes, with inseparable pairs and fused
    /// groups contracted. `partition` and `bench --partition` both cut this one.
    pub fn unit_graph(&self, a: &Assignment) -> UnitGraph {
        let g = self.graph();
        phase("unit graph", || {
            UnitGraph::from_assignment(g, a, &a.glue(g, self.semantics()))
        })
    }

    /// Cuts the assigned graph with `algorithm`.
    pub fn partition(&self, a: &Assignment, algorithm: Algorithm) -> Result<UnitPartition, Error> {
        self.partition_traced(a, algorithm, &mut Vec::new())
    }

    /// [`LoadedModel::partition`], with the OpenVINO algorithm's steps in its design page's words
    /// appended to `trace` (also when it gives up).
    pub fn partition_traced(
        &self,
        a: &Assignment,
        algorithm: Algorithm,
        trace: &mut Vec<String>,
    ) -> Result<UnitPartition, Error> {
        let g = self.graph();
        let units = self.unit_graph(a);
        let start = Instant::now();
        let partition = phase("partition", || -> Result<Partition, Error> {
            Ok(match algorithm {
                Algorithm::Default { allow_disconnected } => {
                    partition_default(&units, Options { allow_disconnected })
                }
                Algorithm::OpenVino { budget } => {
                    let labels: Vec<String> = units
                        .unit_nodes()
                        .map(|ns| {
                            ns.iter()
                                .map(|&n| g.node_label(n))
                                .collect::<Vec<_>>()
                                .join("+")
                        })
                        .collect();
                    let ov = OpenVinoOptions {
                        time_budget: budget,
                        ..Default::default()
                    };
                    openvino(&units, &labels, &a.devices, &ov, trace).map_err(Error::usage)?
                }
            })
        })?;
        let elapsed = start.elapsed();
        let references = Some(phase("reference counts", || reference_counts(&units)));
        Ok(UnitPartition {
            units,
            partition,
            references,
            elapsed,
        })
    }

    /// Maps a cut back onto the graph's nodes and proves it: the only way to a
    /// [`ValidatedPlan`].
    pub fn plan(&self, a: &Assignment, cut: &UnitPartition) -> Result<ValidatedPlan, Error> {
        let g = self.graph();
        let caches: Vec<cleave_ir::ValueId> = self
            .model()
            .state
            .iter()
            .filter_map(|p| g.find(&p.input))
            .collect();
        let plan = phase("plan build", || {
            let mut plan = Plan::build(g, a, &cut.units, &cut.partition)?;
            plan.read_own_shapes(g, &caches, |n| self.semantics().reads_shape_only(n))?;
            Ok(plan)
        })
        .map_err(|e: cleave_partition::PlanError| Error::internal(self.path(), e))?;
        phase("plan validation", || validate(g, a, plan))
            .map_err(|e| Error::internal(self.path(), format!("the partition is invalid: {e}")))
    }
}
