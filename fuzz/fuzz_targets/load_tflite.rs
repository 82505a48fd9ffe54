//! Any byte string given to the TFLite/circle reader must give a model or an error, never a
//! panic: identifier and verifier, IR conversion (indices, buffers, offsets, codes), then
//! everything written from what was read: the whole model again, a part of it (its first half
//! of operators) and the other format.
#![no_main]

use std::path::Path;

use cleave_tflite::build::{self, Selection};
use cleave_tflite::{FlatModel, Format, TfliteSource};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let bytes = bytes::Bytes::copy_from_slice(data);
    let Ok(flat) = FlatModel::from_bytes(Path::new("fuzz.tflite"), bytes) else {
        return;
    };
    let Ok(source) = TfliteSource::new(flat.clone()) else {
        return;
    };
    let _ = source.reencode();
    let g = &source.converted.model.graph;
    let ops: Vec<usize> = g
        .nodes
        .iter()
        .filter_map(|n| n.source.map(|s| s.index()))
        .collect();
    let half = build::ordered(ops.iter().copied().take(ops.len().div_ceil(2)));
    let tensor = |v: &cleave_ir::ValueId| {
        let name = &g.value(*v).name;
        source.converted.names.iter().position(|n| n == name)
    };
    let no_dims = std::collections::HashMap::new();
    let sel = Selection {
        ops: half,
        inputs: g.inputs.iter().filter_map(tensor).collect(),
        outputs: g.outputs.iter().filter_map(tensor).collect(),
        names: &source.converted.names,
        dims: &no_dims,
        description: String::new(),
        keep_metadata: true,
    };
    let _ = source.encode(&sel);
    for target in [Format::Tflite, Format::Circle] {
        let _ = cleave_tflite::convert::convert(&flat, target);
    }
});
