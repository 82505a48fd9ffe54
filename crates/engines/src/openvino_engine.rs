//! OpenVINO through the `openvino` crate, its C library (`libopenvino_c.so`) loaded at run
//! time: from `$OPENVINO_LIB`, else the `openvino` package of the user's Python, else a
//! system install. A part is read from its file (ONNX or TFLite, OpenVINO's own front-ends)
//! and compiled for one OpenVINO device (`CPU`, `GPU`, `NPU`, `GPU.1`, ...).

use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use cleave_ir::ElemType;
use cleave_runtime::{
    Cancel, Engine, HostTensor, LoadOptions, PackagedLibrary, RuntimeError, Session,
};
use openvino::{
    CompiledModel, Core, DeviceType, ElementType, InferRequest, InferenceErrorKind, PropertyKey,
    RwPropertyKey, Shape, Tensor,
};

const ENGINE: &str = "openvino";
/// The wheel the tests use; any recent OpenVINO with the C API works.
pub const OPENVINO_WHEEL: &str = "openvino==2026.4.1";

/// Where cleave finds OpenVINO's C library: `$OPENVINO_LIB`, else `libs/libopenvino_c.so*`
/// in the `openvino` package that `python3` (or `$CLEAVE_PYTHON`) imports, else what
/// `openvino-finder` finds in a system install.
pub fn openvino_library_path() -> Result<PathBuf, String> {
    let explicit = std::env::var_os(LIBRARY.variable).map(PathBuf::from);
    let named = explicit.is_some();
    match crate::python_pkg::find_library(&LIBRARY, explicit, &crate::python_pkg::python()) {
        Ok(p) => Ok(p),
        // A library the user named is the one to use, or to be told about.
        Err(e) if named => Err(e),
        Err(e) => openvino_sys::library::find().ok_or(e),
    }
}

/// OpenVINO's C library in its wheel.
pub(crate) static LIBRARY: PackagedLibrary = PackagedLibrary {
    variable: "OPENVINO_LIB",
    package: "openvino",
    file: "libs/libopenvino_c.so",
    wheel: OPENVINO_WHEEL,
};

/// Every function of the C library that the `openvino` crate calls (its preprocessing API
/// aside, which cleave does not use), from `grep -ohE 'ov_[a-z0-9_]+\(' -r src` over the
/// crate at the version pinned in Cargo.toml.
const OPENVINO_SYMBOLS: &[&str] = &[
    "ov_available_devices_free",
    "ov_compiled_model_create_infer_request",
    "ov_compiled_model_get_property",
    "ov_compiled_model_get_runtime_model",
    "ov_compiled_model_input",
    "ov_compiled_model_input_by_index",
    "ov_compiled_model_input_by_name",
    "ov_compiled_model_inputs_size",
    "ov_compiled_model_output",
    "ov_compiled_model_output_by_index",
    "ov_compiled_model_output_by_name",
    "ov_compiled_model_outputs_size",
    "ov_compiled_model_set_property",
    "ov_const_port_get_shape",
    "ov_core_compile_model",
    "ov_core_create",
    "ov_core_create_with_config",
    "ov_core_get_available_devices",
    "ov_core_get_property",
    "ov_core_get_versions_by_device_name",
    "ov_core_read_model",
    "ov_core_read_model_from_memory_buffer",
    "ov_core_set_property",
    "ov_core_versions_free",
    "ov_dimension_is_dynamic",
    "ov_get_last_err_msg",
    "ov_get_openvino_version",
    "ov_infer_request_cancel",
    "ov_infer_request_get_input_tensor",
    "ov_infer_request_get_input_tensor_by_index",
    "ov_infer_request_get_output_tensor",
    "ov_infer_request_get_output_tensor_by_index",
    "ov_infer_request_get_tensor",
    "ov_infer_request_infer",
    "ov_infer_request_set_input_tensor",
    "ov_infer_request_set_input_tensor_by_index",
    "ov_infer_request_set_output_tensor",
    "ov_infer_request_set_output_tensor_by_index",
    "ov_infer_request_set_tensor",
    "ov_infer_request_start_async",
    "ov_infer_request_wait_for",
    "ov_layout_create",
    "ov_model_const_input_by_index",
    "ov_model_const_output_by_index",
    "ov_model_inputs_size",
    "ov_model_is_dynamic",
    "ov_model_outputs_size",
    "ov_model_reshape",
    "ov_model_reshape_by_port_indexes",
    "ov_model_reshape_by_ports",
    "ov_model_reshape_input_by_name",
    "ov_model_reshape_single_input",
    "ov_partial_shape_create",
    "ov_partial_shape_create_dynamic",
    "ov_partial_shape_create_static",
    "ov_partial_shape_free",
    "ov_partial_shape_is_dynamic",
    "ov_port_get_any_name",
    "ov_port_get_element_type",
    "ov_port_get_partial_shape",
    "ov_rank_is_dynamic",
    "ov_shape_create",
    "ov_shape_free",
    "ov_tensor_create",
    "ov_tensor_data",
    "ov_tensor_get_byte_size",
    "ov_tensor_get_element_type",
    "ov_tensor_get_shape",
    "ov_tensor_get_size",
    "ov_tensor_set_shape",
    "ov_version_free",
];

