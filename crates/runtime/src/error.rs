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
    /// `engine` failed to run the model at `path`.
    pub fn engine(engine: &'static str, path: &std::path::Path, message: String) -> RuntimeError {
        RuntimeError::Engine {
            path: path.to_path_buf(),
            engine,
            message,
        }
    }

    /// `engine` does not support what the model at `path` asks.
    pub fn unsupported(
        engine: &'static str,
        path: &std::path::Path,
        message: String,
    ) -> RuntimeError {
        RuntimeError::Unsupported {
            path: path.to_path_buf(),
            engine,
            message,
        }
    }

    /// The tensor `inputs` gives for the model input `name`, or the error that names it.
    pub fn given<'t, N: AsRef<str>, T>(
        inputs: &'t [(N, T)],
        name: &str,
        path: &std::path::Path,
    ) -> Result<&'t T, RuntimeError> {
        inputs
            .iter()
            .find(|(n, _)| n.as_ref() == name)
            .map(|(_, t)| t)
            .ok_or_else(|| RuntimeError::Input {
                path: path.to_path_buf(),
                name: name.to_string(),
                message: "not given".into(),
            })
    }

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
