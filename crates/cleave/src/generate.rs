//! `cleave gen`: a random model shaped like a real network, and a `.part` file placing each
//! of its nodes, for scale tests and `cleave bench --partition`.

use std::path::Path;

use cleave_frontend::FrontendError;
use cleave_onnx::gen::{generate, GenOptions};
use cleave_onnx::{encode_model, write_atomic};

use crate::Error;

/// What [`generate_model`] wrote.
#[derive(Clone, Debug)]
pub struct Generated {
    pub nodes: usize,
    /// The devices the `.part` file places nodes on, the default first.
    pub backends: Vec<String>,
}

/// Writes a generated ONNX model of `nodes` nodes to `output` and its `.part` file, placing
/// each node on one of `devices` devices, to `part`; the same `seed` gives the same files.
pub fn generate_model(
    nodes: usize,
    devices: usize,
    seed: u64,
    output: &Path,
    part: &Path,
) -> Result<Generated, Error> {
    if nodes == 0 || devices == 0 {
        return Err(Error::usage("--nodes and --devices must be at least 1"));
    }
    if devices > u16::MAX as usize {
        return Err(Error::usage(format!(
            "--devices {devices} is more than {} devices",
            u16::MAX
        )));
    }
    let g = generate(GenOptions {
        nodes,
        devices,
        seed,
    });
    let onnx = |e: cleave_onnx::OnnxError| Error::from(FrontendError::from(e));
    write_atomic(output, &encode_model(&g.model)).map_err(onnx)?;
    let names = g
        .model
        .graph
        .as_ref()
        .map(|gr| gr.node.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|n| n.name());
    let text = cleave_assign::render_opname(
        &g.backends,
        &g.backends[0],
        names.zip(g.device.iter().copied()),
    );
    cleave_workdir::write_atomic(part, text.as_bytes())
        .map_err(|e| Error::from(FrontendError::from(e)))?;
    Ok(Generated {
        nodes,
        backends: g.backends,
    })
}
