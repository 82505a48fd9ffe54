//! Serving a written partition on Ray: the parts as Ray actors joined by a Ray Compiled Graph
//! behind a Ray Serve ingress (or one Serve deployment per part, chained by deployment
//! handles). The application is the Python package's `cleave.serve` (Ray's API is
//! Python), carried inside the binary as those same files; this module checks the partition,
//! writes the package out (as `ray_app`) and runs it.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use cleave_workdir::{ConnFile, ConnModel};

use crate::Error;

/// The Ray Serve application and its command line (`serve`, `export`, `bench`, `verify`): the
/// Python package's `cleave.serve`, file by file, written out as the package `ray_app` to run.
pub const RAY_APP: &[(&str, &str)] = &[
    (
        "__init__.py",
        include_str!("../../../../python/cleave/serve/__init__.py"),
    ),
    (
        "__main__.py",
        include_str!("../../../../python/cleave/serve/__main__.py"),
    ),
    (
        "actors.py",
        include_str!("../../../../python/cleave/serve/actors.py"),
    ),
    (
        "checks.py",
        include_str!("../../../../python/cleave/serve/checks.py"),
    ),
    (
        "cli.py",
        include_str!("../../../../python/cleave/serve/cli.py"),
    ),
    (
        "cluster.py",
        include_str!("../../../../python/cleave/serve/cluster.py"),
    ),
    (
        "compiled.py",
        include_str!("../../../../python/cleave/serve/compiled.py"),
    ),
    (
        "completions.py",
        include_str!("../../../../python/cleave/serve/completions.py"),
    ),
    (
        "decoder_app.py",
        include_str!("../../../../python/cleave/serve/decoder_app.py"),
    ),
    (
        "flags.json",
        include_str!("../../../../python/cleave/serve/flags.json"),
    ),
    (
        "generation.py",
        include_str!("../../../../python/cleave/serve/generation.py"),
    ),
    (
        "handles.py",
        include_str!("../../../../python/cleave/serve/handles.py"),
    ),
    (
        "ingress.py",
        include_str!("../../../../python/cleave/serve/ingress.py"),
    ),
    (
        "listener.py",
        include_str!("../../../../python/cleave/serve/listener.py"),
    ),
    (
        "partition.py",
        include_str!("../../../../python/cleave/serve/partition.py"),
    ),
    (
        "ray_token.py",
        include_str!("../../../../python/cleave/serve/ray_token.py"),
    ),
    (
        "report.py",
        include_str!("../../../../python/cleave/serve/report.py"),
    ),
    (
        "runtime.py",
        include_str!("../../../../python/cleave/serve/runtime.py"),
    ),
    (
        "wire.py",
        include_str!("../../../../python/cleave/serve/wire.py"),
    ),
];

/// The Python interpreter to run it with (`$CLEAVE_PYTHON`, else `python3` from an absolute
/// `PATH` folder).
fn python() -> OsString {
    cleave_engines::python().into()
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
    for (k, p) in parsed.parts.iter().enumerate() {
        let format = part_format(p);
        if !matches!(format.as_str(), "onnx" | "tflite" | "circle") {
            let format = if format.is_empty() {
                "unknown-format"
            } else {
                &format
            };
            return Err(Error::argument(
                conn,
                format!(
                    "part {} ({}) is a {format} part, and no engine on Ray serves it (ONNX Runtime and OpenVINO read ONNX, LiteRT TFLite, onert circle)",
                    k + 1,
                    p.file
                ),
            ));
        }
        // A served part's engine runs inside a Ray actor: what it would trust of the file
        // wrongly is refused here, in one line, instead of crashing the actor on each request.
        if matches!(format.as_str(), "tflite" | "circle") {
            let f = dir.join(&p.file);
            let needs = if format == "circle" {
                cleave_tflite::EngineNeeds::ONERT
            } else {
                cleave_tflite::EngineNeeds::LITERT
            };
            let model = cleave_tflite::FlatModel::load(&f).map_err(Error::from)?;
            cleave_tflite::check_for_engine(&model, needs).map_err(|m| Error::model(&f, m))?;
        }
    }
    Ok(parsed)
}

