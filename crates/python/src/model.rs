//! `Model`: a model loaded by the front-end that reads it, with the requests made of it.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use cleave::frontend::FixedDims;
use cleave::ir::{Dim, Graph, ValueId};
use cleave::{AssignRequest, Choice, DeviceRequest, LoadedModel, Objective, RewriteLevel, Rules};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tempfile::TempDir;

use crate::errors::{from_engine_in, from_facade_in, raise, Kind, Names};
use crate::plan::Plan;
use crate::tensors::run_session;

#[pyclass(module = "cleave._cleave", frozen)]
pub struct Model {
    pub(crate) path: PathBuf,
    pub(crate) loaded: LoadedModel,
    /// The folder a model given as bytes was written into; it lives as long as anything
    /// made from the model needs it.
    pub(crate) tmp: Option<Arc<TempDir>>,
    /// What messages call that folder and its file.
    pub(crate) names: Names,
}

fn fixed_dims(
    shape: Option<HashMap<String, Vec<i64>>>,
    dim: Option<HashMap<String, i64>>,
) -> PyResult<FixedDims> {
    let mut fixed = FixedDims::default();
    for (name, dims) in shape.unwrap_or_default() {
        if let Some(d) = dims.iter().find(|&&d| d < 0) {
            return Err(raise(
                Kind::Argument,
                None,
                &format!("shape of '{name}': {d} is not a dimension"),
            ));
        }
        fixed.shapes.push((name, dims));
    }
    for (name, v) in dim.unwrap_or_default() {
        if v < 0 {
            return Err(raise(
                Kind::Argument,
                None,
                &format!("dim '{name}': {v} is not a dimension"),
            ));
        }
        fixed.dims.push((name, v));
    }
    Ok(fixed)
}

fn open(
    path: PathBuf,
    fixed: FixedDims,
    tmp: Option<Arc<TempDir>>,
    names: Names,
) -> PyResult<Model> {
    let loaded = cleave::load_fixed(&path, &fixed).map_err(|e| from_facade_in(e, &names))?;
    Ok(Model {
        path,
        loaded,
        tmp,
        names,
    })
}

/// Loads the model file at `path` (ONNX, TFLite or circle), `shape`/`dim` fixed.
#[pyfunction]
#[pyo3(signature = (path, shape=None, dim=None))]
pub fn load_path(
    py: Python<'_>,
    path: PathBuf,
    shape: Option<HashMap<String, Vec<i64>>>,
    dim: Option<HashMap<String, i64>>,
) -> PyResult<Model> {
    let fixed = fixed_dims(shape, dim)?;
    py.detach(|| open(path, fixed, None, Names::default()))
}

/// Loads a model from its bytes; the format is read from them (TFLite and circle carry a file
/// identifier, anything else is read as ONNX). `name` is what messages call it (`<bytes>`,
/// `<ModelProto 'graph'>`): the private file it is written to is never shown.
#[pyfunction]
#[pyo3(signature = (data, name="<bytes>", shape=None, dim=None))]
pub fn load_bytes(
    py: Python<'_>,
    data: &[u8],
    name: &str,
    shape: Option<HashMap<String, Vec<i64>>>,
    dim: Option<HashMap<String, i64>>,
) -> PyResult<Model> {
    let fixed = fixed_dims(shape, dim)?;
    let ext = match data.get(4..8) {
        Some(b"TFL3") => "tflite",
        Some(b"CIR0") => "circle",
        _ => "onnx",
    };
    py.detach(|| {
        let tmp = cleave::workdir::private_tempdir("cleave-model-")
            .map_err(|e| raise(Kind::File, None, &format!("no temporary folder: {e}")))?;
        // A fixed name: the graph's name may be long, or anything at all.
        let path = tmp.path().join(format!("model.{ext}"));
        let names = Names::default().with(tmp.path(), name).with(&path, name);
        cleave::workdir::write_private(&path, data).map_err(|e| {
            raise(
                Kind::File,
                None,
                &format!("{name}: cannot write a private copy in the temporary folder: {e}"),
            )
        })?;
        open(path, fixed, Some(Arc::new(tmp)), names)
    })
}

