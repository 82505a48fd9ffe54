//! `Plan`: a validated partition, its parts written on demand; `Runner`: the parts loaded
//! into their engines.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cleave::runtime::runner::LoadedParts;
use cleave::{Assigned, Devices, Emitted, Error, ExternalData, ValidatedPlan};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tempfile::TempDir;

use crate::errors::{from_engine, from_facade, raise, Kind};
use crate::model::feeds_of;
use crate::tensors::to_numpy;

#[pyclass(module = "cleave._cleave")]
pub struct Plan {
    assigned: Assigned,
    plan: ValidatedPlan,
    /// Lines `cleave partition` prints about the stages, when stages made the plan.
    stage_lines: Vec<String>,
    /// Where the parts are written for `runner`, `part_bytes` and `report`.
    scratch: Option<(TempDir, Emitted)>,
    _model_tmp: Option<Arc<TempDir>>,
}

impl Plan {
    pub(crate) fn make(
        path: &Path,
        req: &cleave::AssignRequest,
        stages: Option<usize>,
        memory: &[String],
        algorithm: cleave::Algorithm,
        model_tmp: Option<Arc<TempDir>>,
    ) -> Result<Plan, Error> {
        let (assigned, cut, stage_lines) = match stages {
            Some(n) => {
                let (loaded, stages) = cleave::load_and_stage(path, req, n, memory)?;
                let lines = stage_summary(&stages);
                let assigned = Assigned {
                    loaded,
                    devices: Devices::priority(&[]),
                    assignment: stages.assignment,
                    costs: None,
                    latency: None,
                };
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
        Ok(Plan {
            assigned,
            plan,
            stage_lines,
            scratch: None,
            _model_tmp: model_tmp,
        })
    }

    /// The parts written once into a folder of the plan's own.
    fn scratch(&mut self) -> PyResult<&Emitted> {
        if self.scratch.is_none() {
            let dir = tempfile::Builder::new()
                .prefix("cleave-parts-")
                .tempdir()
                .map_err(|e| raise(Kind::Argument, None, &format!("no temporary folder: {e}")))?;
            let written = self
                .assigned
                .loaded
                .write(&self.plan, dir.path(), ExternalData::Inline)
                .map_err(from_facade)?;
            self.scratch = Some((dir, written));
        }
        match &self.scratch {
            Some((_, w)) => Ok(w),
            None => Err(raise(Kind::Argument, None, "the parts were not written")),
        }
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
        let g = self.assigned.loaded.graph();
        let name = |v: &cleave::ir::ValueId| g.value(*v).name.to_string();
        self.plan
            .parts
            .iter()
            .enumerate()
            .map(|(k, p)| {
                let d = PyDict::new(py);
                d.set_item("index", k + 1)?;
                d.set_item("backend", self.plan.device_name(p))?;
                let nodes: Vec<&str> = p.nodes.iter().map(|&n| g.node_label(n)).collect();
                d.set_item("nodes", nodes)?;
                let constants: Vec<&str> =
                    p.constant_nodes.iter().map(|&n| g.node_label(n)).collect();
                d.set_item("constant_nodes", constants)?;
                d.set_item("inputs", p.inputs.iter().map(name).collect::<Vec<_>>())?;
                d.set_item("outputs", p.outputs.iter().map(name).collect::<Vec<_>>())?;
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
                let weights = stored.chain(computed).fold(0u64, u64::saturating_add);
                d.set_item("weight_bytes", weights)?;
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
        self.assigned.assignment.warnings.clone()
    }

    /// Writes the parts and ONE's connection files into `folder` (created if missing), as
    /// `cleave partition -o folder` does; returns the `.conn.json` path.
    #[pyo3(signature = (folder, external_data="inline"))]
    fn save(&mut self, py: Python<'_>, folder: PathBuf, external_data: &str) -> PyResult<String> {
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
        std::fs::create_dir_all(&folder)
            .map_err(|e| raise(Kind::File, Some(&folder), &format!("cannot create: {e}")))?;
        let Plan { assigned, plan, .. } = self;
        let written = py
            .detach(|| assigned.loaded.write(plan, &folder, external))
            .map_err(from_facade)?;
        Ok(written.conn_json.display().to_string())
    }

    /// Each part's file name and bytes, in order (weights inline).
    fn part_files(&mut self) -> PyResult<Vec<(String, Vec<u8>)>> {
        let written = self.scratch()?;
        let dir = written
            .conn_json
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        written
            .parts
            .iter()
            .map(|p| {
                let f = dir.join(&p.file);
                std::fs::read(&f)
                    .map(|b| (p.file.clone(), b))
                    .map_err(|e| raise(Kind::File, Some(&f), &format!("cannot read: {e}")))
            })
            .collect()
    }

    /// Writes the partition's views (markdown, DOT and the HTML report) beside a written copy
    /// of the parts; returns the HTML file's path.
    fn report(&mut self) -> PyResult<String> {
        let conn = self.scratch()?.conn_json.clone();
        let html =
            cleave_cli::write_report(&conn).map_err(|e| raise(Kind::Argument, Some(&conn), &e))?;
        Ok(html.display().to_string())
    }

    /// Loads every part into its engine: `engines` maps a backend to `tract`, `onnxruntime`
    /// or `litert` (by default `.tflite` parts run on LiteRT, ONNX parts on tract).
    #[pyo3(signature = (engines=None))]
    fn runner(
        &mut self,
        py: Python<'_>,
        engines: Option<Vec<(String, String)>>,
    ) -> PyResult<Runner> {
        let pairs: Vec<String> = engines
            .unwrap_or_default()
            .into_iter()
            .map(|(b, e)| format!("{b}={e}"))
            .collect();
        let map = cleave::engine_map(&pairs).map_err(from_facade)?;
        let conn = self.scratch()?.conn_json.clone();
        let parts = py
            .detach(|| cleave::load_parts(&conn, &map, false))
            .map_err(from_engine)?;
        Ok(Runner::new(parts))
    }
}

/// The parts of a partition loaded into their engines, run on numpy arrays.
#[pyclass(module = "cleave._cleave")]
pub struct Runner {
    parts: Mutex<LoadedParts>,
    outputs: Vec<String>,
    /// Every tensor a part hands to another, in part order.
    boundaries: Vec<String>,
}

impl Runner {
    fn new(parts: LoadedParts) -> Runner {
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
            .map_err(from_engine)?;
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