static LOADED: OnceLock<Result<String, String>> = OnceLock::new();

/// Loads the library once per process; its version, or why it is unavailable.
pub fn openvino_version() -> Result<String, RuntimeError> {
    let loaded = LOADED.get_or_init(|| {
        let path = openvino_library_path()?;
        // The binding panics when a function it calls is missing: check them all first.
        if let Some(s) = crate::python_pkg::missing_symbol(&path, OPENVINO_SYMBOLS)? {
            return Err(format!(
                "{} does not export {s}: not OpenVINO's C library, or one older than 2025.1; set OPENVINO_LIB to libopenvino_c.so, or `pip install {OPENVINO_WHEEL}`",
                path.display()
            ));
        }
        openvino_sys::library::load_from(path.clone())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(openvino::version().build_number)
    });
    loaded.clone().map_err(|message| RuntimeError::Unavailable {
        engine: "OpenVINO",
        message,
    })
}

/// OpenVINO's own words for the last failed call (the crate's error is only a status code).
fn last_message(status: impl std::fmt::Display) -> String {
    // SAFETY: the library is loaded before any call that can fail; the message is a
    // NUL-terminated string owned by the library, copied at once.
    let text = unsafe {
        let p = openvino_sys::ov_get_last_err_msg();
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.is_empty() {
        status.to_string()
    } else {
        format!("{status}: {text}")
    }
}

fn err(path: &Path, e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::Engine {
        path: path.to_path_buf(),
        engine: ENGINE,
        message: last_message(e),
    }
}

fn unsupported(path: &Path, e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::Unsupported {
        path: path.to_path_buf(),
        engine: ENGINE,
        message: last_message(e),
    }
}

/// Properties every compile gets unless `CLEAVE_OPENVINO_PROPERTIES` sets them: full
/// precision (a CPU with bf16 or AMX units would otherwise compute in bf16 and parts would
/// not match the source), and latency over throughput (one request at a time).
const DEFAULTS: [(&str, &str); 2] = [
    ("INFERENCE_PRECISION_HINT", "f32"),
    ("PERFORMANCE_HINT", "LATENCY"),
];

/// `KEY=VALUE,KEY=VALUE` from `CLEAVE_OPENVINO_PROPERTIES` over [`DEFAULTS`].
fn properties() -> Result<Vec<(String, String)>, String> {
    let mut props: Vec<(String, String)> = DEFAULTS
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let Ok(text) = std::env::var("CLEAVE_OPENVINO_PROPERTIES") else {
        return Ok(props);
    };
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').ok_or_else(|| {
            format!("CLEAVE_OPENVINO_PROPERTIES: '{pair}' is not KEY=VALUE (e.g. PERFORMANCE_HINT=THROUGHPUT)")
        })?;
        let (k, v) = (k.trim().to_string(), v.trim().to_string());
        match props.iter_mut().find(|(key, _)| *key == k) {
            Some(slot) => slot.1 = v,
            None => props.push((k, v)),
        }
    }
    Ok(props)
}

