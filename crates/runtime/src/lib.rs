//! Running partitions on real engines.
//!
//! An [`Engine`] loads a model file into a [`Session`] that maps named [`HostTensor`]s to
//! named outputs: [`engine::Tract`] runs in process, [`engine::OnnxRuntime`] loads ONNX
//! Runtime's shared library at run time. [`runner`] executes the parts of a connection file in
//! an order where each part's inputs are ready, and [`verify`] compares them with the whole
//! model, tensor by tensor.
//!
//! Architecture invariant: only this crate links an inference engine.

pub mod conformance;
pub mod engine;
mod error;
mod npy;
mod pb;
pub mod pipeline;
pub mod runner;
mod tensor;
pub mod verify;

pub use engine::{Engine, EngineKind, EngineMap, Session};
pub use error::RuntimeError;
pub use npy::{read_npy, write_npy};
pub use pb::read_pb;
pub use tensor::{Diff, HostTensor};
