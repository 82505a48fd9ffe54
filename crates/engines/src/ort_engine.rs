//! ONNX Runtime through the `ort` crate, with its shared library loaded at run time.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use cleave_ir::ElemType;
use ort::environment::Environment;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::RunOptions;
use ort::session::SessionInputValue;
use ort::value::{DynValue, Tensor, TensorElementType, TensorRef, ValueType};

use cleave_runtime::RuntimeError;
use cleave_runtime::{Cancel, Engine, Interrupt, LoadOptions, PackagedLibrary, Session, Threads};
use cleave_runtime::{HostTensor, TensorView};

/// The library's file name in the PyPI `onnxruntime` wheel that `scripts/install/fetch-ort.sh` unpacks.
pub const ORT_LIBRARY: &str = "libonnxruntime.so.1.31.1";

/// ONNX Runtime's library in its wheel.
pub(crate) static LIBRARY: PackagedLibrary = PackagedLibrary {
    variable: "ORT_DYLIB_PATH",
    package: "onnxruntime",
    file: "capi/libonnxruntime.so",
    wheel: "onnxruntime",
};

/// Where cleave looks for ONNX Runtime: `ORT_DYLIB_PATH`, else
/// `~/.cache/cleave/ort/libonnxruntime.so.1.31.1`, else the library inside the `onnxruntime`
/// package of the user's Python (`$CLEAVE_PYTHON`, else `python3`).
pub fn ort_library_path() -> PathBuf {
    ort_library().0
}

/// [`ort_library_path`], and why the user's Python could not be asked when that is why the
/// library is missing (it is not a Python, say): the fix is then CLEAVE_PYTHON, not a pip
/// install.
fn ort_library() -> (PathBuf, Option<String>) {
    if let Some(p) = std::env::var_os(LIBRARY.variable) {
        return (PathBuf::from(p), None);
    }
    let cached = PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
        .join(".cache/cleave/ort")
        .join(ORT_LIBRARY);
    if cached.is_file() {
        return (cached, None);
    }
    match python_library() {
        Ok(Some(p)) => (p, None),
        Ok(None) => (cached, None),
        Err(why) => (cached, Some(why)),
    }
}

/// `libonnxruntime.so*` in the `onnxruntime` package's `capi` folder, if Python has one;
/// an error when the Python itself failed.
fn python_library() -> Result<Option<PathBuf>, String> {
    use crate::python_pkg::{first_with_prefix, package_dir, python, PackageError};
    let (folder, prefix) = LIBRARY.file.rsplit_once('/').unwrap_or(("", LIBRARY.file));
    match package_dir(&python(), LIBRARY.package) {
        Ok(dir) => Ok(first_with_prefix(&Path::new(&dir).join(folder), prefix)),
        Err(PackageError::Python(why)) => Err(why),
        Err(PackageError::Package(_)) => Ok(None),
    }
}

static ENV: OnceLock<Result<Environment, String>> = OnceLock::new();

pub struct OnnxRuntime {
    env: &'static Environment,
}

impl OnnxRuntime {
    /// Loads the shared library once per process; reports it unavailable with the fix.
    pub fn new() -> Result<OnnxRuntime, RuntimeError> {
        let env = ENV.get_or_init(|| {
            let (path, python_failed) = ort_library();
            // Only asked when nothing else gave the library, so then it is missing.
            if let Some(why) = python_failed {
                return Err(format!(
                    "{why}, so cleave cannot look for the onnxruntime package; set \
                     CLEAVE_PYTHON to a Python that has it, or ORT_DYLIB_PATH to \
                     libonnxruntime.so"
                ));
            }
            if !path.is_file() {
                return Err(format!(
                    "{} not found; pip install onnxruntime (cleave finds the library in the package), or set ORT_DYLIB_PATH to libonnxruntime.so",
                    path.display()
                ));
            }
            ort::init_from(&path)
                .map_err(|e| format!("{}: {e}", path.display()))?
                .with_name("cleave")
                .build()
                .map_err(|e| format!("{}: {e}", path.display()))
        });
        match env {
            Ok(env) => Ok(OnnxRuntime { env }),
            Err(message) => Err(RuntimeError::Unavailable {
                engine: "ONNX Runtime",
                message: message.clone(),
            }),
        }
    }
}

struct OrtSession {
    path: PathBuf,
    session: ort::session::Session,
    /// The GPU asked for, and whether the CUDA provider took the session.
    gpu: Option<Result<u32, String>>,
}