/// What the writer recorded as the part's format, else its file's extension (older files).
fn part_format(p: &ConnModel) -> String {
    cleave_runtime::engine::part_format(Path::new(&p.file), p.format.as_deref())
}

/// The Python packages the application imports to serve `conn`'s parts: Ray and numpy, plus
/// each part format's engine (for circle, onert where `on_onert`, else LiteRT on the parts
/// converted to TFLite).
pub fn packages_for(conn: &ConnFile, on_onert: bool) -> Vec<&'static str> {
    // The parts run on cleave's runtime, through the installed package's extension.
    let mut need = vec!["ray", "ray.serve", "numpy", "cleave._cleave"];
    for p in &conn.parts {
        let engine = match part_format(p).as_str() {
            "circle" if on_onert => "onert",
            "tflite" | "circle" => "ai_edge_litert",
            _ if p
                .engine
                .as_deref()
                .is_some_and(|e| e.starts_with("openvino")) =>
            {
                "openvino"
            }
            // ONNX Runtime where its package is, else tract, in the extension.
            _ => continue,
        };
        if !need.contains(&engine) {
            need.push(engine);
        }
    }
    need
}

/// Checks that the interpreter can import every module of `need`, naming the missing ones and
/// the install that brings them.
fn check_python(need: &[&str]) -> Result<(), Error> {
    // One interpreter start for all: it prints the modules it could not import.
    let probe = format!(
        "import importlib, sys\nmissing = []\nfor m in {need:?}:\n    try:\n        importlib.import_module(m)\n    except Exception:\n        missing.append(m)\nprint(' '.join(missing))\nsys.exit(1 if missing else 0)"
    );
    let out = cleave_engines::python_code(python(), &probe)
        .output()
        .map_err(|e| {
            Error::usage(format!(
                "cannot run {}: {e} (set CLEAVE_PYTHON to the Python that has Ray)",
                python().to_string_lossy()
            ))
        })?;
    if !out.status.success() {
        let missing = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let missing: Vec<&str> = missing.split_whitespace().collect();
        let fix = if missing.contains(&"onert") {
            "pip install 'cleave-nn[ray,onert]'"
        } else if missing.contains(&"ai_edge_litert") {
            "pip install 'cleave-nn[ray,litert]'"
        } else if missing.contains(&"openvino") {
            "pip install 'cleave-nn[ray]' openvino"
        } else {
            "pip install 'cleave-nn[ray]'"
        };
        let shown = if missing.is_empty() {
            need.join(", ")
        } else {
            missing.join(", ")
        };
        return Err(Error::usage(format!(
            "{} cannot import {shown}: {fix} (or set CLEAVE_PYTHON to a Python that has them)",
            python().to_string_lossy()
        )));
    }
    Ok(())
}

/// How many of the partition's parts are circle files, which the application serves on onert,
/// or converted to TFLite where the onert package is missing.
pub fn circle_parts(conn: &ConnFile) -> usize {
    conn.parts
        .iter()
        .filter(|p| part_format(p) == "circle")
        .count()
}

/// The most bytes a part may have to travel inside its deployment (the application's
/// `INLINE_MAX_BYTES`); a larger one is opened by path on the node.
const INLINE_MAX_BYTES: u64 = 64 << 20;

