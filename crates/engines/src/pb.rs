//! ONNX `TensorProto` files (`input_0.pb`, as in the ONNX backend tests).

use std::path::Path;

use cleave_ir::WeightData;
use prost::Message;

use cleave_runtime::HostTensor;
use cleave_runtime::RuntimeError;

pub fn read_pb(path: &Path) -> Result<HostTensor, RuntimeError> {
    let bad = |message: String| RuntimeError::BadTensor {
        path: path.to_path_buf(),
        message,
    };
    let bytes = std::fs::read(path).map_err(|source| RuntimeError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let t = cleave_onnx::proto::TensorProto::decode(&bytes[..])
        .map_err(|e| bad(format!("not a TensorProto: {e}")))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let w = cleave_onnx::weight_from_tensor(&t, path, base).map_err(|e| bad(e.to_string()))?;
    let shape = w
        .dims
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| bad("negative dimension".into()))?;
    let data = match &w.data {
        WeightData::Bytes(_) | WeightData::External { .. } => cleave_onnx::read_weight(&w)
            .map_err(|e| bad(e.to_string()))?
            .to_vec(),
        _ => {
            return Err(bad(format!(
                "{} tensors are not supported as inputs",
                w.elem
            )))
        }
    };
    let want = w
        .ty()
        .byte_size()
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| bad(format!("dims {:?} of {} are too large", w.dims, w.elem)))?;
    if data.len() != want {
        return Err(bad(format!(
            "holds {} bytes, its type {} needs {want}",
            data.len(),
            w.ty()
        )));
    }
    Ok(HostTensor {
        elem: w.elem,
        shape,
        data,
    })
}
