//! Engines that ship in Python wheels (ONNX Runtime in `onnxruntime`, LiteRT in
//! `ai_edge_litert`): the folder of such a package, as the user's Python sees it.
//!
//! Every Python cleave starts is isolated from the working folder: users run cleave inside
//! folders of downloaded models, and `python -c` puts the working folder first on `sys.path`,
//! so a planted `json.py` or `onnxruntime/` would run (or hand cleave a library to load).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use cleave_runtime::PackagedLibrary;

/// The Python cleave asks: `$CLEAVE_PYTHON` (the Python package sets it to its own
/// interpreter), else the first executable `python3` in an absolute `PATH` folder (a relative
/// or empty entry would name the working folder), else `/usr/bin/python3`: never a bare name,
/// which the system would look up through every `PATH` entry.
pub fn python() -> String {
    if let Some(p) = std::env::var_os("CLEAVE_PYTHON") {
        return p.to_string_lossy().into_owned();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join("python3"))
        .find(|p| is_executable(p))
        .map_or_else(|| "/usr/bin/python3".into(), |p| p.display().to_string())
}

fn is_executable(p: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    p.is_file()
}

/// The first lines of every `-c` program cleave runs: `sys.path` keeps absolute entries only
/// (the working folder is `''`; `os` and `sys` are loaded before any path is searched).
pub const ISOLATE: &str =
    "import os, sys\nsys.path[:] = [p for p in sys.path if p and os.path.isabs(p)]\n";

/// `python` set up to import nothing from the working folder: `PYTHONSAFEPATH` (3.11+) keeps
/// the working folder or the script's folder off `sys.path`, and `PYTHONPATH` keeps only its
/// absolute entries. A `-c` program must also start with `ISOLATE` (older Pythons).
pub fn isolated(python: impl AsRef<OsStr>) -> Command {
    let mut c = Command::new(python);
    c.env("PYTHONSAFEPATH", "1");
    if let Some(pp) = std::env::var_os("PYTHONPATH") {
        match absolute_entries(&pp) {
            Some(v) => c.env("PYTHONPATH", v),
            None => c.env_remove("PYTHONPATH"),
        };
    }
    c
}

/// The absolute entries of a `PATH`-like list (Python makes a relative one absolute against
/// the working folder), or None when none is left.
fn absolute_entries(list: &OsStr) -> Option<OsString> {
    let kept: Vec<PathBuf> = std::env::split_paths(list)
        .filter(|d| d.is_absolute())
        .collect();
    std::env::join_paths(kept).ok().filter(|v| !v.is_empty())
}

/// `python -c program`, isolated (`isolated`; `ISOLATE` runs first, after the program's
/// `from __future__` imports, which Python takes only at the top).
pub fn run_code(python: impl AsRef<OsStr>, program: &str) -> Command {
    let mut c = isolated(python);
    // One-line future imports only; a parenthesised or continued one stays where it is (and
    // Python says why it cannot run it).
    let (future, rest): (Vec<&str>, Vec<&str>) = program.lines().partition(|l| {
        l.starts_with("from __future__ import ") && !l.contains('(') && !l.ends_with('\\')
    });
    let mut code = String::new();
    for l in future {
        code.push_str(l);
        code.push('\n');
    }
    code.push_str(ISOLATE);
    code.push_str(&rest.join("\n"));
    c.arg("-c").arg(code);
    c
}

/// How long a Python may take to answer a probe. A Python answers in well under a second; one
/// that has not answered in a minute will not (a script that sleeps, a wrapper waiting on a
/// terminal), and cleave must not wait on it forever.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// `python` as a message names it: `CLEAVE_PYTHON=PATH` when that variable chose it, so the
/// user sees which setting to fix.
pub fn describe(python: &str) -> String {
    match std::env::var_os("CLEAVE_PYTHON") {
        Some(v) if v == OsStr::new(python) => format!("CLEAVE_PYTHON={python}"),
        _ => python.to_string(),
    }
}

/// Runs `cmd`, a program of `python` (see [`run_code`]), to its end and returns its output, or
/// says why not: it could not be started, or did not finish within `timeout` (it is killed,
/// with whatever it started: it runs in a process group of its own).
pub fn probe_output(mut cmd: Command, python: &str, timeout: Duration) -> Result<Output, String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot run {} ({e})", describe(python)))?;
    let pid = child.id();
    // The pipes are read to their end on another thread: a program that keeps them open
    // (or one of its children that does) is the timeout's to end.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(out) => out.map_err(|e| format!("{}: {e}", describe(python))),
        Err(_) => {
            #[cfg(unix)]
            if let Ok(group) = i32::try_from(pid) {
                // SAFETY: signals the process group this call made (pgid = the child's pid);
                // the thread above still waits on the child, so the pid is not yet reused.
                unsafe { libc::kill(-group, libc::SIGKILL) };
            }
            #[cfg(not(unix))]
            let _ = pid;
            Err(format!(
                "{}: did not answer within {} s",
                describe(python),
                timeout.as_secs()
            ))
        }
    }
}

