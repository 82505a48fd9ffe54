//! The ONNX backend test models: byte-identical round trip, zero-copy weights, and integrity.

use bytes::Bytes;
use cleave_onnx::{encode_model, to_ir, OnnxModel};
use cleave_testdata::{onnx_files, SUITES};

/// Through the lean load that every command uses (nodes held as undecoded records) and back.
#[test]
fn every_suite_model_round_trips_to_identical_bytes() {
    let files = onnx_files(&SUITES);
    assert!(
        files.len() > 1800,
        "expected ~1900 models, found {}",
        files.len()
    );
    let mut differ = Vec::new();
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        let lean = OnnxModel::from_bytes(Bytes::from(bytes.clone()), f.clone())
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let model = lean.proto().unwrap();
        if encode_model(&model) != bytes {
            differ.push(f.display().to_string());
        }
    }
    assert!(
        differ.is_empty(),
        "{} of {} files changed on round trip, e.g. {:?}",
        differ.len(),
        files.len(),
        &differ[..differ.len().min(5)]
    );
}

#[test]
fn every_suite_model_converts_to_a_valid_graph() {
    let mut failed = Vec::new();
    for f in onnx_files(&SUITES) {
        let m = OnnxModel::load(&f).unwrap();
        if let Err(e) = to_ir(&m) {
            failed.push(format!("{}: {e}", f.display()));
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

#[test]
fn raw_weights_are_slices_of_the_mapped_file() {
    let path = cleave_testdata::light_random("light_squeezenet");
    let m = OnnxModel::load(&path).unwrap();
    let ir = to_ir(&m).unwrap();
    let size = std::fs::metadata(&path).unwrap().len() as usize;
    let mut checked = 0;
    // Every weight's bytes must point into one region of `size` bytes: the map.
    let ptrs: Vec<(usize, usize)> = ir
        .graph
        .weights()
        .filter_map(|(_, w)| match &w.data {
            cleave_ir::WeightData::Bytes(b) if b.len() > 64 => Some((b.as_ptr() as usize, b.len())),
            _ => None,
        })
        .collect();
    let lo = ptrs.iter().map(|p| p.0).min().unwrap();
    let hi = ptrs.iter().map(|p| p.0 + p.1).max().unwrap();
    for (p, len) in &ptrs {
        let proto_w = m
            .without_nodes()
            .graph
            .as_ref()
            .unwrap()
            .initializer
            .iter()
            .find(|t| {
                t.raw_data
                    .as_ref()
                    .is_some_and(|r| r.as_ptr() as usize == *p)
            });
        assert!(
            proto_w.is_some_and(|t| t.raw_data.as_ref().unwrap().len() == *len),
            "IR weight is not the proto's buffer"
        );
        checked += 1;
    }
    assert!(checked > 20);
    assert!(
        hi - lo <= size,
        "weights span {} bytes, more than the {size}-byte file: they were copied",
        hi - lo
    );
}
