//! Why a model cannot be assigned, in the messages OpenVINO's plugins give.

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AssignError {
    /// The VPU page's message, then a hint.
    #[error(
        "[{device}] Cannot convert layer {node} due to unsupported layer type {op}{detail}; {hint}"
    )]
    Unsupported {
        device: String,
        node: String,
        op: String,
        detail: String,
        /// A device list that runs the node, never the one just given, or why there is none.
        hint: String,
    },
    #[error("{rule} puts layer {node} ({op}) on {device}, which cannot run it: {reason}")]
    RuleUnsupported {
        rule: String,
        node: String,
        op: String,
        device: String,
        reason: String,
    },
    #[error("no devices given: use --devices (e.g. --devices myriad,cpu) or a .part file")]
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
