//! ONNX backend node tests (`model.onnx` + `test_data_set_*/{input,output}_*.pb`) through an
//! engine: pass, fail, or unsupported (the engine cannot load the model).

use std::path::{Path, PathBuf};

use prost::Message;

use crate::pb::read_pb;
use cleave_runtime::Engine;
use cleave_runtime::HostTensor;

#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Pass,
    Fail(String),
    Unsupported(String),
}

/// Tolerances of the comparison with the shipped outputs.
pub const RTOL: f64 = 1e-3;
pub const ATOL: f64 = 1e-5;

fn numbered(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<(usize, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let n = name
                .strip_prefix(prefix)?
                .strip_suffix(".pb")?
                .parse()
                .ok()?;
            Some((n, e.path()))
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, p)| p).collect()
}

fn tensor_name(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    crate::proto::TensorProto::decode(&bytes[..])
        .ok()?
        .name
        .filter(|n| !n.is_empty())
}

/// Runs `model` (a test's model, or a one-part partition of it) on the first data set of
/// `case` and compares each output with the shipped one. `input_names`/`output_names` are the
/// model's, in graph order, used where a `.pb` carries no name.
pub fn run_case(
    engine: &dyn Engine,
    model: &Path,
    case: &Path,
    input_names: &[String],
    output_names: &[String],
) -> Outcome {
    let data = case.join("test_data_set_0");
    let mut inputs: Vec<(String, HostTensor)> = Vec::new();
    for (i, p) in numbered(&data, "input_").iter().enumerate() {
        let name = tensor_name(p)
            .or_else(|| input_names.get(i).cloned())
            .unwrap_or_default();
        match read_pb(p) {
            Ok(t) => inputs.push((name, t)),
            Err(e) => return Outcome::Unsupported(format!("input {i}: {e}")),
        }
    }
    let mut session = match engine.load(model, false) {
        Ok(s) => s,
        Err(e) => return Outcome::Unsupported(e.to_string()),
    };
    let got = match session.run(&inputs) {
        Ok(o) => o,
        Err(e @ cleave_runtime::RuntimeError::Unsupported { .. }) => {
            return Outcome::Unsupported(e.to_string())
        }
        Err(e) => return Outcome::Fail(e.to_string()),
    };
    for (i, p) in numbered(&data, "output_").iter().enumerate() {
        let name = tensor_name(p)
            .or_else(|| output_names.get(i).cloned())
            .unwrap_or_default();
        let want = match read_pb(p) {
            Ok(t) => t,
            Err(e) => return Outcome::Unsupported(format!("output {i}: {e}")),
        };
        let Some((_, have)) = got.iter().find(|(n, _)| *n == name).or_else(|| got.get(i)) else {
            return Outcome::Fail(format!("output '{name}' missing"));
        };
        let d = have.diff(&want, RTOL, ATOL);
        if d.beyond > 0 {
            return Outcome::Fail(format!(
                "output '{name}': {} elements beyond tolerance (max abs {:.3e})",
                d.beyond, d.max_abs
            ));
        }
    }
    Outcome::Pass
}
