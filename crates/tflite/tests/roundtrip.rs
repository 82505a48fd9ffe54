//! Decode → encode → decode on every TFLite test model: the same object tree, and LiteRT's
//! outputs bit-identical on the original and the rewritten file (seeded inputs).

use std::path::Path;
use std::process::Command;

use cleave_tflite::schema::tflite;
use cleave_tflite::{FlatModel, TfliteSource};

/// LiteRT's outputs for `model` on seed 7, as raw .npy bytes in output order.
fn litert_outputs(model: &Path, out: &Path) -> Vec<Vec<u8>> {
    let status = Command::new("python3")
        .arg(cleave_testdata::oracles().join("tflite_oracle.py"))
        .args(["run"])
        .arg(model)
        .args(["--seed", "7", "--out"])
        .arg(out)
        .status()
        .expect("python3 runs");
    assert!(
        status.success(),
        "tflite_oracle.py failed on {}",
        model.display()
    );
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("index.json")).unwrap()).unwrap();
    index["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| std::fs::read(out.join(o["file"].as_str().unwrap())).unwrap())
        .collect()
}

fn tree(data: &[u8]) -> tflite::ModelT {
    tflite::root_as_model(data).unwrap().unpack()
}

#[test]
fn every_test_model_round_trips_tree_equal_and_bit_identical_in_litert() {
    let tmp = tempfile::tempdir().unwrap();
    let models = cleave_testdata::tflite_files();
    for (k, path) in models.iter().enumerate() {
        let src = TfliteSource::load(path).unwrap();
        let bytes = src.reencode().unwrap();
        let before = tree(&std::fs::read(path).unwrap());
        let after = tree(&bytes);
        assert!(
            before == after,
            "{}: the object tree changed",
            path.display()
        );
        // The rewritten file reads back into the same IR.
        let again = FlatModel::from_bytes(path, bytes.clone().into()).unwrap();
        let again = TfliteSource::new(again).unwrap();
        let (a, b) = (&src.converted.model.graph, &again.converted.model.graph);
        assert_eq!(a.nodes.len(), b.nodes.len());
        assert_eq!(a.values.len(), b.values.len());

        let copy = tmp.path().join(format!("copy{k}.tflite"));
        std::fs::write(&copy, &bytes).unwrap();
        let want = litert_outputs(path, &tmp.path().join(format!("a{k}")));
        let got = litert_outputs(&copy, &tmp.path().join(format!("b{k}")));
        assert!(!want.is_empty());
        assert!(
            want == got,
            "{}: LiteRT's outputs differ after the round trip",
            path.display()
        );
    }
    eprintln!("{} models round-tripped", models.len());
}
