//! LiteRT (Google's TFLite runtime) through its C API, with `libLiteRt.so` from the PyPI
//! wheel `ai-edge-litert==2.3.0` loaded at run time. Models run on the CPU accelerator
//! through their first signature; a model without SignatureDefs gets LiteRT's default one,
//! whose inputs and outputs are the main subgraph's, named by their tensors.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cleave_ir::ElemType;
use cleave_runtime::{Engine, HostTensor, LoadOptions, RuntimeError, Session, Threads};

use crate::litert_ffi::{self as ffi, Api, Handle, Layout, RankedTensorType, Status};
use crate::python_pkg::locate_library;
use cleave_runtime::PackagedLibrary;

const ENGINE: &str = "litert";
pub(crate) static LIBRARY: PackagedLibrary = PackagedLibrary {
    variable: "CLEAVE_LITERT_LIB",
    package: "ai_edge_litert",
    file: "libLiteRt.so",
    wheel: "ai-edge-litert==2.3.0",
};

/// Where cleave finds LiteRT: `CLEAVE_LITERT_LIB` (the path of `libLiteRt.so`), else the
/// folder of the `ai_edge_litert` package that `python3` (or `$CLEAVE_PYTHON`) imports.
pub fn litert_library_path() -> Result<PathBuf, String> {
    locate_library(&LIBRARY)
}

static API: OnceLock<Result<Api, String>> = OnceLock::new();

/// The LiteRT engine; the library is loaded and its functions resolved once per process.
pub struct Litert {
    api: &'static Api,
}

impl Litert {
    /// Loads the library, or reports it unavailable with how to install it.
    pub fn new() -> Result<Litert, RuntimeError> {
        let api = API.get_or_init(|| {
            let path = litert_library_path()?;
            // SAFETY: the path is the wheel's runtime library (or the one the user named in
            // CLEAVE_LITERT_LIB for this purpose); the functions are declared as in 2.3.0.
            unsafe { Api::load(&path) }.map_err(|e| format!("{}: {e}", path.display()))
        });
        match api {
            Ok(api) => Ok(Litert { api }),
            Err(message) => Err(RuntimeError::Unavailable {
                engine: "LiteRT",
                message: message.clone(),
            }),
        }
    }
}

impl Engine for Litert {
    fn name(&self) -> &'static str {
        ENGINE
    }

    /// Through LiteRT's Python interpreter: the compiled-model API this engine runs binds
    /// each output to a buffer sized before the run, which a tensor whose dims only the run
    /// computes (a Keras front end's shapes made by SHAPE and PACK) overflows, and it shows no
    /// tensor that is not an output.
    fn tensor_dims(
        &self,
        model: &Path,
        inputs: &[HostTensor],
    ) -> Result<Option<Vec<Option<Vec<i64>>>>, RuntimeError> {
        crate::litert_dims::tensor_dims(model, inputs).map(Some)
    }

    fn load_with(&self, path: &Path, opts: LoadOptions) -> Result<Box<dyn Session>, RuntimeError> {
        let threads = opts.threads;
        Ok(Box::new(LitertSession::load(self.api, path, threads)?))
    }
}

/// One input or output of the signature that runs.
struct Port {
    /// The tensor's name, by which cleave passes tensors between parts.
    name: String,
    /// The signature's name for it (the same as `name` in cleave's parts and in models
    /// without SignatureDefs), also accepted for inputs.
    key: String,
    elem: ElemType,
    /// As declared; negative dimensions are dynamic.
    dims: Vec<i32>,
}

/// Storage for a model file that suits any alignment LiteRT or XNNPACK asks of weights.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Align64([u8; 64]);

/// A compiled model. The handles are created in field order and destroyed in reverse
/// (`Drop`); a null one was never made. `file` holds the model's bytes, which LiteRT reads
/// in place for as long as the model lives; it is dropped after the handles.
struct LitertSession {
    api: &'static Api,
    path: PathBuf,
    file: Vec<Align64>,
    env: Handle,
    model: Handle,
    options: Handle,
    compiled: Handle,
    inputs: Vec<Port>,
    outputs: Vec<Port>,
    /// Whether a run has worked the output shapes out since loading.
    shapes_known: bool,
}