/// The partition as the application serves it: `conn_path` itself, or where it has circle
/// parts, a conn.json in `dir` naming every part by its absolute path, the circle ones
/// converted to TFLite there unless they run on onert (`on_onert`). A circle source is
/// converted for `verify` and `bench`, whose reference run is LiteRT's. A converted part past `INLINE_MAX_BYTES` would be read from `dir` on
/// the node, which a detached deployment outlives: refused then. `sources` holds the sources
/// converted so far, so that the cuts of one circle model benched together share one.
fn as_served(
    conn_path: &Path,
    conn: &ConnFile,
    dir: &Path,
    command: &str,
    detached: bool,
    on_onert: bool,
    sources: &mut HashMap<PathBuf, PathBuf>,
) -> Result<PathBuf, Error> {
    if circle_parts(conn) == 0 {
        return Ok(conn_path.to_path_buf());
    }
    let base = conn_path.parent().unwrap_or(Path::new("."));
    let to_tflite = |file: &str| -> Result<PathBuf, Error> {
        let src = base.join(file);
        let name = Path::new(file).with_extension("tflite");
        let dst = dir.join(name.file_name().unwrap_or(name.as_os_str()));
        crate::convert::convert(&src, &dst, None)?;
        Ok(dst)
    };
    let mut served = conn.clone();
    for p in &mut served.parts {
        if part_format(p) == "circle" && !on_onert {
            let dst = to_tflite(&p.file)?;
            let size = std::fs::metadata(&dst).map_or(0, |m| m.len());
            if detached && size > INLINE_MAX_BYTES {
                return Err(Error::argument(
                    conn_path,
                    format!(
                        "{} converts to {size} bytes of TFLite, more than a detached deployment carries ({INLINE_MAX_BYTES}): convert the parts with `cleave convert` and serve that partition",
                        p.file
                    ),
                ));
            }
            p.file = dst.display().to_string();
            p.format = Some("tflite".into());
        } else {
            p.file = base.join(&p.file).display().to_string();
        }
    }
    let source_is_circle = part_format(&served.source) == "circle";
    if matches!(command, "verify" | "bench") && source_is_circle && !served.source.file.is_empty() {
        let original = base.join(&served.source.file);
        let converted = match sources.get(&original) {
            Some(done) => done.clone(),
            None => {
                let done = to_tflite(&served.source.file)?;
                sources.insert(original, done.clone());
                done
            }
        };
        served.source.file = converted.display().to_string();
    } else if !served.source.file.is_empty() {
        served.source.file = base.join(&served.source.file).display().to_string();
    }
    let out = dir.join(conn_path.file_name().unwrap_or(conn_path.as_os_str()));
    cleave_workdir::write_private(&out, served.to_json().as_bytes())
        .map_err(|e| Error::io(&out, "cannot write", e))?;
    cleave_workdir::seal(dir).map_err(|e| Error::io(dir, "cannot make private", e))?;
    Ok(out)
}

/// The application's command line, ready to run: the interpreter checked, the script
/// written, circle parts converted (`converted` of them).
pub struct RayApp {
    dir: tempfile::TempDir,
    args: Vec<OsString>,
    pub converted: usize,
    /// Circle parts served on onert as they are.
    pub on_onert: usize,
}

/// Prepares the application's command line `args` (its first the subcommand, then one
/// conn.json per partition) for the partitions `conns`, each path with its conn.json as
/// `check_served` read it; the application gets each partition as `as_served` makes it.
pub fn ray_app(conns: &[(&Path, &ConnFile)], args: &[OsString]) -> Result<RayApp, Error> {
    let needs_cluster = args.first().is_some_and(|a| a != "export");
    let command = args.first().and_then(|a| a.to_str()).unwrap_or_default();
    let circle: usize = conns.iter().map(|(_, c)| circle_parts(c)).sum();
    // Circle parts run on onert where this Python has it (the nodes need it then too); an
    // exported application, bound for nodes unknown here, holds them converted to TFLite.
    let on_onert = needs_cluster && circle > 0 && check_python(&["onert"]).is_ok();
    if needs_cluster {
        let mut need: Vec<&str> = Vec::new();
        for (_, conn) in conns {
            for p in packages_for(conn, on_onert) {
                if !need.contains(&p) {
                    need.push(p);
                }
            }
            let circle_source = part_format(&conn.source) == "circle";
            if matches!(command, "verify" | "bench")
                && circle_source
                && !need.contains(&"ai_edge_litert")
            {
                need.push("ai_edge_litert");
            }
        }
        check_python(&need)?;
    } else {
        check_python(&["numpy"])?;
    }
    let dir = cleave_workdir::private_tempdir("cleave-serve-")
        .map_err(|e| Error::usage(format!("no temporary folder: {e}")))?;
    let package: PathBuf = dir.path().join("ray_app");
    std::fs::create_dir(&package).map_err(|e| Error::io(&package, "cannot create", e))?;
    for (name, text) in RAY_APP {
        let file = package.join(name);
        cleave_workdir::write_private(&file, text.as_bytes())
            .map_err(|e| Error::io(&file, "cannot write", e))?;
    }
    cleave_workdir::seal(dir.path()).map_err(|e| Error::io(&package, "cannot make private", e))?;
    let detached = args.iter().any(|a| a == "--detach");
    let mut args = args.to_vec();
    let mut sources = HashMap::new();
    for (i, (conn_path, conn)) in conns.iter().enumerate() {
        // One folder per partition: the cuts of one model share their file names.
        let own = dir.path().join(format!("partition{i}"));
        if circle_parts(conn) > 0 {
            std::fs::create_dir(&own).map_err(|e| Error::io(&own, "cannot create", e))?;
        }
        let served = as_served(
            conn_path,
            conn,
            &own,
            command,
            detached,
            on_onert,
            &mut sources,
        )?;
        if let Some(a) = args.get_mut(i + 1) {
            *a = served.into_os_string();
        }
    }
    Ok(RayApp {
        dir,
        args,
        converted: if on_onert { 0 } else { circle },
        on_onert: if on_onert { circle } else { 0 },
    })
}

