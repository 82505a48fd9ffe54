//! The engines behind `cleave_runtime::Engine`: [`Tract`] runs ONNX in process,
//! [`OnnxRuntime`] loads ONNX Runtime's shared library at run time, [`Litert`] loads LiteRT's
//! (for `.tflite` models), [`OpenVino`] loads OpenVINO's C library (ONNX and TFLite, on
//! any OpenVINO device). Also what reads ONNX's own
//! tensor files ([`read_pb`]) and runs ONNX's node tests ([`conformance`]).
//!
//! Architecture invariant: only this crate links an inference engine.

pub mod conformance;
mod guard;
mod litert_engine;
mod litert_ffi;
mod openvino_engine;
mod ort_engine;
mod pb;
mod python_pkg;
mod tract_engine;

use cleave_runtime::{Engine, EngineKind, RuntimeError};

pub use litert_engine::{litert_library_path, Litert};
pub use openvino_engine::{openvino_library_path, openvino_version, OpenVino, OPENVINO_WHEEL};
pub use ort_engine::{ort_library_path, OnnxRuntime};
pub use pb::read_pb;
pub use python_pkg::python;
pub use tract_engine::Tract;

/// The engine of a kind; an [`cleave_runtime::EngineFactory`]. Its loads and runs are guarded:
/// a panic inside the engine is an error naming the model, never the end of the process.
pub fn engine(kind: EngineKind) -> Result<Box<dyn Engine>, RuntimeError> {
    let inner: Box<dyn Engine> = match kind {
        EngineKind::Tract => Box::new(Tract),
        EngineKind::Ort => Box::new(OnnxRuntime::new()?),
        EngineKind::Litert => Box::new(Litert::new()?),
        EngineKind::OpenVino(device) => Box::new(OpenVino::new(&device)?),
    };
    Ok(Box::new(guard::Guarded(inner)))
}
