//! The second stage of a partition's life: every node of a loaded model given a device, by
//! rules and priority, by predicted latency, or as pipeline stages ([`Assigned`]);
//! [`Assigned::into_partitioned`] cuts it into proven parts.

use cleave_assign::Assignment;

use crate::{
    Algorithm, Costs, Devices, Error, LatencyChoice, LoadedModel, Partitioned, Prediction, Stages,
};

/// A model loaded, rewritten if asked, and assigned.
pub struct Assigned {
    pub loaded: LoadedModel,
    pub devices: Devices,
    pub assignment: Assignment,
    /// Latency figures, when a cost file or the latency objective asked for them.
    pub costs: Option<Costs>,
    /// What the latency objective chose.
    pub latency: Option<LatencyChoice>,
    /// The pipeline stages, when they placed the nodes: their cut is made already.
    pub stages: Option<Stages>,
}

impl Assigned {
    /// Cuts the assigned graph with `algorithm` (stages come cut), maps the cut back onto the
    /// nodes and proves it; the OpenVINO algorithm's steps are appended to `trace`.
    pub fn into_partitioned(
        self,
        algorithm: Algorithm,
        trace: &mut Vec<String>,
    ) -> Result<Partitioned, Error> {
        let made;
        let cut = match &self.stages {
            Some(s) => &s.cut,
            None => {
                made = self
                    .loaded
                    .partition_traced(&self.assignment, algorithm, trace)?;
                &made
            }
        };
        let plan = self.loaded.plan(&self.assignment, cut)?;
        let (references, elapsed) = (cut.references, cut.elapsed);
        Ok(Partitioned {
            plan,
            references,
            elapsed,
            assigned: self,
        })
    }

    /// The predicted latency of `plan`, when there are figures.
    pub fn predict(&self, plan: &cleave_partition::Plan) -> Result<Option<Prediction>, Error> {
        let Some(costs) = &self.costs else {
            return Ok(None);
        };
        Ok(Some(self.loaded.predict(
            &self.assignment,
            plan,
            &self.devices,
            costs,
        )?))
    }

    /// For pipeline stages, each stage's (weights, activation peak) in bytes, which the
    /// connection file records; empty otherwise.
    pub(crate) fn stage_memory(&self) -> Vec<(u64, u64)> {
        self.stages.as_ref().map_or_else(Vec::new, |s| {
            s.plan
                .stages
                .iter()
                .map(|s| (s.weights, s.activation_peak))
                .collect()
        })
    }
}
