//! `Plan`: a validated partition, its parts written on demand; `Runner`: the parts loaded
//! into their engines.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cleave::runtime::runner::LoadedParts;
use cleave::{
    Assigned, Emitted, Error, ExternalData, LoadedModel, PartitionRequest, Partitioned,
    ValidatedPlan,
};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tempfile::TempDir;

use crate::errors::{from_engine_in, from_facade_in, raise, Kind, Names};
use crate::generator::{Ask, Generator, SharedParts};
use crate::tensors::feeds_of;
use crate::tensors::to_numpy;

/// Frozen, so threads share it: what it reads is computed once, and what writes files (the
/// model, whose rewritten form a write saves, and the scratch folder) is behind locks taken
/// with the GIL released, inside which nothing calls into Python.
#[pyclass(module = "cleave._cleave", frozen)]
pub struct Plan {
    partitioned: Mutex<Partitioned>,
    devices: Vec<String>,
    parts: Vec<PartInfo>,
    warnings: Vec<String>,
    /// Lines `cleave partition` prints about the stages, when stages made the plan.
    stage_lines: Vec<String>,
    /// Where the parts are written for `runner`, `part_bytes` and `report`.
    scratch: Mutex<Option<(Arc<TempDir>, Emitted)>>,
    _model_tmp: Option<Arc<TempDir>>,
    /// What messages call the model's private copy.
    names: Names,
    /// The predicted latency, when the latency objective or a cost file gave figures.
    prediction: Option<PredictionInfo>,
}

/// What `prediction` tells: the plan's predicted latency and what it was compared with.
struct PredictionInfo {
    total_ms: f64,
    part_ms: Vec<f64>,
    /// (placement, ms, parts): the capability placement and each single device.
    compared: Vec<(String, f64, usize)>,
    declared: Vec<String>,
    estimated: Vec<String>,
}

impl PredictionInfo {
    fn of(assigned: &Assigned, plan: &ValidatedPlan) -> Result<Option<PredictionInfo>, Error> {
        let Some(p) = assigned.predict(plan.plan())? else {
            return Ok(None);
        };
        let compared = assigned.latency.as_ref().map_or_else(Vec::new, |c| {
            c.candidates
                .iter()
                .map(|k| (k.name.clone(), k.total_s * 1e3, k.parts))
                .collect()
        });
        Ok(Some(PredictionInfo {
            total_ms: p.estimate.total_s * 1e3,
            part_ms: p.estimate.parts.iter().map(|q| q.total_s() * 1e3).collect(),
            compared,
            declared: p.declared,
            estimated: p.estimated,
        }))
    }
}

/// What `parts_info` tells of a part.
struct PartInfo {
    backend: String,
    nodes: Vec<String>,
    constant_nodes: Vec<String>,
    inputs: Vec<String>,
    outputs: Vec<String>,
    weight_bytes: u64,
}

impl PartInfo {
    fn of(g: &cleave::ir::Graph, plan: &ValidatedPlan) -> Vec<PartInfo> {
        let name = |v: &cleave::ir::ValueId| g.value(*v).name.to_string();
        let label = |n: &cleave::ir::NodeId| g.node_label(*n).to_string();
        plan.parts
            .iter()
            .map(|p| {
                // Stored weights, and what the constant nodes copied into the part compute
                // (exporters that write weights as Constant nodes have no initializers).
                let stored = p.weights.iter().map(|&v| match &g.value(v).def {
                    cleave::ir::ValueDef::Weight(w) => w.byte_len(),
                    _ => 0,
                });
                let computed = p.constant_nodes.iter().flat_map(|&n| {
                    g.node(n)
                        .outputs
                        .iter()
                        .flatten()
                        .map(|&v| g.value(v).ty.byte_size().unwrap_or(0))
                });
                PartInfo {
                    backend: plan.device_name(p).to_string(),
                    nodes: p.nodes.iter().map(label).collect(),
                    constant_nodes: p.constant_nodes.iter().map(label).collect(),
                    inputs: p.inputs.iter().map(name).collect(),
                    outputs: p.outputs.iter().map(name).collect(),
                    weight_bytes: stored.chain(computed).fold(0u64, u64::saturating_add),
                }
            })
            .collect()
    }
}

