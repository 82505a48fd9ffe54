//! One partition as both faces ask for it: a model and a request in, a validated plan out that
//! writes itself, stage memory included, in one all-or-nothing commit. The CLI's `partition`
//! and Python's `Model.partition` call [`partition`] whole; neither composes the steps.

use std::path::Path;
use std::time::Duration;

use cleave_frontend::{Emitted, ExternalData};
use cleave_partition::{References, ValidatedPlan};

use crate::request::ModelSource;
use crate::{load_and_assign, load_and_stage, Algorithm, AssignRequest, Assigned, Error};
use crate::{Prediction, Stages};

/// What to partition for: the devices (or stages) and how to cut.
#[derive(Clone, Debug)]
pub struct PartitionRequest {
    pub assign: AssignRequest,
    /// Pipeline stages instead of device rules: N consecutive slices, slowest stage least.
    pub stages: Option<usize>,
    /// Memory budgets of the stages' devices, `DEVICE=SIZE` (stages only).
    pub memory: Vec<String>,
    /// How to cut the assigned graph (not used for stages).
    pub algorithm: Algorithm,
    /// Count a decoder's stages at this context (stages only).
    pub context: Option<crate::DecodeContext>,
}

impl PartitionRequest {
    /// Rules or priorities cut by the default algorithm.
    pub fn new(assign: AssignRequest) -> PartitionRequest {
        PartitionRequest {
            assign,
            stages: None,
            memory: Vec::new(),
            algorithm: Algorithm::Default {
                allow_disconnected: false,
            },
            context: None,
        }
    }
}

/// Hooks into a long partition: what a console shows while it runs.
#[derive(Default)]
pub struct Progress<'a> {
    /// Called as each phase starts (`loading and assigning`, `partitioning`, ...).
    pub phase: Option<&'a dyn Fn(&str)>,
    /// Receives the algorithm's steps (`--trace`); kept when the cut fails.
    pub trace: Option<&'a mut Vec<String>>,
    /// Called once every node has a device, before the cut: what the assignment warns of
    /// (fused groups dissolved, learned types, estimated figures) is told even when the cut
    /// or its validation then fails.
    pub assigned: Option<&'a dyn Fn(&Assigned)>,
}

/// A validated partition, ready to write.
pub struct Partitioned {
    pub assigned: Assigned,
    pub plan: ValidatedPlan,
    /// The stages, when they made the plan.
    pub stages: Option<Stages>,
    /// Part counts of the references, when rules (not stages) made the partition.
    pub references: Option<References>,
    /// Time the cutting algorithm took.
    pub elapsed: Duration,
}

impl Partitioned {
    /// Writes the parts and the connection files into `workdir`, all or nothing.
    pub fn write(&mut self, workdir: &Path, external: ExternalData) -> Result<Emitted, Error> {
        self.assigned.write(&self.plan, workdir, external)
    }

    /// The predicted latency, when the latency objective or a cost file gave figures.
    pub fn prediction(&self) -> Result<Option<Prediction>, Error> {
        self.assigned.predict(self.plan.plan())
    }

    /// The stage table (empty unless stages made the plan).
    pub fn stage_table(&self) -> Vec<String> {
        self.stages.as_ref().map_or_else(Vec::new, Stages::table)
    }
}

/// Loads (or takes) the model, assigns or stages it, cuts and validates.
pub fn partition<'a>(
    source: impl Into<ModelSource<'a>>,
    req: &PartitionRequest,
    progress: Progress<'_>,
) -> Result<Partitioned, Error> {
    let Progress {
        phase,
        trace,
        assigned: on_assigned,
    } = progress;
    let told = |a: &Assigned| {
        if let Some(f) = on_assigned {
            f(a);
        }
    };
    let say = |what: &str| {
        if let Some(f) = phase {
            f(what);
        }
    };
    let source = source.into();
    match req.stages {
        Some(n) => {
            say("loading and planning the stages");
            let (loaded, stages) =
                load_and_stage(source, &req.assign, n, &req.memory, req.context)?;
            let assigned = Assigned::from_stages(loaded, &stages);
            told(&assigned);
            say("building and validating the parts");
            let plan = assigned.loaded.plan(&assigned.assignment, &stages.cut)?;
            Ok(Partitioned {
                assigned,
                plan,
                references: stages.cut.references,
                elapsed: stages.cut.elapsed,
                stages: Some(stages),
            })
        }
        None => {
            if !req.memory.is_empty() {
                return Err(Error::usage("--memory needs --stages N"));
            }
            if req.context.is_some() {
                return Err(Error::usage("--context needs --stages N"));
            }
            say("loading and assigning");
            let assigned = load_and_assign(source, &req.assign)?;
            told(&assigned);
            say("partitioning");
            let mut scratch = Vec::new();
            let trace = trace.unwrap_or(&mut scratch);
            let cut =
                assigned
                    .loaded
                    .partition_traced(&assigned.assignment, req.algorithm, trace)?;
            say("building and validating the parts");
            let plan = assigned.loaded.plan(&assigned.assignment, &cut)?;
            Ok(Partitioned {
                assigned,
                plan,
                references: cut.references,
                elapsed: cut.elapsed,
                stages: None,
            })
        }
    }
}
