use std::path::{Path, PathBuf};

use cleave_assign::AssignError;
pub use cleave_frontend::NodeRef;
use cleave_frontend::{ErrorKind, FrontendError};
pub use cleave_ir::words::{Arg, Face, Message};
use cleave_runtime::RuntimeError;

/// Why a pipeline step failed, by kind: the CLI prints every kind the same way (`file:
/// cause`, one line, exit code 2) and the Python package raises a class per kind. `Display`
/// is the cause alone, on one line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The model is not a valid model of its format: unreadable bytes, a broken graph, an
    /// attribute out of range. `node` is the node at fault, where there is one.
    #[error("{message}")]
    InvalidModel {
        path: PathBuf,
        node: Option<NodeRef>,
        message: Message,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// A valid model that asks for what cleave or the chosen devices do not do: an operator
    /// no listed device runs, a feature a format does not have yet.
    #[error("{message}")]
    Unsupported {
        path: PathBuf,
        node: Option<NodeRef>,
        message: Message,
    },
    /// The model, or an output file or folder, could not be read or written.
    #[error("{message}")]
    Io {
        path: PathBuf,
        message: Message,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The request is wrong: a rule, cost, profile or connection file (missing, unreadable or
    /// malformed), a device list, a memory or stage count, options that contradict each
    /// other. `path` is the file at fault, if any.
    #[error("{message}")]
    Argument {
        path: Option<PathBuf>,
        message: Message,
    },
    /// An engine could not be loaded or failed to run a model.
    #[error("{message}")]
    Engine {
        path: Option<PathBuf>,
        message: Message,
        #[source]
        source: Option<RuntimeError>,
    },
    /// cleave broke one of its own invariants: a bug to report, not the user's doing.
    #[error("internal error: {message}")]
    Internal { path: PathBuf, message: String },
}

impl Error {
    /// The model at `path` is invalid.
    pub fn model(path: impl Into<PathBuf>, message: impl ToString) -> Error {
        Error::InvalidModel {
            path: path.into(),
            node: None,
            message: Message::text(message.to_string()),
            source: None,
        }
    }

    /// An argument file (rules, costs, a profile, a connection file) is wrong.
    pub fn argument(path: impl Into<PathBuf>, message: impl ToString) -> Error {
        Error::Argument {
            path: Some(path.into()),
            message: Message::text(message.to_string()),
        }
    }

    /// The request itself is wrong; no file is at fault.
    pub fn usage(message: impl ToString) -> Error {
        Error::Argument {
            path: None,
            message: Message::text(message.to_string()),
        }
    }

    /// The request is wrong, in words that name its arguments by kind: each face says them
    /// its own way ([`Error::worded`]).
    pub fn request(message: impl Into<Message>) -> Error {
        Error::Argument {
            path: None,
            message: message.into(),
        }
    }

    /// An argument file is wrong, in words that name arguments by kind.
    pub fn argument_file(path: impl Into<PathBuf>, message: impl Into<Message>) -> Error {
        Error::Argument {
            path: Some(path.into()),
            message: message.into(),
        }
    }

    /// The cause as `face` words it: arguments as flags or as keyword arguments.
    pub fn worded(&self, face: Face) -> String {
        let (Error::InvalidModel { message, .. }
        | Error::Unsupported { message, .. }
        | Error::Io { message, .. }
        | Error::Argument { message, .. }
        | Error::Engine { message, .. }) = self
        else {
            return self.to_string();
        };
        message.worded(face)
    }

    /// Reading or writing `path` failed.
    pub fn io(path: impl Into<PathBuf>, what: &str, e: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            message: Message::text(format!("{what}: {e}")),
            source: Some(Box::new(e)),
        }
    }

    /// An engine failed on the model at `path`.
    pub fn engine(path: impl Into<PathBuf>, message: impl ToString) -> Error {
        Error::Engine {
            path: Some(path.into()),
            message: Message::text(message.to_string()),
            source: None,
        }
    }

    /// A broken invariant found while working on the model at `path`.
    pub fn internal(path: impl Into<PathBuf>, message: impl ToString) -> Error {
        Error::Internal {
            path: path.into(),
            message: message.to_string(),
        }
    }

    /// The file the error concerns, if any.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Error::InvalidModel { path, .. }
            | Error::Unsupported { path, .. }
            | Error::Io { path, .. }
            | Error::Internal { path, .. } => Some(path),
            Error::Argument { path, .. } | Error::Engine { path, .. } => path.as_deref(),
        }
    }

    /// The node the error is about, where the kind has one.
    pub fn node(&self) -> Option<&NodeRef> {
        match self {
            Error::InvalidModel { node, .. } | Error::Unsupported { node, .. } => node.as_ref(),
            _ => None,
        }
    }

    /// The kind as a word, for callers that map kinds to their own (Python's exceptions).
    pub fn kind(&self) -> &'static str {
        match self {
            Error::InvalidModel { .. } => "model",
            Error::Unsupported { .. } => "unsupported",
            Error::Io { .. } => "io",
            Error::Argument { .. } => "argument",
            Error::Engine { .. } => "engine",
            Error::Internal { .. } => "internal",
        }
    }
}

impl From<FrontendError> for Error {
    fn from(e: FrontendError) -> Error {
        let FrontendError {
            path,
            kind,
            node,
            message,
            source,
        } = e;
        match kind {
            ErrorKind::Unsupported => Error::Unsupported {
                path,
                node,
                message,
            },
            ErrorKind::Io => Error::Io {
                path,
                message,
                source,
            },
            _ => Error::InvalidModel {
                path,
                node,
                message,
                source,
            },
        }
    }
}

impl From<RuntimeError> for Error {
    fn from(e: RuntimeError) -> Error {
        let message = Message::text(e.to_string());
        match &e {
            RuntimeError::Read { path, .. } | RuntimeError::Write { path, .. } => Error::Io {
                path: path.clone(),
                message,
                source: Some(Box::new(e)),
            },
            RuntimeError::Model { path, .. } => Error::InvalidModel {
                path: path.clone(),
                node: None,
                message,
                source: Some(Box::new(e)),
            },
            RuntimeError::Conn { path, .. } => Error::argument_file(path, message),
            _ => Error::Engine {
                path: e.path().map(Path::to_path_buf),
                message,
                source: Some(e),
            },
        }
    }
}

impl Error {
    /// An assignment's refusal about the model at `path`: an operator the devices do not run
    /// is unsupported, the rest are the request's.
    pub fn assignment(path: &Path, e: AssignError) -> Error {
        let message = e.message();
        match e {
            AssignError::Unsupported { node, op, .. }
            | AssignError::RuleUnsupported { node, op, .. } => Error::Unsupported {
                path: path.to_path_buf(),
                node: Some(NodeRef { name: node, op }),
                message,
            },
            AssignError::SharedState { .. } => Error::Unsupported {
                path: path.to_path_buf(),
                node: None,
                message,
            },
            _ => Error::request(message),
        }
    }
}
