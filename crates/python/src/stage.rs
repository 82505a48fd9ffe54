//! `Stage`: a decoder's part as a served stage, keeping each sequence's KV cache between
//! steps (`cleave::runtime::sequences`); and `Sampler`, the token choice of `cleave
//! generate`, for the serving loop.

use std::sync::Mutex;

use cleave::ir::{StatePair, XorShift64};
use cleave::runtime::decode::{choose, Sampling};
use cleave::runtime::sequences::{Limits, Stage as Held, StageError};
use cleave::runtime::Threads;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{from_engine_in, raise, Kind, Names};
use crate::model::Model;
use crate::tensors::{feeds_of, to_numpy};

/// A part and the caches of the sequences it holds. Frozen, so threads share it: one step at
/// a time, the GIL released while it runs.
#[pyclass(module = "cleave._cleave", frozen)]
pub struct Stage {
    held: Mutex<Held>,
    engine: String,
    note: Option<String>,
    names: Names,
}

/// Loads `model` (a part of a decoder) to serve as a stage on `backend` (engines as
/// `open_part`). `state` pairs (input, output) add to those the names show. A bound of 0 is
/// none.
#[pyfunction]
#[pyo3(signature = (model, backend, engine=None, threads=0, state=None, max_sequences=0, max_context=0, max_bytes=0, max_idle_s=0.0))]
#[allow(clippy::too_many_arguments)]
pub fn open_stage(
    py: Python<'_>,
    model: &Model,
    backend: &str,
    engine: Option<&str>,
    threads: usize,
    state: Option<Vec<(String, String)>>,
    max_sequences: usize,
    max_context: usize,
    max_bytes: u64,
    max_idle_s: f64,
) -> PyResult<Stage> {
    let max_idle = std::time::Duration::try_from_secs_f64(max_idle_s).map_err(|_| {
        raise(
            Kind::Argument,
            None,
            &format!("max_idle_s={max_idle_s}: give seconds, 0 or more"),
        )
    })?;
    let g = model.loaded.graph();
    let inputs = g
        .inputs
        .iter()
        .map(|&v| (g.value(v).name.to_string(), g.value(v).ty.clone()))
        .collect();
    let mut pairs = model.loaded.model().state.clone();
    for (input, output) in state.unwrap_or_default() {
        pairs.push(StatePair { input, output });
    }
    let path = model.loaded.source.path().to_path_buf();
    let names = model.names.clone();
    let served = py
        .detach(|| cleave::load_served_part(&path, backend, None, engine, Threads::count(threads)))
        .map_err(|e| from_engine_in(e, &names))?;
    let limits = Limits {
        max_sequences,
        max_context,
        max_bytes,
        max_idle,
    };
    Ok(Stage {
        engine: served.engine.label(),
        note: served.note,
        held: Mutex::new(Held::new(served.session, &path, inputs, &pairs, limits)),
        names,
    })
}

#[pymethods]
impl Stage {
    #[getter]
    fn engine(&self) -> &str {
        &self.engine
    }

    #[getter]
    fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    /// The state pairs this stage keeps, (input, output).
    #[getter]
    fn state(&self) -> PyResult<Vec<(String, String)>> {
        Ok(self
            .lock()?
            .pairs()
            .iter()
            .map(|p| (p.input.clone(), p.output.clone()))
            .collect())
    }

    /// One step of `sequence`, which feeds `fed` new tokens after `past` tokens of context
    /// (None: whatever the stage holds; 0 starts it afresh): `feeds` are the part's inputs
    /// other than its state. Returns the outputs other than its state. A step past the
    /// stage's bounds raises `cleave.LimitError` (its `status` 429 or 413), one that assumes
    /// another past than the stage holds `LimitError` with status 409 (replay the sequence);
    /// both change nothing, nor does a failed run (`EngineError`).
    #[pyo3(signature = (sequence, fed, feeds, past=None))]
    fn step<'py>(
        &self,
        py: Python<'py>,
        sequence: &str,
        fed: usize,
        feeds: &Bound<'py, PyDict>,
        past: Option<usize>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let feeds = feeds_of(feeds)?;
        let got = py.detach(|| match self.held.lock() {
            Ok(mut held) => Some(held.step(sequence, past, fed, feeds)),
            Err(_) => None,
        });
        let got = match got {
            Some(got) => got.map_err(|e| match e {
                StageError::Run(e) => from_engine_in(e.into(), &self.names),
                limit => limit_error(&limit),
            })?,
            None => {
                return Err(raise(
                    Kind::Engine,
                    None,
                    "an earlier step of this stage panicked",
                ))
            }
        };
        let out = PyDict::new(py);
        for (name, t) in got {
            let arr = to_numpy(py, &name, t)?;
            out.set_item(name, arr)?;
        }
        Ok(out)
    }

    /// Frees `sequence`'s cache; whether the stage held it.
    fn end(&self, sequence: &str) -> PyResult<bool> {
        Ok(self.lock()?.end(sequence))
    }

    /// The tokens of context the stage holds for `sequence`.
    fn context(&self, sequence: &str) -> PyResult<usize> {
        Ok(self.lock()?.context(sequence))
    }

    /// `{"sequences", "tokens", "kv_bytes", "steps"}`: what the stage holds now.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.lock()?.stats();
        let out = PyDict::new(py);
        out.set_item("sequences", s.sequences)?;
        out.set_item("tokens", s.tokens)?;
        out.set_item("kv_bytes", s.kv_bytes)?;
        out.set_item("steps", s.steps)?;
        Ok(out)
    }
}

