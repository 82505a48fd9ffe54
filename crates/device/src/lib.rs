//! Device capability profiles.
//!
//! A profile (TOML) lists the ops a device runs, each with optional constraints: element
//! types, ranks, attribute values, static shapes. Op names are a format's own, so a profile
//! has a general table and may have one per format key (`[formats.tflite]`), chosen by what
//! the model's semantics answer. The built-in `cpu` runs every op of a format without its
//! own table, and ONE runtime's CPU list for TFLite/circle; `acl_cl` and `acl_neon` are ONE
//! runtime's ARM Compute Library backends (TFLite/circle only); `xnnpack` is the TFLite
//! XNNPACK delegate; `myriad` follows OpenVINO's published VPU supported-layer table in ONNX
//! terms; `nnapi` and `coreml*` ONNX Runtime's EP tables. A backend with no profile runs
//! every op, as in ONE's circle-partitioner. A profile may instead carry a device plugin's
//! own answer for one model ([`PluginAnswer`], OpenVINO's `query_model`).

mod catalogue;
mod constraint;
mod cost;
mod ops;
mod plugin;
mod profile;
mod verdict;

pub use catalogue::Profiles;
pub use constraint::Constraint;
pub use cost::{default_costs, DeclaredCost};
pub use ops::SupportedOps;
pub use plugin::PluginAnswer;
pub use profile::{FuseSection, Profile, ProfileError};
pub use verdict::Verdict;
