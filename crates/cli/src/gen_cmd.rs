//! `cleave gen`: a random model shaped like a real network, and a `.part` file placing each
//! of its nodes, for scale tests and `cleave bench --partition`.

use std::path::{Path, PathBuf};

use crate::Fail;

/// The `.part` file beside `output` unless named: `model.onnx` → `model.part`.
pub fn part_path(output: &Path, part: Option<&Path>) -> PathBuf {
    part.map_or_else(|| output.with_extension("part"), Path::to_path_buf)
}

pub fn run(a: Args) -> Result<(), Fail> {
    let bar = crate::progress::spinner("generating");
    let part = part_path(&a.output, a.rules.as_deref());
    let g = cleave::generate_model(a.nodes, a.devices, a.seed, &a.output, &part)?;
    bar.finish_and_clear();
    println!(
        "wrote {} ({} nodes) and {} ({} devices: {})",
        a.output.display(),
        g.nodes,
        part.display(),
        g.backends.len(),
        g.backends.join(",")
    );
    Ok(())
}

// `cleave gen`'s flags, declared here alone; `lib.rs` dispatches them.
#[derive(clap::Args)]
pub struct Args {
    /// Number of nodes.
    #[arg(long, default_value_t = 1000)]
    pub nodes: usize,
    /// Number of devices (cpu, npu, gpu, dsp, dev4...).
    #[arg(long, default_value_t = 2)]
    pub devices: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The model to write (.onnx).
    #[arg(short = 'o', long = "output", value_name = "MODEL.onnx")]
    pub output: std::path::PathBuf,
    /// Where to write the .part file (default: beside the model, MODEL.part).
    #[arg(long, value_name = "FILE.part")]
    pub rules: Option<std::path::PathBuf>,
}
