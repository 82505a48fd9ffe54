//! Engines that parse flatbuffers they do not verify (LiteRT, onert) run in a worker process
//! of their own, so that a hostile or broken model crashing inside them is an error naming
//! the part and the engine, not the end of cleave (or of the Python that called it).
//!
//! The program that embeds cleave says how to start a worker ([`set_launcher`]): the `cleave`
//! binary starts itself with a hidden argument, the Python module starts its own interpreter
//! on the extension. Whoever is started calls [`worker_main`]. Without a launcher (a Rust
//! program using the library, the tests of this crate), or with `CLEAVE_ISOLATE=0`, the
//! engines run in process.

mod client;
mod wire;
mod worker;

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use cleave_runtime::{Engine, RuntimeError};

use crate::python_pkg::locate_library;
use cleave_runtime::PackagedLibrary;

pub use client::Isolated;
pub use worker::main as worker_main;

/// How to start a worker: a program and its arguments.
#[derive(Clone, Debug)]
pub struct Launcher {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

static LAUNCHER: Mutex<Option<Launcher>> = Mutex::new(None);

/// Set in a worker: the engines it makes run in it.
static IN_WORKER: AtomicBool = AtomicBool::new(false);

/// Says how this program starts an engine worker; from then on, the engines that need it run
/// in one.
pub fn set_launcher(launcher: Launcher) {
    *LAUNCHER.lock().unwrap_or_else(|e| e.into_inner()) = Some(launcher);
}

/// The variable that turns isolation off (`0`), for a debugger or to measure what it costs.
pub const ISOLATE_VARIABLE: &str = "CLEAVE_ISOLATE";

/// The launcher, where engines are to run isolated.
fn launcher() -> Option<Launcher> {
    if IN_WORKER.load(Ordering::Relaxed)
        || std::env::var_os(ISOLATE_VARIABLE).is_some_and(|v| v == "0")
    {
        return None;
    }
    LAUNCHER.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Each library's path, found once (finding it may ask a Python).
fn located(library: &PackagedLibrary) -> Result<PathBuf, String> {
    /// By the variable that names each library.
    type Found = Vec<(&'static str, Result<PathBuf, String>)>;
    static FOUND: Mutex<Found> = Mutex::new(Vec::new());
    let mut found = FOUND.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, r)) = found.iter().find(|(v, _)| *v == library.variable) {
        return r.clone();
    }
    let r = locate_library(library);
    found.push((library.variable, r.clone()));
    r
}

/// The engine `label` runs on, in a worker process where this program can start one, else
/// `in_process()`. `unavailable` is the name a missing library is reported under.
pub(crate) fn or_in_process(
    engine: &'static str,
    unavailable: &'static str,
    label: String,
    library: &PackagedLibrary,
    in_process: impl FnOnce() -> Result<Box<dyn Engine>, RuntimeError>,
) -> Result<Box<dyn Engine>, RuntimeError> {
    let Some(launcher) = launcher() else {
        return in_process();
    };
    let path = located(library).map_err(|message| RuntimeError::Unavailable {
        engine: unavailable,
        message,
    })?;
    Ok(Box::new(Isolated {
        engine,
        label,
        library: (library.variable, path),
        launcher,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// An engine whose "worker" is a shell program.
    fn fake(label: &str, program: &str) -> Isolated {
        Isolated {
            engine: "litert",
            label: label.into(),
            library: ("FAKE_ENGINE_LIB", PathBuf::from("/nonexistent")),
            launcher: Launcher {
                program: "/bin/sh".into(),
                args: vec!["-c".into(), program.into()],
            },
        }
    }

    #[test]
    fn a_worker_that_crashes_is_an_error_naming_the_model_and_the_signal() {
        let e = fake(
            "crash-on-load",
            "echo 'F0000 tensor.cc:12 Check failed: dims' >&2; head -c 1 >/dev/null; kill -SEGV $$",
        );
        let err = e
            .load(Path::new("m.tflite"), false)
            .err()
            .map(|e| e.to_string());
        let err = err.unwrap_or_default();
        assert!(
            err.contains("litert cannot run it: the engine crashed loading it (SIGSEGV"),
            "{err}"
        );
        assert!(
            err.contains("its last words: F0000 tensor.cc:12 Check failed: dims"),
            "{err}"
        );
        // The next call starts a new worker, which crashes again: the same answer, no hang.
        let again = e
            .load(Path::new("m.tflite"), false)
            .err()
            .map(|e| e.to_string());
        assert!(again.unwrap_or_default().contains("SIGSEGV"));
    }

    #[test]
    fn a_run_that_crashes_its_worker_twice_is_an_error_naming_the_model() {
        // Loads (answers LOADED to session 1), then dies soon after the run arrives; a new
        // worker does the same, so the second crash is the error.
        let loaded = r"printf '\001\000\000\000\013\000\000\000\000\000\000\000\000'";
        let e = fake(
            "crash-on-run",
            &format!("head -c 1 >/dev/null; {loaded}; sleep 0.3; kill -SEGV $$"),
        );
        let mut s = e.load(Path::new("m.tflite"), false).unwrap();
        let err = s.run(&[]).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            err.contains("the engine crashed running it (SIGSEGV"),
            "{err}"
        );
    }

    #[test]
    fn a_worker_that_answers_nonsense_is_stopped() {
        let e = fake(
            "nonsense",
            "head -c 1 >/dev/null; printf 'garbage that is no frame at all'; sleep 30",
        );
        let t = std::time::Instant::now();
        let err = e
            .load(Path::new("m.tflite"), false)
            .err()
            .map(|e| e.to_string());
        let err = err.unwrap_or_default();
        assert!(err.contains("after a reply cleave could not read"), "{err}");
        // Killed, not waited for.
        assert!(t.elapsed() < std::time::Duration::from_secs(20));
    }

    #[test]
    fn a_worker_that_cannot_start_is_said() {
        let mut e = fake("missing", "");
        e.launcher.program = "/nonexistent/cleave".into();
        let err = e
            .load(Path::new("m.tflite"), false)
            .err()
            .map(|e| e.to_string());
        assert!(err
            .unwrap_or_default()
            .contains("its worker process did not start: cannot start /nonexistent/cleave"),);
    }
}
