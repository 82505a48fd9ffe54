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
    /// What cleave does not do, such as a tensor type numpy has no dtype for:
    /// `UnsupportedError`.
    Unsupported,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Argument => "argument",
            Kind::Engine => "engine",
            Kind::File => "io",
            Kind::Unsupported => "unsupported",
        }
    }
}

/// What the user calls the private files cleave made of what they gave: a model given as
/// bytes is `<bytes>` or `<ModelProto 'name'>` in messages, never the temporary file it was
/// written to, and a plan's parts written for it are `<parts of the plan>/FILE`.
#[derive(Clone, Default)]
pub struct Names(Vec<(std::path::PathBuf, String)>);

impl Names {
    /// `path` (a file or a folder) is shown as `shown`.
    pub fn with(mut self, path: &Path, shown: &str) -> Names {
        self.0.push((path.to_path_buf(), shown.to_string()));
        // Longest first: a file inside a named folder is named by the file's own name.
        self.0
            .sort_by_key(|(p, _)| std::cmp::Reverse(p.as_os_str().len()));
        self
    }

    fn path(&self, p: &Path) -> String {
        for (known, shown) in &self.0 {
            if p == known {
                return shown.clone();
            }
            if let Ok(rest) = p.strip_prefix(known) {
                return format!("{shown}/{}", rest.display());
            }
        }
        p.display().to_string()
    }

    fn text(&self, s: &str) -> String {
        self.0.iter().fold(s.to_string(), |s, (known, shown)| {
            s.replace(&known.display().to_string(), shown)
        })
    }
}

/// The exception for `message` about `path`, built by the package's own factory.
pub fn raise(kind: Kind, path: Option<&Path>, message: &str) -> PyErr {
    raise_named(
        kind.name(),
        path.map(|p| p.display().to_string()),
        None,
        message,
    )
}

/// [`raise`] about `path` as `names` shows it.
pub fn raise_shown(kind: Kind, names: &Names, path: &Path, message: &str) -> PyErr {
    raise_named(kind.name(), Some(names.path(path)), None, message)
}

/// [`raise`] by the facade's name for the kind, with the node at fault where there is one;
/// `message` is in Python's words already ([`cleave::Error::worded`]).
fn raise_named(
    kind: &str,
    path: Option<String>,
    node: Option<&cleave::NodeRef>,
    message: &str,
) -> PyErr {
    Python::attach(|py| {
        let made = py.import("cleave._errors").and_then(|m| {
            m.getattr("_from_rust")?.call1((
                kind,
                path,
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

/// A facade error as the exception of its kind, private files named as `names` says.
pub fn from_facade_in(e: cleave::Error, names: &Names) -> PyErr {
    raise_named(
        e.kind(),
        e.path().map(|p| names.path(p)),
        e.node(),
        &names.text(&e.worded(cleave::Face::Python)),
    )
}

/// A facade error met while loading or running parts on engines, private files named as
/// `names` says.
pub fn from_engine_in(e: cleave::Error, names: &Names) -> PyErr {
    raise_named(
        Kind::Engine.name(),
        e.path().map(|p| names.path(p)),
        None,
        &names.text(&e.worded(cleave::Face::Python)),
    )
}