/// `(name, dtype, dims)` of each value: dtype in numpy's spelling where it has one, a dim an
/// int, a symbolic name, or None.
fn describe(py: Python<'_>, g: &Graph, values: &[ValueId]) -> PyResult<Vec<Py<PyAny>>> {
    values
        .iter()
        .map(|&v| {
            let value = g.value(v);
            let dtype = value.ty.elem.map(|e| e.name());
            let dims: Option<Vec<Py<PyAny>>> = value
                .ty
                .shape
                .as_ref()
                .map(|s| {
                    s.iter()
                        .map(|d| {
                            Ok(match d {
                                Dim::Fixed(n) => n.into_pyobject(py)?.into_any().unbind(),
                                Dim::Param(p) => p.into_pyobject(py)?.into_any().unbind(),
                                Dim::Unknown => py.None(),
                            })
                        })
                        .collect::<PyResult<Vec<_>>>()
                })
                .transpose()?;
            Ok((value.name.to_string(), dtype, dims)
                .into_pyobject(py)?
                .into_any()
                .unbind())
        })
        .collect()
}

/// A rules dict as the Python wrapper passes it (every key present).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub(crate) struct RuleTableArg {
    backends: Vec<String>,
    default: Option<String>,
    comply: Option<String>,
    #[pyo3(item("OPCODE"))]
    opcode: Vec<(String, String)>,
    #[pyo3(item("OPNAME"))]
    opname: Vec<(String, String)>,
}

/// The keyword arguments `query` and `partition` share, as the Python wrapper passes them
/// (a dict with every key present).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub(crate) struct Request {
    devices: Vec<String>,
    rules: Option<PathBuf>,
    /// A rules dict.
    rules_table: Option<RuleTableArg>,
    default: Option<String>,
    profiles: Vec<PathBuf>,
    optimize: Option<String>,
    objective: String,
    costs: Option<PathBuf>,
    margin: f64,
    no_constraints: bool,
    allow_disconnected: bool,
    /// Decoder state pairs declared beyond those the names show, (input, output).
    state: Vec<(String, String)>,
}

impl Request {
    /// The facade's request. It fixes no dims: the model was loaded with them.
    fn assign_request(self) -> Result<AssignRequest, cleave::Error> {
        let optimize = self
            .optimize
            .as_deref()
            .map(RewriteLevel::from_word)
            .transpose()?;
        let objective = Objective::from_word(&self.objective)?;
        Ok(AssignRequest {
            devices: DeviceRequest {
                devices: self.devices,
                part: match (self.rules, self.rules_table) {
                    (_, Some(t)) => Some(Rules::Table {
                        table: cleave::assign::RuleTable {
                            backends: t.backends,
                            default: t.default,
                            comply: t.comply,
                            opcode: t.opcode,
                            opname: t.opname,
                        },
                        name: PathBuf::from("<rules dict>"),
                    }),
                    (Some(path), None) => Some(Rules::File(path)),
                    (None, None) => None,
                },
                default: self.default,
                profiles: self.profiles,
                no_constraints: self.no_constraints,
            },
            optimize,
            objective,
            costs: self.costs,
            margin: self.margin,
            state: self
                .state
                .into_iter()
                .map(|(input, output)| cleave::ir::StatePair { input, output })
                .collect(),
            ..AssignRequest::default()
        })
    }
}

/// A memory budget as Python gives it: bytes, or text with a unit (`"16GiB"`).
#[derive(FromPyObject)]
pub(crate) enum Size {
    Bytes(u64),
    Text(String),
}

