//! Fusion for cleave, in two kinds.
//!
//! - **Fused groups** ([`find_groups`]): chains such as Conv → Relu → Add that a device runs as
//!   one runtime layer. They do not change the graph; assignment places each group whole, so a
//!   group never straddles two devices. As in OpenVINO's `query_model`, groups are found per
//!   candidate device *before* assignment, with that device's rules (its profile's `[fuse]`).
//! - **Rewrites** ([`optimize`]): real graph changes (constant folding, BatchNormalization
//!   folded into Conv, Split → Convs → Concat merged into one grouped Conv, sibling Convs
//!   joined, oversized Convs tiled). They produce a new ONNX model with the same outputs.
//!
//! Rules match the IR; rewrites edit the ONNX protobuf, so untouched nodes keep every field.

mod groups;
mod pattern;
mod rewrite;
mod rules;
mod tensor;

pub use groups::{find_groups, Group};
pub use rewrite::{
    optimize, runtime_layers, Level, OptimizeError, OptimizeOptions, Optimized, RuntimeLayer,
};
pub use rules::{Rule, UnknownRule};