/// Why the Python cleave asks could not say where a package is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PackageError {
    /// The Python itself failed: it could not be run, did not answer, or is not a Python.
    Python(String),
    /// The Python answered: it has no such package, or gave an answer not to trust.
    Package(String),
}

impl std::fmt::Display for PackageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PackageError::Python(m) | PackageError::Package(m) => f.write_str(m),
        }
    }
}

impl From<PackageError> for String {
    fn from(e: PackageError) -> String {
        e.to_string()
    }
}

/// Starts the one line of a probe's answer: a program that is not Python but exits 0 (or
/// prints something) is not taken as a Python saying "no such package".
const ANSWER: &str = "cleave-probe:";

/// The folder of `package` as `python` would import it, found without importing it (an
/// engine package's `__init__` pulls in numpy and more) and never in the working folder.
pub fn package_dir(python: &str, package: &str) -> Result<String, PackageError> {
    package_dir_within(python, package, PROBE_TIMEOUT)
}

fn package_dir_within(
    python: &str,
    package: &str,
    timeout: Duration,
) -> Result<String, PackageError> {
    // A package that fails to be found (a broken one) is an answer too: no folder.
    let probe = format!(
        "import importlib.util as u\n\
         try:\n    s = u.find_spec('{package}')\nexcept Exception:\n    s = None\n\
         print('{ANSWER}' + (s.submodule_search_locations[0] \
         if s and s.submodule_search_locations else ''))"
    );
    let out =
        probe_output(run_code(python, &probe), python, timeout).map_err(PackageError::Python)?;
    let who = describe(python);
    if !out.status.success() {
        return Err(PackageError::Python(format!(
            "{who}: is not a Python ({})",
            exit_and_stderr(&out)
        )));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let Some(dir) = stdout.lines().last().and_then(|l| l.strip_prefix(ANSWER)) else {
        return Err(PackageError::Python(format!(
            "{who}: is not a Python (it ran, but did not answer cleave's probe)"
        )));
    };
    let dir = dir.trim();
    if dir.is_empty() {
        return Err(PackageError::Package(format!(
            "{python} has no {package} package"
        )));
    }
    // Anything but one absolute folder is not an answer to trust (a relative one would be
    // read against the working folder).
    if !Path::new(dir).is_absolute() {
        return Err(PackageError::Package(format!(
            "{python} answered '{dir}' for the {package} package's folder, not an absolute path"
        )));
    }
    Ok(dir.to_string())
}

/// `exit code N: first line of stderr`, or `killed by signal N`, for a message.
fn exit_and_stderr(out: &Output) -> String {
    let status = match (out.status.code(), signal(&out.status)) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        (None, None) => out.status.to_string(),
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    match stderr.lines().map(str::trim).find(|l| !l.is_empty()) {
        Some(line) => format!("{status}: {}", line.chars().take(200).collect::<String>()),
        None => status,
    }
}

#[cfg(unix)]
fn signal(s: &std::process::ExitStatus) -> Option<i32> {
    std::os::unix::process::ExitStatusExt::signal(s)
}

#[cfg(not(unix))]
fn signal(_: &std::process::ExitStatus) -> Option<i32> {
    None
}

/// The library `lib` names, from its variable (`explicit`) or the package of `python`; missing,
/// a message that says how to install it.
pub fn find_library(
    lib: &PackagedLibrary,
    explicit: Option<PathBuf>,
    python: &str,
) -> Result<PathBuf, String> {
    let PackagedLibrary {
        variable,
        package,
        file,
        wheel,
    } = lib;
    let (folder, prefix) = file.rsplit_once('/').unwrap_or(("", file));
    let install = format!(
        "install it with `{python} -m pip install {wheel}`, or set {variable} to its {prefix}"
    );
    if let Some(p) = explicit {
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!(
                "{variable} names {}, which is not a file; {install}",
                p.display()
            ))
        };
    }
    let dir = package_dir(python, package).map_err(|e| match e {
        // Installing into a Python that does not answer would not help.
        PackageError::Python(e) => format!(
            "{e}; set CLEAVE_PYTHON to a Python with the {wheel} wheel, or {variable} to \
             its {prefix}"
        ),
        PackageError::Package(e) => format!("{e}; {install}"),
    })?;
    let folder = Path::new(&dir).join(folder);
    first_with_prefix(&folder, prefix).ok_or_else(|| {
        format!(
            "{} is missing (not the {wheel} wheel?); {install}",
            folder.join(prefix).display()
        )
    })
}

/// [`find_library`] from the environment and the Python cleave asks.
pub fn locate_library(lib: &PackagedLibrary) -> Result<PathBuf, String> {
    find_library(
        lib,
        std::env::var_os(lib.variable).map(PathBuf::from),
        &python(),
    )
}