// SAFETY: the session owns its LiteRT objects alone (its own environment included) and uses
// them from one thread at a time (`run` takes `&mut self`); LiteRT ties none of them to the
// thread that made them.
unsafe impl Send for LitertSession {}

impl Drop for LitertSession {
    fn drop(&mut self) {
        let a = self.api;
        // SAFETY: each handle was made by the matching create call and is destroyed once;
        // the compiled model goes before the options and model it was built from.
        unsafe {
            if !self.compiled.is_null() {
                (a.LiteRtDestroyCompiledModel)(self.compiled);
            }
            if !self.options.is_null() {
                (a.LiteRtDestroyOptions)(self.options);
            }
            if !self.model.is_null() {
                (a.LiteRtDestroyModel)(self.model);
            }
            if !self.env.is_null() {
                (a.LiteRtDestroyEnvironment)(self.env);
            }
        }
    }
}

fn engine_err(path: &Path, message: String) -> RuntimeError {
    RuntimeError::engine(ENGINE, path, message)
}

fn unsupported(path: &Path, message: String) -> RuntimeError {
    RuntimeError::unsupported(ENGINE, path, message)
}

/// A failed call as one line: what was being done and LiteRT's status.
fn check(path: &Path, what: &str, s: Status) -> Result<(), RuntimeError> {
    if s == ffi::STATUS_OK {
        Ok(())
    } else {
        Err(engine_err(path, format!("{what}: {}", ffi::status_text(s))))
    }
}

/// A string LiteRT owns, copied; null reads as empty.
///
/// # Safety
/// `p` is null or a NUL-terminated string that lives through the call.
unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// LiteRT's element type codes (`LiteRtElementType`, TFLite's `TfLiteType`).
fn elem_of(code: c_int) -> ElemType {
    match code {
        1 => ElemType::F32,
        2 => ElemType::I32,
        3 => ElemType::U8,
        4 => ElemType::I64,
        5 => ElemType::Str,
        6 => ElemType::Bool,
        7 => ElemType::I16,
        8 => ElemType::C64,
        9 => ElemType::I8,
        10 => ElemType::F16,
        11 => ElemType::F64,
        12 => ElemType::C128,
        13 => ElemType::U64,
        16 => ElemType::U32,
        17 => ElemType::U16,
        18 => ElemType::I4,
        19 => ElemType::BF16,
        20 => ElemType::I2,
        21 => ElemType::U4,
        22 => ElemType::F8E4M3FN,
        23 => ElemType::F8E5M2,
        other => ElemType::Other(other),
    }
}

fn code_of(e: ElemType) -> Option<c_int> {
    Some(match e {
        ElemType::F32 => 1,
        ElemType::I32 => 2,
        ElemType::U8 => 3,
        ElemType::I64 => 4,
        ElemType::Bool => 6,
        ElemType::I16 => 7,
        ElemType::C64 => 8,
        ElemType::I8 => 9,
        ElemType::F16 => 10,
        ElemType::F64 => 11,
        ElemType::C128 => 12,
        ElemType::U64 => 13,
        ElemType::U32 => 16,
        ElemType::U16 => 17,
        ElemType::BF16 => 19,
        ElemType::F8E4M3FN => 22,
        ElemType::F8E5M2 => 23,
        _ => return None,
    })
}

/// Bytes per element of the types whose host bytes are LiteRT's bytes; strings and packed
/// sub-byte types have no such one-to-one form.
fn elem_bytes(e: ElemType) -> Option<usize> {
    code_of(e)?;
    e.bits().map(|b| b as usize / 8)
}

