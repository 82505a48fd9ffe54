//! Any byte string given to the ONNX loader must give a model or an error, never a panic:
//! decode, IR conversion (integrity checks, subgraphs, functions) and type inference.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let bytes = bytes::Bytes::copy_from_slice(data);
    if let Ok(model) = cleave_onnx::OnnxModel::from_bytes(bytes, "fuzz.onnx".into()) {
        if let Ok(mut ir) = cleave_onnx::to_ir(&model) {
            let _ = cleave_onnx::infer_types(&mut ir);
            if let Ok(whole) = model.proto() {
                let _ = cleave_onnx::encode_model(&whole);
            }
        }
    }
});
