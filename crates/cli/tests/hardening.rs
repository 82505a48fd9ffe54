//! Nothing from the working folder runs: users run cleave inside folders of downloaded models,
//! so a planted `onnxruntime/` package, `json.py` or `numpy.py` there must neither be imported
//! by the Python cleave asks nor hand it a library to load. And an engine library that lacks
//! the functions cleave calls is one error line, never a panic.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;

fn cleave_in(dir: &Path, args: &[&std::ffi::OsStr], env: &[(&str, &Path)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cleave"));
    c.args(args).current_dir(dir).env_remove("CLEAVE_PYTHON");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn python_has(module: &str) -> bool {
    python_has_with(module, &[])
}

/// Whether python3 imports `module` with `env` set (a HOME hides `pip --user` installs).
fn python_has_with(module: &str, env: &[(&str, &Path)]) -> bool {
    let mut c = Command::new("python3");
    c.args(["-c", &format!("import {module}")]).current_dir("/");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().is_ok_and(|o| o.status.success())
}

/// The bundled example partitioned into `dir/parts`; its conn.json.
fn example_parts(dir: &Path) -> (PathBuf, PathBuf) {
    let model = repo().join("examples/tiny_cnn.onnx");
    let out = dir.join("parts");
    let o = cleave(&[
        os("partition"),
        model.as_os_str(),
        os("--rules"),
        repo().join("examples/tiny_cnn.part").as_os_str(),
        os("-o"),
        out.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    (model, out.join("tiny_cnn.conn.json"))
}

/// A Python file that leaves `marker` behind when it is imported.
fn planted(path: &Path, marker: &Path) {
    std::fs::write(
        path,
        format!(
            "open({:?}, 'w').write('ran')\nraise SystemExit(0)\n",
            marker.display().to_string()
        ),
    )
    .unwrap();
}

#[test]
fn a_planted_onnxruntime_package_hands_cleave_no_library() {
    let tmp = tempfile::tempdir().unwrap();
    let (model, conn) = example_parts(tmp.path());
    let folder = tmp.path().join("downloads");
    let capi = folder.join("onnxruntime/capi");
    std::fs::create_dir_all(&capi).unwrap();
    std::fs::write(folder.join("onnxruntime/__init__.py"), "").unwrap();
    let fake = capi.join("libonnxruntime.so.1.31.1");
    std::fs::write(&fake, b"not a library").unwrap();
    // An empty HOME: no library cached under ~/.cache/cleave/ort, so the Python is asked.
    let home = tmp.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_cleave"));
    let o = c
        .args([
            os("verify"),
            model.as_os_str(),
            conn.as_os_str(),
            os("--reference"),
            os("ort"),
        ])
        .current_dir(&folder)
        .env_remove("ORT_DYLIB_PATH")
        .env_remove("CLEAVE_PYTHON")
        .env("HOME", &home)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(
        !err.contains(&fake.display().to_string()) && !err.contains("downloads/onnxruntime"),
        "cleave took the working folder's onnxruntime: {err}"
    );
    if python_has_with("onnxruntime", &[("HOME", &home)]) {
        // The installed package's library, found as if the planted folder were not there.
        assert!(o.status.success(), "{err}");
    } else {
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains("pip install onnxruntime"), "{err}");
    }
}

#[test]
fn a_planted_numpy_does_not_run_when_serve_exports() {
    if !python_has("numpy") {
        eprintln!("skipped: python3 has no numpy");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (_, conn) = example_parts(tmp.path());
    let folder = tmp.path().join("downloads");
    std::fs::create_dir(&folder).unwrap();
    let marker = tmp.path().join("numpy-ran");
    planted(&folder.join("numpy.py"), &marker);
    let app = tmp.path().join("app");
    let o = cleave_in(
        &folder,
        &[
            os("serve"),
            conn.as_os_str(),
            os("--export"),
            app.as_os_str(),
        ],
        &[],
    );
    assert!(!marker.exists(), "the working folder's numpy.py ran");
    assert!(o.status.success(), "{}", stderr(&o));
    // The exported conn.json names the source from its own folder, not by this machine's path.
    let exported: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(app.join("tiny_cnn.conn.json")).unwrap())
            .unwrap();
    let source = exported["source"]["file"].as_str().unwrap_or_default();
    assert!(
        source.ends_with("tiny_cnn.onnx") && Path::new(source).is_relative(),
        "{source}"
    );
    assert!(
        app.join(source).is_file(),
        "{source} is not the source from the app's folder"
    );
}

#[test]
fn a_planted_json_does_not_answer_for_openvino_nor_poison_its_cache() {
    if !python_has("openvino") {
        assert!(
            std::env::var_os("CLEAVE_REQUIRE_OPENVINO").is_none(),
            "CLEAVE_REQUIRE_OPENVINO is set but python3 has no openvino package"
        );
        eprintln!("skipped: python3 has no openvino package");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let folder = tmp.path().join("downloads");
    std::fs::create_dir(&folder).unwrap();
    let marker = tmp.path().join("json-ran");
    planted(&folder.join("json.py"), &marker);
    let cache = tmp.path().join("cache");
    let model = repo().join("examples/tiny_cnn.onnx");
    let o = cleave_in(
        &folder,
        &[
            os("query"),
            model.as_os_str(),
            os("--devices"),
            os("ov:CPU,cpu"),
            os("--json"),
        ],
        &[("CLEAVE_CACHE", &cache)],
    );
    assert!(!marker.exists(), "the working folder's json.py ran");
    assert!(o.status.success(), "{}", stderr(&o));
    // What was cached is OpenVINO's own answer for the CPU.
    let cached: Vec<PathBuf> = std::fs::read_dir(cache.join("openvino"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(cached.len(), 1, "{cached:?}");
    let answer: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cached[0]).unwrap()).unwrap();
    assert_eq!(answer["device"], "CPU");
    assert!(answer["tensors"].as_object().is_some_and(|t| !t.is_empty()));
}

#[test]
fn an_answer_for_another_device_is_not_cached() {
    if !python_has("openvino") {
        eprintln!("skipped: python3 has no openvino package");
        return;
    }
    // A Python that answers for the wrong device: used (it is the user's Python), never kept.
    let tmp = tempfile::tempdir().unwrap();
    let fake = tmp.path().join("python3");
    let real = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    let real = String::from_utf8_lossy(&real.stdout).trim().to_string();
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\n\"{real}\" \"$@\" | sed 's/\"device\": \"CPU\"/\"device\": \"GPU\"/'\n"
        ),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let cache = tmp.path().join("cache");
    let model = repo().join("examples/tiny_cnn.onnx");
    let o = cleave_in(
        tmp.path(),
        &[
            os("query"),
            model.as_os_str(),
            os("--devices"),
            os("ov:CPU,cpu"),
        ],
        &[("CLEAVE_CACHE", &cache), ("CLEAVE_PYTHON", &fake)],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let kept = std::fs::read_dir(cache.join("openvino")).map_or(0, |d| d.count());
    assert_eq!(kept, 0, "an answer for GPU was cached for CPU");
}

/// A shared library with none of any engine's functions.
fn foreign_library() -> Option<PathBuf> {
    [
        "/lib/x86_64-linux-gnu/libz.so.1",
        "/usr/lib/x86_64-linux-gnu/libz.so.1",
        "/lib/x86_64-linux-gnu/libc.so.6",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
}

#[test]
fn an_engine_library_without_its_functions_is_one_line_and_exit_2() {
    let Some(lib) = foreign_library() else {
        eprintln!("skipped: no system library to stand in for an engine's");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let (model, conn) = example_parts(tmp.path());
    // LiteRT's own loader checks every function it binds (litert_ffi.rs, unit-tested there).
    for (var, engine) in [("OPENVINO_LIB", "openvino"), ("ORT_DYLIB_PATH", "ort")] {
        let o = cleave_in(
            tmp.path(),
            &[
                os("verify"),
                model.as_os_str(),
                conn.as_os_str(),
                os("--reference"),
                os(engine),
            ],
            &[(var, &lib)],
        );
        eprintln!("{var}: {}", stderr(&o).trim());
        assert_bad_input(&o, &lib, "does not export");
    }
}

#[test]
fn a_cleave_python_that_is_not_python_is_named_not_onnxruntime() {
    let tmp = tempfile::tempdir().unwrap();
    let (model, conn) = example_parts(tmp.path());
    let fake = tmp.path().join("not-python");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho 'not-python: no such option -c' >&2\nexit 5\n",
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // An empty HOME: no library cached under ~/.cache/cleave/ort, so the Python is asked.
    let home = tmp.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_cleave"))
        .args([
            os("verify"),
            model.as_os_str(),
            conn.as_os_str(),
            os("--reference"),
            os("ort"),
        ])
        .current_dir(tmp.path())
        .env_remove("ORT_DYLIB_PATH")
        .env("CLEAVE_PYTHON", &fake)
        .env("HOME", &home)
        .output()
        .unwrap();
    assert_bad_input(
        &o,
        &fake,
        &format!(
            "CLEAVE_PYTHON={}: is not a Python (exit code 5: not-python: no such option -c), \
             so cleave cannot look for the onnxruntime package",
            fake.display()
        ),
    );
    assert!(
        !stderr(&o).contains("pip install onnxruntime"),
        "{}",
        stderr(&o)
    );
}

/// Served parts run on the cleave package's extension: a Python without it is refused before
/// any cluster is asked, naming the install.
#[test]
fn serve_names_the_install_a_python_without_the_cleave_package_lacks() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("p");
    ok(&cleave(&[
        os("partition"),
        repo().join("examples/tiny_cnn.onnx").as_os_str(),
        os("--rules"),
        repo().join("examples/tiny_cnn.part").as_os_str(),
        os("-o"),
        out.as_os_str(),
    ]));
    // The system's Python without its site-packages: no Ray, no cleave.
    let bare = tmp.path().join("bare-python3");
    std::fs::write(&bare, "#!/bin/sh\nexec python3 -S \"$@\"\n").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&bare, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let o = Command::new(env!("CARGO_BIN_EXE_cleave"))
        .args([
            os("serve"),
            out.join("tiny_cnn.conn.json").as_os_str(),
            os("--ray"),
            os("127.0.0.1:9"),
        ])
        .env("CLEAVE_PYTHON", &bare)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cleave._cleave") && err.contains("pip install 'cleave-nn[ray]'"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
