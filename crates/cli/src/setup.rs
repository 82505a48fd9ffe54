//! What `query` and `partition` share: load, type, assign.

use std::path::{Path, PathBuf};

use clap::Args;
pub use cleave::Assigned;
use cleave::{
    load_model, AssignRequest, DeviceRequest, FixedDims, LoadedModel, Objective, RewriteLevel,
};

use crate::choice_arg::words;

use crate::Fail;

#[derive(Args, Debug, Clone)]
pub struct DeviceArgs {
    /// Devices in priority order, e.g. `myriad,cpu` (as OpenVINO's HETERO:MYRIAD,CPU): a node
    /// goes to the first one whose profile runs it. With --rules, overrides its `backends`.
    /// An entry ending in .toml is a profile file: its device is used. `ov:DEVICE` (e.g.
    /// ov:GPU,ov:CPU) is an installed OpenVINO device: it runs what OpenVINO's query_model
    /// says it runs of the model, its parts are named `ov-DEVICE` and run on OpenVINO.
    #[arg(
        long,
        visible_alias = "backends",
        value_delimiter = ',',
        value_name = "A,B,..."
    )]
    pub devices: Vec<String>,
    /// ONE circle-partitioner rule file: [partition] backends/default/comply, [OPCODE], [OPNAME].
    #[arg(long, value_name = "FILE.part")]
    pub rules: Option<PathBuf>,
    /// Device for nodes no rule places (overrides the .part file's `default`).
    #[arg(long, value_name = "DEVICE")]
    pub default: Option<String>,
    /// Extra device profile (TOML); may be repeated; overrides a built-in of the same name.
    /// Built-ins: cpu (every op), myriad (OpenVINO's VPU table), nnapi, coreml, coreml-mlprogram
    /// (ONNX Runtime's EP tables). A device without a profile runs every op.
    #[arg(long, value_name = "FILE.toml")]
    pub profile: Vec<PathBuf>,
    /// Rewrite the model before assigning: `basic` folds constants (every node computed from
    /// constants alone runs once on ONNX Runtime, or tract without it), merges nodes that
    /// compute the same thing, removes Identity/Dropout and folds BatchNormalization into Conv
    /// (any device), as ONNX Runtime's basic level; `device` adds the rewrites the devices'
    /// profiles enable (group-conv merge, identity Power removal, joining, tiling). The source
    /// file is not modified; parts are cut from the rewritten model.
    #[arg(long, value_name = "LEVEL", value_parser = words::<RewriteLevel>())]
    pub optimize: Option<RewriteLevel>,
    /// The most MiB of tensors constant folding may add; a constant whose value would pass it
    /// stays a node, computed at run time, and the rewrite says so.
    #[arg(long, value_name = "MIB", default_value_t = 2048)]
    pub fold_limit: u64,
    /// Judge support by op type alone: ignore the profiles' element types, ranks, attribute
    /// values, constant inputs and static shapes (as ONNX Runtime's usability checker does).
    #[arg(long)]
    pub no_constraints: bool,
    /// Fix an input's shape before anything else reads the model, as ONNX Runtime's
    /// make_dynamic_shape_fixed does: NAME=1,3,640,640. Its named dims take those values
    /// wherever the model declares them; the parts are written with them. Repeat per input.
    /// TFLite and circle: the dims go into the input's shape and shape_signature.
    #[arg(long = "shape", value_name = "NAME=D,D,...")]
    pub shape: Vec<String>,
    /// Fix every dim named PARAM (a dim_param, e.g. batch=1) wherever the model declares it.
    #[arg(long = "dim", value_name = "PARAM=N")]
    pub dim: Vec<String>,
    /// Where inference cannot tell a tensor's element type or rank (an op it has no rule
    /// for), run the model once on ONNX Runtime, on seeded random inputs of the shapes
    /// --shape fixes, and take the types the run shows (said on stderr). TFLite: every
    /// tensor whose dims the file leaves dynamic (-1 in shape_signature, a placeholder in
    /// shape), run on LiteRT's Python interpreter, so that parts are written with dims they
    /// can be prepared with (not circle: convert it to TFLite first). Off by default: the
    /// learned dims hold for those input shapes only.
    #[arg(long)]
    pub learn_dims: bool,
    /// Declare a decoder state pair: the input IN takes, on the next step, the value the
    /// output OUT gave (one layer's KV cache). Pairs named as exporters name them
    /// (past_key_values.N.key -> present.N.key, past.N -> present.N) are found without it.
    /// conn.json records each part's pairs; `cleave generate` feeds them back. Repeat per pair.
    #[arg(long = "state", value_name = "IN=OUT")]
    pub state: Vec<String>,
    /// What the placement optimises. `fewest`: each node on the first device that runs it
    /// (rules and the priority list), cut into the fewest parts. `latency`: each unit on the
    /// device, among those that may run it (rules and pins still hold), that minimises the
    /// predicted end-to-end latency of the parts run one after another. Each device's
    /// figures come from --costs where the file has it, else from a `[cost]` section of its
    /// profile, else from cleave's built-in estimate for that device (every built-in device
    /// has one, from published figures; said on stderr). Pieces an accelerator
    /// would run that save less than their launch and copies go to another device.
    #[arg(long, default_value = "fewest", value_parser = words::<Objective>())]
    pub objective: Objective,
    /// Latency figures from `cleave measure` (JSON). With `--objective fewest` they only
    /// predict the split's latency.
    #[arg(long, value_name = "FILE.json")]
    pub costs: Option<PathBuf>,
    /// With --objective latency: a split must be predicted faster than the best single
    /// device that runs the whole model by more than this fraction, else that device runs
    /// it all (a split's prediction errs more than one part's).
    #[arg(long, default_value_t = cleave::DEFAULT_MARGIN, value_name = "FRACTION")]
    pub margin: f64,
}