impl LitertSession {
    fn load(
        api: &'static Api,
        path: &Path,
        threads: Threads,
    ) -> Result<LitertSession, RuntimeError> {
        // What LiteRT believes of a file without checking it (buffer sizes, quantization
        // arrays, indices), checked first.
        crate::trusted(path, cleave_tflite::EngineNeeds::LITERT, ENGINE)?;
        // LiteRT reads a model file without verifying it (a truncated one crashes it), and
        // verifies a model in memory: so the file is read here and handed over as bytes.
        let bytes = std::fs::read(path).map_err(|source| RuntimeError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        if bytes.is_empty() {
            return Err(RuntimeError::Model {
                path: path.to_path_buf(),
                message: "the file is empty".into(),
            });
        }
        let mut file = vec![Align64([0; 64]); bytes.len().div_ceil(64)];
        for (dst, src) in file.iter_mut().zip(bytes.chunks(64)) {
            dst.0[..src.len()].copy_from_slice(src);
        }
        let len = bytes.len();
        drop(bytes);
        let mut s = LitertSession {
            api,
            path: path.to_path_buf(),
            file,
            env: std::ptr::null_mut(),
            model: std::ptr::null_mut(),
            options: std::ptr::null_mut(),
            compiled: std::ptr::null_mut(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            shapes_known: false,
        };
        let p = path;
        // Only the CPU accelerator is registered (no probing for GPU or NPU libraries), and
        // LiteRT's log keeps to errors. The severity is process-wide in LiteRT.
        let env_options = [
            ffi::EnvOption {
                tag: ffi::ENV_AUTO_REGISTER_ACCELERATORS,
                value: ffi::Any {
                    kind: ffi::ANY_INT,
                    int_value: i64::from(ffi::HW_ACCELERATOR_CPU),
                },
            },
            ffi::EnvOption {
                tag: ffi::ENV_MIN_LOGGER_SEVERITY,
                value: ffi::Any {
                    kind: ffi::ANY_INT,
                    int_value: ffi::LOG_SEVERITY_ERROR,
                },
            },
        ];
        // SAFETY: every call gets live handles this session made and out-pointers to locals
        // of the declared types; the options array outlives the call.
        unsafe {
            check(
                p,
                "creating the environment",
                (api.LiteRtCreateEnvironment)(2, env_options.as_ptr(), &mut s.env),
            )?;
            let st =
                (api.LiteRtCreateModelFromBuffer)(s.env, s.file.as_ptr().cast(), len, &mut s.model);
            if st != ffi::STATUS_OK {
                return Err(RuntimeError::Model {
                    path: p.to_path_buf(),
                    message: format!(
                        "LiteRT cannot read it as a TFLite model: {}",
                        ffi::status_text(st)
                    ),
                });
            }
            let mut n = 0;
            check(
                p,
                "counting signatures",
                (api.LiteRtGetNumModelSignatures)(s.model, &mut n),
            )?;
            if n == 0 {
                return Err(unsupported(p, "the model has no signature to run".into()));
            }
            let mut sig: Handle = std::ptr::null_mut();
            check(
                p,
                "reading signature 0",
                (api.LiteRtGetModelSignature)(s.model, 0, &mut sig),
            )?;
            s.inputs = s.ports(sig, true)?;
            s.outputs = s.ports(sig, false)?;

            check(
                p,
                "creating options",
                (api.LiteRtCreateOptions)(&mut s.options),
            )?;
            check(
                p,
                "choosing the CPU accelerator",
                (api.LiteRtSetOptionsHardwareAccelerators)(s.options, ffi::HW_ACCELERATOR_CPU),
            )?;
            if let Threads::Exactly(n) = threads {
                s.cpu_threads(n.get())?;
            }
            let st = (api.LiteRtCreateCompiledModel)(s.env, s.model, s.options, &mut s.compiled);
            if st != ffi::STATUS_OK {
                s.compiled = std::ptr::null_mut();
                return Err(unsupported(
                    p,
                    format!("compiling for the CPU: {}", ffi::status_text(st)),
                ));
            }
        }
        s.dedupe_names();
        Ok(s)
    }

    /// The signature's inputs or outputs, with their tensors' names and types.
    ///
    /// # Safety
    /// `sig` is a signature of `self.model`.
    unsafe fn ports(&self, sig: Handle, inputs: bool) -> Result<Vec<Port>, RuntimeError> {
        let (a, p) = (self.api, self.path.as_path());
        let side = if inputs { "input" } else { "output" };
        let mut n = 0;
        let st = unsafe {
            if inputs {
                (a.LiteRtGetNumSignatureInputs)(sig, &mut n)
            } else {
                (a.LiteRtGetNumSignatureOutputs)(sig, &mut n)
            }
        };
        check(p, &format!("counting the signature's {side}s"), st)?;
        let mut ports = Vec::with_capacity(n);
        for i in 0..n {
            let mut key: *const c_char = std::ptr::null();
            let mut tensor: Handle = std::ptr::null_mut();
            let mut name: *const c_char = std::ptr::null();
            let mut type_id: c_int = -1;
            // SAFETY: `i` is below the count LiteRT gave; the strings belong to the model,
            // which lives through the copies.
            let (key, name, type_id) = unsafe {
                let st = if inputs {
                    (a.LiteRtGetSignatureInputName)(sig, i, &mut key)
                } else {
                    (a.LiteRtGetSignatureOutputName)(sig, i, &mut key)
                };
                check(p, &format!("reading {side} {i}'s name"), st)?;
                let st = if inputs {
                    (a.LiteRtGetSignatureInputTensorByIndex)(sig, i, &mut tensor)
                } else {
                    (a.LiteRtGetSignatureOutputTensorByIndex)(sig, i, &mut tensor)
                };
                check(p, &format!("reading {side} {i}'s tensor"), st)?;
                check(
                    p,
                    &format!("reading {side} {i}'s tensor name"),
                    (a.LiteRtGetTensorName)(tensor, &mut name),
                )?;
                check(
                    p,
                    &format!("reading {side} {i}'s type"),
                    (a.LiteRtGetTensorTypeId)(tensor, &mut type_id),
                )?;
                (text(key), text(name), type_id)
            };
            let label = if name.is_empty() { &key } else { &name };
            if type_id != ffi::RANKED_TENSOR_TYPE {
                return Err(unsupported(p, format!("{side} '{label}' has no rank")));
            }
            let mut ty = RankedTensorType {
                element_type: 0,
                layout: Layout::zeroed(),
            };
            // SAFETY: a ranked tensor of this model; `ty` has the declared layout.
            let st = unsafe { (a.LiteRtGetRankedTensorType)(tensor, &mut ty) };
            check(p, &format!("reading {side} '{label}''s type"), st)?;
            let elem = elem_of(ty.element_type);
            if elem_bytes(elem).is_none() {
                return Err(unsupported(p, format!("{side} '{label}' of type {elem}")));
            }
            ports.push(Port {
                name,
                key,
                elem,
                dims: ty.layout.dims().to_vec(),
            });
        }
        Ok(ports)
    }

    /// Tensor names are not required to be unique or present in TFLite; where they fail to
    /// tell a side's ports apart, that side goes by the signature's names.
    fn dedupe_names(&mut self) {
        for ports in [&mut self.inputs, &mut self.outputs] {
            let mut seen = std::collections::HashSet::new();
            let distinct = ports
                .iter()
                .all(|q| !q.name.is_empty() && seen.insert(q.name.clone()));
            if !distinct {
                for q in ports.iter_mut() {
                    q.name = q.key.clone();
                }
            }
        }
    }

    /// Keeps the CPU accelerator (XNNPACK) on one thread: its settings travel as a TOML text
    /// in opaque options named "xnnpack", which the options then own.
    ///
    /// # Safety
    /// `self.options` is live.
    unsafe fn cpu_threads(&mut self, n: u16) -> Result<(), RuntimeError> {
        unsafe extern "C" fn free_text(p: *mut c_void) {
            if !p.is_null() {
                // SAFETY: the payload is the CString leaked below, freed once by LiteRT.
                drop(unsafe { CString::from_raw(p.cast()) });
            }
        }
        let (a, p) = (self.api, self.path.as_path());
        // A count has no NUL byte: the CString cannot fail.
        let payload = CString::new(format!("num_threads = {n}\n"))
            .unwrap_or_default()
            .into_raw();
        let mut opaque: Handle = std::ptr::null_mut();
        // SAFETY: the identifier is static; the payload and its destructor match.
        let st = unsafe {
            (a.LiteRtCreateOpaqueOptions)(
                ffi::CPU_OPTIONS_ID.as_ptr(),
                payload.cast(),
                Some(free_text),
                &mut opaque,
            )
        };
        if st != ffi::STATUS_OK {
            // SAFETY: LiteRT did not take the payload.
            unsafe { free_text(payload.cast()) };
            return check(p, "making the CPU options", st);
        }
        // SAFETY: both handles are live; on success the options own `opaque`.
        let st = unsafe { (a.LiteRtAddOpaqueOptions)(self.options, opaque) };
        if st != ffi::STATUS_OK {
            // SAFETY: not added, so still ours (destroying it frees the payload).
            unsafe { (a.LiteRtDestroyOpaqueOptions)(opaque) };
        }
        check(p, "setting the CPU threads", st)
    }
}

/// Tensor buffers made for one run, destroyed however the run ends.
struct Buffers<'a> {
    api: &'a Api,
    handles: Vec<Handle>,
}

impl Drop for Buffers<'_> {
    fn drop(&mut self) {
        for &h in &self.handles {
            // SAFETY: each was made by LiteRtCreateManagedTensorBuffer and is freed once.
            unsafe { (self.api.LiteRtDestroyTensorBuffer)(h) };
        }
    }
}

