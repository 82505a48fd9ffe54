//! The working folder a partition is written into, whatever the model format: every file
//! through [`write_atomic`], a partition's files all together through [`Staged`], and the
//! connection files of ONE's circle-partitioner ([`ConnFile`]), with the part naming scheme
//! `stem.00001_<backend>.<ext>` that both share.
//!
//! Architecture invariant: this crate knows no model format and no engine; front-ends and
//! views write through it.

mod atomic;
mod conn;
mod naming;
mod private;
mod signals;
mod staged;

pub use atomic::{copy_atomic, write_atomic, write_with, WriteError};
pub use conn::{ConnDim, ConnFile, ConnModel};
pub use naming::{
    backend_of, check_backend_name, is_part_file, part_file_name, relative_path, stale_parts,
};
pub use private::{private_tempdir, private_tempdir_in, seal, write_private};
pub use signals::remove_on_signals;
pub use staged::{ConnFiles, Staged};
