use std::path::Path;

use cleave::onnx::{encode_model, to_ir, write_atomic, OnnxModel, MIN_EXTERNAL_BYTES};
use cleave::tflite::{FlatModel, Format, TfliteSource};

use crate::partition_cmd::ExternalDataArg;
use crate::Fail;

pub fn run(input: &Path, output: &Path, external: Option<ExternalDataArg>) -> Result<(), Fail> {
    let flat = |p: &Path| {
        let ext = p
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        matches!(ext.as_deref(), Some("tflite" | "circle"))
    };
    if flat(input) || flat(output) {
        if external.is_some() {
            return Err(Fail::usage("--external-data applies to ONNX models only"));
        }
        return convert_flat(input, output);
    }
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

/// TFLite ⇄ circle (or the same format re-encoded), by OUT's extension.
fn convert_flat(input: &Path, output: &Path) -> Result<(), Fail> {
    let ext = output
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let target = match ext.as_deref() {
        Some("tflite") => Format::Tflite,
        Some("circle") => Format::Circle,
        _ => {
            return Err(Fail::input(
                output,
                "a TFLite or circle model converts to a .tflite or .circle file only",
            ))
        }
    };
    let source = FlatModel::load(input).map_err(|e| Fail::input(&e.path, &e.message))?;
    // Refuse what cleave could not use itself, as for ONNX.
    TfliteSource::new(source.clone()).map_err(|e| Fail::input(&e.path, &e.message))?;
    let converted =
        cleave::tflite::convert::convert(&source, target).map_err(|m| Fail::input(input, m))?;
    // The result must read back before it replaces anything.
    let back = FlatModel::from_bytes(output, converted.bytes.clone().into())
        .and_then(TfliteSource::new)
        .map_err(|e| {
            Fail::input(
                input,
                format!("the converted model does not read back: {}", e.message),
            )
        })?;
    drop(back);
    write_atomic(output, &converted.bytes)?;
    for n in &converted.notes {
        eprintln!("note: {n}");
    }
    Ok(())
}