impl Stage {
    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, Held>> {
        self.held
            .lock()
            .map_err(|_| raise(Kind::Engine, None, "an earlier step of this stage panicked"))
    }
}

/// `cleave.LimitError(cause, status)`.
fn limit_error(e: &StageError) -> PyErr {
    Python::attach(|py| {
        let made = py
            .import("cleave._errors")
            .and_then(|m| m.getattr("LimitError")?.call1((e.to_string(), e.status())));
        match made {
            Ok(exc) => PyErr::from_value(exc),
            Err(err) => raise(
                Kind::Engine,
                None,
                &format!("{e} (and cleave._errors: {err})"),
            ),
        }
    })
}

/// The next token from logits, as `cleave generate` chooses it: greedy at temperature 0,
/// else sampled within top-k and top-p from the seed's sequence of draws.
#[pyclass(module = "cleave._cleave")]
pub struct Sampler {
    sampling: Sampling,
    rng: XorShift64,
}

#[pymethods]
impl Sampler {
    #[new]
    #[pyo3(signature = (temperature=0.0, top_k=0, top_p=1.0, seed=0))]
    fn new(temperature: f64, top_k: usize, top_p: f64, seed: u64) -> PyResult<Sampler> {
        let sampling = Sampling {
            temperature,
            top_k,
            top_p,
            seed,
        };
        sampling
            .check()
            .map_err(|m| raise(Kind::Argument, None, &m.worded(cleave::Face::Python)))?;
        Ok(Sampler {
            sampling,
            rng: XorShift64::seeded(seed),
        })
    }

    /// The token for `logits` (a float array; its last row where it has several).
    fn choose(&mut self, logits: &Bound<'_, PyAny>) -> PyResult<i64> {
        let t = crate::tensors::to_host("logits", logits)?;
        let all = t.to_f64().ok_or_else(|| {
            raise(
                Kind::Argument,
                None,
                &format!("logits are {}, not floats", t.elem),
            )
        })?;
        let vocab = t.shape.last().copied().unwrap_or(0);
        if vocab == 0 || all.len() < vocab {
            return Err(raise(
                Kind::Argument,
                None,
                &format!("logits of shape {:?} hold no token", t.shape),
            ));
        }
        let last: Vec<f32> = all[all.len() - vocab..].iter().map(|&v| v as f32).collect();
        Ok(choose(&last, &self.sampling, &mut self.rng))
    }
}

/// A `tokenizer.json` (Hugging Face's format), as `cleave generate --prompt` reads it.
#[pyclass(module = "cleave._cleave", frozen)]
pub struct Codec(cleave::TextCodec);

#[pymethods]
impl Codec {
    #[new]
    fn new(path: std::path::PathBuf) -> PyResult<Codec> {
        cleave::TextCodec::load(&path)
            .map(Codec)
            .map_err(|e| crate::errors::from_facade_in(e, &Names::default()))
    }

    /// The `tokenizer.json` beside a connection file's source model, where there is one.
    #[staticmethod]
    fn beside(conn: std::path::PathBuf) -> PyResult<Option<std::path::PathBuf>> {
        cleave::TextCodec::beside(&conn)
            .map_err(|e| crate::errors::from_facade_in(e, &Names::default()))
    }

    fn encode(&self, text: &str) -> PyResult<Vec<i64>> {
        self.0
            .encode(text)
            .map_err(|e| crate::errors::from_facade_in(e, &Names::default()))
    }

    fn decode(&self, ids: Vec<i64>) -> PyResult<String> {
        self.0
            .decode(&ids)
            .map_err(|e| crate::errors::from_facade_in(e, &Names::default()))
    }
}
