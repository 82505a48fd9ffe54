//! OpenVINO devices (`--devices ov:CPU`): what each runs is OpenVINO's own `query_model`
//! answer, node by node; their parts run on OpenVINO and verify against ONNX Runtime. Where
//! OpenVINO is not installed the tests say so and pass, unless CLEAVE_REQUIRE_OPENVINO is set
//! (the test script installs it and sets it).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cleave::onnx::proto::{tensor_proto, TensorProto};
use common::*;
use prost::Message;

fn openvino_installed() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import openvino"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CLEAVE_REQUIRE_OPENVINO").is_none(),
            "CLEAVE_REQUIRE_OPENVINO is set but python3 has no openvino package"
        );
        eprintln!("skipped: python3 has no openvino package (pip install openvino)");
    }
    ok
}

/// `cleave ARGS` with its OpenVINO answers cached under `cache`.
fn run(cache: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cleave"));
    c.args(args).env("CLEAVE_CACHE", cache);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn weights(name: &str, dims: &[i64], seed: u64) -> TensorProto {
    let n: i64 = dims.iter().product();
    let mut rng = Rng::new(seed);
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(tensor_proto::DataType::Float as i32),
        float_data: (0..n)
            .map(|_| rng.below(2001) as f32 / 1000.0 - 1.0)
            .collect(),
        ..Default::default()
    }
}

/// Conv → Relu → Det → Neg → Mul: ONNX Runtime runs every node, OpenVINO's ONNX front-end
/// has no Det, so it cannot read the whole model and is asked node by node.
fn det_model(dir: &Path) -> PathBuf {
    let mut conv = node("conv", "Conv", &["x", "w", "b"], &["c"]);
    conv.attribute.push(cleave::onnx::proto::AttributeProto {
        name: Some("pads".into()),
        r#type: Some(cleave::onnx::proto::attribute_proto::AttributeType::Ints as i32),
        ints: vec![1, 1, 1, 1],
        ..Default::default()
    });
    let mut m = model(
        vec![
            conv,
            node("relu", "Relu", &["c"], &["r"]),
            node("det", "Det", &["r"], &["d"]),
            node("neg", "Neg", &["d"], &["n"]),
            node("square", "Mul", &["n", "n"], &["y"]),
        ],
        vec![weights("w", &[3, 3, 3, 3], 7), weights("b", &[3], 11)],
        "y",
    );
    let g = m.graph.as_mut().unwrap();
    g.input = vec![float_input("x", &[1, 3, 4, 4])];
    g.output = vec![float_input("y", &[1, 3])];
    write(dir, "det.onnx", &m.encode_to_vec())
}

