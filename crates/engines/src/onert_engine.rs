//! onert (Samsung ONE's runtime) through its nnfw C API, with `libonert.so` from the PyPI wheel
//! `onert` loaded at run time. It runs circle and TFLite models on the backends it is given
//! (`cpu` by default; the wheel also ships `ruy`), fed and read by position: the names come
//! from the model's main subgraph, which cleave reads (and verifies, since onert does not: a
//! truncated file crashes it) through the TFLite front-end's schema.

use std::ffi::{c_int, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cleave_ir::ElemType;
use cleave_runtime::{Engine, HostTensor, LoadOptions, RuntimeError, Session};
use cleave_tflite::FlatModel;

use crate::onert_ffi::{self as ffi, nnfw_tensorinfo, Api, Status};
use crate::python_pkg::locate_library;
use crate::stderr_capture;
use cleave_runtime::PackagedLibrary;

const ENGINE: &str = "onert";
pub(crate) static LIBRARY: PackagedLibrary = PackagedLibrary {
    variable: "CLEAVE_ONERT_LIB",
    package: "onert",
    file: "native/libonert.so",
    wheel: "onert",
};

/// The backends onert runs on unless `onert:BACKENDS` says.
pub(crate) const ONERT_DEFAULT_BACKENDS: &str = "cpu";

/// Where cleave finds onert: `CLEAVE_ONERT_LIB` (the path of `libonert.so`), else the
/// `native` folder of the `onert` package that `python3` (or `$CLEAVE_PYTHON`) imports.
fn onert_library_path() -> Result<PathBuf, String> {
    locate_library(&LIBRARY)
}

static API: OnceLock<Result<Api, String>> = OnceLock::new();

fn api() -> Result<&'static Api, RuntimeError> {
    let loaded = API.get_or_init(|| {
        let path = onert_library_path()?;
        // SAFETY: the path is the wheel's runtime library (or the one the user named in
        // CLEAVE_ONERT_LIB for this purpose); the functions are declared as in nnfw.h.
        unsafe { Api::load(&path) }.map_err(|e| format!("{}: {e}", path.display()))
    });
    loaded
        .as_ref()
        .map_err(|message| RuntimeError::Unavailable {
            engine: "onert",
            message: message.clone(),
        })
}

/// Backends as `nnfw_set_available_backends` takes them: names separated by `;`, each a
/// library `libbackend_NAME.so` beside onert's own, so only letters, digits and `_`.
pub(crate) fn check_backends(backends: &str) -> Result<(), String> {
    let ok = backends
        .split(';')
        .all(|b| !b.is_empty() && b.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "backends '{backends}': expected names separated by ';', e.g. cpu or ruy;cpu"
        ))
    }
}

/// The onert engine on a list of backends; the library is loaded once per process.
pub struct Onert {
    api: &'static Api,
    backends: CString,
}

impl Onert {
    /// Loads the library, or reports it unavailable with how to install it.
    pub fn new(backends: &str) -> Result<Onert, RuntimeError> {
        let unavailable = |message| RuntimeError::Unavailable {
            engine: "onert",
            message,
        };
        check_backends(backends).map_err(unavailable)?;
        let backends = CString::new(backends).map_err(|e| unavailable(e.to_string()))?;
        Ok(Onert {
            api: api()?,
            backends,
        })
    }
}

impl Engine for Onert {
    fn name(&self) -> &'static str {
        ENGINE
    }

    /// onert has no per-session thread setting in its C API; `threads` is not honoured
    /// (its `cpu` backend runs most kernels on one thread as it is).
    fn load_with(&self, path: &Path, _opts: LoadOptions) -> Result<Box<dyn Session>, RuntimeError> {
        Ok(Box::new(OnertSession::load(
            self.api,
            path,
            &self.backends,
        )?))
    }
}

/// One input or output, by position.
struct Port {
    name: String,
    elem: ElemType,
    /// onert's type code for it.
    code: c_int,
    /// As the file declares them (`shape_signature` where present): negative is dynamic.
    dims: Vec<i32>,
}

