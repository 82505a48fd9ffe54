//! Serving a written partition on Ray: one Ray Serve deployment per part, chained by
//! deployment handles. The application is the Python package's `cleave.serve` module (Ray's
//! API is Python), carried inside the binary as that same file; this module checks the
//! partition, writes the file out and runs it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use cleave_files::ConnFile;

use crate::Error;

/// The Ray Serve application and its command line (`serve`, `export`, `bench`, `verify`).
pub const RAY_APP: &str = include_str!("../../../../python/cleave/serve.py");

/// The Python interpreter to run it with: `$CLEAVE_PYTHON`, else `python3`.
fn python() -> OsString {
    std::env::var_os("CLEAVE_PYTHON").unwrap_or_else(|| "python3".into())
}

/// Reads `conn` and checks that every part file it names exists, so a bad partition fails
/// here in one line rather than inside a Ray actor.
pub fn check_served(conn: &Path) -> Result<ConnFile, Error> {
    let text = std::fs::read_to_string(conn)
        .map_err(|e| Error::argument(conn, format!("cannot read: {e}")))?;
    let parsed = ConnFile::from_json(&text).map_err(|e| Error::argument(conn, e))?;
    let dir = conn.parent().unwrap_or(Path::new("."));
    for p in &parsed.parts {
        let f = dir.join(&p.file);
        if !f.is_file() {
            return Err(Error::argument(
                conn,
                format!("part file {} is missing", f.display()),
            ));
        }
    }
    if parsed.parts.is_empty() {
        return Err(Error::argument(conn, "lists no parts"));
    }
    Ok(parsed)
}

/// Checks that the interpreter has Ray and ONNX Runtime, with the fix when it has not.
fn check_python(need: &[&str]) -> Result<(), Error> {
    let imports = need.join(", ");
    let out = Command::new(python())
        .args(["-c", &format!("import {imports}")])
        .output()
        .map_err(|e| {
            Error::usage(format!(
                "cannot run {}: {e} (set CLEAVE_PYTHON to the Python that has Ray)",
                python().to_string_lossy()
            ))
        })?;
    if !out.status.success() {
        return Err(Error::usage(format!(
            "{} cannot import {imports}: pip install 'cleave-nn[ray]' (or set CLEAVE_PYTHON to a Python that has them)",
            python().to_string_lossy()
        )));
    }
    Ok(())
}

/// Runs the application's command line with `args` (its first the subcommand), standard
/// streams passed through; returns its exit code.
pub fn run_ray_app(args: &[OsString]) -> Result<i32, Error> {
    let needs_cluster = args.first().is_some_and(|a| a != "export");
    if needs_cluster {
        check_python(&["ray", "ray.serve", "onnxruntime", "numpy"])?;
    } else {
        check_python(&["numpy"])?;
    }
    let dir = tempfile::tempdir().map_err(|e| Error::usage(format!("no temporary folder: {e}")))?;
    let script: PathBuf = dir.path().join("ray_app.py");
    std::fs::write(&script, RAY_APP).map_err(|e| Error::io(&script, "cannot write", e))?;
    let status = Command::new(python())
        .arg(&script)
        .args(args)
        .status()
        .map_err(|e| Error::usage(format!("cannot run {}: {e}", python().to_string_lossy())))?;
    // A signal (Ctrl-C on `serve`) has no code: report it as an interrupted run.
    Ok(status.code().unwrap_or(130))
}
