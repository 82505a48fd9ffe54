//! Device capability profiles.
//!
//! A profile (TOML) lists the ops a device runs, each with optional constraints: element
//! types, ranks, attribute values, static shapes. The built-in `cpu` runs every op; `myriad`
//! follows OpenVINO's published VPU supported-layer table in ONNX terms. A backend with no
//! profile runs every op, as in ONE's circle-partitioner.

mod constraint;
mod profile;

pub use constraint::Constraint;
pub use profile::{DeclaredCost, FuseSection, Profile, ProfileError, Profiles, Verdict};
