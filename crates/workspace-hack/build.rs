//! Empty: the crate has a build script only so that its `[build-dependencies]` (host-side
//! feature unification, see Cargo.toml) are part of every build that uses it.
fn main() {}