impl Size {
    fn bytes(self, device: &str) -> PyResult<u64> {
        match self {
            Size::Bytes(0) => Err(raise(
                Kind::Argument,
                None,
                &format!("memory['{device}']=0: give a size above 0"),
            )),
            Size::Bytes(b) => Ok(b),
            Size::Text(t) => cleave::parse_size(&t).map_err(|e| {
                raise(
                    Kind::Argument,
                    None,
                    &format!("memory['{device}']='{t}': {e}"),
                )
            }),
        }
    }
}

#[pymethods]
impl Model {
    /// The model file (a temporary copy for a model given as bytes).
    #[getter]
    fn path(&self) -> String {
        self.path.display().to_string()
    }

    /// "onnx", "tflite" or "circle".
    #[getter]
    fn format(&self) -> &'static str {
        self.loaded.model().format
    }

    #[getter]
    fn inputs(&self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        let g = self.loaded.graph();
        describe(py, g, &g.inputs)
    }

    #[getter]
    fn outputs(&self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        let g = self.loaded.graph();
        describe(py, g, &g.outputs)
    }

    /// Nodes of the top-level graph.
    #[getter]
    fn node_count(&self) -> usize {
        self.loaded.graph().nodes.len()
    }

    /// Decoder state pairs the names show, input -> output.
    #[getter]
    fn state(&self) -> BTreeMap<String, String> {
        self.loaded
            .model()
            .state
            .iter()
            .map(|p| (p.input.clone(), p.output.clone()))
            .collect()
    }

    /// Nodes per op type.
    #[getter]
    fn op_counts(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for n in &self.loaded.graph().nodes {
            *counts.entry(n.op_type.to_string()).or_insert(0) += 1;
        }
        counts
    }

    /// Every node's device and why, and each accelerator's coverage, as `cleave query
    /// --json` prints it (a JSON string).
    fn query_json(&self, py: Python<'_>, request: Request) -> PyResult<String> {
        let allow_disconnected = request.allow_disconnected;
        let req = request
            .assign_request()
            .map_err(|e| from_facade_in(e, &self.names))?;
        py.detach(|| {
            let assigned = cleave::load_and_assign(self.loaded.clone(), &req)?;
            let report = cleave::coverage::query(&assigned, allow_disconnected)?;
            serde_json::to_string(&report).map_err(cleave::Error::usage)
        })
        .map_err(|e| from_facade_in(e, &self.names))
    }

    /// Assigns, partitions and validates; see the Python wrapper for the arguments.
    #[pyo3(signature = (request, stages, memory, algorithm, budget_s, context=None, batch=1))]
    #[allow(clippy::too_many_arguments)]
    fn partition(
        &self,
        py: Python<'_>,
        request: Request,
        stages: Option<usize>,
        memory: Vec<(String, Size)>,
        algorithm: &str,
        budget_s: f64,
        context: Option<u64>,
        batch: u64,
    ) -> PyResult<Plan> {
        let allow_disconnected = request.allow_disconnected;
        let facade = |e| from_facade_in(e, &self.names);
        let assign = request.assign_request().map_err(facade)?;
        let algorithm = cleave::AlgorithmChoice::from_word(algorithm)
            .and_then(|a| a.with(allow_disconnected, budget_s))
            .map_err(facade)?;
        let memory = memory
            .into_iter()
            .map(|(device, size)| size.bytes(&device).map(|b| (device, b)))
            .collect::<PyResult<Vec<_>>>()?;
        let req = cleave::PartitionRequest {
            assign,
            stages,
            memory,
            algorithm,
            context: context.map(|tokens| cleave::DecodeContext { tokens, batch }),
        };
        let tmp = self.tmp.clone();
        let names = self.names.clone();
        py.detach(|| Plan::make(self.loaded.clone(), &req, tmp, names))
    }

    /// Runs the whole model once on `engine` (its format's default when None) and returns
    /// `outputs` (the graph's outputs when None; any other tensor of the graph may be named).
    #[pyo3(signature = (feeds, outputs=None, engine=None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        feeds: &Bound<'py, PyDict>,
        outputs: Option<Vec<String>>,
        engine: Option<&str>,
    ) -> PyResult<Bound<'py, PyDict>> {
        self.session(py, outputs, engine)?.run(py, feeds)
    }

    /// The whole model loaded once on `engine`, returning `outputs` from each run: state the
    /// model keeps (resource variables) carries from one run to the next.
    #[pyo3(signature = (outputs=None, engine=None))]
    fn session(
        &self,
        py: Python<'_>,
        outputs: Option<Vec<String>>,
        engine: Option<&str>,
    ) -> PyResult<WholeModel> {
        let source = &self.loaded.source;
        let g = self.loaded.graph();
        let kind = match engine {
            None => cleave::default_engine(source.path()),
            Some(e) => cleave::parse_engine("engine=", e),
        }
        .map_err(|e| from_facade_in(e, &self.names))?;
        let graph_outputs: Vec<String> = g
            .outputs
            .iter()
            .map(|&v| g.value(v).name.to_string())
            .collect();
        let wanted = outputs.unwrap_or_else(|| graph_outputs.clone());
        let mut extra = Vec::new();
        for name in &wanted {
            match g.find(name) {
                Some(v) if !graph_outputs.contains(name) => extra.push(v),
                Some(_) => {}
                None => {
                    return Err(crate::errors::raise_shown(
                        Kind::Argument,
                        &self.names,
                        source.path(),
                        &format!("the model has no tensor '{name}'"),
                    ))
                }
            }
        }
        let names = &self.names;
        let label = kind.label();
        py.detach(|| {
            let engine = cleave::engine(kind).map_err(|e| from_engine_in(e, names))?;
            if extra.is_empty() {
                let session = engine
                    .load(source.path(), false)
                    .map_err(|e| from_engine_in(e.into(), names))?;
                return Ok(WholeModel::new(session, label, wanted, None, names.clone()));
            }
            // A copy whose outputs include the tensors asked for, alive as long as the session.
            let tmp = cleave::workdir::private_tempdir("cleave-whole-")
                .map_err(|e| raise(Kind::File, None, &format!("no temporary folder: {e}")))?;
            let copy = tmp.path().join(format!("whole.{}", source.extension()));
            let shown = format!(
                "<the model with the outputs asked for>.{}",
                source.extension()
            );
            let names = names.clone().with(&copy, &shown);
            source
                .write_with_outputs(&extra, &copy)
                .map_err(|e| from_facade_in(e.into(), &names))?;
            let session = engine
                .load(&copy, false)
                .map_err(|e| from_engine_in(e.into(), &names))?;
            Ok(WholeModel::new(session, label, wanted, Some(tmp), names))
        })
    }
}

