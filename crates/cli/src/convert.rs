use std::path::Path;

use cleave::onnx::{encode_model, to_ir, write_atomic, OnnxModel, MIN_EXTERNAL_BYTES};

use crate::partition_cmd::ExternalDataArg;
use crate::Fail;

pub fn run(input: &Path, output: &Path, external: Option<ExternalDataArg>) -> Result<(), Fail> {
    let model = OnnxModel::load(input)?;
    // Refuse to write out a graph cleave could not use: same checks as every other command.
    to_ir(&model)?;
    match external {
        None => model.save(output)?,
        Some(ExternalDataArg::Inline) => model.internalized()?.save(output)?,
        Some(ExternalDataArg::Shared) => {
            let stem = output
                .file_stem()
                .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
            let (shared, _) = model.externalized(
                &output.with_file_name(format!("{stem}.weights")),
                MIN_EXTERNAL_BYTES,
            )?;
            // Its locations name the new file beside `output`, so nothing is carried along.
            write_atomic(output, &encode_model(&shared.proto))?;
        }
    }
    Ok(())
}
