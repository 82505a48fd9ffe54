//! Writing a partition out: each part as a standalone ONNX model named
//! `stem.00001_<backend>.onnx`, and the connection files `stem.conn.json` / `stem.conn.ini` in
//! ONE circle-partitioner's format. Reading them back for `check` and `run`.
//!
//! Architecture invariant: this is the only crate that writes partition files; every file is
//! written to a temporary name and renamed into place, and the source model is never touched.

mod conn;
mod onnx_part;
mod read_back;
mod write;

pub use conn::{ConnFile, ConnModel};
pub use onnx_part::{part_model, with_outputs};
pub use read_back::{backend_of, check_conn, read_partition, CheckReport, ReadPartition};
pub use write::{emit, emit_with, EmitError, Emitted, EmittedPart, ExternalData};
