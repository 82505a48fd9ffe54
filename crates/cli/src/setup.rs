//! What `query` and `partition` share: load, type, assign.

use std::path::PathBuf;

use cleave_assign::{assign, AssignOptions, Assignment, PartFile};
use std::collections::BTreeMap;

use clap::{Args, ValueEnum};
use cleave_device::Profiles;
use cleave_fuse::{optimize, Level, OptimizeOptions};
use cleave_ir::Model;
use cleave_onnx::{infer_types, is_deterministic, to_ir, OnnxModel};

use crate::Fail;

#[derive(Args, Debug, Clone)]
pub struct DeviceArgs {
    /// Devices in priority order, e.g. `myriad,cpu` (as OpenVINO's HETERO:MYRIAD,CPU): a node
    /// goes to the first one whose profile runs it. With --part, overrides its `backends`.
    /// An entry ending in .toml is a profile file: its device is used.
    #[arg(
        long,
        visible_alias = "backends",
        value_delimiter = ',',
        value_name = "A,B,..."
    )]
    pub devices: Vec<String>,
    /// ONE circle-partitioner rule file: [partition] backends/default/comply, [OPCODE], [OPNAME].
    #[arg(long, value_name = "FILE.part")]
    pub part: Option<PathBuf>,
    /// Device for nodes no rule places (overrides the .part file's `default`).
    #[arg(long, value_name = "DEVICE")]
    pub default: Option<String>,
    /// Extra device profile (TOML); may be repeated; overrides a built-in of the same name.
    /// Built-ins: cpu (every op), myriad (OpenVINO's VPU table), nnapi, coreml, coreml-mlprogram
    /// (ONNX Runtime's EP tables). A device without a profile runs every op.
    #[arg(long, value_name = "FILE.toml")]
    pub profile: Vec<PathBuf>,
    /// Rewrite the model before assigning: `basic` folds constants, removes Identity/Dropout
    /// and folds BatchNormalization into Conv (any device); `device` adds the rewrites the
    /// devices' profiles enable (group-conv merge, identity Power removal, joining, tiling).
    /// The source file is not modified; parts are cut from the rewritten model.
    #[arg(long, value_enum, value_name = "LEVEL")]
    pub optimize: Option<OptLevel>,
    /// Judge support by op type alone: ignore the profiles' element types, ranks, attribute
    /// values, constant inputs and static shapes (as ONNX Runtime's usability checker does).
    #[arg(long)]
    pub no_constraints: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum OptLevel {
    Basic,
    Device,
}

impl From<OptLevel> for Level {
    fn from(l: OptLevel) -> Level {
        match l {
            OptLevel::Basic => Level::Basic,
            OptLevel::Device => Level::Device,
        }
    }
}

/// What `--optimize` did.
pub struct Rewritten {
    pub applied: BTreeMap<&'static str, usize>,
    pub nodes_before: usize,
}

pub struct Loaded {
    pub onnx: OnnxModel,
    pub model: Model,
    pub assignment: Assignment,
    pub constant: Vec<bool>,
    pub rewritten: Option<Rewritten>,
}

/// The built-in profiles plus `--profile` files and `.toml` entries of `--devices`; returns
/// the device list with those entries replaced by the names their files define.
pub fn profiles(args: &DeviceArgs) -> Result<(Profiles, Vec<String>), Fail> {
    let mut profiles = Profiles::builtin();
    for p in &args.profile {
        profiles.load(p).map_err(|e| Fail::input(e.path(), &e))?;
    }
    let mut devices = Vec::with_capacity(args.devices.len());
    for d in &args.devices {
        if d.ends_with(".toml") {
            devices.push(
                profiles
                    .load(std::path::Path::new(d))
                    .map_err(|e| Fail::input(e.path(), &e))?,
            );
        } else {
            devices.push(d.clone());
        }
    }
    if args.no_constraints {
        profiles = profiles.without_constraints();
    }
    let mut seen = std::collections::HashSet::new();
    for d in &devices {
        if d.is_empty() || !seen.insert(d) {
            return Err(Fail::usage(format!(
                "--devices: '{d}' is empty or listed twice"
            )));
        }
    }
    Ok((profiles, devices))
}

pub fn load_and_assign(model_path: &std::path::Path, args: &DeviceArgs) -> Result<Loaded, Fail> {
    let (profiles, devices) = profiles(args)?;
    let part = match &args.part {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| Fail::input(path, format!("cannot read: {e}")))?;
            let backends = (!devices.is_empty()).then_some(devices.as_slice());
            Some(
                PartFile::parse(&text, path, backends, args.default.as_deref())
                    .map_err(|e| Fail::input(e.path(), &e))?,
            )
        }
        None => None,
    };
    if part.is_none() && devices.is_empty() {
        return Err(Fail::usage(
            "no devices given: use --devices (e.g. --devices myriad,cpu) or --part FILE.part",
        ));
    }
    let (mut onnx, mut model, mut constant) = load_model(model_path)?;
    let mut rewritten = None;
    if let Some(level) = args.optimize {
        let list = part
            .as_ref()
            .map_or(devices.clone(), |p| p.backends.clone());
        let o = optimize(
            &onnx,
            &OptimizeOptions {
                level: level.into(),
                devices: list,
                profiles: &profiles,
            },
        )
        .map_err(|e| Fail::input(model_path, e))?;
        rewritten = Some(Rewritten {
            applied: o.applied,
            nodes_before: model.graph.nodes.len(),
        });
        onnx = o.model;
        model = o.ir;
        constant = model.graph.constant_nodes(is_deterministic);
    }
    let opts = AssignOptions {
        devices,
        default: args.default.clone(),
        part: part.as_ref(),
    };
    let assignment = assign(&model.graph, &profiles, &opts, &constant)
        .map_err(|e| Fail::input(model_path, e))?;
    for w in &assignment.warnings {
        eprintln!("cleave: warning: {}: {w}", model_path.display());
    }
    Ok(Loaded {
        onnx,
        model,
        assignment,
        constant,
        rewritten,
    })
}

/// Loads, checks and types a model; marks the nodes that compute constants.
pub fn load_model(model_path: &std::path::Path) -> Result<(OnnxModel, Model, Vec<bool>), Fail> {
    let onnx = OnnxModel::load(model_path)?;
    let mut model = to_ir(&onnx)?;
    infer_types(&mut model);
    let constant = model.graph.constant_nodes(is_deterministic);
    Ok((onnx, model, constant))
}
