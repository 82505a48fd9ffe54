//! cleave's errors as the Python package's exceptions (`cleave.Error` and its subclasses,
//! defined in `cleave/_errors.py`, which also reads the node and op out of the cause).

use std::path::Path;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// Which exception a failure becomes.
#[derive(Clone, Copy)]
pub enum Kind {
    /// The model file is invalid or unreadable: `InvalidModelError`.
    Model,
    /// A rule, cost or memory argument, or another named file, is wrong: `ArgumentError`.
    Argument,
    /// An engine could not load or run a part: `EngineError`.
    Engine,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Model => "model",
            Kind::Argument => "argument",
            Kind::Engine => "engine",
        }
    }
}

/// The exception for `message` about `path`, built by the package's own factory.
pub fn raise(kind: Kind, path: Option<&Path>, message: &str) -> PyErr {
    Python::attach(|py| {
        let made = py.import("cleave._errors").and_then(|m| {
            m.getattr("_from_rust")?.call1((
                kind.name(),
                path.map(|p| p.display().to_string()),
                message,
            ))
        });
        match made {
            Ok(exc) => PyErr::from_value(exc),
            // Only a broken installation gets here; still an exception, never a panic.
            Err(e) => PyRuntimeError::new_err(format!("{message} (and cleave._errors: {e})")),
        }
    })
}

/// A facade error met while working on the model at `model`: about that file, the model is
/// invalid; about another file or the request, an argument is.
pub fn from_facade(e: cleave::Error, model: &Path) -> PyErr {
    let message = e.to_string();
    match e.path() {
        Some(p) if same_file(p, model) => raise(Kind::Model, Some(p), &message),
        Some(p) => raise(Kind::Argument, Some(p), &message),
        None => raise(Kind::Argument, None, &message),
    }
}

/// A facade error met while loading or running parts on engines.
pub fn from_engine(e: cleave::Error) -> PyErr {
    let message = e.to_string();
    raise(Kind::Engine, e.path(), &message)
}

fn same_file(a: &Path, b: &Path) -> bool {
    a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}