/// ONNX Runtime's CUDA provider on GPU `id` for the session `b` builds: the GPU, or why the
/// session stays on the CPU (a CPU-only onnxruntime, no CUDA libraries, no such device).
fn cuda(b: &mut ort::session::builder::SessionBuilder, id: u32) -> Result<u32, String> {
    use ort::ep::{ExecutionProvider, CUDA};
    match CUDA::is_available() {
        Ok(true) => {}
        Ok(false) => {
            return Err(
                "this onnxruntime has no CUDA provider (pip install onnxruntime-gpu)".into(),
            )
        }
        Err(e) => return Err(e.to_string()),
    }
    let device = i32::try_from(id).map_err(|_| format!("no GPU {id}"))?;
    CUDA::default()
        .with_device_id(device)
        .register(b)
        .map(|()| id)
        .map_err(|e| {
            e.to_string()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        })
}

/// Terminates the one ONNX Runtime run given these options (each cancellable run has its own).
struct OrtInterrupt(Arc<RunOptions>);

impl Interrupt for OrtInterrupt {
    fn interrupt(&self) {
        // Fails only where ONNX Runtime cannot set a flag: the run then ends by itself.
        let _ = self.0.terminate();
    }
}

fn err(path: &Path, e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::Engine {
        path: path.to_path_buf(),
        engine: "onnxruntime",
        message: e
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    }
}

fn unsupported(path: &Path, e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::Unsupported {
        path: path.to_path_buf(),
        engine: "onnxruntime",
        message: e
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    }
}

impl Engine for OnnxRuntime {
    fn name(&self) -> &'static str {
        "onnxruntime"
    }

    fn load_with(&self, path: &Path, opts: LoadOptions) -> Result<Box<dyn Session>, RuntimeError> {
        let threads = opts.threads;
        let e = |x: ort::Error<ort::session::builder::SessionBuilder>| err(path, x);
        let mut b = ort::session::Session::builder(self.env).map_err(|x| err(path, x))?;
        // As written unless asked (served parts), so boundary tensors mean the same in parts
        // and whole.
        let level = if opts.optimize {
            GraphOptimizationLevel::Level3
        } else {
            GraphOptimizationLevel::Disable
        };
        b = b.with_optimization_level(level).map_err(e)?;
        if let Threads::Exactly(n) = threads {
            b = b
                .with_intra_threads(usize::from(n.get()))
                .map_err(e)?
                .with_inter_threads(1)
                .map_err(e)?;
        }
        // A partition holds many sessions that run one after another: threads left spinning
        // by the session that just ran take the cores from the next (442 parts of a detector
        // verified in 21 s spinning, 0.5 s without).
        b = b.with_intra_op_spinning(false).map_err(e)?;
        b = b.with_log_level(ort::logging::LogLevel::Fatal).map_err(e)?;
        let gpu = opts.gpu.map(|id| cuda(&mut b, id));
        let session = b.commit_from_file(path).map_err(|x| unsupported(path, x))?;
        Ok(Box::new(OrtSession {
            path: path.to_path_buf(),
            session,
            gpu,
        }))
    }
}

/// Little-endian bytes as numbers, in one copy (served parts move MiBs a run through here).
macro_rules! from_le {
    ($t:ty, $data:expr) => {{
        let data: &[u8] = $data;
        let n = data.len() / std::mem::size_of::<$t>();
        let mut v: Vec<$t> = vec![<$t>::default(); n];
        if cfg!(target_endian = "little") {
            // SAFETY: `v` holds `n` plain numbers, every bit pattern valid, and the source has
            // at least `n * size_of::<T>()` bytes; the two do not overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    data.as_ptr(),
                    v.as_mut_ptr().cast::<u8>(),
                    n * std::mem::size_of::<$t>(),
                );
            }
        } else {
            for (x, c) in v
                .iter_mut()
                .zip(data.chunks_exact(std::mem::size_of::<$t>()))
            {
                *x = <$t>::from_le_bytes(c.try_into().unwrap_or_default());
            }
        }
        v
    }};
}

macro_rules! to_value {
    ($t:ty, $shape:expr, $data:expr, $path:expr) => {{
        let v: Vec<$t> = from_le!($t, &$data);
        Tensor::<$t>::from_array(($shape, v))
            .map_err(|e| err($path, e))?
            .into_dyn()
    }};
}