/// The parts as written into a plan's scratch folder.
struct Scratch {
    /// The folder, shared with the runners loaded from it.
    dir: Arc<TempDir>,
    written: Emitted,
    /// The plan's names, and the scratch folder as `<parts of the plan>`.
    names: Names,
}

impl Plan {
    /// Partitions `loaded` (a copy of the `Model`'s, so the model stays as loaded) through the
    /// facade call the CLI makes.
    pub(crate) fn make(
        loaded: LoadedModel,
        req: &PartitionRequest,
        model_tmp: Option<Arc<TempDir>>,
        names: Names,
    ) -> PyResult<Plan> {
        let made = cleave::partition(loaded, req, cleave::Progress::default()).and_then(|p| {
            let prediction = PredictionInfo::of(&p.assigned, &p.plan)?;
            Ok((p, prediction))
        });
        let (p, prediction) = made.map_err(|e| from_facade_in(e, &names))?;
        Ok(Plan {
            prediction,
            devices: p.plan.devices.clone(),
            parts: PartInfo::of(p.assigned.loaded.graph(), &p.plan),
            warnings: p.assigned.assignment.warnings.clone(),
            stage_lines: p.stage_table(cleave::Face::Python),
            partitioned: Mutex::new(p),
            scratch: Mutex::new(None),
            _model_tmp: model_tmp,
            names,
        })
    }

    /// The parts written once into a private folder of the plan's own (the GIL released while
    /// they are written; a second thread waits for the first's write).
    fn scratch(&self, py: Python<'_>) -> PyResult<Scratch> {
        // Only Rust inside the locks: a failure becomes an exception once they are released.
        let done = py.detach(|| -> Result<Scratch, Box<(cleave::Error, Names)>> {
            let plain = |e: String| Box::new((cleave::Error::usage(e), self.names.clone()));
            let mut slot = self
                .scratch
                .lock()
                .map_err(|_| plain("an earlier write of the plan's parts failed midway".into()))?;
            if slot.is_none() {
                let dir = cleave::workdir::private_tempdir("cleave-parts-")
                    .map_err(|e| plain(format!("no temporary folder: {e}")))?;
                let names = self.scratch_names(dir.path());
                let mut partitioned = self.partitioned.lock().map_err(|_| {
                    plain("an earlier write of the plan's parts failed midway".into())
                })?;
                let written = partitioned
                    .write(dir.path(), ExternalData::Inline)
                    .map_err(|e| Box::new((e, names.clone())))?;
                drop(partitioned);
                cleave::workdir::seal(dir.path()).map_err(|e| {
                    (
                        cleave::Error::io(dir.path(), "cannot make private", e),
                        names,
                    )
                })?;
                *slot = Some((Arc::new(dir), written.into_emitted()));
            }
            match slot.as_ref() {
                Some((dir, w)) => Ok(Scratch {
                    dir: dir.clone(),
                    written: w.clone(),
                    names: self.scratch_names(dir.path()),
                }),
                None => Err(plain("the parts were not written".into())),
            }
        });
        done.map_err(|b| from_facade_in(b.0, &b.1))
    }

    fn scratch_names(&self, dir: &Path) -> Names {
        self.names.clone().with(dir, "<parts of the plan>")
    }
}

#[pymethods]
impl Plan {
    /// The devices, in the order parts name them.
    #[getter]
    fn devices(&self) -> Vec<String> {
        self.devices.clone()
    }

