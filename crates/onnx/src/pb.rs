//! ONNX `TensorProto` files (`input_0.pb`, as in the ONNX backend tests) as host tensors.

use std::path::Path;

use cleave_runtime::HostTensor;
use cleave_runtime::RuntimeError;

pub fn read_pb(path: &Path) -> Result<HostTensor, RuntimeError> {
    let bytes = std::fs::read(path).map_err(|source| RuntimeError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let t = crate::tensor_from_pb(&bytes, path).map_err(|message| RuntimeError::BadTensor {
        path: path.to_path_buf(),
        message,
    })?;
    Ok(HostTensor {
        elem: t.elem,
        shape: t.shape,
        data: t.data,
    })
}