/// OpenVINO on one of its devices. The core is shared by the sessions of a process; its
/// calls are serialised (the crate's `Core` is not `Sync`).
pub struct OpenVino {
    device: String,
    core: Mutex<Core>,
}

impl OpenVino {
    /// Loads the library and makes a core for `device` (an OpenVINO device name).
    pub fn new(device: &str) -> Result<OpenVino, RuntimeError> {
        openvino_version()?;
        let core = Core::new().map_err(|e| RuntimeError::Unavailable {
            engine: "OpenVINO",
            message: last_message(e),
        })?;
        Ok(OpenVino {
            device: device.to_string(),
            core: Mutex::new(core),
        })
    }

    /// The devices this installation of OpenVINO sees (`CPU`, `GPU.0`, ...).
    pub fn available_devices(&self) -> Result<Vec<String>, RuntimeError> {
        let core = self.core.lock().unwrap_or_else(|p| p.into_inner());
        let devices = core
            .available_devices()
            .map_err(|e| RuntimeError::Unavailable {
                engine: "OpenVINO",
                message: last_message(e),
            })?;
        Ok(devices.iter().map(|d| d.as_ref().to_string()).collect())
    }
}

impl Engine for OpenVino {
    fn name(&self) -> &'static str {
        ENGINE
    }

    fn load_with(&self, path: &Path, opts: LoadOptions) -> Result<Box<dyn Session>, RuntimeError> {
        let threads = opts.threads;
        let file = path.to_str().ok_or_else(|| {
            unsupported(path, "the path is not UTF-8, which OpenVINO's C API needs")
        })?;
        let props = properties().map_err(|m| RuntimeError::Unavailable {
            engine: "OpenVINO",
            message: m,
        })?;
        let mut core = self.core.lock().unwrap_or_else(|p| p.into_inner());
        let device = DeviceType::from(self.device.as_str());
        let supported = core
            .get_property(&device, &PropertyKey::SupportedProperties)
            .unwrap_or_default();
        // 0: OpenVINO's own choice.
        let threads = threads.get().to_string();
        let all = props
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .chain([("INFERENCE_NUM_THREADS", threads.as_str())]);
        for (k, v) in all {
            // A device that lacks a property (the GPU has no thread count) is left to its
            // own default; a property it has but refuses is an error.
            if !supported.split([' ', ',']).any(|s| s == k) {
                continue;
            }
            core.set_property(&device, &RwPropertyKey::Other(k.to_string().into()), v)
                .map_err(|e| err(path, format!("{} {k}={v}: {e}", self.device)))?;
        }
        let model = core
            .read_model_from_file(file, "")
            .map_err(|e| unsupported(path, e))?;
        let mut compiled = core
            .compile_model(&model, device)
            .map_err(|e| unsupported(path, format!("on {}: {e}", self.device)))?;
        drop(core);
        let ov_inputs = port_names(path, &compiled, true)?;
        let mut inputs = ov_inputs.clone();
        let mut outputs = port_names(path, &compiled, false)?;
        let scalar_outputs = (0..outputs.len())
            .map(|k| {
                let port = compiled.get_output_by_index(k).map_err(|e| err(path, e))?;
                let ps = port.get_partial_shape().map_err(|e| err(path, e))?;
                let rank = ps.get_rank();
                // The C API calls a rank of exactly 0 dynamic; its bounds say what it is.
                Ok(rank.get_min() == 0 && rank.get_max() == 0)
            })
            .collect::<Result<Vec<bool>, RuntimeError>>()?;
        // OpenVINO renames a port whose tensor passes straight through (a part that is one
        // Dropout takes and gives `d61`, not `r61`); the ONNX file's own names, in the same
        // order, are the ones the caller uses.
        if let Some((i, o)) = onnx_io_names(path) {
            if i.len() == inputs.len() && o.len() == outputs.len() {
                (inputs, outputs) = (i, o);
            }
        }
        let request = compiled.create_infer_request().map_err(|e| err(path, e))?;
        Ok(Box::new(OvSession {
            path: path.to_path_buf(),
            compiled,
            request,
            inputs,
            ov_inputs,
            outputs,
            scalar_outputs,
        }))
    }
}

