//! Device capability profiles.
//!
//! A profile (TOML) lists the ops a device runs, each with optional constraints: element
//! types, ranks, attribute values, static shapes. Op names are a format's own, so a profile
//! has a general table and may have one per format key (`[formats.tflite]`), chosen by what
//! the model's semantics answer. The built-in `cpu` runs every op; `myriad` follows
//! OpenVINO's published VPU supported-layer table in ONNX terms. A backend with no profile
//! runs every op, as in ONE's circle-partitioner.

mod constraint;
mod profile;

pub use constraint::Constraint;
pub use profile::{DeclaredCost, FuseSection, OpTable, Profile, ProfileError, Profiles, Verdict};
