use std::path::Path;

use cleave_onnx::{to_ir, OnnxModel};

use crate::Fail;

pub fn run(input: &Path, output: &Path) -> Result<(), Fail> {
    let model = OnnxModel::load(input)?;
    // Refuse to write out a graph cleave could not use: same checks as every other command.
    to_ir(&model)?;
    model.save(output)?;
    Ok(())
}