/// Just the names an ONNX file gives its graph's inputs (less those that are initializers)
/// and outputs; prost skips every other field.
mod io_only {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Model {
        #[prost(message, optional, tag = "7")]
        pub graph: Option<Graph>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Graph {
        #[prost(message, repeated, tag = "5")]
        pub initializer: Vec<Named8>,
        #[prost(message, repeated, tag = "11")]
        pub input: Vec<Named1>,
        #[prost(message, repeated, tag = "12")]
        pub output: Vec<Named1>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Named1 {
        #[prost(string, tag = "1")]
        pub name: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Named8 {
        #[prost(string, tag = "8")]
        pub name: String,
    }
}

/// Files larger than this are not read again for their names (a whole model with its
/// weights inline); OpenVINO's own names serve there.
const IO_NAMES_MAX_BYTES: u64 = 256 << 20;

fn onnx_io_names(path: &Path) -> Option<(Vec<String>, Vec<String>)> {
    use prost::Message;
    if path.extension().is_none_or(|e| e != "onnx")
        || std::fs::metadata(path).ok()?.len() > IO_NAMES_MAX_BYTES
    {
        return None;
    }
    let bytes = std::fs::read(path).ok()?;
    let g = io_only::Model::decode(bytes.as_slice()).ok()?.graph?;
    let weights: std::collections::HashSet<&str> =
        g.initializer.iter().map(|t| t.name.as_str()).collect();
    let inputs = g
        .input
        .iter()
        .filter(|v| !weights.contains(v.name.as_str()))
        .map(|v| v.name.clone())
        .collect();
    let outputs = g.output.iter().map(|v| v.name.clone()).collect();
    Some((inputs, outputs))
}

fn port_names(
    path: &Path,
    compiled: &CompiledModel,
    inputs: bool,
) -> Result<Vec<String>, RuntimeError> {
    let n = if inputs {
        compiled.get_input_size()
    } else {
        compiled.get_output_size()
    }
    .map_err(|e| err(path, e))?;
    (0..n)
        .map(|i| {
            let node = if inputs {
                compiled.get_input_by_index(i)
            } else {
                compiled.get_output_by_index(i)
            }
            .map_err(|e| err(path, e))?;
            node.get_name().map_err(|e| err(path, e))
        })
        .collect()
}

struct OvSession {
    path: PathBuf,
    // The request runs inside the compiled model: keep it alive as long as the request.
    compiled: CompiledModel,
    request: InferRequest,
    /// The names callers use (the ONNX file's where it has them) ...
    inputs: Vec<String>,
    /// ... and OpenVINO's own, in the same order.
    ov_inputs: Vec<String>,
    outputs: Vec<String>,
    /// Outputs of rank 0, whose shape the C API cannot hand out.
    scalar_outputs: Vec<bool>,
}

fn ov_type(path: &Path, name: &str, e: ElemType) -> Result<ElementType, RuntimeError> {
    Ok(match e {
        ElemType::F32 => ElementType::F32,
        ElemType::F64 => ElementType::F64,
        ElemType::F16 => ElementType::F16,
        ElemType::BF16 => ElementType::Bf16,
        ElemType::I8 => ElementType::I8,
        ElemType::I16 => ElementType::I16,
        ElemType::I32 => ElementType::I32,
        ElemType::I64 => ElementType::I64,
        ElemType::U8 => ElementType::U8,
        ElemType::U16 => ElementType::U16,
        ElemType::U32 => ElementType::U32,
        ElemType::U64 => ElementType::U64,
        ElemType::Bool => ElementType::Boolean,
        other => {
            return Err(RuntimeError::Input {
                path: path.to_path_buf(),
                name: name.to_string(),
                message: format!("{other} tensors are not supported by the OpenVINO engine"),
            })
        }
    })
}

fn host_type(path: &Path, name: &str, e: ElementType) -> Result<ElemType, RuntimeError> {
    Ok(match e {
        ElementType::F32 => ElemType::F32,
        ElementType::F64 => ElemType::F64,
        ElementType::F16 => ElemType::F16,
        ElementType::Bf16 => ElemType::BF16,
        ElementType::I8 => ElemType::I8,
        ElementType::I16 => ElemType::I16,
        ElementType::I32 => ElemType::I32,
        ElementType::I64 => ElemType::I64,
        ElementType::U8 => ElemType::U8,
        ElementType::U16 => ElemType::U16,
        ElementType::U32 => ElemType::U32,
        ElementType::U64 => ElemType::U64,
        ElementType::Boolean => ElemType::Bool,
        other => {
            return Err(unsupported(
                path,
                format!("output '{name}' of type {other}"),
            ))
        }
    })
}

fn to_ov(path: &Path, name: &str, t: &HostTensor) -> Result<Tensor, RuntimeError> {
    let dims = t
        .shape
        .iter()
        .map(|&d| i64::try_from(d))
        .collect::<Result<Vec<i64>, _>>()
        .map_err(|e| err(path, format!("input '{name}': {e}")))?;
    let shape =
        Shape::new(&dims).map_err(|e| err(path, format!("input '{name}': shape {dims:?}: {e}")))?;
    let mut tensor = Tensor::new(ov_type(path, name, t.elem)?, &shape)
        .map_err(|e| err(path, format!("input '{name}': {e}")))?;
    fill(path, name, &mut tensor, t)?;
    Ok(tensor)
}

/// Copies `t`'s bytes into `tensor`, which has its element type and shape. An empty tensor
/// has no storage to copy into (OpenVINO gives no data pointer for it).
fn fill(path: &Path, name: &str, tensor: &mut Tensor, t: &HostTensor) -> Result<(), RuntimeError> {
    let size = tensor.get_byte_size().map_err(|e| err(path, e))?;
    if size == 0 && t.data.is_empty() {
        return Ok(());
    }
    let dst = tensor.get_raw_data_mut().map_err(|e| err(path, e))?;
    if dst.len() != t.data.len() {
        return Err(RuntimeError::Input {
            path: path.to_path_buf(),
            name: name.to_string(),
            message: format!(
                "{} bytes of data for a tensor of {} bytes",
                t.data.len(),
                dst.len()
            ),
        });
    }
    dst.copy_from_slice(&t.data);
    Ok(())
}

fn from_ov(path: &Path, name: &str, t: &Tensor, scalar: bool) -> Result<HostTensor, RuntimeError> {
    let err = |path: &Path, e: &dyn std::fmt::Display| err(path, format!("output '{name}': {e}"));
    let elem = host_type(path, name, t.get_element_type().map_err(|e| err(path, &e))?)?;
    let shape = if scalar {
        Vec::new()
    } else {
        t.get_shape()
            .map_err(|e| err(path, &e))?
            .get_dimensions()
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<Result<Vec<usize>, _>>()
            .map_err(|e| err(path, &e))?
    };
    let data = if t.get_byte_size().map_err(|e| err(path, &e))? == 0 {
        Vec::new()
    } else {
        t.get_raw_data().map_err(|e| err(path, &e))?.to_vec()
    };
    Ok(HostTensor { elem, shape, data })
}

/// How often a cancellable run looks at its request's token: the most a cancelled run goes on.
const CANCEL_POLL_MS: i64 = 5;

impl OvSession {
    /// Runs the request, started asynchronously where `cancel` may stop it: the wait for the
    /// result looks at the token every few ms, and a cancelled request is cancelled in
    /// OpenVINO, then waited for, so the next run finds it idle.
    fn infer(&mut self, cancel: Option<&Cancel>) -> Result<(), RuntimeError> {
        let path = &self.path;
        let Some(cancel) = cancel else {
            return self
                .request
                .infer()
                .map_err(|e| err(path, format!("inference: {e}")));
        };
        if cancel.is_cancelled() {
            return Err(RuntimeError::Cancelled);
        }
        self.request
            .infer_async()
            .map_err(|e| err(path, format!("inference: {e}")))?;
        loop {
            match self.request.wait(CANCEL_POLL_MS) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind == InferenceErrorKind::ResultNotReady && cancel.is_cancelled() => {
                    // Either ends the run early or finds it done; the wait says which.
                    let _ = self.request.cancel();
                    let _ = self.request.wait(-1);
                    // A cancelled request refuses the next run's inputs: that run gets a
                    // fresh one.
                    self.request = self
                        .compiled
                        .create_infer_request()
                        .map_err(|e| err(path, format!("a new request after a cancel: {e}")))?;
                    return Err(RuntimeError::Cancelled);
                }
                Err(e) if e.kind == InferenceErrorKind::ResultNotReady => {}
                Err(e) => return Err(err(path, format!("inference: {e}"))),
            }
        }
    }

    fn run_with(
        &mut self,
        inputs: &[(String, HostTensor)],
        cancel: Option<&Cancel>,
    ) -> Result<Vec<(String, HostTensor)>, RuntimeError> {
        let path = self.path.clone();
        for (k, name) in self.inputs.iter().enumerate() {
            let t = RuntimeError::given(inputs, name, &path)?;
            if t.shape.is_empty() {
                // OpenVINO's C API makes no shape of rank 0, so a scalar is written into the
                // request's own input tensor.
                let mut own = self
                    .request
                    .get_tensor(&self.ov_inputs[k])
                    .map_err(|e| err(&path, format!("input '{name}': {e}")))?;
                let want = own.get_element_type().map_err(|e| err(&path, e))?;
                if want != ov_type(&path, name, t.elem)? {
                    return Err(RuntimeError::Input {
                        path: path.clone(),
                        name: name.clone(),
                        message: format!("a {} scalar where the model takes {want}", t.elem),
                    });
                }
                fill(&path, name, &mut own, t)?;
                continue;
            }
            let tensor = to_ov(&path, name, t)?;
            self.request
                .set_input_tensor_by_index(k, &tensor)
                .map_err(|e| err(&path, format!("input '{name}': {e}")))?;
        }
        self.infer(cancel)?;
        let mut out = Vec::with_capacity(self.outputs.len());
        for (k, name) in self.outputs.iter().enumerate() {
            let t = self
                .request
                .get_output_tensor_by_index(k)
                .map_err(|e| err(&path, format!("output '{name}': {e}")))?;
            out.push((
                name.clone(),
                from_ov(&path, name, &t, self.scalar_outputs[k])?,
            ));
        }
        Ok(out)
    }
}

impl Session for OvSession {
    fn run(
        &mut self,
        inputs: &[(String, HostTensor)],
    ) -> Result<Vec<(String, HostTensor)>, RuntimeError> {
        self.run_with(inputs, None)
    }

    fn run_cancellable(
        &mut self,
        inputs: &[(String, HostTensor)],
        cancel: &Cancel,
    ) -> Result<Vec<(String, HostTensor)>, RuntimeError> {
        self.run_with(inputs, Some(cancel))
    }

    fn cancellable(&self) -> bool {
        true
    }
}