    /// Per part, in dependency order: backend, node names, input and output tensor names,
    /// bytes of the constants it carries (stored weights and constant nodes' values), and the
    /// constant nodes copied into it.
    fn parts_info<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.parts
            .iter()
            .enumerate()
            .map(|(k, p)| {
                let d = PyDict::new(py);
                d.set_item("index", k + 1)?;
                d.set_item("backend", &p.backend)?;
                d.set_item("nodes", &p.nodes)?;
                d.set_item("constant_nodes", &p.constant_nodes)?;
                d.set_item("inputs", &p.inputs)?;
                d.set_item("outputs", &p.outputs)?;
                d.set_item("weight_bytes", p.weight_bytes)?;
                Ok(d)
            })
            .collect()
    }

    /// Lines describing pipeline stages (empty unless `stages` made the plan).
    #[getter]
    fn stage_lines(&self) -> Vec<String> {
        self.stage_lines.clone()
    }

    /// Warnings of the assignment (fused groups dissolved).
    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }

    /// The predicted latency (None without figures): `total_ms`, `part_ms`, `compared`
    /// ({placement: (ms, parts)}: the capability placement and each single device), and
    /// which devices' figures are `declared` by a profile, of which `estimated` are
    /// cleave's built-in estimates.
    #[getter]
    fn prediction<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(p) = &self.prediction else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("total_ms", p.total_ms)?;
        d.set_item("part_ms", &p.part_ms)?;
        let compared = PyDict::new(py);
        for (name, ms, parts) in &p.compared {
            compared.set_item(name, (*ms, *parts))?;
        }
        d.set_item("compared", compared)?;
        d.set_item("declared", &p.declared)?;
        d.set_item("estimated", &p.estimated)?;
        Ok(Some(d))
    }

    /// Writes the parts and ONE's connection files into `folder` (created if missing), as
    /// `cleave partition -o folder` does; returns the `.conn.json` path.
    #[pyo3(signature = (folder, external_data="inline"))]
    fn save(&self, py: Python<'_>, folder: PathBuf, external_data: &str) -> PyResult<String> {
        let external = <ExternalData as cleave::Choice>::from_word(external_data)
            .map_err(|e| from_facade_in(e, &self.names))?;
        let written = py
            .detach(|| {
                std::fs::create_dir_all(&folder)
                    .map_err(|e| cleave::Error::io(&folder, "cannot create", e))?;
                let mut partitioned = self.partitioned.lock().map_err(|_| {
                    cleave::Error::usage("an earlier write of the plan failed midway")
                })?;
                partitioned.write(&folder, external)
            })
            .map_err(|e| from_facade_in(e, &self.names))?;
        Ok(written.conn_json.display().to_string())
    }

    /// Each part's file name and bytes, in order (weights inline).
    fn part_files(&self, py: Python<'_>) -> PyResult<Vec<(String, Vec<u8>)>> {
        let scratch = self.scratch(py)?;
        let dir = scratch
            .written
            .conn_json
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        py.detach(|| {
            scratch
                .written
                .parts
                .iter()
                .map(|p| {
                    let f = dir.join(&p.file);
                    std::fs::read(&f).map(|b| (p.file.clone(), b)).map_err(|e| {
                        crate::errors::raise_shown(
                            Kind::File,
                            &scratch.names,
                            &f,
                            &format!("cannot read: {e}"),
                        )
                    })
                })
                .collect()
        })
    }

    /// Writes the partition's views (markdown, DOT and the HTML report) beside a written copy
    /// of the parts; returns the HTML file's path, or `dest` where the HTML was copied to
    /// (atomically, never through a link planted there or beside it).
    #[pyo3(signature = (dest=None))]
    fn report(&self, py: Python<'_>, dest: Option<PathBuf>) -> PyResult<String> {
        let scratch = self.scratch(py)?;
        let (written, names) = (&scratch.written, &scratch.names);
        let conn = &written.conn_json;
        let latency = self.prediction.as_ref().map(|p| cleave::view::LatencyView {
            part_ms: p.part_ms.clone(),
            lines: Vec::new(),
        });
        py.detach(|| {
            // The guard is dropped before a failure becomes an exception (a call into Python).
            let views = match self.partitioned.lock() {
                Ok(partitioned) => cleave::write_views(&partitioned, written, latency),
                Err(_) => Err(cleave::Error::usage(
                    "an earlier write of the plan failed midway",
                )),
            }
            .map_err(|e| from_facade_in(e, names))?;
            let html = views.files.html;
            if let Some(dir) = conn.parent() {
                cleave::workdir::seal(dir)
                    .map_err(|e| raise(Kind::File, None, &format!("the plan's views: {e}")))?;
            }
            let Some(dest) = dest else {
                return Ok(html.display().to_string());
            };
            cleave::workdir::copy_atomic(&html, &dest).map_err(|e| {
                raise(
                    Kind::File,
                    Some(&dest),
                    &format!("cannot write: {}", e.source),
                )
            })?;
            Ok(dest.display().to_string())
        })
    }

    /// Loads every part into its engine: `engines` maps a backend to `tract`, `onnxruntime`
    /// or `litert` (by default `.tflite` parts run on LiteRT, ONNX parts on tract).
    #[pyo3(signature = (engines=None))]
    fn runner(&self, py: Python<'_>, engines: Option<Vec<(String, String)>>) -> PyResult<Runner> {
        let map = cleave::engine_map(&engines.unwrap_or_default())
            .map_err(|e| from_facade_in(e, &self.names))?;
        let scratch = self.scratch(py)?;
        let names = scratch.names;
        let conn_json = scratch.written.conn_json;
        let parts = py
            .detach(|| cleave::load_parts(&conn_json, &map, false))
            .map_err(|e| from_engine_in(e, &names))?;
        Ok(Runner::new(parts, names, Some(scratch.dir)))
    }
}

