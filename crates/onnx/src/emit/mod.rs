//! Writing a validated partition out as ONNX: each part a standalone model named
//! `stem.00001_<backend>.onnx`, and the connection files `stem.conn.json` / `stem.conn.ini` in
//! ONE circle-partitioner's format. Every file is written to a temporary name and renamed into
//! place; the source model is never touched.

mod error;
mod part;
mod write;

pub use error::EmitError;
pub use part::{part_model, value_info, with_outputs};
pub use write::emit_limited;
pub(crate) use write::{from_emit, PROTOBUF_LIMIT};