impl DeviceArgs {
    pub fn request(&self) -> DeviceRequest {
        DeviceRequest {
            devices: self.devices.clone(),
            part: self.rules.clone().map(cleave::Rules::File),
            default: self.default.clone(),
            profiles: self.profile.clone(),
            no_constraints: self.no_constraints,
        }
    }
}

impl DeviceArgs {
    /// The facade's request: devices, fixed dims, rewrite, objective and figures.
    pub fn assign_request(&self) -> Result<AssignRequest, Fail> {
        Ok(AssignRequest {
            devices: self.request(),
            fixed: self.fixed_dims()?,
            learn_dims: self.learn_dims,
            optimize: self.optimize,
            fold_limit: self.fold_limit_bytes(),
            objective: self.objective,
            costs: self.costs.clone(),
            margin: self.margin,
            state: self.state_pairs()?,
        })
    }

    /// `--fold-limit` in bytes.
    pub fn fold_limit_bytes(&self) -> u64 {
        self.fold_limit.saturating_mul(1 << 20)
    }

    /// `--state`, parsed.
    pub fn state_pairs(&self) -> Result<Vec<cleave::ir::StatePair>, Fail> {
        parse_state(&self.state)
    }

    /// `--shape` and `--dim`, parsed.
    pub fn fixed_dims(&self) -> Result<FixedDims, Fail> {
        parse_fixed(&self.shape, &self.dim)
    }

    /// `source` with `--shape`/`--dim` applied (itself when there are none).
    pub fn fix(
        &self,
        source: Box<dyn cleave::FormatModel>,
    ) -> Result<Box<dyn cleave::FormatModel>, Fail> {
        fix_source(source, &self.fixed_dims()?)
    }

    /// Loads the model with `--shape`/`--dim` applied.
    pub fn load(&self, model_path: &Path) -> Result<LoadedModel, Fail> {
        Ok(load_model(model_path)?.fix_dims(&self.fixed_dims()?)?)
    }
}

/// The source of the partition at `conn` with the shapes it was cut for applied under
/// `given`; says on stderr which recorded ones it took.
pub fn conn_source(conn: &Path, given: &FixedDims) -> Result<Box<dyn cleave::FormatModel>, Fail> {
    let (source, recorded) = cleave::conn_source_fixed(conn, given)?;
    if !recorded.is_empty() {
        eprintln!(
            "note: {}: the parts were cut for {}; running them so (--shape or --dim chooses otherwise)",
            conn.display(),
            cleave::as_flags(&recorded)
        );
    }
    Ok(source)
}

/// `source` with `fixed` dims applied (itself when there are none).
pub fn fix_source(
    source: Box<dyn cleave::FormatModel>,
    fixed: &FixedDims,
) -> Result<Box<dyn cleave::FormatModel>, Fail> {
    if fixed.is_empty() {
        return Ok(source);
    }
    Ok(source.fix_dims(fixed).map_err(cleave::Error::from)?)
}