impl Buffers<'_> {
    /// A host-memory buffer of this type, sized for it.
    fn make(
        &mut self,
        env: Handle,
        path: &Path,
        label: &str,
        ty: &RankedTensorType,
        bytes: usize,
    ) -> Result<Handle, RuntimeError> {
        let mut h: Handle = std::ptr::null_mut();
        // SAFETY: `env` is the session's live environment; `ty` is a valid tensor type.
        let st = unsafe {
            (self.api.LiteRtCreateManagedTensorBuffer)(
                env,
                ffi::BUFFER_HOST_MEMORY,
                ty,
                bytes,
                &mut h,
            )
        };
        check(path, &format!("allocating {label}"), st)?;
        self.handles.push(h);
        Ok(h)
    }
}

fn dims_i32(path: &Path, name: &str, shape: &[usize]) -> Result<Vec<i32>, RuntimeError> {
    shape
        .iter()
        .map(|&d| i32::try_from(d))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| RuntimeError::Input {
            path: path.to_path_buf(),
            name: name.to_string(),
            message: format!("shape {shape:?} has a dimension past LiteRT's 32 bits"),
        })
}

/// Runs `f` on a buffer's host memory between a lock and its unlock.
///
/// # Safety
/// `h` is a live host-memory buffer; `f` keeps within its size and does not keep the pointer.
unsafe fn locked<R>(
    a: &Api,
    path: &Path,
    what: &str,
    h: Handle,
    mode: c_int,
    f: impl FnOnce(*mut c_void) -> R,
) -> Result<R, RuntimeError> {
    let mut mem: *mut c_void = std::ptr::null_mut();
    let st = unsafe { (a.LiteRtLockTensorBuffer)(h, &mut mem, mode) };
    check(path, &format!("locking {what}"), st)?;
    let r = f(mem);
    let st = unsafe { (a.LiteRtUnlockTensorBuffer)(h) };
    check(path, &format!("unlocking {what}"), st)?;
    Ok(r)
}

