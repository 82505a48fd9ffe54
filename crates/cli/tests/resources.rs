//! What a file or a flag can make cleave ask of the machine: a declared input of 4 TiB and a
//! billion requests are refused in one line before anything is allocated (issue 68: an
//! allocator abort with a backtrace, exit 134), and a run interrupted by a signal leaves no
//! private temporary folder behind (issue 68: `verify` left 549 MB on Ctrl-C).

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use prost::Message;

/// `y = Relu(x)` on float32 `dims`, written as `name` in `dir`.
fn relu(dir: &Path, name: &str, dims: &[i64]) -> PathBuf {
    let mut m = model(vec![node("r", "Relu", &["x"], &["y"])], vec![], "y");
    let g = m.graph.as_mut().unwrap();
    g.input = vec![float_input("x", dims)];
    g.output = vec![float_input("y", dims)];
    write(dir, name, &m.encode_to_vec())
}

/// [`relu`] partitioned on the cpu into `dir/out`: the model and its connection file.
fn partitioned(dir: &Path, stem: &str, dims: &[i64]) -> (PathBuf, PathBuf) {
    let m = relu(dir, &format!("{stem}.onnx"), dims);
    let out = dir.join("out");
    ok(&cleave(&[
        os("partition"),
        m.as_os_str(),
        os("--devices"),
        os("cpu"),
        os("-o"),
        out.as_os_str(),
    ]));
    (m, out.join(format!("{stem}.conn.json")))
}

#[test]
fn a_declared_input_past_memory_is_refused_naming_it_before_any_allocation() {
    let tmp = tempfile::tempdir().unwrap();
    let (m, conn) = partitioned(tmp.path(), "huge", &[1 << 20, 1 << 20]);
    for args in [
        vec![os("run"), conn.as_os_str()],
        vec![os("verify"), m.as_os_str(), conn.as_os_str()],
    ] {
        let o = cleave(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(
            err.lines()
                .filter(|l| l.starts_with("cleave: error:"))
                .count(),
            1,
            "{err}"
        );
        assert!(
            err.contains("input 'x': shape [1048576, 1048576] of float32 is 4398046511104 bytes, more than this machine's"),
            "{err}"
        );
        assert!(
            !err.contains("memory allocation") && !err.contains("panicked"),
            "{err}"
        );
    }
}

#[test]
fn a_billion_requests_are_refused_naming_the_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, conn) = partitioned(tmp.path(), "small", &[1, 4]);
    for cmd in ["run", "bench"] {
        let o = cleave(&[
            os(cmd),
            conn.as_os_str(),
            os("--requests"),
            os("1000000000"),
        ]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {err}");
        assert!(
            err.contains("--requests 1000000000: that many copies of the inputs are"),
            "{cmd}: {err}"
        );
    }
    // A sane count still runs.
    let got = tmp.path().join("got");
    ok(&cleave(&[
        os("run"),
        conn.as_os_str(),
        os("--requests"),
        os("4"),
        os("-o"),
        got.as_os_str(),
    ]));
}

#[test]
fn an_interrupted_run_removes_its_temporary_folder() {
    let tmpdir = tempfile::tempdir().unwrap();
    // SIGTERM: SIGINT is the same path, but a test run in a background job inherits it
    // ignored, and cleave leaves an ignored signal ignored.
    for signal in ["TERM"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cleave"))
            .args([os("bench"), example("tiny_cnn.onnx").as_os_str()])
            .args(["--devices", "cpu", "--runs", "1000000"])
            .env("TMPDIR", tmpdir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Until bench has made its folder and works in it.
        let start = Instant::now();
        let made = || std::fs::read_dir(tmpdir.path()).unwrap().count() > 0;
        while !made() && start.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(made(), "bench made no folder in TMPDIR");
        std::thread::sleep(Duration::from_millis(300));
        let sent = Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if start.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                panic!("{signal} did not end bench");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let want = 15;
        assert_eq!(status.signal(), Some(want), "{signal}: {status}");
        let left: Vec<_> = std::fs::read_dir(tmpdir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert!(left.is_empty(), "{signal} left {left:?}");
    }
}
