//! What both faces ask of a partition, as typed values parsed at each face's edge
//! ([`PartitionRequest`], [`AssignRequest`]), and [`partition`], which walks a model through
//! its stages: [`LoadedModel`] → [`Assigned`] → [`Partitioned`] (→ [`crate::Written`] by
//! [`Partitioned::write`]). The CLI's `partition` and Python's `Model.partition` call it whole.

use std::path::{Path, PathBuf};

use cleave_frontend::{FixedDims, RewriteLevel};
use cleave_ir::phases::phase;

use crate::{
    load_model, Algorithm, Arg, Assigned, Costs, DecodeContext, DeviceRequest, Devices, Error,
    LoadedModel, Message, Partitioned,
};

/// What the placement optimises.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Objective {
    /// Each node on the first device that runs it, cut into the fewest parts.
    #[default]
    Fewest,
    /// Each unit where the predicted end-to-end latency is least (needs figures).
    Latency,
}

/// Everything that decides where nodes go.
#[derive(Clone, Debug)]
pub struct AssignRequest {
    pub devices: DeviceRequest,
    /// Dims to fix before anything reads the model (`--shape`, `--dim`).
    pub fixed: FixedDims,
    /// Rewrite the model first, at this level.
    pub optimize: Option<RewriteLevel>,
    /// The most bytes constant folding may add.
    pub fold_limit: u64,
    pub objective: Objective,
    /// A cost file from `cleave measure`.
    pub costs: Option<PathBuf>,
    /// With [`Objective::Latency`]: how much faster than the best single device a split must
    /// be predicted to be.
    pub margin: f64,
    /// Type the tensors inference cannot by running the model once on ONNX Runtime
    /// ([`LoadedModel::learn_types`]).
    pub learn_dims: bool,
    /// Decoder state pairs to declare beyond those the names show (`--state IN=OUT`).
    pub state: Vec<cleave_ir::StatePair>,
}

impl Default for AssignRequest {
    fn default() -> Self {
        AssignRequest {
            devices: DeviceRequest::default(),
            fixed: FixedDims::default(),
            optimize: None,
            fold_limit: cleave_frontend::DEFAULT_FOLD_LIMIT,
            learn_dims: false,
            objective: Objective::Fewest,
            costs: None,
            margin: crate::DEFAULT_MARGIN,
            state: Vec::new(),
        }
    }
}

/// What to partition for: the devices (or stages) and how to cut.
#[derive(Clone, Debug)]
pub struct PartitionRequest {
    pub assign: AssignRequest,
    /// Pipeline stages instead of device rules: N consecutive slices, slowest stage least.
    pub stages: Option<usize>,
    /// Memory budgets of the stages' devices in bytes, by device (stages only).
    pub memory: Vec<(String, u64)>,
    /// How to cut the assigned graph (not used for stages).
    pub algorithm: Algorithm,
    /// Count a decoder's stages at this context (stages only).
    pub context: Option<DecodeContext>,
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

/// A model to partition: a file the request's dims are fixed in as it loads, or a model
/// already loaded (the Python package's `Model`), which the request's dims, if any, fix again.
pub enum ModelSource<'a> {
    File(&'a Path),
    Loaded(LoadedModel),
}

impl ModelSource<'_> {
    fn load(self, fixed: &FixedDims) -> Result<LoadedModel, Error> {
        match self {
            ModelSource::File(path) => load_fixed(path, fixed),
            ModelSource::Loaded(m) => m.fix_dims(fixed),
        }
    }
}

impl<'a> From<&'a Path> for ModelSource<'a> {
    fn from(p: &'a Path) -> Self {
        ModelSource::File(p)
    }
}

impl From<LoadedModel> for ModelSource<'_> {
    fn from(m: LoadedModel) -> Self {
        ModelSource::Loaded(m)
    }
}

/// The model at `path` with `fixed` dims applied.
pub fn load_fixed(path: &Path, fixed: &FixedDims) -> Result<LoadedModel, Error> {
    load_model(path)?.fix_dims(fixed)
}

/// Loads a model and gives every node a device. Warnings (fused groups dissolved) are in the
/// assignment for the caller to show.
pub fn load_and_assign<'a>(
    source: impl Into<ModelSource<'a>>,
    req: &AssignRequest,
) -> Result<Assigned, Error> {
    // The devices, rules and margin first: a typo in them is told before a long load.
    let devices = phase("devices and rules", || Devices::resolve(&req.devices))?;
    if req.objective == Objective::Latency {
        crate::latency::check_margin(req.margin)?;
    }
    source.into().load(&req.fixed)?.into_assigned(devices, req)
}

/// Loads (or takes) the model, assigns or stages it, cuts and validates.
pub fn partition<'a>(
    source: impl Into<ModelSource<'a>>,
    req: &PartitionRequest,
    progress: Progress<'_>,
) -> Result<Partitioned, Error> {
    let say = |what: &str| {
        if let Some(f) = progress.phase {
            f(what);
        }
    };
    let source = source.into();
    let assigned = match req.stages {
        Some(n) => {
            say("loading and planning the stages");
            // What the request contradicts or names wrongly is told before a long load.
            if req.assign.objective == Objective::Latency {
                return Err(Error::request(
                    Message::default()
                        .arg(Arg::Stages)
                        .then(" and ")
                        .given(Arg::Objective, "latency")
                        .then(" both decide the devices: choose one"),
                ));
            }
            // Stage devices are names; profiles matter only for their declared [cost] figures.
            let devices = if req.assign.devices.devices.is_empty() {
                Devices::priority(&[])
            } else {
                Devices::resolve(&req.assign.devices)?
            };
            let costs = match &req.assign.costs {
                Some(path) => Costs::read(path)?,
                None => Costs::default(),
            };
            source
                .load(&req.assign.fixed)?
                .into_staged(devices, &costs, n, req)?
        }
        None => {
            if !req.memory.is_empty() {
                return Err(Error::request(
                    Message::about_arg(Arg::Memory, " needs ").given(Arg::Stages, "N"),
                ));
            }
            if req.context.is_some() {
                return Err(Error::request(
                    Message::about_arg(Arg::Context, " needs ").given(Arg::Stages, "N"),
                ));
            }
            say("loading and assigning");
            load_and_assign(source, &req.assign)?
        }
    };
    if let Some(f) = progress.assigned {
        f(&assigned);
    }
    say("cutting and validating the parts");
    let mut scratch = Vec::new();
    let trace = progress.trace.unwrap_or(&mut scratch);
    assigned.into_partitioned(req.algorithm, trace)
}
