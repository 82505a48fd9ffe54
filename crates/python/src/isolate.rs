//! Engine workers for the Python package: this interpreter's executable, isolated (`-I -S`:
//! nothing from the working folder, the user's site or `PYTHON*` variables), loading this
//! very extension by its absolute path and nothing else, then serving cleave's engine
//! requests. A model that crashes LiteRT or onert then ends that process, not the user's.

use std::ffi::{c_void, CStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use pyo3::prelude::*;

/// The worker's program: the extension loaded from `sys.argv[1]` under its own name.
const PROGRAM: &str = "import sys\n\
from importlib.machinery import ExtensionFileLoader\n\
from importlib.util import module_from_spec, spec_from_loader\n\
loader = ExtensionFileLoader('_cleave', sys.argv[1])\n\
module = module_from_spec(spec_from_loader('_cleave', loader))\n\
loader.exec_module(module)\n\
module._engine_worker()\n";

/// The file this extension was loaded from.
fn own_path() -> Option<PathBuf> {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let here = own_path as *const c_void;
    // SAFETY: `here` is an address inside this library; dladdr fills `info` or returns 0.
    if unsafe { libc::dladdr(here, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr's file name is a NUL-terminated string owned by the loader.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    let path = PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes()));
    path.is_absolute().then_some(path)
}

/// Tells the facade how to start engine workers from this interpreter.
pub fn set_launcher(py: Python<'_>) -> PyResult<()> {
    let exe: Option<String> = py.import("sys")?.getattr("executable")?.extract()?;
    let exe = exe.filter(|e| !e.is_empty()).map(PathBuf::from);
    // An embedded interpreter without an executable, or an extension whose file is unknown:
    // the engines run in process.
    if let (Some(program), Some(extension)) = (exe.filter(|e| e.is_absolute()), own_path()) {
        let args: Vec<OsString> = ["-I", "-S", "-c", PROGRAM]
            .into_iter()
            .map(OsString::from)
            .chain([extension.into_os_string()])
            .collect();
        cleave::isolate_engines(cleave::Launcher { program, args });
    }
    Ok(())
}

/// Runs this process as an engine worker and ends it (never returns).
#[pyfunction]
pub fn _engine_worker(py: Python<'_>) {
    let code = py.detach(cleave::engine_worker_main);
    std::process::exit(code);
}
