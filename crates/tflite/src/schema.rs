//! The code flatc 25.12.19 generated from the vendored schemas (`scripts/gen/gen-flatbuffers.sh`).

#[allow(
    clippy::all,
    clippy::pedantic,
    unsafe_op_in_unsafe_fn,
    unused_imports,
    non_camel_case_types,
    non_snake_case,
    mismatched_lifetime_syntaxes,
    deprecated
)]
#[rustfmt::skip]
#[path = "generated/tflite_schema_generated.rs"]
mod tflite_generated;

#[allow(
    clippy::all,
    clippy::pedantic,
    unsafe_op_in_unsafe_fn,
    unused_imports,
    non_camel_case_types,
    non_snake_case,
    mismatched_lifetime_syntaxes,
    deprecated
)]
#[rustfmt::skip]
#[path = "generated/circle_schema_generated.rs"]
mod circle_generated;

pub use circle_generated::circle;
pub use tflite_generated::tflite;
