//! Running partitions on real engines.
//!
//! An [`Engine`] loads a model file into a [`Session`] that maps named [`HostTensor`]s to
//! named outputs; the engines themselves (tract, ONNX Runtime) live in `cleave-engines`, and
//! reach the runner through an [`EngineFactory`]. [`runner`] executes the parts of a
//! connection file in an order where each part's inputs are ready, [`pipeline`] overlaps
//! requests with one worker per device, and [`verify`] compares them with the whole model,
//! tensor by tensor.
//!
//! Architecture invariant: this crate knows no model format and links no engine.

pub mod engine;
mod error;
mod npy;
pub mod pipeline;
pub mod runner;
mod tensor;
pub mod verify;

pub use engine::{
    openvino_device, Engine, EngineFactory, EngineKind, EngineMap, Session, ENGINE_NAMES,
    OPENVINO_PREFIX,
};
pub use error::RuntimeError;
pub use npy::{npy_from_bytes, read_npy, write_npy};
pub use tensor::{Diff, HostTensor};
