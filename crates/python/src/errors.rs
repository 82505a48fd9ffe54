//! cleave's errors as the Python package's exceptions (`cleave.Error` and its subclasses,
//! defined in `cleave/_errors.py`), picked by the facade error's kind.

use std::path::Path;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// Which exception a failure becomes.
#[derive(Clone, Copy)]
pub enum Kind {
    /// A rule, cost or memory argument, or another named file, is wrong: `ArgumentError`.
    Argument,
    /// An engine could not load or run a part: `EngineError`.
    Engine,
    /// A file or folder could not be read or written: `FileError`.
    File,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Argument => "argument",
            Kind::Engine => "engine",
            Kind::File => "io",
        }
    }
}

/// The exception for `message` about `path`, built by the package's own factory.
pub fn raise(kind: Kind, path: Option<&Path>, message: &str) -> PyErr {
    raise_named(kind.name(), path, None, message)
}

/// [`raise`] by the facade's name for the kind, with the node at fault where there is one.
fn raise_named(
    kind: &str,
    path: Option<&Path>,
    node: Option<&cleave::NodeRef>,
    message: &str,
) -> PyErr {
    Python::attach(|py| {
        let made = py.import("cleave._errors").and_then(|m| {
            m.getattr("_from_rust")?.call1((
                kind,
                path.map(|p| p.display().to_string()),
                message,
                node.map(|n| n.name.as_str()),
                node.map(|n| n.op.as_str()),
            ))
        });
        match made {
            Ok(exc) => PyErr::from_value(exc),
            // Only a broken installation gets here; still an exception, never a panic.
            Err(e) => PyRuntimeError::new_err(format!("{message} (and cleave._errors: {e})")),
        }
    })
}

/// A facade error as the exception of its kind.
pub fn from_facade(e: cleave::Error) -> PyErr {
    raise_named(e.kind(), e.path(), e.node(), &e.to_string())
}

/// A facade error met while loading or running parts on engines.
pub fn from_engine(e: cleave::Error) -> PyErr {
    let message = e.to_string();
    raise(Kind::Engine, e.path(), &message)
}
