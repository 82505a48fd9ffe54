//! Why a model cannot be assigned, in the messages OpenVINO's plugins give.

use cleave_ir::words::{Arg, Message};

/// What to do about a node no listed device runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hint {
    /// This device list runs it (the given one with a device added).
    Fallback(Vec<String>),
    /// No built-in profile runs it.
    NoProfile,
}

impl Hint {
    pub fn message(&self) -> Message {
        match self {
            Hint::Fallback(list) => Message::text("add a fallback device that supports it, e.g. ")
                .given(Arg::Devices, list.join(",")),
            Hint::NoProfile => {
                Message::text("no built-in device profile runs it: add a device whose profile (")
                    .given(Arg::Profiles, "FILE.toml")
                    .then(") lists it, or one without a profile, which runs every op")
            }
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AssignError {
    /// The VPU page's message, then a hint.
    #[error(
        "[{device}] Cannot convert layer {node} due to unsupported layer type {op}{detail}; {}",
        hint.message()
    )]
    Unsupported {
        device: String,
        node: String,
        op: String,
        detail: String,
        /// A device list that runs the node, never the one just given, or why there is none.
        hint: Hint,
    },
    #[error("{rule} puts layer {node} ({op}) on {device}, which cannot run it: {reason}")]
    RuleUnsupported {
        rule: String,
        node: String,
        op: String,
        device: String,
        reason: String,
    },
    #[error("no devices given: use --devices (e.g. --devices myriad,cpu) or --rules FILE.part")]
    NoDevices,
    #[error("default device '{0}' is not in the device list")]
    DefaultNotListed(String),
    #[error("profile '{device}': [fuse] rules: {message}")]
    FuseRule { device: String, message: String },
    #[error("the ops of {names} share state and must run on one device, but none of {devices} runs them all: {ops}")]
    SharedState {
        names: String,
        ops: String,
        devices: String,
    },
}

impl AssignError {
    /// The message, with the arguments it names by kind for each face to word.
    pub fn message(&self) -> Message {
        match self {
            AssignError::Unsupported {
                device,
                node,
                op,
                detail,
                hint,
            } => {
                let head = format!(
                    "[{device}] Cannot convert layer {node} due to unsupported layer type {op}{detail}; "
                );
                let mut m = Message::text(head);
                m.extend(hint.message());
                m
            }
            AssignError::NoDevices => Message::text("no devices given: use ")
                .arg(Arg::Devices)
                .then(" (e.g. ")
                .given(Arg::Devices, "myriad,cpu")
                .then(") or ")
                .given(Arg::Rules, "FILE.part"),
            other => Message::text(other.to_string()),
        }
    }
}
