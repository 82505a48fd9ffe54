//! `cleave convert`: a model rewritten in another container of its format family (ONNX with
//! its weights inline or in one shared file; TFLite ⇄ circle), refused unless cleave could
//! use the result itself.

use std::path::Path;

use cleave_frontend::FrontendError;
use cleave_onnx::{
    check_external_data, encode_model, to_ir, write_atomic, OnnxModel, MIN_EXTERNAL_BYTES,
};
use cleave_tflite::{FlatModel, Format, TfliteSource};

use crate::{Arg, Error, ExternalData, Message};

/// Converts `input` to `output` by their extensions; `external` chooses how an ONNX model
/// holds its weights (kept as they are when `None`). Returns notes for the user.
pub fn convert(
    input: &Path,
    output: &Path,
    external: Option<ExternalData>,
) -> Result<Vec<String>, Error> {
    let flat = |p: &Path| {
        let ext = p
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        matches!(ext.as_deref(), Some("tflite" | "circle"))
    };
    if flat(input) || flat(output) {
        if external.is_some() {
            return Err(Error::request(Message::about_arg(
                Arg::ExternalData,
                " applies to ONNX models only",
            )));
        }
        return convert_flat(input, output);
    }
    let onnx = |e: cleave_onnx::OnnxError| Error::from(FrontendError::from(e));
    let model = OnnxModel::load(input).map_err(onnx)?;
    // Refuse to write out a graph cleave could not use: same checks as every other command.
    let ir = to_ir(&model).map_err(onnx)?;
    check_external_data(&model.path, &ir).map_err(onnx)?;
    match external {
        None => model.save(output).map_err(onnx)?,
        Some(ExternalData::Inline) => model
            .internalized()
            .and_then(|m| m.save(output))
            .map_err(onnx)?,
        Some(ExternalData::Shared) => {
            let stem = output
                .file_stem()
                .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
            let (shared, _) = model
                .externalized(
                    &output.with_file_name(format!("{stem}.weights")),
                    MIN_EXTERNAL_BYTES,
                )
                .map_err(onnx)?;
            // Its locations name the new file beside `output`, so nothing is carried along.
            let proto = shared.proto().map_err(onnx)?;
            write_atomic(output, &encode_model(&proto)).map_err(onnx)?;
        }
    }
    Ok(Vec::new())
}

/// TFLite ⇄ circle (or the same format re-encoded), by `output`'s extension.
fn convert_flat(input: &Path, output: &Path) -> Result<Vec<String>, Error> {
    let ext = output
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let target = match ext.as_deref() {
        Some("tflite") => Format::Tflite,
        Some("circle") => Format::Circle,
        _ => {
            return Err(Error::argument(
                output,
                "a TFLite or circle model converts to a .tflite or .circle file only",
            ))
        }
    };
    let source = FlatModel::load(input)?;
    // Refuse what cleave could not use itself, as for ONNX.
    TfliteSource::new(source.clone())?;
    let converted =
        cleave_tflite::convert::convert(&source, target).map_err(|m| Error::model(input, m))?;
    // The result must read back before it replaces anything.
    let back = FlatModel::from_bytes(output, converted.bytes.clone().into())
        .and_then(TfliteSource::new)
        .map_err(|e| {
            Error::internal(
                input,
                format!("the converted model does not read back: {}", e.message),
            )
        })?;
    drop(back);
    cleave_workdir::write_atomic(output, &converted.bytes)
        .map_err(|e| Error::from(FrontendError::from(e)))?;
    Ok(converted.notes)
}
