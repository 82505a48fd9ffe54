//! A partition request as the CLI and the Python package both state it: load the model with
//! its dims fixed, rewrite it if asked, give every node a device (by rules and priority, or by
//! predicted latency), or cut it into pipeline stages. Both faces call these; neither
//! composes the stages itself.

use std::path::{Path, PathBuf};

use cleave_assign::Assignment;
use cleave_frontend::{Emitted, ExternalData, FixedDims, RewriteLevel};
use cleave_ir::phases::phase;
use cleave_partition::ValidatedPlan;

use crate::{
    load_model, parse_memory, Costs, DeviceRequest, Devices, Error, LatencyChoice, LoadedModel,
    Prediction, StageRequest, Stages,
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
    /// A cost file from `cleave profile`.
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

/// A model loaded, rewritten if asked, and assigned.
pub struct Assigned {
    pub loaded: LoadedModel,
    pub devices: Devices,
    pub assignment: Assignment,
    /// Latency figures, when a cost file or the latency objective asked for them.
    pub costs: Option<Costs>,
    /// What the latency objective chose.
    pub latency: Option<LatencyChoice>,
    /// For pipeline stages, each stage's (weights, activation peak) in bytes, which the
    /// connection file records; empty otherwise.
    pub stage_memory: Vec<(u64, u64)>,
}

impl Assigned {
    /// The stages' placement as an assignment to cut and write: each stage's nodes on its
    /// device, and what each stage holds for the connection file.
    pub fn from_stages(loaded: LoadedModel, stages: &Stages) -> Assigned {
        Assigned {
            loaded,
            devices: Devices::priority(&[]),
            assignment: stages.assignment.clone(),
            costs: None,
            latency: None,
            stage_memory: stages
                .plan
                .stages
                .iter()
                .map(|s| (s.weights, s.activation_peak))
                .collect(),
        }
    }

    /// Writes the parts and the connection files of `plan` into `workdir`, all or nothing:
    /// the connection file records each part's engine and, for stages, what each holds.
    pub fn write(
        &mut self,
        plan: &ValidatedPlan,
        workdir: &Path,
        external: ExternalData,
    ) -> Result<Emitted, Error> {
        self.loaded
            .write_stages(plan, workdir, external, &self.stage_memory)
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
}

/// The model at `path` with `fixed` dims applied.
pub fn load_fixed(path: &Path, fixed: &FixedDims) -> Result<LoadedModel, Error> {
    load_model(path)?.fix_dims(fixed)
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

/// [`ModelSource::load`], then, when `req` asks, the rewrite for `devices` and the types one
/// run shows.
fn load_for(
    source: ModelSource<'_>,
    req: &AssignRequest,
    devices: &Devices,
) -> Result<LoadedModel, Error> {
    let mut loaded = source.load(&req.fixed)?;
    if let Some(level) = req.optimize {
        loaded = loaded.rewrite(level, devices, req.fold_limit)?;
    }
    if req.learn_dims {
        let engine = learning_engine(&loaded)?;
        loaded.learn_types(engine, 0)?;
    }
    loaded.declare_state(&req.state)?;
    Ok(loaded)
}

/// The engine a `--learn-dims` run uses: the first registered to run whole models of the
/// model's format.
fn learning_engine(loaded: &LoadedModel) -> Result<cleave_runtime::EngineKind, Error> {
    let format = loaded.source.extension();
    let candidates = crate::engine_registry().candidates(format);
    candidates
        .into_iter()
        .next()
        .ok_or_else(|| Error::usage(format!("--learn-dims: no engine runs {format} models")))
}

/// Loads a model and gives every node a device. Warnings (fused groups dissolved) are in the
/// assignment for the caller to show.
pub fn load_and_assign<'a>(
    source: impl Into<ModelSource<'a>>,
    req: &AssignRequest,
) -> Result<Assigned, Error> {
    // The devices and rules first: a typo in them is told before a long load.
    let mut devices = phase("devices and rules", || Devices::resolve(&req.devices))?;
    let mut loaded = source.into().load(&req.fixed)?;
    devices.ask_openvino(loaded.path())?;
    if let Some(level) = req.optimize {
        loaded = loaded.rewrite(level, &devices, req.fold_limit)?;
    }
    if req.learn_dims {
        // After the rewrite, which types its model afresh.
        let engine = learning_engine(&loaded)?;
        loaded.learn_types(engine, 0)?;
    }
    loaded.declare_state(&req.state)?;
    let mut assignment = loaded.assign(&devices)?;
    let costs = match &req.costs {
        Some(path) => Some(Costs::read(path)?),
        None => (req.objective == Objective::Latency).then(Costs::default),
    };
    let mut latency = None;
    if let (Objective::Latency, Some(c)) = (req.objective, &costs) {
        if !(req.margin.is_finite() && req.margin >= 0.0) {
            return Err(Error::usage(format!(
                "margin {}: give a fraction, at least 0",
                req.margin
            )));
        }
        let choice = loaded.place_for_latency(&assignment, &devices, c, req.margin)?;
        assignment = choice.assignment.clone();
        latency = Some(choice);
    }
    // The rules have placed every node; a million-node `.part` file holds ~90 MB of names.
    devices.forget_node_rules();
    Ok(Assigned {
        loaded,
        devices,
        assignment,
        costs,
        latency,
        stage_memory: Vec::new(),
    })
}

/// `stages` consecutive slices of a topological order, on `req`'s devices in turn (or on
/// `stage1..N`), the slowest as fast as the `memory` budgets (`DEVICE=SIZE`) allow.
pub fn load_and_stage<'a>(
    source: impl Into<ModelSource<'a>>,
    req: &AssignRequest,
    stages: usize,
    memory: &[String],
    context: Option<crate::DecodeContext>,
) -> Result<(LoadedModel, Stages), Error> {
    if req.objective == Objective::Latency {
        return Err(Error::usage(
            "stages and the latency objective both decide the devices: choose one",
        ));
    }
    let memory = memory
        .iter()
        .map(|m| parse_memory(m).map_err(Error::usage))
        .collect::<Result<Vec<_>, _>>()?;
    // Stage devices are names; profiles matter only for their declared [cost] figures.
    let profiles = if req.devices.devices.is_empty() {
        Devices::priority(&[])
    } else {
        Devices::resolve(&req.devices)?
    };
    let costs = match &req.costs {
        Some(path) => Costs::read(path)?,
        None => Costs::default(),
    };
    let loaded = load_for(source.into(), req, &profiles)?;
    let stages = loaded.stages(&StageRequest {
        stages,
        devices: &req.devices.devices,
        memory: &memory,
        profiles: &profiles,
        costs: &costs,
        context,
    })?;
    Ok((loaded, stages))
}