/// `--shape NAME=D,D,...` and `--dim PARAM=N` flags, parsed.
pub fn parse_fixed(shape: &[String], dim: &[String]) -> Result<FixedDims, Fail> {
    let number = |flag: &str, s: &str, d: &str| {
        d.trim()
            .parse::<i64>()
            .ok()
            .filter(|&n| n >= 0)
            .ok_or_else(|| Fail::usage(format!("{flag} '{s}': '{d}' is not a dimension")))
    };
    let split = |flag: &str, s: &str| {
        s.split_once('=')
            .ok_or_else(|| Fail::usage(format!("{flag} '{s}': expected NAME=VALUE")))
            .map(|(a, b)| (a.to_string(), b.to_string()))
    };
    let mut fixed = FixedDims::default();
    for s in shape {
        let (name, dims) = split("--shape", s)?;
        let dims = dims
            .split(',')
            .map(|d| number("--shape", s, d))
            .collect::<Result<Vec<_>, _>>()?;
        fixed.shapes.push((name, dims));
    }
    for s in dim {
        let (name, v) = split("--dim", s)?;
        fixed.dims.push((name, number("--dim", s, &v)?));
    }
    Ok(fixed)
}

/// Loads a model and gives every node a device, as `query` and `partition` do; prints the
/// assignment's warnings.
pub fn load_and_assign(model_path: &Path, args: &DeviceArgs) -> Result<Assigned, Fail> {
    let assigned = cleave::load_and_assign(model_path, &args.assign_request()?)?;
    say_assigned(model_path, &assigned);
    Ok(assigned)
}

/// What the user should know of an assignment: what `--learn-dims` learned, fused groups
/// dissolved, latency figures that are estimates.
pub fn say_assigned(model_path: &Path, assigned: &Assigned) {
    say_learned(model_path, &assigned.loaded);
    for w in &assigned.assignment.warnings {
        eprintln!("cleave: warning: {}: {w}", model_path.display());
    }
    if let Some(note) = assigned
        .latency
        .as_ref()
        .and_then(|c| crate::latency::estimates_note(model_path, &c.estimated))
    {
        eprintln!("{note}");
    }
}

/// What `--learn-dims` took from a run, said as such: these types hold for the inputs' shapes.
pub fn say_learned(model_path: &Path, loaded: &LoadedModel) {
    let Some(l) = &loaded.learned else {
        return;
    };
    if l.unasked.is_some() {
        // Said in the partition's notes.
        return;
    }
    if l.tensors.is_empty() {
        eprintln!(
            "cleave: note: {}: --learn-dims: inference types every tensor; the model was not run",
            model_path.display()
        );
        return;
    }
    let shown: Vec<String> = l
        .tensors
        .iter()
        .take(6)
        .map(|(n, t)| format!("{n} {t}"))
        .collect();
    let more = l.tensors.len().saturating_sub(shown.len());
    eprintln!(
        "cleave: note: {}: --learn-dims: {} tensor type{} learned by running the model once on {} (they hold for these input shapes): {}{}",
        model_path.display(),
        l.tensors.len(),
        if l.tensors.len() == 1 { "" } else { "s" },
        l.engine,
        shown.join(", "),
        if more > 0 { format!(" and {more} more") } else { String::new() }
    );
}

/// `--engine`, as every command that runs parts or models takes it.
#[derive(Args, Debug, Clone, Default)]
pub struct EngineArgs {
    /// Engine per backend (device), e.g. npu=tract,cpu=ort,gpu=openvino:GPU,acl=onert:ruy;cpu
    /// (engines: tract, ort, litert, openvino[:DEVICE], onert[:BACKENDS]). Default: a backend
    /// ov-DEVICE runs on OpenVINO's DEVICE, onert-BACKEND on onert's BACKEND, a .tflite part
    /// or model on LiteRT, a .circle one on onert (cpu), else a backend named `ort` on ONNX
    /// Runtime, every other on tract.
    #[arg(
        long = "engine",
        value_delimiter = ',',
        value_name = "BACKEND=ENGINE",
        value_parser = cleave::parse_engine_pair
    )]
    pub engines: Vec<(String, String)>,
}

/// How a partition is deployed on Ray, as `serve` and `bench --ray` take it (declared in
/// `serve/flags.json`).
pub type RayArgs = crate::serve_flags::Flags<crate::serve_flags::Deploy>;

/// `--input`, as every command that runs a model takes it.
#[derive(Args, Debug, Clone, Default)]
pub struct InputArgs {
    /// A model input: NAME=FILE.npy or NAME=FILE.pb (ONNX TensorProto); repeat per input.
    /// Inputs not given are seeded random data of their declared type and shape (`run` only
    /// when none is given, as a smoke test), said on stderr where a dim had to be chosen.
    #[arg(long = "input", value_name = "NAME=FILE")]
    pub inputs: Vec<String>,
}

/// `--state IN=OUT` declarations.
pub fn parse_state(pairs: &[String]) -> Result<Vec<cleave::ir::StatePair>, Fail> {
    pairs
        .iter()
        .map(|s| cleave::ir::parse_state_pair(s).map_err(|e| Fail::usage(format!("--state {e}"))))
        .collect()
}
