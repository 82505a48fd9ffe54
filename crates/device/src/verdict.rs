//! What a device's profile says of one node.

/// A profile's answer for one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Supported,
    /// The op type is not in the profile.
    UnsupportedOp,
    /// The op is listed, but this node breaks a constraint.
    Constraint(String),
}
