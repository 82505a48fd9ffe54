use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{message}")]
    BadTensor { path: PathBuf, message: String },
    #[error("{engine} cannot run it: {message}")]
    Engine {
        path: PathBuf,
        engine: &'static str,
        message: String,
    },
    /// The engine cannot load or compile the model (an op or type it lacks).
    #[error("{engine} does not support it: {message}")]
    Unsupported {
        path: PathBuf,
        engine: &'static str,
        message: String,
    },
    /// An engine loaded at run time whose library is missing or unusable.
    #[error("{engine} is unavailable: {message}")]
    Unavailable {
        engine: &'static str,
        message: String,
    },
    #[error("model partition or configuration has problems: no part can run, {detail}")]
    Stuck { path: PathBuf, detail: String },
    #[error("input '{name}': {message}")]
    Input {
        path: PathBuf,
        name: String,
        message: String,
    },
    /// The model file itself is unreadable or malformed.
    #[error("{message}")]
    Model { path: PathBuf, message: String },
    #[error("{message}")]
    Conn { path: PathBuf, message: String },
    /// The request was given up on (`Session::run_cancellable`).
    #[error("the run was cancelled: its request was given up on")]
    Cancelled,
}

impl RuntimeError {
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            RuntimeError::Read { path, .. }
            | RuntimeError::Write { path, .. }
            | RuntimeError::BadTensor { path, .. }
            | RuntimeError::Engine { path, .. }
            | RuntimeError::Unsupported { path, .. }
            | RuntimeError::Stuck { path, .. }
            | RuntimeError::Input { path, .. }
            | RuntimeError::Conn { path, .. }
            | RuntimeError::Model { path, .. } => Some(path),
            RuntimeError::Unavailable { .. } | RuntimeError::Cancelled => None,
        }
    }
}
