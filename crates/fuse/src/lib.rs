//! Fused groups for cleave: chains such as Conv → Relu → Add that a device runs as one runtime
//! layer ([`find_groups`]). They do not change the graph; assignment places each group whole,
//! so a group never straddles two devices. As in OpenVINO's `query_model`, groups are found
//! per candidate device *before* assignment, with that device's rules (its profile's
//! `[fuse]`).
//!
//! Patterns match operator meanings ([`cleave_ir::OpClass`]) that the model's front-end
//! supplies, so they work on any format. Rewrites (rules that change the graph, such as
//! folding BatchNormalization into Conv) belong to the front-ends, which match through the
//! same [`View`].

mod groups;
mod layers;
mod pattern;
mod rules;

pub use groups::{find_groups, Group};
pub use layers::{runtime_layers, RuntimeLayer};
pub use pattern::View;
pub use rules::{Rule, UnknownRule};