impl LitertSession {
    fn input_err(&self, port: &Port, message: String) -> RuntimeError {
        RuntimeError::Input {
            path: self.path.clone(),
            name: port.name.clone(),
            message,
        }
    }

    /// Checks input `i` against its port, resizes the model to it where a dynamic dimension
    /// differs from the last run, and copies it into a new buffer of `bufs`. Returns whether
    /// it resized.
    fn feed(
        &self,
        i: usize,
        port: &Port,
        t: &HostTensor,
        bufs: &mut Buffers,
    ) -> Result<bool, RuntimeError> {
        let (a, p) = (self.api, self.path.as_path());
        if t.elem != port.elem {
            return Err(self.input_err(
                port,
                format!("element type is {}, the model wants {}", t.elem, port.elem),
            ));
        }
        let dims = dims_i32(p, &port.name, &t.shape)?;
        let fits = dims.len() == port.dims.len()
            && dims.iter().zip(&port.dims).all(|(&d, &w)| w < 0 || d == w);
        if !fits {
            return Err(self.input_err(
                port,
                format!("shape is {:?}, the model wants {:?}", t.shape, port.dims),
            ));
        }
        let width = elem_bytes(t.elem).unwrap_or(1);
        if t.byte_len(width) != Some(t.data.len()) {
            let n = t.data.len();
            return Err(self.input_err(
                port,
                format!("{n} bytes for {} elements of {}", t.len(), t.elem),
            ));
        }
        // A byte other than 0 or 1 is not a C++ bool.
        if t.elem == ElemType::Bool && t.data.iter().any(|&b| b > 1) {
            return Err(self.input_err(port, "bool bytes must be 0 or 1".into()));
        }
        let layout = Layout::dense(&dims).ok_or_else(|| {
            self.input_err(port, format!("rank {} is past LiteRT's 8", dims.len()))
        })?;

        let mut now = Layout::zeroed();
        // SAFETY: live compiled model; `i` is an input of signature 0.
        let st =
            unsafe { (a.LiteRtGetCompiledModelInputTensorLayout)(self.compiled, 0, i, &mut now) };
        check(p, &format!("reading input '{}''s shape", port.name), st)?;
        let resize = now.dims() != dims.as_slice();
        if resize {
            // SAFETY: as above; `dims` lives through the call.
            let st = unsafe {
                (a.LiteRtCompiledModelResizeInputTensor)(
                    self.compiled,
                    0,
                    i,
                    dims.as_ptr(),
                    dims.len(),
                )
            };
            let what = format!("resizing input '{}' to {:?}", port.name, t.shape);
            check(p, &what, st)?;
        }

        let ty = RankedTensorType {
            element_type: code_of(t.elem).unwrap_or(0),
            layout,
        };
        let what = format!("input '{}'", port.name);
        let h = bufs.make(self.env, p, &what, &ty, t.data.len())?;
        if !t.data.is_empty() {
            // SAFETY: the buffer was made `t.data.len()` bytes long.
            unsafe {
                locked(a, p, &what, h, ffi::LOCK_WRITE, |dst| {
                    if !dst.is_null() {
                        std::ptr::copy_nonoverlapping(t.data.as_ptr(), dst.cast(), t.data.len());
                    }
                })
            }?;
        }
        Ok(resize)
    }