/// The parts of a partition loaded into their engines, run on numpy arrays.
#[pyclass(module = "cleave._cleave", frozen)]
pub struct Runner {
    parts: SharedParts,
    /// The part files, kept while the runner lives: an engine whose worker process died loads
    /// its part again from them.
    _files: Option<Arc<TempDir>>,
    outputs: Vec<String>,
    /// Every tensor a part hands to another, in part order.
    boundaries: Vec<String>,
    /// Parts that run on another engine than their default, which could not load them.
    notes: Vec<String>,
    names: Names,
}

impl Runner {
    fn new(parts: LoadedParts, names: Names, files: Option<Arc<TempDir>>) -> Runner {
        let inputs: HashSet<&String> = parts.conn.source.inputs.iter().collect();
        let outputs = parts.conn.source.outputs.clone();
        let mut seen = HashSet::new();
        let boundaries = parts
            .conn
            .parts
            .iter()
            .flat_map(|p| p.outputs.iter())
            .filter(|t| !inputs.contains(t) && !outputs.contains(t) && seen.insert(t.to_string()))
            .cloned()
            .collect();
        let notes = parts.notes.clone();
        Runner {
            parts: SharedParts(Arc::new(Mutex::new(parts))),
            _files: files,
            outputs,
            boundaries,
            notes,
            names,
        }
    }
}

#[pymethods]
impl Runner {
    /// The source model's outputs, which `run` returns.
    #[getter]
    fn outputs(&self) -> Vec<String> {
        self.outputs.clone()
    }

    /// Parts that run on another engine than their default, which could not load them.
    #[getter]
    fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }

    /// The tensors between parts, which `run(..., boundaries=True)` adds.
    #[getter]
    fn boundaries(&self) -> Vec<String> {
        self.boundaries.clone()
    }

    /// Runs every part once on `feeds`; returns the model's outputs, plus every tensor
    /// between parts with `boundaries=True`.
    #[pyo3(signature = (feeds, boundaries=false))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        feeds: &Bound<'py, PyDict>,
        boundaries: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let feeds = feeds_of(feeds)?;
        let parts = &self.parts.0;
        let mut got = py
            .detach(|| {
                let mut parts = parts
                    .lock()
                    .map_err(|_| Error::usage("an earlier run of these parts panicked"))?;
                let mut stats = Vec::new();
                parts.run(feeds, &mut stats).map_err(Error::from)
            })
            .map_err(|e| from_engine_in(e, &self.names))?;
        let out = PyDict::new(py);
        let wanted = self
            .outputs
            .iter()
            .chain(self.boundaries.iter().filter(|_| boundaries));
        for name in wanted {
            if let Some(t) = got.remove(name) {
                out.set_item(name, to_numpy(py, name, t)?)?;
            }
        }
        Ok(out)
    }

    /// Starts a generation (a decoder's parts): `prompt` token ids, then at most
    /// `max_new_tokens`, greedy at temperature 0; each part keeps its KV cache between steps.
    #[pyo3(signature = (prompt, max_new_tokens, stop, temperature, top_k, top_p, seed, state, text=None, tokenizer=None))]
    #[allow(clippy::too_many_arguments)]
    fn generate(
        &self,
        py: Python<'_>,
        prompt: Vec<i64>,
        max_new_tokens: usize,
        stop: Vec<i64>,
        temperature: f64,
        top_k: usize,
        top_p: f64,
        seed: u64,
        state: Vec<(String, String)>,
        text: Option<String>,
        tokenizer: Option<PathBuf>,
    ) -> PyResult<Generator> {
        let ask = Ask {
            prompt,
            text,
            tokenizer,
            max_new_tokens,
            stop,
            sampling: cleave::runtime::decode::Sampling {
                temperature,
                top_k,
                top_p,
                seed,
            },
            state,
        };
        Generator::start(py, self.parts.clone(), ask, self.names.clone())
    }
}