macro_rules! from_value {
    ($t:ty, $v:expr, $path:expr) => {{
        let (_, data) = $v.try_extract_tensor::<$t>().map_err(|e| err($path, e))?;
        if cfg!(target_endian = "little") {
            // SAFETY: a slice of plain numbers read as its bytes, which it holds exactly.
            unsafe {
                std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data))
            }
            .to_vec()
        } else {
            data.iter()
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<u8>>()
        }
    }};
}

fn to_ort(path: &Path, t: &TensorView<'_>) -> Result<DynValue, RuntimeError> {
    let shape: Vec<i64> = t.shape.iter().map(|&d| d as i64).collect();
    Ok(match t.elem {
        ElemType::F32 => to_value!(f32, shape, t.data, path),
        ElemType::F64 => to_value!(f64, shape, t.data, path),
        ElemType::I64 => to_value!(i64, shape, t.data, path),
        ElemType::I32 => to_value!(i32, shape, t.data, path),
        ElemType::I16 => to_value!(i16, shape, t.data, path),
        ElemType::I8 => to_value!(i8, shape, t.data, path),
        ElemType::U8 => to_value!(u8, shape, t.data, path),
        ElemType::U16 => to_value!(u16, shape, t.data, path),
        ElemType::U32 => to_value!(u32, shape, t.data, path),
        ElemType::U64 => to_value!(u64, shape, t.data, path),
        ElemType::Bool => {
            let v: Vec<bool> = t.data.iter().map(|&b| b != 0).collect();
            Tensor::<bool>::from_array((shape, v))
                .map_err(|e| err(path, e))?
                .into_dyn()
        }
        other => return Err(unsupported(path, format!("{other} tensors"))),
    })
}

/// A tensor ONNX Runtime reads in place, borrowing the host tensor's bytes where they can be
/// read as its numbers (little-endian, aligned for them); else a copy (`to_ort`).
macro_rules! view_value {
    ($t:ty, $shape:expr, $data:expr, $path:expr) => {{
        let data: &[u8] = $data;
        let size = std::mem::size_of::<$t>();
        if cfg!(target_endian = "little")
            && data.len() % size == 0
            && data.as_ptr().align_offset(std::mem::align_of::<$t>()) == 0
        {
            // SAFETY: the bytes are aligned for `$t`, a whole number of them, every bit
            // pattern a valid `$t`, and borrowed for as long as the view that reads them.
            let typed: &[$t] = unsafe {
                std::slice::from_raw_parts(data.as_ptr().cast::<$t>(), data.len() / size)
            };
            Some(
                TensorRef::from_array_view(($shape, typed))
                    .map_err(|e| err($path, e))?
                    .into(),
            )
        } else {
            None
        }
    }};
}

fn ort_view<'a>(path: &Path, t: &TensorView<'a>) -> Result<SessionInputValue<'a>, RuntimeError> {
    let shape: Vec<i64> = t.shape.iter().map(|&d| d as i64).collect();
    let view: Option<SessionInputValue<'a>> = match t.elem {
        ElemType::F32 => view_value!(f32, shape, t.data, path),
        ElemType::F64 => view_value!(f64, shape, t.data, path),
        ElemType::I64 => view_value!(i64, shape, t.data, path),
        ElemType::I32 => view_value!(i32, shape, t.data, path),
        ElemType::I16 => view_value!(i16, shape, t.data, path),
        ElemType::I8 => view_value!(i8, shape, t.data, path),
        ElemType::U8 => view_value!(u8, shape, t.data, path),
        ElemType::U16 => view_value!(u16, shape, t.data, path),
        ElemType::U32 => view_value!(u32, shape, t.data, path),
        ElemType::U64 => view_value!(u64, shape, t.data, path),
        _ => None,
    };
    match view {
        Some(v) => Ok(v),
        None => Ok(to_ort(path, t)?.into()),
    }
}

