//! ONNX `TensorProto` files (`input_0.pb`, as in the ONNX backend tests).

use std::path::Path;

use cleave_ir::{ElemType, WeightData};
use prost::Message;

/// A dense tensor read from a `.pb` file: its element type, dims and little-endian bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorFile {
    pub elem: ElemType,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

/// The tensor in `bytes`, the contents of the file `path` (external data is read relative to
/// its folder), or why it is not one. Its bytes must be exactly what its type needs.
pub fn tensor_from_pb(bytes: &[u8], path: &Path) -> Result<TensorFile, String> {
    let t =
        crate::proto::TensorProto::decode(bytes).map_err(|e| format!("not a TensorProto: {e}"))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let w = crate::weight_from_tensor(&t, path, base).map_err(|e| e.to_string())?;
    let shape = w
        .dims
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| "negative dimension".to_string())?;
    if !matches!(w.data, WeightData::Bytes(_) | WeightData::External { .. }) {
        return Err(format!("{} tensors are not supported as inputs", w.elem));
    }
    // Checked before reading, so a huge declared shape is refused without reading anything.
    let want = w
        .ty()
        .byte_size()
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| format!("dims {:?} of {} are too large", w.dims, w.elem))?;
    let data = crate::read_weight(&w).map_err(|e| e.to_string())?.to_vec();
    if data.len() != want {
        return Err(format!(
            "holds {} bytes, its type {} needs {want}",
            data.len(),
            w.ty()
        ));
    }
    Ok(TensorFile {
        elem: w.elem,
        shape,
        data,
    })
}
