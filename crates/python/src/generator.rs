//! `Generator`: tokens from a decoder's parts, one `next()` at a time; the parts keep their
//! KV caches between steps (`Runner.generate`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cleave::runtime::decode::{Generation, Sampling, Steps};
use cleave::runtime::runner::LoadedParts;
use cleave::runtime::{HostTensor, RuntimeError};
use cleave::{Error, GenerateRequest};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{from_engine_in, from_facade_in, Names};

/// A runner's parts, shared with its generations: each step takes the lock for its run.
#[derive(Clone)]
pub(crate) struct SharedParts(pub Arc<Mutex<LoadedParts>>);

impl Steps for SharedParts {
    fn step(
        &mut self,
        feeds: Vec<(String, HostTensor)>,
    ) -> Result<(HashMap<String, HostTensor>, u64), RuntimeError> {
        let mut parts = self.0.lock().map_err(|_| RuntimeError::Model {
            path: Default::default(),
            message: "an earlier run of these parts panicked".into(),
        })?;
        parts.step(feeds)
    }
}

/// What `Runner.generate` takes, as the Python wrapper passes it.
pub(crate) struct Ask {
    pub prompt: Vec<i64>,
    /// The prompt as text instead, and the tokenizer for it (default: beside the model).
    pub text: Option<String>,
    pub tokenizer: Option<std::path::PathBuf>,
    pub max_new_tokens: usize,
    pub stop: Vec<i64>,
    pub sampling: Sampling,
    pub state: Vec<(String, String)>,
}

/// A generation in progress: iterate it for the tokens.
#[pyclass(module = "cleave._cleave", frozen)]
pub struct Generator {
    inner: Mutex<(Generation<SharedParts>, Vec<i64>)>,
    codec: Option<cleave::TextCodec>,
    names: Names,
}

impl Generator {
    pub(crate) fn start(
        py: Python<'_>,
        parts: SharedParts,
        ask: Ask,
        names: Names,
    ) -> PyResult<Generator> {
        let conn = match parts.0.lock() {
            Ok(p) => p.conn_path.clone(),
            Err(_) => {
                return Err(from_facade_in(
                    Error::usage("an earlier run of these parts panicked"),
                    &names,
                ))
            }
        };
        let codec = py
            .detach(|| {
                let path = match (&ask.tokenizer, &ask.text) {
                    (Some(p), _) => p.clone(),
                    (None, None) => return Ok(None),
                    (None, Some(_)) => cleave::TextCodec::beside(&conn)?.ok_or_else(|| {
                        Error::usage(
                            "a prompt as text needs a tokenizer.json beside the model, or tokenizer=",
                        )
                    })?,
                };
                cleave::TextCodec::load(&path).map(Some)
            })
            .map_err(|e| from_facade_in(e, &names))?;
        let prompt = match (&ask.text, &codec) {
            (Some(t), Some(c)) => c.encode(t).map_err(|e| from_facade_in(e, &names))?,
            _ => ask.prompt,
        };
        let req = GenerateRequest {
            prompt,
            max_new_tokens: ask.max_new_tokens,
            stop: ask.stop,
            sampling: ask.sampling,
            state: ask
                .state
                .into_iter()
                .map(|(input, output)| cleave::ir::StatePair { input, output })
                .collect(),
        };
        let g = py
            .detach(|| {
                let spec = cleave::decoder_spec(&conn, &req.state)?;
                cleave::generation(parts, spec, &req)
            })
            .map_err(|e| from_facade_in(e, &names))?;
        Ok(Generator {
            inner: Mutex::new((g, Vec::new())),
            codec,
            names,
        })
    }
}

#[pymethods]
impl Generator {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// The next token; StopIteration once `max_new_tokens` are out or a stop token came.
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<i64>> {
        let inner = &self.inner;
        py.detach(|| match inner.lock() {
            Ok(mut g) => {
                let t = g.0.next_token().map_err(Error::from)?;
                g.1.extend(t);
                Ok(t)
            }
            Err(_) => Err(Error::usage("an earlier step of this generation panicked")),
        })
        .map_err(|e| from_engine_in(e, &self.names))
    }

    /// The tokens so far as text, by the tokenizer the prompt was encoded with (None
    /// where the prompt was token ids and no tokenizer was given).
    fn text(&self) -> PyResult<Option<String>> {
        let Some(c) = &self.codec else {
            return Ok(None);
        };
        let tokens = match self.inner.lock() {
            Ok(g) => g.1.clone(),
            Err(_) => Vec::new(),
        };
        c.decode(&tokens)
            .map(Some)
            .map_err(|e| from_facade_in(e, &self.names))
    }

    /// What the steps so far measured: `prefill_ms`, `per_token_ms` (each decode step's),
    /// `hop_bytes` (bytes between parts per decode step) and `state_bytes` (the caches the
    /// parts hold now).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let g = match self.inner.lock() {
            Ok(g) => g,
            Err(_) => return Ok(d),
        };
        let g = &g.0;
        let ms = |r: &cleave::runtime::decode::StepReport| r.elapsed.as_secs_f64() * 1e3;
        let (first, rest) = match g.reports.split_first() {
            Some((f, r)) => (Some(f), r),
            None => (None, &[][..]),
        };
        d.set_item("prefill_ms", first.map(ms))?;
        d.set_item("per_token_ms", rest.iter().map(ms).collect::<Vec<_>>())?;
        d.set_item(
            "hop_bytes",
            rest.iter().map(|r| r.hop_bytes).collect::<Vec<_>>(),
        )?;
        d.set_item("state_bytes", g.reports.last().map_or(0, |r| r.state_bytes))?;
        Ok(d)
    }
}