    /// An output's tensor, as the buffer it was run into holds it.
    fn read(&self, port: &Port, h: Handle) -> Result<HostTensor, RuntimeError> {
        let (a, p) = (self.api, self.path.as_path());
        let what = format!("output '{}'", port.name);
        let mut ty = RankedTensorType {
            element_type: 0,
            layout: Layout::zeroed(),
        };
        let mut size = 0usize;
        // SAFETY: a live buffer; the lock gives `size` readable bytes until the unlock.
        let data = unsafe {
            let st = (a.LiteRtGetTensorBufferTensorType)(h, &mut ty);
            check(p, &format!("reading {what}'s type"), st)?;
            let st = (a.LiteRtGetTensorBufferPackedSize)(h, &mut size);
            check(p, &format!("reading {what}'s size"), st)?;
            locked(a, p, &what, h, ffi::LOCK_READ, |src| {
                if size == 0 || src.is_null() {
                    Vec::new()
                } else {
                    std::slice::from_raw_parts(src.cast::<u8>(), size).to_vec()
                }
            })?
        };
        let shape = ty.layout.dims().iter().map(|&d| d.max(0) as usize);
        let t = HostTensor {
            elem: port.elem,
            shape: shape.collect(),
            data,
        };
        let want = t
            .byte_len(elem_bytes(port.elem).unwrap_or(1))
            .unwrap_or(usize::MAX);
        if t.data.len() != want {
            let (n, shape) = (t.data.len(), &t.shape);
            return Err(engine_err(
                p,
                format!("{what} came back with {n} bytes for shape {shape:?}, not {want}"),
            ));
        }
        Ok(t)
    }
}

