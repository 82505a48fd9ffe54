//! `Part`: one part loaded alone into its engine, as Ray's part actors serve it, through the
//! same registry, engines and errors as `cleave run`.

use std::sync::{Arc, Mutex};

use cleave::ir::Dim;
use cleave::runtime::{Cancel, Session, Threads};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tempfile::TempDir;

use crate::errors::{from_engine_in, raise, Kind, Names};
use crate::model::Model;
use crate::tensors::{dtype_name, run_session};

/// What an input takes: numpy's dtype name (None where numpy has none) and the dims (None
/// where one is dynamic; no dims at all where the file does not say).
type InputSpec = (String, Option<&'static str>, Option<Vec<Option<u64>>>);

/// A part in its engine, run on numpy arrays. Frozen, so threads share it: one run at a
/// time, the GIL released while it runs.
#[pyclass(module = "cleave._cleave", frozen)]
pub struct Part {
    session: Mutex<Box<dyn Session>>,
    /// Whether a run in progress stops when its request is cancelled.
    cancellable: bool,
    engine: String,
    note: Option<String>,
    inputs: Vec<InputSpec>,
    outputs: Vec<String>,
    /// The folder a part given as bytes was written into.
    _tmp: Option<Arc<TempDir>>,
    names: Names,
}

/// Loads `model` (a part, by path or bytes) to serve on backend `backend`: on `engine` where
/// the connection file records one, else on the engine the backend names, else on the first
/// engine of its format that loads it (ONNX Runtime, then tract, for ONNX). `threads` caps
/// the engine's threads (0: the engine's own choice, all cores).
#[pyfunction]
#[pyo3(signature = (model, backend, engine=None, threads=0))]
pub fn open_part(
    py: Python<'_>,
    model: &Model,
    backend: &str,
    engine: Option<&str>,
    threads: usize,
) -> PyResult<Part> {
    let g = model.loaded.graph();
    let inputs = g
        .inputs
        .iter()
        .map(|&v| {
            let value = g.value(v);
            let dims = value.ty.shape.as_ref().map(|s| {
                s.iter()
                    .map(|d| match d {
                        Dim::Fixed(n) => u64::try_from(*n).ok(),
                        _ => None,
                    })
                    .collect()
            });
            (
                value.name.to_string(),
                value.ty.elem.and_then(dtype_name),
                dims,
            )
        })
        .collect();
    let outputs = g
        .outputs
        .iter()
        .map(|&v| g.value(v).name.to_string())
        .collect();
    let path = model.loaded.source.path().to_path_buf();
    let names = model.names.clone();
    let served = py
        .detach(|| cleave::load_served_part(&path, backend, None, engine, Threads::count(threads)))
        .map_err(|e| from_engine_in(e, &names))?;
    Ok(Part {
        cancellable: served.session.cancellable(),
        session: Mutex::new(served.session),
        engine: served.engine.label(),
        note: served.note,
        inputs,
        outputs,
        _tmp: model.tmp.clone(),
        names,
    })
}

#[pymethods]
impl Part {
    /// The engine the part runs on (`ort`, `tract`, `litert`, `openvino:CPU`, `onert:cpu`).
    #[getter]
    fn engine(&self) -> &str {
        &self.engine
    }

    /// Why it runs on another engine than the first choice, where it does.
    #[getter]
    fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    /// `(name, dtype, dims)` per input: dtype numpy's name (None where numpy has none), a
    /// dim None where dynamic, dims None where the file gives none.
    #[getter]
    fn inputs(&self) -> Vec<InputSpec> {
        self.inputs.clone()
    }

    /// The part's outputs, in the file's order.
    #[getter]
    fn outputs(&self) -> Vec<String> {
        self.outputs.clone()
    }

    /// Whether cancelling a request stops its run in progress (ONNX Runtime can); on the
    /// other engines a cancelled request's run does not start, and one started finishes.
    #[getter]
    fn cancellable(&self) -> bool {
        self.cancellable
    }

    /// Runs the part once on `feeds` (numpy arrays by input name); returns `outputs` (all
    /// of them when None) as arrays that own the engine's bytes. Given `cancel`, a run that
    /// request is given up on raises (see `cancellable`); cancelling it touches no other run.
    #[pyo3(signature = (feeds, outputs=None, cancel=None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        feeds: &Bound<'py, PyDict>,
        outputs: Option<Vec<String>>,
        cancel: Option<PyRef<'py, CancelToken>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let wanted = outputs.unwrap_or_else(|| self.outputs.clone());
        if let Some(bad) = wanted.iter().find(|n| !self.outputs.contains(n)) {
            return Err(raise(
                Kind::Argument,
                None,
                &format!("the part has no output '{bad}'"),
            ));
        }
        let cancel = cancel.map(|c| c.0.clone());
        run_session(
            py,
            &self.session,
            feeds,
            &wanted,
            &self.names,
            "part",
            cancel.as_deref(),
        )
    }
}

/// One request's cancellation: pass it to `Part.run`, and call `cancel()` from any thread once
/// the request is given up on.
#[pyclass(module = "cleave._cleave", name = "Cancel", frozen)]
pub struct CancelToken(Arc<Cancel>);

#[pymethods]
impl CancelToken {
    #[new]
    fn new() -> CancelToken {
        CancelToken(Arc::new(Cancel::new()))
    }

    /// Gives the request up: its run stops where the engine can, or never starts.
    fn cancel(&self) {
        self.0.cancel();
    }

    #[getter]
    fn cancelled(&self) -> bool {
        self.0.is_cancelled()
    }
}