struct OnertSession {
    api: &'static Api,
    path: PathBuf,
    /// The file and backends again, to compile anew when input shapes change.
    c_path: CString,
    backends: CString,
    session: ffi::Session,
    inputs: Vec<Port>,
    outputs: Vec<Port>,
    /// The input shapes onert was last told, once it has been prepared.
    prepared: Option<Vec<Vec<i32>>>,
}

// SAFETY: the session is owned here alone and used from one thread at a time (`run` takes
// `&mut self`); onert ties a session to no thread.
unsafe impl Send for OnertSession {}

impl Drop for OnertSession {
    fn drop(&mut self) {
        if !self.session.is_null() {
            // SAFETY: made by nnfw_create_session, closed once.
            unsafe { (self.api.nnfw_close_session)(self.session) };
        }
    }
}

fn engine_err(path: &Path, message: String) -> RuntimeError {
    RuntimeError::engine(ENGINE, path, message)
}

fn unsupported(path: &Path, message: String) -> RuntimeError {
    RuntimeError::unsupported(ENGINE, path, message)
}

/// onert's type codes (`NNFW_TYPE`); quantized 8-bit unsigned reads as `u8`, as TFLite's does.
fn elem_of(code: c_int) -> Option<ElemType> {
    Some(match code {
        0 => ElemType::F32,
        1 => ElemType::I32,
        2 | 4 => ElemType::U8,
        3 => ElemType::Bool,
        5 => ElemType::I64,
        6 => ElemType::I8,
        7 => ElemType::I16,
        _ => return None,
    })
}

fn type_name(code: c_int) -> &'static str {
    match code {
        0 => "float32",
        1 => "int32",
        2 => "quantized uint8",
        3 => "bool",
        4 => "uint8",
        5 => "int64",
        6 => "quantized int8",
        7 => "quantized int16",
        _ => "an unknown type",
    }
}

/// Bytes of a tensor of these dims, or `None` for a dynamic dim or an overflow.
fn byte_len(dims: &[i32], elem: ElemType) -> Option<usize> {
    let width = elem.bits().map(|b| b as usize / 8)?;
    dims.iter()
        .try_fold(width, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?))
}

/// The main subgraph's inputs and outputs as the file names and declares them.
/// A tensor's name and declared dims.
type Declared = (String, Vec<i32>);

fn file_ports(m: &FlatModel) -> Result<(Vec<Declared>, Vec<Declared>), String> {
    let root = m.root();
    let sg = root
        .subgraphs()
        .filter(|s| !s.is_empty())
        .map(|s| s.get(0))
        .ok_or("the model has no subgraph")?;
    let tensors = sg.tensors().ok_or("the main subgraph has no tensors")?;
    let side = |ids: Option<flatbuffers::Vector<'_, i32>>, what: &str| {
        ids.into_iter()
            .flatten()
            .map(|i| {
                let t = usize::try_from(i)
                    .ok()
                    .filter(|&i| i < tensors.len())
                    .map(|i| tensors.get(i))
                    .ok_or_else(|| format!("{what} tensor index {i} is out of range"))?;
                let dims = t
                    .shape_signature()
                    .filter(|s| !s.is_empty())
                    .or_else(|| t.shape())
                    .map(|s| s.iter().collect())
                    .unwrap_or_default();
                Ok((t.name().unwrap_or_default().to_string(), dims))
            })
            .collect::<Result<Vec<_>, String>>()
    };
    Ok((side(sg.inputs(), "input")?, side(sg.outputs(), "output")?))
}

