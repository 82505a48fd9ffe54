//! Where a node goes, and why: what the assignment and the shared-state pass both speak.

/// Why a node went where it did (shown by `query`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// An `[OPNAME]` rule.
    OpName,
    /// An `[OPCODE]` rule.
    OpCode,
    /// No rule: the default device runs it.
    Default,
    /// No rule, or no default: the first device of the priority list that runs it.
    Priority,
    /// Moved to its partner so a QuantizeLinear → DequantizeLinear pair stays together.
    QdqPair,
    /// A constant that is also a graph output: one part on the default device makes it.
    ConstantOutput,
    /// Member of a fused group: goes where the group's anchor goes.
    Fused,
    /// Moved by the latency objective: the cost model predicts the split faster so.
    Cost,
    /// Moved to the device of the rest of the state it reads or writes (a variable's ops).
    SharedState,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Runs on `devices[index]`.
    Device(u16, Reason),
    /// Computes a constant: copied into every part that reads it, on no device of its own.
    Constant,
}

impl Placement {
    pub fn device(self) -> Option<u16> {
        match self {
            Placement::Device(d, _) => Some(d),
            Placement::Constant => None,
        }
    }
}
