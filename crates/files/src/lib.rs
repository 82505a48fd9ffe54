//! Files cleave writes whatever the model format: every file through [`write_atomic`], a
//! partition's files all together through [`Staged`], and the
//! connection files of ONE's circle-partitioner ([`ConnFile`]), with the part naming scheme
//! `stem.00001_<backend>.<ext>` that both share.
//!
//! Architecture invariant: this crate knows no model format; front-ends and views write
//! through it.

mod atomic;
mod conn;
mod naming;
mod staged;

pub use atomic::{copy_atomic, write_atomic, write_with, WriteError};
pub use conn::{ConnFile, ConnModel};
pub use naming::{
    backend_of, check_backend_name, engine_of_backend, is_part_file, openvino_device,
    part_file_name, relative_path, stale_parts, OPENVINO_PREFIX,
};
pub use staged::{ConnFiles, Staged};
