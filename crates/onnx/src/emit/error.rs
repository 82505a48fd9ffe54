//! What writing parts can fail on, apart from the writer and the part builder that both
//! return it.

use std::path::{Path, PathBuf};

use crate::OnnxError;

#[derive(Debug, thiserror::Error)]
pub enum EmitError {
    #[error("cannot write: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("part {part}: boundary tensor '{tensor}' has no element type or rank ({ty}): {origin}; declare it in the model's value_info")]
    Untyped {
        part: usize,
        tensor: String,
        ty: String,
        /// Where the unknown starts: the first node upstream whose inputs are all typed.
        origin: String,
    },
    #[error("{0}")]
    Source(String),
}

impl EmitError {
    /// The file the error concerns, where there is one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            EmitError::Write { path, .. } => Some(path),
            _ => None,
        }
    }
}

impl From<OnnxError> for EmitError {
    fn from(e: OnnxError) -> Self {
        match e {
            OnnxError::Write { path, source } => EmitError::Write { path, source },
            other => EmitError::Source(format!("{}: {other}", other.path().display())),
        }
    }
}
