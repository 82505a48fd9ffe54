//! ONNX front-end for cleave: load and save `.onnx` files byte for byte, resolve external
//! data, convert to the format-neutral [`cleave_ir`] graph and infer tensor types; ONNX's
//! operator semantics ([`OnnxSemantics`]), its rewrites ([`rewrite`]) and writing parts of a
//! validated plan ([`emit`]); all of it behind [`OnnxFrontend`].
//!
//! Architecture invariant: a leaf. No format-neutral crate depends on this one.
//!
//! Known loss: prost drops protobuf fields it does not know. A file written by a newer ONNX
//! whose schema adds fields loses those fields on `save`; every field of the vendored
//! `onnx.proto` (onnx 1.23) round-trips to identical bytes.

pub mod conformance;
mod cost;
mod data_file;
mod dtype;
pub mod emit;
mod error;
mod explorer_ids;
mod external;
mod fix_dims;
mod frontend;
pub mod gen;
mod infer;
mod io;
mod op_registry;
mod ops;
mod pb;
mod probe;
pub mod rewrite;
mod schema;
mod tensor_file;
mod to_ir;
mod validate;
mod weights_file;

/// The protobuf types generated from the vendored `proto/onnx.proto`.
#[allow(clippy::all, missing_docs)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/onnx.rs"));
}

pub use cost::node_flops;
pub use dtype::{elem_from_code, elem_to_code};
pub use error::OnnxError;
pub use external::read_weight;
pub use frontend::{OnnxFrontend, OnnxSource};
pub use infer::{infer_types, type_report, InferReport};
pub use io::{decode_model, encode_model, encoded_len, write_atomic, OnnxModel};
pub use op_registry::is_default_domain;
pub use ops::{is_deterministic, OnnxSemantics};
pub use pb::read_pb;
pub use tensor_file::{tensor_from_pb, TensorFile};
pub use to_ir::{to_ir, to_ir_weight, weight_from_tensor};
pub use validate::MAX_OPSET;

/// ONNX's op registry, built once from every op family's entries. The crate root builds it:
/// the registry's own module names no family, and the families register into it.
pub(crate) fn registry() -> &'static op_registry::OpRegistry {
    static REGISTRY: std::sync::OnceLock<op_registry::OpRegistry> = std::sync::OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut r = op_registry::OpRegistry::default();
        infer::register_families(&mut r);
        r
    })
}

/// The checks of [`to_checked_ir`] that need inferred ranks (axes in range); run on the IR
/// after [`infer_types`].
pub fn check_typed(path: &std::path::Path, ir: &cleave_ir::Model) -> Result<(), OnnxError> {
    validate::typed(ir).map_err(|(what, cause)| OnnxError::Invalid {
        path: path.to_path_buf(),
        what,
        cause,
    })
}

/// Refuses external data that is not a regular file holding what its tensor needs (see
/// [`to_checked_ir`], which checks this among the rest).
pub fn check_external_data(path: &std::path::Path, ir: &cleave_ir::Model) -> Result<(), OnnxError> {
    validate::external_data(&ir.graph).map_err(|(what, cause)| OnnxError::Invalid {
        path: path.to_path_buf(),
        what,
        cause,
    })
}

/// [`to_ir`], refusing what the onnx checker would refuse and cleave would trip on.
pub fn to_checked_ir(m: &OnnxModel) -> Result<cleave_ir::Model, OnnxError> {
    let ir = to_ir(m)?;
    validate::validate(&ir).map_err(|(what, cause)| OnnxError::Invalid {
        path: m.path.clone(),
        what,
        cause,
    })?;
    Ok(ir)
}
pub use weights_file::{
    write_weights_file, write_weights_file_to, WeightsFile, WeightsSource, MIN_EXTERNAL_BYTES,
};
