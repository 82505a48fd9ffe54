//! `cleave gen`: a random model shaped like a real network, and a `.part` file placing each
//! of its nodes, for scale tests and `cleave bench --partition`.

use std::path::{Path, PathBuf};

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
    let bar = crate::progress::spinner("generating");
    let part = part_path(a.output, a.part);
    let g = cleave::generate_model(a.nodes, a.devices, a.seed, a.output, &part)?;
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
