//! The front-ends cleave knows, and loading a model through the one that reads it.

use std::path::Path;

use cleave_frontend::{FormatModel, Frontend};
use cleave_onnx::OnnxFrontend;
use cleave_tflite::TfliteFrontend;

use crate::Error;

/// Every front-end, in the order they are asked.
pub fn frontends() -> &'static [&'static dyn Frontend] {
    &[&OnnxFrontend, &TfliteFrontend]
}

/// The front-end that reads `path`; ONNX, the first, for a file no front-end claims, so that
/// its loader says what is wrong with the file.
pub fn frontend_for(path: &Path) -> &'static dyn Frontend {
    frontends()
        .iter()
        .copied()
        .find(|f| f.accepts(path))
        .unwrap_or(&OnnxFrontend)
}

/// Loads, checks and types a model with the front-end that reads it.
pub fn load(path: &Path) -> Result<Box<dyn FormatModel>, Error> {
    Ok(frontend_for(path).load(path)?)
}