fn from_ort(path: &Path, name: &str, v: &DynValue) -> Result<HostTensor, RuntimeError> {
    let ValueType::Tensor { ty, shape, .. } = v.dtype() else {
        return Err(err(path, format!("output '{name}' is not a tensor")));
    };
    let shape: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
    let (elem, data) = match ty {
        TensorElementType::Float32 => (ElemType::F32, from_value!(f32, v, path)),
        TensorElementType::Float64 => (ElemType::F64, from_value!(f64, v, path)),
        TensorElementType::Int64 => (ElemType::I64, from_value!(i64, v, path)),
        TensorElementType::Int32 => (ElemType::I32, from_value!(i32, v, path)),
        TensorElementType::Int16 => (ElemType::I16, from_value!(i16, v, path)),
        TensorElementType::Int8 => (ElemType::I8, from_value!(i8, v, path)),
        TensorElementType::Uint8 => (ElemType::U8, from_value!(u8, v, path)),
        TensorElementType::Uint16 => (ElemType::U16, from_value!(u16, v, path)),
        TensorElementType::Uint32 => (ElemType::U32, from_value!(u32, v, path)),
        TensorElementType::Uint64 => (ElemType::U64, from_value!(u64, v, path)),
        TensorElementType::Bool => {
            let (_, data) = v.try_extract_tensor::<bool>().map_err(|e| err(path, e))?;
            (ElemType::Bool, data.iter().map(|&b| u8::from(b)).collect())
        }
        other => {
            return Err(unsupported(
                path,
                format!("output '{name}' of type {other:?}"),
            ))
        }
    };
    Ok(HostTensor { elem, shape, data })
}

impl OrtSession {
    fn run_with(
        &mut self,
        inputs: &[(&str, TensorView<'_>)],
        options: Option<&RunOptions>,
    ) -> Result<Vec<(String, HostTensor)>, RuntimeError> {
        let wanted: Vec<String> = self
            .session
            .inputs()
            .iter()
            .map(|o| o.name().to_string())
            .collect();
        let mut feed: Vec<(String, SessionInputValue<'_>)> = Vec::with_capacity(wanted.len());
        for name in &wanted {
            let t = RuntimeError::given(inputs, name, &self.path)?;
            feed.push((name.clone(), ort_view(&self.path, t)?));
        }
        let path = self.path.clone();
        let outputs = match options {
            Some(o) => self.session.run_with_options(feed, o),
            None => self.session.run(feed),
        }
        .map_err(|e| err(&path, e))?;
        let mut out = Vec::with_capacity(outputs.len());
        for (name, v) in outputs.iter() {
            // Sequences and maps (ZipMap's output, say) have no tensor form to hand on or
            // compare: they are left out, and callers say so.
            if !matches!(v.dtype(), ValueType::Tensor { .. }) {
                continue;
            }
            out.push((name.to_string(), from_ort(&path, name, &v)?));
        }
        Ok(out)
    }

    fn run_cancel(
        &mut self,
        inputs: &[(&str, TensorView<'_>)],
        cancel: &Cancel,
    ) -> Result<Vec<(String, HostTensor)>, RuntimeError> {
        // Options of this run alone: a terminate meant for it cannot outlive it and stop the
        // next request's run, nor be cleared by that run before it lands.
        let options = Arc::new(RunOptions::new().map_err(|e| err(&self.path, e))?);
        if !cancel.arm(Arc::new(OrtInterrupt(options.clone()))) {
            return Err(RuntimeError::Cancelled);
        }
        let got = self.run_with(inputs, Some(&options));
        cancel.disarm();
        match got {
            Err(_) if cancel.is_cancelled() => Err(RuntimeError::Cancelled),
            other => other,
        }
    }
}

fn views(inputs: &[(String, HostTensor)]) -> Vec<(&str, TensorView<'_>)> {
    inputs.iter().map(|(n, t)| (n.as_str(), t.view())).collect()
}

impl Session for OrtSession {
    fn run(
        &mut self,
        inputs: &[(String, HostTensor)],
    ) -> Result<Vec<(String, HostTensor)>, RuntimeError> {
        self.run_with(&views(inputs), None)
    }

    fn run_cancellable(
        &mut self,
        inputs: &[(String, HostTensor)],
        cancel: &Cancel,
    ) -> Result<Vec<(String, HostTensor)>, RuntimeError> {
        self.run_cancel(&views(inputs), cancel)
    }

    fn run_views(
        &mut self,
        inputs: &[(&str, TensorView<'_>)],
        cancel: Option<&Cancel>,
    ) -> Result<Vec<(String, HostTensor)>, RuntimeError> {
        match cancel {
            Some(c) => self.run_cancel(inputs, c),
            None => self.run_with(inputs, None),
        }
    }

    fn cancellable(&self) -> bool {
        true
    }

    fn gpu(&self) -> Option<Result<u32, String>> {
        self.gpu.clone()
    }
}