/// The whole model loaded in an engine, run as often as asked.
#[pyclass(module = "cleave._cleave", frozen)]
pub struct WholeModel {
    session: std::sync::Mutex<Box<dyn cleave::runtime::Session>>,
    engine: String,
    wanted: Vec<String>,
    _tmp: Option<TempDir>,
    names: Names,
}

impl WholeModel {
    fn new(
        session: Box<dyn cleave::runtime::Session>,
        engine: String,
        wanted: Vec<String>,
        tmp: Option<TempDir>,
        names: Names,
    ) -> WholeModel {
        WholeModel {
            session: std::sync::Mutex::new(session),
            engine,
            wanted,
            _tmp: tmp,
            names,
        }
    }
}

#[pymethods]
impl WholeModel {
    /// The engine the model runs on, as `cleave verify` names its reference (`litert`,
    /// `onert:cpu`, `openvino:CPU`).
    #[getter]
    fn engine(&self) -> &str {
        &self.engine
    }

    /// Runs the model once on `feeds`; returns the tensors the session was opened for.
    fn run<'py>(
        &self,
        py: Python<'py>,
        feeds: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyDict>> {
        run_session(
            py,
            &self.session,
            feeds,
            &self.wanted,
            &self.names,
            "model",
            None,
        )
    }
}
