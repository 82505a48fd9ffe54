//! The tensor files `run`, `verify` and `bench` read as inputs: `.npy` and ONNX `TensorProto`
//! (`.pb`) bytes become a tensor whose bytes are exactly what its dims and type need, or an
//! error; never a panic, an overflow or an allocation the header merely claims.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(t) = cleave_runtime::npy_from_bytes(data) {
        let width = t.elem.bits().map_or(1, |b| (b as usize).div_ceil(8));
        assert_eq!(
            Some(t.data.len()),
            t.byte_len(width),
            "{:?} {:?}",
            t.elem,
            t.shape
        );
    }
    // External data is read relative to this path's folder, which holds no data files.
    let path = std::path::Path::new("/nonexistent/cleave-fuzz/input_0.pb");
    if let Ok(t) = cleave_onnx::tensor_from_pb(data, path) {
        let n = t.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        assert!(n.is_some(), "{:?}", t.shape);
    }
});
