//! What `query` and `partition` share: load, type, assign.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use cleave::assign::Assignment;
use cleave::{load_model, DeviceRequest, Devices, Loaded, RewriteLevel};

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

impl From<OptLevel> for RewriteLevel {
    fn from(l: OptLevel) -> RewriteLevel {
        match l {
            OptLevel::Basic => RewriteLevel::Basic,
            OptLevel::Device => RewriteLevel::Device,
        }
    }
}

impl DeviceArgs {
    pub fn request(&self) -> DeviceRequest {
        DeviceRequest {
            devices: self.devices.clone(),
            part: self.part.clone(),
            default: self.default.clone(),
            profiles: self.profile.clone(),
            no_constraints: self.no_constraints,
        }
    }
}

/// A model loaded, rewritten if asked, and assigned.
pub struct Assigned {
    pub loaded: Loaded,
    pub devices: Devices,
    pub assignment: Assignment,
}

/// Loads a model and gives every node a device, as `query` and `partition` do; prints the
/// assignment's warnings.
pub fn load_and_assign(model_path: &Path, args: &DeviceArgs) -> Result<Assigned, Fail> {
    let devices = Devices::resolve(&args.request())?;
    let mut loaded = load_model(model_path)?;
    if let Some(level) = args.optimize {
        loaded = loaded.rewrite(level.into(), &devices)?;
    }
    let assignment = loaded.assign(&devices)?;
    for w in &assignment.warnings {
        eprintln!("cleave: warning: {}: {w}", model_path.display());
    }
    Ok(Assigned {
        loaded,
        devices,
        assignment,
    })
}
