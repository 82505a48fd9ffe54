//! Running partitions on real engines.
//!
//! An [`Engine`] loads a model file into a [`Session`] that maps named [`HostTensor`]s to
//! named outputs; the engines themselves live in `cleave-engines`, and reach the runner
//! through a [`Registry`] of names, formats and factories. [`runner`] executes the parts of a
//! connection file in an order where each part's inputs are ready, [`pipeline`] overlaps
//! requests with one worker per device, and [`verify`] compares them with the whole model,
//! tensor by tensor.
//!
//! Architecture invariant: this crate names no model format and no engine, and links none.

mod cancel;
pub mod decode;
pub mod engine;
mod error;
pub mod memory;
mod npy;
pub mod pipeline;
pub mod runner;
pub mod sequences;
mod tensor;
pub mod verify;

pub use cancel::{Cancel, Interrupt};
pub use engine::{
    part_format, Devices, Engine, EngineEntry, EngineKind, EngineMap, LoadOptions, MakeEngine,
    PackagedLibrary, Registry, Session, Threads,
};
pub use error::RuntimeError;
pub use npy::{npy_bytes, npy_from_bytes, read_npy, write_npy};
pub use tensor::{Diff, HostTensor, TensorView};
