use std::path::{Path, PathBuf};

/// Why a pipeline step failed. `Display` is the cause alone, on one line, so a caller can
/// print `file: cause`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file is unreadable, malformed, or asks for what cannot be done; `path` names it.
    #[error("{message}")]
    Input { path: PathBuf, message: String },
    /// The request itself is wrong (options that contradict each other, nothing to do).
    #[error("{0}")]
    Usage(String),
}

impl Error {
    pub fn input(path: impl Into<PathBuf>, message: impl ToString) -> Error {
        Error::Input {
            path: path.into(),
            message: message.to_string(),
        }
    }

    pub fn usage(message: impl ToString) -> Error {
        Error::Usage(message.to_string())
    }

    /// The file the error concerns, if any.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Error::Input { path, .. } => Some(path),
            Error::Usage(_) => None,
        }
    }
}

impl From<cleave_frontend::FrontendError> for Error {
    fn from(e: cleave_frontend::FrontendError) -> Error {
        Error::Input {
            path: e.path,
            message: e.message,
        }
    }
}

impl From<cleave_runtime::RuntimeError> for Error {
    fn from(e: cleave_runtime::RuntimeError) -> Error {
        match e.path() {
            Some(p) => Error::input(p, &e),
            None => Error::usage(&e),
        }
    }
}