#[test]
fn openvino_devices_run_what_query_model_answers_and_their_parts_verify() {
    if !openvino_installed() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let m = det_model(dir.path());
    let ms = m.to_str().unwrap();

    // OpenVINO alone cannot run Det: one line naming the node, the answer and a fallback.
    let o = run(&cache, &["query", ms, "--devices", "ov:CPU"], &[]);
    assert_bad_input(&o, &m, "unsupported layer type Det");
    let err = stderr(&o);
    assert!(err.contains("[OV-CPU]") && err.contains("det"), "{err}");
    assert!(err.contains("No conversion rule found"), "{err}");
    assert!(err.contains("--devices ov-CPU,cpu"), "{err}");

    // With ONNX Runtime behind it, Det alone falls back.
    let table = ok(&run(&cache, &["query", ms, "--devices", "ov:CPU,ort"], &[]));
    let device_of = |node: &str| {
        table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(node))
            .and_then(|l| l.split_whitespace().nth(2))
            .unwrap_or_else(|| panic!("{node} not in {table}"))
            .to_string()
    };
    for (node, dev) in [
        ("conv", "ov-CPU"),
        ("relu", "ov-CPU"),
        ("det", "ort"),
        ("neg", "ov-CPU"),
        ("square", "ov-CPU"),
    ] {
        assert_eq!(device_of(node), dev, "{node} in {table}");
    }

    // The answer is cached by model digest, device and version: a second question needs no
    // Python (the library named by OPENVINO_LIB gives the version); a different device is a
    // new question, and without Python it says so.
    let lib = Command::new("python3")
        .args([
            "-c",
            "import glob, os, openvino; d = os.path.dirname(openvino.__file__); \
             print(sorted(glob.glob(os.path.join(d, 'libs', 'libopenvino_c.so*')))[0])",
        ])
        .output()
        .unwrap();
    let lib = String::from_utf8(lib.stdout).unwrap().trim().to_string();
    let no_python = [
        ("CLEAVE_PYTHON", "/nonexistent/python3"),
        ("OPENVINO_LIB", lib.as_str()),
    ];
    let again = run(
        &cache,
        &["query", ms, "--devices", "ov:CPU,ort"],
        &no_python,
    );
    assert_eq!(ok(&again), table);
    let other = run(
        &cache,
        &["query", ms, "--devices", "ov:GPU.7,ort"],
        &no_python,
    );
    assert_eq!(other.status.code(), Some(2), "{}", stderr(&other));
    assert!(stderr(&other).contains("cannot run /nonexistent/python3"));

    // The parts: OpenVINO's record their engine in the connection file and run on it.
    let out = dir.path().join("out");
    let outs = out.to_str().unwrap();
    ok(&run(
        &cache,
        &["partition", ms, "--devices", "ov:CPU,ort", "-o", outs],
        &[],
    ));
    let conn_path = out.join("det.conn.json");
    let conn: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&conn_path).unwrap()).unwrap();
    let parts = conn["parts"].as_array().unwrap();
    let engines: Vec<(&str, Option<&str>)> = parts
        .iter()
        .map(|p| (p["backend"].as_str().unwrap(), p["engine"].as_str()))
        .collect();
    assert_eq!(
        engines,
        [
            ("ov-CPU", Some("openvino:CPU")),
            ("ort", None),
            ("ov-CPU", Some("openvino:CPU"))
        ]
    );
    let conns = conn_path.to_str().unwrap();
    let v = ok(&run(
        &cache,
        &["verify", ms, conns, "--boundaries", "--reference", "ort"],
        &[],
    ));
    for t in ["y", "r", "d"] {
        assert!(
            v.lines().any(|l| l.starts_with(t) && l.ends_with("ok")),
            "{t} not compared: {v}"
        );
    }
    // An engine the file names that does not exist is refused, naming the file.
    let text = std::fs::read_to_string(&conn_path).unwrap();
    std::fs::write(&conn_path, text.replacen("openvino:CPU", "warp-drive", 1)).unwrap();
    let o = run(&cache, &["verify", ms, conns], &[]);
    assert_bad_input(&o, &conn_path, "unknown engine 'warp-drive'");
}

#[test]
fn the_example_split_between_openvino_and_onnxruntime_matches_both_whole_models() {
    if !openvino_installed() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let ex = example("tiny_cnn.onnx");
    let part = example("tiny_cnn.part");
    let out = dir.path().join("out");
    ok(&run(
        &cache,
        &[
            "partition",
            ex.to_str().unwrap(),
            "--rules",
            part.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
        &[],
    ));
    let conn = out.join("tiny_cnn.conn.json");
    for reference in ["ort", "openvino"] {
        let v = ok(&run(
            &cache,
            &[
                "verify",
                ex.to_str().unwrap(),
                conn.to_str().unwrap(),
                "--boundaries",
                "--engine",
                "npu=openvino,cpu=ort",
                "--reference",
                reference,
                "--shape",
                "input=2,3,16,16",
            ],
            &[],
        ));
        let last = v.lines().last().unwrap_or_default();
        assert!(last.contains(&format!("whole model ({reference}")), "{v}");
        // Every output and boundary was compared: 1 output and 4 boundaries.
        assert!(last.starts_with("verify: 5 tensors match"), "{v}");
    }
}

#[test]
fn names_openvino_drops_when_it_reads_the_whole_model_do_not_refuse_their_nodes() {
    if !openvino_installed() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // OpenVINO removes the Dropout as an identity: `c` takes the name `d`, and the mask `k`,
    // read by nobody, is not made at all.
    let mut m = model(
        vec![
            node("conv", "Conv", &["x", "w"], &["c"]),
            node("drop", "Dropout", &["c"], &["d", "k"]),
            node("relu", "Relu", &["d"], &["y"]),
        ],
        vec![weights("w", &[3, 3, 3, 3], 5)],
        "y",
    );
    let g = m.graph.as_mut().unwrap();
    g.input = vec![float_input("x", &[1, 3, 6, 6])];
    g.output = vec![float_input("y", &[1, 3, 4, 4])];
    let path = write(dir.path(), "drop.onnx", &m.encode_to_vec());
    let table = ok(&run(
        &dir.path().join("cache"),
        &["query", path.to_str().unwrap(), "--devices", "ov:CPU"],
        &[],
    ));
    assert!(table.contains("3 nodes: ov-CPU 3"), "{table}");
}