/// The first file, by name, in `dir` whose name starts with `prefix` (a versioned library:
/// `libonnxruntime.so.1.31.1`, `libopenvino_c.so.2641`).
pub fn first_with_prefix(dir: &Path, prefix: &str) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .collect();
    found.sort();
    found.into_iter().next()
}

/// The first of `symbols` that the library at `path` does not export, if any: checked before
/// a binding that panics on a missing function is given the library.
pub fn missing_symbol(path: &Path, symbols: &[&str]) -> Result<Option<String>, String> {
    // SAFETY: the library is one the user named or whose package they installed; opening it
    // runs its initialisers, as the engine's own load would.
    let lib = unsafe { libloading::Library::new(path) }
        .map_err(|e| format!("{}: cannot be loaded ({e})", path.display()))?;
    for s in symbols {
        // SAFETY: only the symbol's presence is read; it is never called through this type.
        let found = unsafe { lib.get::<*const ()>(s.as_bytes()) };
        if found.is_err() {
            return Ok(Some((*s).to_string()));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_code_sees_nothing_of_the_working_folder() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("planted_here.py"), "x = 1\n").unwrap();
        let program = "from __future__ import annotations\n\
                       import importlib.util as u\n\
                       print(u.find_spec('planted_here') is None)";
        let out = run_code(python(), program)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "True");
        // The same program without isolation finds it: the check above can fail.
        let open = Command::new(python())
            .arg("-c")
            .arg(program)
            .current_dir(dir.path())
            .env_remove("PYTHONSAFEPATH")
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&open.stdout).trim(), "False");
    }

    /// An executable shell script at `dir/name`.
    #[cfg(unix)]
    fn script(dir: &Path, name: &str, body: &str) -> String {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p.display().to_string()
    }

    #[cfg(unix)]
    #[test]
    fn a_python_that_does_not_answer_is_given_up_on() {
        let dir = tempfile::tempdir().unwrap();
        // The shell's child holds the pipes too: the whole group is ended.
        let sleeper = script(dir.path(), "sleeper", "sleep 600");
        let start = std::time::Instant::now();
        let e = package_dir_within(&sleeper, "onnxruntime", Duration::from_secs(1)).unwrap_err();
        assert_eq!(
            e,
            PackageError::Python(format!("{sleeper}: did not answer within 1 s"))
        );
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{:?}",
            start.elapsed()
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_program_that_is_not_python_is_named_as_such() {
        let dir = tempfile::tempdir().unwrap();
        let fails = script(dir.path(), "fails", "echo 'usage: fails [x]' >&2; exit 3");
        assert_eq!(
            package_dir_within(&fails, "onnxruntime", PROBE_TIMEOUT).unwrap_err(),
            PackageError::Python(format!(
                "{fails}: is not a Python (exit code 3: usage: fails [x])"
            ))
        );
        let silent = script(dir.path(), "silent", "exit 0");
        assert_eq!(
            package_dir_within(&silent, "onnxruntime", PROBE_TIMEOUT).unwrap_err(),
            PackageError::Python(format!(
                "{silent}: is not a Python (it ran, but did not answer cleave's probe)"
            ))
        );
        let text = dir.path().join("text.py");
        std::fs::write(&text, "print('hi')\n").unwrap();
        let e = package_dir_within(&text.display().to_string(), "onnxruntime", PROBE_TIMEOUT)
            .unwrap_err();
        assert!(
            matches!(&e, PackageError::Python(m) if m.starts_with("cannot run ")),
            "{e:?}"
        );
        // A real Python without the package says so.
        assert_eq!(
            package_dir_within(&python(), "no_such_package_here", PROBE_TIMEOUT).unwrap_err(),
            PackageError::Package(format!("{} has no no_such_package_here package", python()))
        );
        let site = package_dir_within(&python(), "json", PROBE_TIMEOUT).unwrap();
        assert!(Path::new(&site).join("__init__.py").is_file(), "{site}");
    }

    #[test]
    fn relative_pythonpath_entries_are_dropped() {
        let list = std::env::join_paths(["rel", "/abs/site", ".", "/other"]).unwrap();
        assert_eq!(
            absolute_entries(&list),
            Some(std::env::join_paths(["/abs/site", "/other"]).unwrap())
        );
        assert_eq!(absolute_entries(OsStr::new("rel:.")), None);
    }

    #[test]
    fn a_library_without_the_symbols_is_named() {
        let libc = ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/libc.so.6"]
            .iter()
            .map(Path::new)
            .find(|p| p.is_file());
        let Some(libc) = libc else {
            eprintln!("skipped: no libc.so.6 at the usual paths");
            return;
        };
        assert_eq!(
            missing_symbol(libc, &["malloc", "ov_core_create"]).unwrap(),
            Some("ov_core_create".into())
        );
        assert_eq!(missing_symbol(libc, &["malloc"]).unwrap(), None);
        let e = missing_symbol(Path::new("/nonexistent/lib.so"), &["x"]).unwrap_err();
        assert!(e.contains("/nonexistent/lib.so: cannot be loaded"), "{e}");
    }
}
