//! The OpenVINO engine against ONNX Runtime on the bundled example and on broken input.
//! Where OpenVINO is not installed the tests say so and pass, unless CLEAVE_REQUIRE_OPENVINO
//! is set (the test script installs it and sets it, so there they run).

use std::path::{Path, PathBuf};

use cleave_engines::{OnnxRuntime, OpenVino};
use cleave_ir::ElemType;
use cleave_runtime::{Engine, HostTensor, RuntimeError};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name)
}

/// OpenVINO on its CPU, or `None` (with a note) where it is not installed and not required.
fn openvino() -> Option<OpenVino> {
    match OpenVino::new("CPU") {
        Ok(e) => Some(e),
        Err(e) if std::env::var_os("CLEAVE_REQUIRE_OPENVINO").is_none() => {
            eprintln!("skipped: {e} (set CLEAVE_REQUIRE_OPENVINO=1 to make this a failure)");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn openvino_matches_onnxruntime_on_the_example_at_two_batch_sizes() {
    let Some(ov) = openvino() else { return };
    assert!(
        ov.available_devices().unwrap().iter().any(|d| d == "CPU"),
        "OpenVINO lists no CPU"
    );
    let ort = OnnxRuntime::new().expect("ONNX Runtime (scripts/install/fetch-ort.sh)");
    let model = example("tiny_cnn.onnx");
    let mut a = ov.load(&model, false).unwrap();
    let mut b = ort.load(&model, false).unwrap();
    // The example's batch dim is symbolic: one compiled model serves both sizes.
    for (batch, seed) in [(1, 3), (4, 11)] {
        let x = HostTensor::random(ElemType::F32, &[batch, 3, 16, 16], seed).unwrap();
        let feed = vec![("input".to_string(), x)];
        let got = a.run(&feed).unwrap();
        let want = b.run(&feed).unwrap();
        assert_eq!(got.len(), want.len());
        for (name, w) in &want {
            let (_, g) = got.iter().find(|(n, _)| n == name).expect(name);
            assert_eq!(g.shape, w.shape, "{name}");
            let d = g.diff(w, 1e-4, 1e-5);
            assert_eq!(d.beyond, 0, "{name}: {d:?}");
        }
        // A wiring check with teeth: a different input gives different outputs.
        let y = HostTensor::random(ElemType::F32, &[batch, 3, 16, 16], seed + 1).unwrap();
        let other = a.run(&[("input".to_string(), y)]).unwrap();
        assert_ne!(other[0].1.data, got[0].1.data);
    }
}

#[test]
fn openvino_refuses_broken_files_and_missing_inputs_with_errors() {
    let Some(ov) = openvino() else { return };
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.onnx");
    std::fs::write(&garbage, b"\x08\x07not a model at all").unwrap();
    match ov.load(&garbage, false) {
        Err(RuntimeError::Unsupported {
            engine, message, ..
        }) => {
            assert_eq!(engine, "openvino");
            assert!(!message.is_empty());
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a garbage file loaded"),
    }
    let mut s = ov.load(&example("tiny_cnn.onnx"), true).unwrap();
    match s.run(&[]) {
        Err(RuntimeError::Input { name, .. }) => assert_eq!(name, "input"),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("ran without its input"),
    }
    let short = HostTensor {
        elem: ElemType::F32,
        shape: vec![1, 3, 16, 16],
        data: vec![0; 12],
    };
    assert!(matches!(
        s.run(&[("input".to_string(), short)]),
        Err(RuntimeError::Input { .. })
    ));
    let missing = OpenVino::new("NO_SUCH_DEVICE").unwrap();
    match missing.load(&example("tiny_cnn.onnx"), false) {
        Err(e) => assert!(e.to_string().contains("NO_SUCH_DEVICE"), "{e}"),
        Ok(_) => panic!("compiled for a device that does not exist"),
    }
}

#[test]
fn a_part_that_only_passes_its_input_through_keeps_its_onnx_names() {
    let Some(ov) = openvino() else { return };
    // Dropout r → d: OpenVINO names both ports `d`.
    let dir = tempfile::tempdir().unwrap();
    // ir 7, opset 12: graph g, input r [1,4] float, output d [1,4] float, one Dropout.
    let vi = |name: &str| {
        format!(
            "{{\"name\": \"{name}\", \"type\": {{\"tensorType\": {{\"elemType\": 1, \"shape\": {{\"dim\": [{{\"dimValue\": \"1\"}}, {{\"dimValue\": \"4\"}}]}}}}}}}}"
        )
    };
    let json = format!(
        "{{\"irVersion\": \"7\", \"opsetImport\": [{{\"version\": \"12\"}}], \"graph\": {{\"name\": \"g\", \"node\": [{{\"input\": [\"r\"], \"output\": [\"d\"], \"name\": \"n\", \"opType\": \"Dropout\"}}], \"input\": [{}], \"output\": [{}]}}}}",
        vi("r"),
        vi("d")
    );
    let model = json_model(dir.path(), "drop.onnx", &json);
    let mut s = ov.load(&model, false).unwrap();
    let x = HostTensor::random(ElemType::F32, &[1, 4], 5).unwrap();
    let got = s.run(&[("r".to_string(), x.clone())]).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, "d");
    assert_eq!(got[0].1.data, x.data);
}

/// Writes the ONNX model given as JSON (protobuf's JSON mapping), checked by the onnx checker.
fn json_model(dir: &Path, name: &str, json: &str) -> PathBuf {
    let model = dir.join(name);
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys, onnx; from google.protobuf import json_format as j; \
             m = j.Parse(sys.argv[1], onnx.ModelProto()); onnx.checker.check_model(m); \
             onnx.save(m, sys.argv[2])",
            json,
            model.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    model
}

#[test]
fn scalars_and_empty_tensors_go_in_and_come_out() {
    let Some(ov) = openvino() else { return };
    let dir = tempfile::tempdir().unwrap();
    let ty = |dims: &str| {
        format!("{{\"tensorType\": {{\"elemType\": 1, \"shape\": {{\"dim\": [{dims}]}}}}}}")
    };
    // y = x + x for a scalar x; e = relu(z) for z of shape [0, 4].
    let json = format!(
        "{{\"irVersion\": \"8\", \"opsetImport\": [{{\"version\": \"17\"}}], \"graph\": {{\"name\": \"g\", \
         \"node\": [{{\"input\": [\"x\", \"x\"], \"output\": [\"y\"], \"opType\": \"Add\"}}, \
                    {{\"input\": [\"z\"], \"output\": [\"e\"], \"opType\": \"Relu\"}}], \
         \"input\": [{{\"name\": \"x\", \"type\": {}}}, {{\"name\": \"z\", \"type\": {}}}], \
         \"output\": [{{\"name\": \"y\", \"type\": {}}}, {{\"name\": \"e\", \"type\": {}}}]}}}}",
        ty(""),
        ty("{\"dimValue\": \"0\"}, {\"dimValue\": \"4\"}"),
        ty(""),
        ty("{\"dimValue\": \"0\"}, {\"dimValue\": \"4\"}"),
    );
    let model = json_model(dir.path(), "scalar.onnx", &json);
    let mut s = ov.load(&model, false).unwrap();
    let x = HostTensor {
        elem: ElemType::F32,
        shape: vec![],
        data: 1.5f32.to_le_bytes().to_vec(),
    };
    let z = HostTensor {
        elem: ElemType::F32,
        shape: vec![0, 4],
        data: vec![],
    };
    let got = s
        .run(&[("x".to_string(), x), ("z".to_string(), z)])
        .unwrap();
    assert_eq!(got[0].0, "y");
    assert_eq!(got[0].1.shape, Vec::<usize>::new());
    assert_eq!(got[0].1.data, 3.0f32.to_le_bytes());
    assert_eq!(got[1].0, "e");
    assert_eq!(got[1].1.shape, [0, 4]);
    assert!(got[1].1.data.is_empty());
}