impl RayApp {
    /// Runs it, standard streams passed through; returns its exit code.
    pub fn run(self) -> Result<i32, Error> {
        let status = cleave_engines::isolated_python(python())
            .arg(self.dir.path().join("ray_app"))
            .args(&self.args)
            .status()
            .map_err(|e| Error::usage(format!("cannot run {}: {e}", python().to_string_lossy())))?;
        // A signal (Ctrl-C on `serve`) has no code: report it as an interrupted run.
        Ok(status.code().unwrap_or(130))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_binary_carries_every_module_of_the_serving_package() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/cleave/serve");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".py") || n.ends_with(".json"))
            .collect();
        on_disk.sort();
        let carried: Vec<&str> = RAY_APP.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            carried, on_disk,
            "list every module of python/cleave/serve in RAY_APP"
        );
        for (name, text) in RAY_APP {
            assert_eq!(
                *text,
                std::fs::read_to_string(dir.join(name)).unwrap(),
                "{name}"
            );
        }
    }

    fn served(dir: &Path, conn_path: &Path, command: &str, on_onert: bool) -> ConnFile {
        let conn = check_served(conn_path).unwrap();
        let out = as_served(
            conn_path,
            &conn,
            dir,
            command,
            false,
            on_onert,
            &mut HashMap::new(),
        )
        .unwrap();
        ConnFile::from_json(&std::fs::read_to_string(out).unwrap()).unwrap()
    }

    #[test]
    fn circle_parts_stay_circle_on_onert_and_are_converted_for_litert() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(
            tmp.path().join("norm.circle"),
            cleave_testdata::synth::instance_norm_circle(),
        )
        .unwrap();
        let one = |file: &str| ConnModel {
            file: file.into(),
            inputs: vec!["Input".into()],
            outputs: vec!["Output".into()],
            format: Some("circle".into()),
            ..ConnModel::default()
        };
        let conn = ConnFile {
            source: one("norm.circle"),
            parts: vec![one("norm.circle")],
        };
        let conn_path = tmp.path().join("norm.conn.json");
        std::fs::write(&conn_path, conn.to_json()).unwrap();
        let head = |f: &str| std::fs::read(f).unwrap()[4..8].to_vec();

        let dir = tempfile::tempdir().unwrap();
        let s = served(dir.path(), &conn_path, "serve", true);
        assert_eq!(s.parts[0].format.as_deref(), Some("circle"));
        assert_eq!(head(&s.parts[0].file), b"CIR0");
        assert!(Path::new(&s.parts[0].file).is_absolute());

        // verify's reference is LiteRT's: the source is converted, the parts are not.
        let dir = tempfile::tempdir().unwrap();
        let s = served(dir.path(), &conn_path, "verify", true);
        assert_eq!(head(&s.parts[0].file), b"CIR0");
        assert_eq!(head(&s.source.file), b"TFL3");

        let dir = tempfile::tempdir().unwrap();
        let s = served(dir.path(), &conn_path, "serve", false);
        assert_eq!(s.parts[0].format.as_deref(), Some("tflite"));
        assert_eq!(head(&s.parts[0].file), b"TFL3");
    }
}
