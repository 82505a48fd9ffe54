//! `cleave gen`: a random model shaped like a real network, and a `.part` file placing each
//! of its nodes, for scale tests and `cleave bench --partition`.

use std::path::{Path, PathBuf};

use cleave::assign::render_opname;
use cleave::onnx::gen::{generate, GenOptions};
use cleave::onnx::{encode_model, write_atomic};

use crate::Fail;

pub struct GenArgs<'a> {
    pub nodes: usize,
    pub devices: usize,
    pub seed: u64,
    pub output: &'a Path,
    pub part: Option<&'a Path>,
}

/// The `.part` file beside `output` unless named: `model.onnx` → `model.part`.
pub fn part_path(output: &Path, part: Option<&Path>) -> PathBuf {
    part.map_or_else(|| output.with_extension("part"), Path::to_path_buf)
}

pub fn run(a: GenArgs) -> Result<(), Fail> {
    if a.nodes == 0 || a.devices == 0 {
        return Err(Fail::usage("--nodes and --devices must be at least 1"));
    }
    if a.devices > u16::MAX as usize {
        return Err(Fail::usage(format!(
            "--devices {} is more than {} devices",
            a.devices,
            u16::MAX
        )));
    }
    let bar = crate::progress::spinner("generating");
    let g = generate(GenOptions {
        nodes: a.nodes,
        devices: a.devices,
        seed: a.seed,
    });
    bar.set_message("writing");
    write_atomic(a.output, &encode_model(&g.model))?;
    let part = part_path(a.output, a.part);
    let nodes = g
        .model
        .graph
        .as_ref()
        .map(|gr| gr.node.as_slice())
        .unwrap_or_default();
    let text = render_opname(
        &g.backends,
        &g.backends[0],
        nodes.iter().map(|n| n.name()).zip(g.device.iter().copied()),
    );
    write_atomic(&part, text.as_bytes())?;
    bar.finish_and_clear();
    println!(
        "wrote {} ({} nodes) and {} ({} devices: {})",
        a.output.display(),
        a.nodes,
        part.display(),
        g.backends.len(),
        g.backends.join(",")
    );
    Ok(())
}
