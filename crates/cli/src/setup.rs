//! What `query` and `partition` share: load, type, assign.

use std::path::PathBuf;

use cleave_assign::{assign, AssignOptions, Assignment, PartFile};
use cleave_device::Profiles;
use cleave_ir::Model;
use cleave_onnx::{infer_types, is_deterministic, to_ir, OnnxModel};
use clap::Args;

use crate::Fail;

#[derive(Args, Debug, Clone)]
pub struct DeviceArgs {
    /// Devices in priority order, e.g. `myriad,cpu` (as OpenVINO's HETERO:MYRIAD,CPU): a node
    /// goes to the first one whose profile runs it. With --part, overrides its `backends`.
    #[arg(long, visible_alias = "backends", value_delimiter = ',', value_name = "A,B,...")]
    pub devices: Vec<String>,
    /// ONE circle-partitioner rule file: [partition] backends/default/comply, [OPCODE], [OPNAME].
    #[arg(long, value_name = "FILE.part")]
    pub part: Option<PathBuf>,
    /// Device for nodes no rule places (overrides the .part file's `default`).
    #[arg(long, value_name = "DEVICE")]
    pub default: Option<String>,
    /// Extra device profile (TOML); may be repeated; overrides a built-in of the same name.
    /// Built-ins: cpu (every op), myriad (OpenVINO's VPU table). A device without a profile runs every op.
    #[arg(long, value_name = "FILE.toml")]
    pub profile: Vec<PathBuf>,
}

pub struct Loaded {
    pub onnx: OnnxModel,
    pub model: Model,
    pub assignment: Assignment,
    pub constant: Vec<bool>,
}

pub fn load_and_assign(model_path: &std::path::Path, args: &DeviceArgs) -> Result<Loaded, Fail> {
    let mut seen = std::collections::HashSet::new();
    for d in &args.devices {
        if d.is_empty() || !seen.insert(d) {
            return Err(Fail::usage(format!("--devices: '{d}' is empty or listed twice")));
        }
    }
    let mut profiles = Profiles::builtin();
    for p in &args.profile {
        profiles.load(p).map_err(|e| Fail::input(e.path(), &e))?;
    }
    let part = match &args.part {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| Fail::input(path, format!("cannot read: {e}")))?;
            let backends = (!args.devices.is_empty()).then_some(args.devices.as_slice());
            Some(PartFile::parse(&text, path, backends, args.default.as_deref()).map_err(|e| Fail::input(e.path(), &e))?)
        }
        None => None,
    };
    if part.is_none() && args.devices.is_empty() {
        return Err(Fail::usage("no devices given: use --devices (e.g. --devices myriad,cpu) or --part FILE.part"));
    }
    let (onnx, model, constant) = load_model(model_path)?;
    let opts = AssignOptions { devices: args.devices.clone(), default: args.default.clone(), part: part.as_ref() };
    let assignment = assign(&model.graph, &profiles, &opts, &constant).map_err(|e| Fail::input(model_path, e))?;
    Ok(Loaded { onnx, model, assignment, constant })
}

/// Loads, checks and types a model; marks the nodes that compute constants.
pub fn load_model(model_path: &std::path::Path) -> Result<(OnnxModel, Model, Vec<bool>), Fail> {
    let onnx = OnnxModel::load(model_path)?;
    let mut model = to_ir(&onnx)?;
    infer_types(&mut model);
    let constant = model.graph.constant_nodes(is_deterministic);
    Ok((onnx, model, constant))
}
