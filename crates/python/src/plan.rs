//! `Plan`: a validated partition, its parts written on demand; `Runner`: the parts loaded
//! into their engines.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cleave::runtime::runner::LoadedParts;
use cleave::{Assigned, Emitted, Error, ExternalData, ValidatedPlan};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tempfile::TempDir;

use crate::errors::{from_engine_in, from_facade_in, raise, Kind, Names};
use crate::tensors::feeds_of;
use crate::tensors::to_numpy;

/// Frozen, so threads share it: what it reads is computed once, and what writes files (the
/// model, whose rewritten form a write saves, and the scratch folder) is behind locks taken
/// with the GIL released, inside which nothing calls into Python.
#[pyclass(module = "cleave._cleave", frozen)]
pub struct Plan {
    assigned: Mutex<Assigned>,
    plan: ValidatedPlan,
    parts: Vec<PartInfo>,
    warnings: Vec<String>,
    /// Lines `cleave partition` prints about the stages, when stages made the plan.
    stage_lines: Vec<String>,
    /// Where the parts are written for `runner`, `part_bytes` and `report`.
    scratch: Mutex<Option<(TempDir, Emitted)>>,
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
    conn_json: PathBuf,
    files: Vec<String>,
    /// The plan's names, and the scratch folder as `<parts of the plan>`.
    names: Names,
}

impl Plan {
    pub(crate) fn make(
        path: &Path,
        req: &cleave::AssignRequest,
        stages: Option<usize>,
        memory: &[String],
        algorithm: cleave::Algorithm,
        model_tmp: Option<Arc<TempDir>>,
        names: Names,
    ) -> PyResult<Plan> {
        Self::plan(path, req, stages, memory, algorithm)
            .and_then(|(assigned, plan, stage_lines)| {
                let prediction = PredictionInfo::of(&assigned, &plan)?;
                Ok((assigned, plan, stage_lines, prediction))
            })
            .map(|(assigned, plan, stage_lines, prediction)| Plan {
                prediction,
                parts: PartInfo::of(assigned.loaded.graph(), &plan),
                warnings: assigned.assignment.warnings.clone(),
                assigned: Mutex::new(assigned),
                plan,
                stage_lines,
                scratch: Mutex::new(None),
                _model_tmp: model_tmp,
                names: names.clone(),
            })
            .map_err(|e| from_facade_in(e, &names))
    }

    fn plan(
        path: &Path,
        req: &cleave::AssignRequest,
        stages: Option<usize>,
        memory: &[String],
        algorithm: cleave::Algorithm,
    ) -> Result<(Assigned, ValidatedPlan, Vec<String>), Error> {
        let (assigned, cut, stage_lines) = match stages {
            Some(n) => {
                let (loaded, stages) = cleave::load_and_stage(path, req, n, memory)?;
                let lines = stage_summary(&stages);
                let assigned = Assigned::from_stages(loaded, &stages);
                (assigned, stages.cut, lines)
            }
            None => {
                if !memory.is_empty() {
                    return Err(Error::usage("memory budgets need stages=N"));
                }
                let assigned = cleave::load_and_assign(path, req)?;
                let cut = assigned.loaded.partition(&assigned.assignment, algorithm)?;
                (assigned, cut, Vec::new())
            }
        };
        let plan = assigned.loaded.plan(&assigned.assignment, &cut)?;
        Ok((assigned, plan, stage_lines))
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
                let mut assigned = self.assigned.lock().map_err(|_| {
                    plain("an earlier write of the plan's parts failed midway".into())
                })?;
                let written = assigned
                    .write(&self.plan, dir.path(), ExternalData::Inline)
                    .map_err(|e| Box::new((e, names.clone())))?;
                drop(assigned);
                cleave::workdir::seal(dir.path()).map_err(|e| {
                    (
                        cleave::Error::io(dir.path(), "cannot make private", e),
                        names,
                    )
                })?;
                *slot = Some((dir, written));
            }
            match slot.as_ref() {
                Some((dir, w)) => Ok(Scratch {
                    conn_json: w.conn_json.clone(),
                    files: w.parts.iter().map(|p| p.file.clone()).collect(),
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

fn stage_summary(s: &cleave::Stages) -> Vec<String> {
    s.devices
        .iter()
        .zip(&s.nodes)
        .enumerate()
        .map(|(k, (d, n))| format!("stage {}: {n} nodes on {d}", k + 1))
        .collect()
}

#[pymethods]
impl Plan {
    /// The devices, in the order parts name them.
    #[getter]
    fn devices(&self) -> Vec<String> {
        self.plan.devices.clone()
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
        let external = match external_data {
            "inline" => ExternalData::Inline,
            "shared" => ExternalData::Shared,
            o => {
                return Err(raise(
                    Kind::Argument,
                    None,
                    &format!("external_data='{o}': choose 'inline' or 'shared'"),
                ))
            }
        };
        let written = py
            .detach(|| {
                std::fs::create_dir_all(&folder)
                    .map_err(|e| cleave::Error::io(&folder, "cannot create", e))?;
                let mut assigned = self.assigned.lock().map_err(|_| {
                    cleave::Error::usage("an earlier write of the plan failed midway")
                })?;
                assigned.write(&self.plan, &folder, external)
            })
            .map_err(|e| from_facade_in(e, &self.names))?;
        Ok(written.conn_json.display().to_string())
    }

    /// Each part's file name and bytes, in order (weights inline).
    fn part_files(&self, py: Python<'_>) -> PyResult<Vec<(String, Vec<u8>)>> {
        let written = self.scratch(py)?;
        let dir = written
            .conn_json
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        py.detach(|| {
            written
                .files
                .iter()
                .map(|file| {
                    let f = dir.join(file);
                    std::fs::read(&f).map(|b| (file.clone(), b)).map_err(|e| {
                        crate::errors::raise_shown(
                            Kind::File,
                            &written.names,
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
        let written = self.scratch(py)?;
        let conn = written.conn_json;
        let names = written.names;
        py.detach(|| {
            let html = cleave_cli::write_report(&conn)
                .map_err(|e| crate::errors::raise_shown(Kind::Argument, &names, &conn, &e))?;
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
        let pairs: Vec<String> = engines
            .unwrap_or_default()
            .into_iter()
            .map(|(b, e)| format!("{b}={e}"))
            .collect();
        let map = cleave::engine_map(&pairs).map_err(|e| from_facade_in(e, &self.names))?;
        let written = self.scratch(py)?;
        let names = written.names;
        let parts = py
            .detach(|| cleave::load_parts(&written.conn_json, &map, false))
            .map_err(|e| from_engine_in(e, &names))?;
        Ok(Runner::new(parts, names))
    }
}

/// The parts of a partition loaded into their engines, run on numpy arrays.
#[pyclass(module = "cleave._cleave", frozen)]
pub struct Runner {
    parts: Mutex<LoadedParts>,
    outputs: Vec<String>,
    /// Every tensor a part hands to another, in part order.
    boundaries: Vec<String>,
    names: Names,
}

impl Runner {
    fn new(parts: LoadedParts, names: Names) -> Runner {
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
        Runner {
            parts: Mutex::new(parts),
            outputs,
            boundaries,
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
        let parts = &self.parts;
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
}