impl Session for LitertSession {
    fn run(
        &mut self,
        inputs: &[(String, HostTensor)],
    ) -> Result<Vec<(String, HostTensor)>, RuntimeError> {
        let (a, p) = (self.api, self.path.as_path());
        let mut bufs = Buffers {
            api: a,
            handles: Vec::new(),
        };
        let mut resized = false;
        for (i, port) in self.inputs.iter().enumerate() {
            let given = inputs
                .iter()
                .find(|(n, _)| *n == port.name)
                .or_else(|| inputs.iter().find(|(n, _)| *n == port.key));
            let Some((_, t)) = given else {
                return Err(self.input_err(port, "not given".into()));
            };
            resized |= self.feed(i, port, t, &mut bufs)?;
        }
        let n_in = bufs.handles.len();

        // After a resize LiteRT works the output shapes out again (and reallocates); so on the
        // first run, as the layouts it holds before are the file's, whose placeholders (a
        // converter's 1 for a dim computed at run time) can be smaller than what runs.
        let update = resized || !self.shapes_known;
        let mut layouts = vec![Layout::zeroed(); self.outputs.len()];
        // SAFETY: one layout slot per output of signature 0.
        let st = unsafe {
            (a.LiteRtGetCompiledModelOutputTensorLayouts)(
                self.compiled,
                0,
                layouts.len(),
                layouts.as_mut_ptr(),
                update,
            )
        };
        check(p, "reading the output shapes", st)?;
        for (port, layout) in self.outputs.iter().zip(&layouts) {
            let bytes = layout
                .dims()
                .iter()
                .try_fold(1usize, |acc, &d| {
                    acc.checked_mul(usize::try_from(d).unwrap_or(0))
                })
                .and_then(|n| n.checked_mul(elem_bytes(port.elem).unwrap_or(1)))
                .ok_or_else(|| {
                    engine_err(
                        p,
                        format!(
                            "output '{}' has dims {:?}, too large",
                            port.name,
                            layout.dims()
                        ),
                    )
                })?;
            let ty = RankedTensorType {
                element_type: code_of(port.elem).unwrap_or(0),
                layout: *layout,
            };
            bufs.make(self.env, p, &format!("output '{}'", port.name), &ty, bytes)?;
        }

        let (ins, outs) = bufs.handles.split_at_mut(n_in);
        // SAFETY: one live buffer per signature input and output, in signature order.
        let st = unsafe {
            (a.LiteRtRunCompiledModel)(
                self.compiled,
                0,
                ins.len(),
                ins.as_mut_ptr(),
                outs.len(),
                outs.as_mut_ptr(),
            )
        };
        check(p, "running", st)?;
        self.shapes_known = true;

        self.outputs
            .iter()
            .zip(&bufs.handles[n_in..])
            .map(|(port, &h)| Ok((port.name.clone(), self.read(port, h)?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::python_pkg::find_library;

    #[test]
    fn a_missing_library_says_how_to_install_it() {
        let e = find_library(
            &LIBRARY,
            Some("/nonexistent/libLiteRt.so".into()),
            "python3",
        )
        .unwrap_err();
        assert!(
            e.contains("CLEAVE_LITERT_LIB names /nonexistent/libLiteRt.so"),
            "{e}"
        );
        assert!(e.contains("pip install ai-edge-litert==2.3.0"), "{e}");
        let e = find_library(&LIBRARY, None, "/nonexistent/python3").unwrap_err();
        assert!(e.contains("cannot run /nonexistent/python3 ("), "{e}");
        assert!(
            e.contains("set CLEAVE_PYTHON to a Python with the ai-edge-litert==2.3.0 wheel, or CLEAVE_LITERT_LIB to its libLiteRt.so"),
            "{e}"
        );
        // `false` runs, answers nothing and fails: no Python at all.
        let e = find_library(&LIBRARY, None, "false").unwrap_err();
        assert!(e.contains("false: is not a Python (exit code 1)"), "{e}");
    }

    #[test]
    fn a_library_that_is_not_litert_is_refused() {
        // SAFETY: libm's initialisers are harmless, and no function is called.
        let e = unsafe { Api::load(Path::new("libm.so.6")) }
            .err()
            .unwrap_or_default();
        assert!(e.contains("LiteRtCreateEnvironment"), "{e}");
        assert!(e.contains("not the LiteRT 2.3.0 runtime"), "{e}");
    }

    #[test]
    fn element_types_round_trip() {
        for code in (0..30).filter(|&c| c != 14 && c != 15) {
            let e = elem_of(code);
            if let Some(back) = code_of(e) {
                assert_eq!(back, code, "{e}");
            }
        }
        assert_eq!(elem_bytes(ElemType::F32), Some(4));
        assert_eq!(elem_bytes(ElemType::Bool), Some(1));
        assert_eq!(elem_bytes(ElemType::C128), Some(16));
        assert_eq!(elem_bytes(ElemType::I4), None);
        assert_eq!(elem_bytes(ElemType::Str), None);
    }
}