impl OnertSession {
    fn load(
        api: &'static Api,
        path: &Path,
        backends: &CString,
    ) -> Result<OnertSession, RuntimeError> {
        let model = crate::trusted(path, cleave_tflite::EngineNeeds::ONERT, ENGINE)?;
        // onert picks its reader by the file's extension.
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        if ext.as_deref() != Some(model.format.extension()) {
            return Err(RuntimeError::Model {
                path: path.to_path_buf(),
                message: format!(
                    "a {} model; onert reads it only from a file named .{}",
                    model.format.name(),
                    model.format.extension()
                ),
            });
        }
        let (ins, outs) = file_ports(&model).map_err(|m| RuntimeError::Model {
            path: path.to_path_buf(),
            message: m,
        })?;
        let offsets = model.root().buffers().into_iter().flatten();
        if offsets.filter(|b| b.offset() > 1).count() > 0 {
            return Err(unsupported(
                path,
                "its buffers are kept after the flatbuffer (Buffer.offset, as converters write \
                 models past 2 GiB), which onert reads wrongly (it crashes)"
                    .into(),
            ));
        }
        drop(model);
        let c_path = CString::new(path.as_os_str().as_encoded_bytes())
            .ok()
            .filter(|p| p.as_bytes().len() < ffi::MAX_PATH)
            .ok_or_else(|| {
                engine_err(
                    path,
                    format!(
                        "onert takes paths of under {} bytes without NUL",
                        ffi::MAX_PATH
                    ),
                )
            })?;
        let mut s = OnertSession {
            api,
            path: path.to_path_buf(),
            c_path,
            backends: backends.clone(),
            session: std::ptr::null_mut(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            prepared: None,
        };
        s.open()?;
        s.inputs = s.ports(true, ins)?;
        s.outputs = s.ports(false, outs)?;
        // A model whose inputs are all fixed is compiled now, so what onert cannot compile
        // (an op its backends lack) is said at load; others wait for the first input shapes.
        if s.inputs.iter().all(|q| q.dims.iter().all(|&d| d >= 0)) {
            let shapes = s.inputs.iter().map(|q| q.dims.clone()).collect();
            s.prepare(shapes)?;
        }
        Ok(s)
    }

    /// A new session on the file and backends, loaded and not yet compiled, in place of any
    /// earlier one.
    fn open(&mut self) -> Result<(), RuntimeError> {
        let api = self.api;
        self.prepared = None;
        if !self.session.is_null() {
            // SAFETY: made by nnfw_create_session, closed once (the field is cleared).
            unsafe { (api.nnfw_close_session)(self.session) };
            self.session = std::ptr::null_mut();
        }
        // SAFETY: the out-pointer is this session's field.
        let st = unsafe { (api.nnfw_create_session)(&mut self.session) };
        if st != ffi::STATUS_OK || self.session.is_null() {
            self.session = std::ptr::null_mut();
            return self.check("creating a session", st.max(1));
        }
        let (session, c_path) = (self.session, &self.c_path);
        // SAFETY: a live session and a NUL-terminated path under onert's limit.
        let (st, said) = stderr_capture::captured(|| unsafe {
            (api.nnfw_load_model_from_file)(session, c_path.as_ptr())
        });
        self.refused(st, &said, "loading")?;
        // SAFETY: a live session; `backends` is NUL-terminated and checked.
        let st = unsafe { (api.nnfw_set_available_backends)(session, self.backends.as_ptr()) };
        self.check("choosing backends", st)
    }

    fn check(&self, what: &str, st: Status) -> Result<(), RuntimeError> {
        if st == ffi::STATUS_OK {
            Ok(())
        } else {
            Err(engine_err(
                &self.path,
                format!("{what}: {}", ffi::status_text(st)),
            ))
        }
    }

    /// A failed load or compile, in onert's words where it printed any.
    fn refused(&self, st: Status, said: &str, what: &str) -> Result<(), RuntimeError> {
        if st == ffi::STATUS_OK {
            // Warnings onert printed stay where the user would have seen them.
            if !said.is_empty() {
                eprint!("{said}");
            }
            return Ok(());
        }
        let words = stderr_capture::message(said);
        let why = if words.is_empty() {
            format!("{what} failed: {}", ffi::status_text(st))
        } else {
            words
        };
        Err(unsupported(&self.path, why))
    }

    /// The session's inputs or outputs, checked against the file's.
    fn ports(
        &self,
        inputs: bool,
        file: Vec<(String, Vec<i32>)>,
    ) -> Result<Vec<Port>, RuntimeError> {
        let (a, p) = (self.api, self.path.as_path());
        let side = if inputs { "input" } else { "output" };
        let mut n = 0u32;
        // SAFETY: a live, loaded session; `n` is a valid out-pointer.
        let st = unsafe {
            if inputs {
                (a.nnfw_input_size)(self.session, &mut n)
            } else {
                (a.nnfw_output_size)(self.session, &mut n)
            }
        };
        self.check(&format!("counting {side}s"), st)?;
        if usize::try_from(n).ok() != Some(file.len()) {
            return Err(engine_err(
                p,
                format!(
                    "onert sees {n} {side}s, the file's main subgraph has {}",
                    file.len()
                ),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        let mut ports = Vec::with_capacity(file.len());
        for (i, (name, dims)) in (0u32..).zip(file) {
            let info = self.info(inputs, i)?;
            let elem = elem_of(info.dtype).ok_or_else(|| {
                unsupported(
                    p,
                    format!("{side} '{name}' is of {}", type_name(info.dtype)),
                )
            })?;
            if name.is_empty() || !seen.insert(name.clone()) {
                return Err(unsupported(
                    p,
                    format!(
                        "{side} {i} has no name of its own ('{name}'); \
                         cleave feeds and reads by name"
                    ),
                ));
            }
            ports.push(Port {
                name,
                elem,
                code: info.dtype,
                dims,
            });
        }
        Ok(ports)
    }

    fn info(&self, input: bool, i: u32) -> Result<nnfw_tensorinfo, RuntimeError> {
        /// Room past the 6 dims: onert writes as many dims as the tensor's rank, and a rank
        /// it computed at run time is checked by nobody before (files are, in `trust`).
        #[repr(C)]
        struct Roomy {
            info: nnfw_tensorinfo,
            spare: [i32; 58],
        }
        let a = self.api;
        let mut room = Roomy {
            info: nnfw_tensorinfo::default(),
            spare: [0; 58],
        };
        // SAFETY: `i` is below the count onert gave; `room` starts with nnfw.h's layout and
        // holds 64 dims.
        let st = unsafe {
            let info = &mut room.info as *mut nnfw_tensorinfo;
            if input {
                (a.nnfw_input_tensorinfo)(self.session, i, info)
            } else {
                (a.nnfw_output_tensorinfo)(self.session, i, info)
            }
        };
        let side = if input { "input" } else { "output" };
        self.check(&format!("reading {side} {i}'s shape"), st)?;
        let rank = usize::try_from(room.info.rank).unwrap_or(usize::MAX);
        if rank > ffi::MAX_RANK {
            return Err(unsupported(
                &self.path,
                format!(
                    "{side} {i} has rank {}; onert's API describes at most {} dims",
                    room.info.rank,
                    ffi::MAX_RANK
                ),
            ));
        }
        Ok(room.info)
    }

    /// Tells onert an input's shape where it differs from what it has.
    fn set_shape(&self, i: u32, dims: &[i32]) -> Result<(), RuntimeError> {
        let now = self.info(true, i)?;
        if now.dims() == dims {
            return Ok(());
        }
        let mut info = nnfw_tensorinfo {
            dtype: now.dtype,
            rank: i32::try_from(dims.len()).unwrap_or(i32::MAX),
            dims: [0; ffi::MAX_RANK],
        };
        info.dims[..dims.len()].copy_from_slice(dims);
        // SAFETY: a live session; `info` has nnfw.h's layout and outlives the call.
        let st = unsafe { (self.api.nnfw_set_input_tensorinfo)(self.session, i, &info) };
        let name = self.inputs.get(i as usize).map_or("", |q| q.name.as_str());
        self.check(&format!("setting input '{name}' to shape {dims:?}"), st)
    }

    /// Compiles the model for these input shapes.
    fn prepare(&mut self, shapes: Vec<Vec<i32>>) -> Result<(), RuntimeError> {
        for (i, dims) in (0u32..).zip(&shapes) {
            self.set_shape(i, dims)?;
        }
        let (a, session) = (self.api, self.session);
        // SAFETY: a live, loaded session, prepared once.
        let (st, said) = stderr_capture::captured(|| unsafe { (a.nnfw_prepare)(session) });
        self.refused(st, &said, "compiling")?;
        self.prepared = Some(shapes);
        Ok(())
    }

    fn input_err(&self, port: &Port, message: String) -> RuntimeError {
        RuntimeError::Input {
            path: self.path.clone(),
            name: port.name.clone(),
            message,
        }
    }

    /// The given tensor for an input, checked against what the model declares.
    fn given<'t>(
        &self,
        port: &Port,
        inputs: &'t [(String, HostTensor)],
    ) -> Result<(&'t HostTensor, Vec<i32>), RuntimeError> {
        let t = inputs
            .iter()
            .find(|(n, _)| *n == port.name)
            .map(|(_, t)| t)
            .ok_or_else(|| self.input_err(port, "not given".into()))?;
        if t.elem != port.elem {
            return Err(self.input_err(
                port,
                format!("element type is {}, the model wants {}", t.elem, port.elem),
            ));
        }
        let dims: Vec<i32> = t
            .shape
            .iter()
            .map(|&d| i32::try_from(d))
            .collect::<Result<_, _>>()
            .map_err(|_| {
                self.input_err(port, format!("shape {:?} is past onert's 32 bits", t.shape))
            })?;
        let fits = dims.len() == port.dims.len()
            && dims.len() <= ffi::MAX_RANK
            && dims.iter().zip(&port.dims).all(|(&d, &w)| w < 0 || d == w);
        if !fits {
            return Err(self.input_err(
                port,
                format!("shape is {:?}, the model wants {:?}", t.shape, port.dims),
            ));
        }
        if byte_len(&dims, t.elem) != Some(t.data.len()) {
            let n = t.data.len();
            return Err(self.input_err(
                port,
                format!("{n} bytes for {} elements of {}", t.len(), t.elem),
            ));
        }
        if t.elem == ElemType::Bool && t.data.iter().any(|&b| b > 1) {
            return Err(self.input_err(port, "bool bytes must be 0 or 1".into()));
        }
        Ok((t, dims))
    }

    /// Output buffers sized by what onert says of each output's shape once compiled.
    fn output_buffers(&self) -> Result<Vec<Vec<u8>>, RuntimeError> {
        let mut bufs = Vec::with_capacity(self.outputs.len());
        for (i, port) in (0u32..).zip(&self.outputs) {
            let info = self.info(false, i)?;
            let n = byte_len(info.dims(), port.elem).unwrap_or(0);
            let mut buf = vec![0u8; n.max(1)];
            // SAFETY: the buffer lives until after the run that writes it (it is returned and
            // read only after nnfw_run).
            let st = unsafe {
                (self.api.nnfw_set_output)(self.session, i, port.code, buf.as_mut_ptr().cast(), n)
            };
            self.check(&format!("giving output '{}' a buffer", port.name), st)?;
            bufs.push(buf);
        }
        Ok(bufs)
    }
}

impl Session for OnertSession {
    fn run(
        &mut self,
        inputs: &[(String, HostTensor)],
    ) -> Result<Vec<(String, HostTensor)>, RuntimeError> {
        let mut feeds = Vec::with_capacity(self.inputs.len());
        for port in &self.inputs {
            feeds.push(self.given(port, inputs)?);
        }
        let shapes: Vec<Vec<i32>> = feeds.iter().map(|(_, d)| d.clone()).collect();
        match &self.prepared {
            None => self.prepare(shapes)?,
            Some(last) if *last != shapes => {
                // onert infers a shape set after compiling only while running, and its C API
                // then neither says the outputs' new sizes beforehand nor after a run that
                // found its buffers short: so the model is compiled anew for the new shapes.
                self.open()?;
                self.prepare(shapes)?;
            }
            Some(_) => {}
        }
        for ((i, port), (t, _)) in (0u32..).zip(&self.inputs).zip(&feeds) {
            // SAFETY: `t.data` outlives the run below; its length was checked against the shape.
            let st = unsafe {
                (self.api.nnfw_set_input)(
                    self.session,
                    i,
                    port.code,
                    t.data.as_ptr().cast(),
                    t.data.len(),
                )
            };
            self.check(&format!("setting input '{}'", port.name), st)?;
        }
        let bufs = self.output_buffers()?;
        // SAFETY: every input and output has a live buffer of the size onert was told.
        let st = unsafe { (self.api.nnfw_run)(self.session) };
        if st == ffi::INSUFFICIENT_OUTPUT_SIZE {
            return Err(unsupported(
                &self.path,
                "an output's size is known only once it has run (a data-dependent shape), \
                 and onert's C API gives no way to read such an output"
                    .into(),
            ));
        }
        self.check("running", st)?;
        let mut outs = Vec::with_capacity(self.outputs.len());
        for ((i, port), mut data) in (0u32..).zip(&self.outputs).zip(bufs) {
            let info = self.info(false, i)?;
            let n = byte_len(info.dims(), port.elem)
                .filter(|&n| n <= data.len())
                .ok_or_else(|| {
                    engine_err(
                        &self.path,
                        format!(
                            "output '{}' came back as {:?}, past its buffer",
                            port.name,
                            info.dims()
                        ),
                    )
                })?;
            data.truncate(n);
            let shape = info.dims().iter().map(|&d| d.max(0) as usize).collect();
            outs.push((
                port.name.clone(),
                HostTensor {
                    elem: port.elem,
                    shape,
                    data,
                },
            ));
        }
        Ok(outs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::python_pkg::find_library;

    #[test]
    fn a_missing_library_says_how_to_install_it() {
        let e =
            find_library(&LIBRARY, Some("/nonexistent/libonert.so".into()), "python3").unwrap_err();
        assert!(
            e.contains("CLEAVE_ONERT_LIB names /nonexistent/libonert.so"),
            "{e}"
        );
        assert!(e.contains("pip install onert"), "{e}");
        let e = find_library(&LIBRARY, None, "false").unwrap_err();
        assert!(
            e.contains("false: is not a Python (exit code 1); set CLEAVE_PYTHON to a Python with the onert wheel, or CLEAVE_ONERT_LIB to its libonert.so"),
            "{e}"
        );
    }

    #[test]
    fn a_library_that_is_not_onert_is_refused() {
        // SAFETY: libm's initialisers are harmless, and no function is called.
        let e = unsafe { Api::load(Path::new("libm.so.6")) }
            .err()
            .unwrap_or_default();
        assert!(e.contains("nnfw_create_session"), "{e}");
        assert!(e.contains("not onert's libonert.so"), "{e}");
    }

    #[test]
    fn backends_are_names_separated_by_semicolons() {
        assert!(check_backends("cpu").is_ok());
        assert!(check_backends("ruy;cpu").is_ok());
        for bad in ["", "cpu;", "../x", "cpu,ruy", "a b"] {
            let e = check_backends(bad).unwrap_err();
            assert!(e.contains("e.g. cpu or ruy;cpu"), "{bad}: {e}");
        }
    }

    #[test]
    fn types_and_sizes() {
        assert_eq!(elem_of(2), Some(ElemType::U8));
        assert_eq!(elem_of(6), Some(ElemType::I8));
        assert_eq!(elem_of(8), None);
        assert_eq!(byte_len(&[2, 3], ElemType::F32), Some(24));
        assert_eq!(byte_len(&[], ElemType::I64), Some(8));
        assert_eq!(byte_len(&[-1, 3], ElemType::F32), None);
        assert_eq!(
            byte_len(&[i32::MAX, i32::MAX, i32::MAX], ElemType::F32),
            None
        );
    }
}
