//! What the format-neutral stages need to know of an operator, asked of the front-end that
//! loaded the model. Fusion patterns, the pairs that must not be cut, constant detection and
//! cost estimates are written against these answers, never against a format's op names.

use crate::graph::{Graph, Node, NodeId, ValueId};

/// An operator's meaning, as far as fusion and partitioning care. A front-end maps its own op
/// names onto these (ONNX `Conv` and TFLite `CONV_2D` are both [`OpClass::Conv`]); everything
/// else is [`OpClass::Other`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpClass {
    /// Convolution; input 0 the data, input 1 the weights, input 2 an optional bias.
    Conv,
    MaxPool,
    AveragePool,
    GlobalAveragePool,
    GlobalMaxPool,
    /// Fully connected with optional bias (ONNX Gemm, TFLite FULLY_CONNECTED).
    FullyConnected,
    MatMul,
    Relu,
    LeakyRelu,
    Elu,
    Sigmoid,
    Tanh,
    HardSigmoid,
    Softplus,
    /// Clamp to a range; inputs after the first are its bounds.
    Clip,
    /// Leaky ReLU with a learned slope, input 1.
    PRelu,
    /// Elementwise binary arithmetic.
    Add,
    Mul,
    Max,
    /// Variadic sum.
    Sum,
    /// Float to integer with scale and zero point.
    Quantize,
    /// Integer back to float.
    Dequantize,
    Other,
}

/// A convolution's or pooling window's geometry with the format's defaults filled in, so that
/// an absent attribute and its explicit default compare equal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// Spatial kernel size (for a Conv, from its weights).
    pub kernel: Vec<i64>,
    pub strides: Vec<i64>,
    pub dilations: Vec<i64>,
    /// Begin pads then end pads, one per spatial axis each.
    pub pads: Vec<i64>,
    /// Padding is given by `pads` (not computed from the input size, as "same" padding is).
    pub explicit_pads: bool,
    /// Output size rounded up rather than down.
    pub ceil_mode: bool,
    /// Convolution groups (1 for pools).
    pub group: i64,
}

/// Nodes that read or write one piece of state (see [`OpSemantics::shared_state`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateGroup {
    /// The resource as the model names it (a variable's shared name).
    pub name: String,
    pub nodes: Vec<NodeId>,
}

/// The operator semantics a front-end supplies to the neutral stages.
pub trait OpSemantics: Sync {
    /// The node's meaning for fusion and partitioning.
    fn class(&self, node: &Node) -> OpClass;

    /// Whether the op gives the same result for the same inputs (a random generator does
    /// not, so a node with only constant inputs is a constant only when this holds).
    fn is_deterministic(&self, node: &Node) -> bool;

    /// The window of a convolution or pooling node, defaults filled in; `None` for other ops
    /// or when it cannot be known (a Conv whose weights have no static shape).
    fn window(&self, g: &Graph, n: NodeId) -> Option<Window>;

    /// The axis of `v` that holds channels: 1 in NCHW layouts, the last in NHWC ones.
    fn channel_axis(&self, g: &Graph, v: ValueId) -> Option<usize>;

    /// Estimated floating-point operations of one run of the node (balances pipeline stages).
    fn flops(&self, g: &Graph, n: NodeId) -> u64;

    /// Whether the edge from `producer` to `consumer` must stay inside one part. By default a
    /// quantize read by a dequantize: cutting between them would ship integers that the
    /// receiving device may not be able to read back.
    fn inseparable(&self, g: &Graph, producer: NodeId, consumer: NodeId) -> bool {
        self.class(g.node(producer)) == OpClass::Quantize
            && self.class(g.node(consumer)) == OpClass::Dequantize
    }

    /// Nodes that share state through one resource (a variable's handle with its reads and
    /// writes): each group must run in one part, since one interpreter holds the state. The
    /// name says which resource, for messages.
    fn shared_state(&self, _g: &Graph) -> Vec<StateGroup> {
        Vec::new()
    }

    /// For each node, whether it computes a constant (see [`Graph::constant_nodes`]).
    fn constant_nodes(&self, g: &Graph) -> Vec<bool> {
        g.constant_nodes(|n| self.is_deterministic(n))
    }

    /// The nodes pipeline stages copy into each stage that reads them rather than pass
    /// between stages: the constants and, in a decoder (a model with `state` pairs), every
    /// node that depends on no cache ([`Graph::recomputable_nodes`]), so that only the
    /// hidden state crosses a stage boundary.
    fn stage_copies(&self, g: &Graph, state: &[crate::StatePair]) -> Vec<bool> {
        if state.is_empty() {
            return self.constant_nodes(g);
        }
        let caches: Vec<crate::ValueId> = state.iter().filter_map(|p| g.find(&p.input)).collect();
        let tokens = g.find(crate::TOKEN_INPUT);
        g.recomputable_nodes(
            &caches,
            tokens,
            |n| self.is_deterministic(n),
            |n| self.reads_shape_only(n),
        )
    }

    /// Whether the node reads only the shapes of its inputs, never their values (ONNX's
    /// `Shape`): a decoder's stage computes the past length from its own cache's shape.
    fn reads_shape_only(&self, _node: &Node) -> bool {
        false
    }

    /// The vocabulary the model's op types are spelled in, as a key: a device profile may
    /// list a table of ops per vocabulary, because one device runs different op sets of
    /// different formats. Formats that share op names share a key. The core never interprets
    /// it; the empty default selects a profile's general table.
    fn format(&self) -> &str {
        ""
    }
}

/// Semantics from a table of op names: for formats with no attribute conventions to read and
/// for tests. Ops not in the table are [`OpClass::Other`]; windows are unknown; channels are
/// on `channel_axis`; a node costs one operation per output element.
#[derive(Clone, Debug)]
pub struct NamedOps {
    classes: std::collections::HashMap<String, OpClass>,
    nondeterministic: std::collections::HashSet<String>,
    channel_axis: usize,
    format: String,
}

impl Default for NamedOps {
    fn default() -> Self {
        NamedOps {
            classes: Default::default(),
            nondeterministic: Default::default(),
            channel_axis: 1,
            format: String::new(),
        }
    }
}

impl NamedOps {
    pub fn new(classes: &[(&str, OpClass)]) -> NamedOps {
        NamedOps {
            classes: classes.iter().map(|(n, c)| (n.to_string(), *c)).collect(),
            ..NamedOps::default()
        }
    }

    /// Ops whose results vary from run to run (random generators).
    pub fn nondeterministic(mut self, ops: &[&str]) -> NamedOps {
        self.nondeterministic = ops.iter().map(|s| s.to_string()).collect();
        self
    }

    pub fn channel_axis(mut self, axis: usize) -> NamedOps {
        self.channel_axis = axis;
        self
    }

    /// The key [`OpSemantics::format`] answers (empty unless set).
    pub fn format(mut self, format: &str) -> NamedOps {
        self.format = format.to_string();
        self
    }
}

impl OpSemantics for NamedOps {
    fn class(&self, node: &Node) -> OpClass {
        self.classes
            .get(node.op_type.as_str())
            .copied()
            .unwrap_or(OpClass::Other)
    }

    fn is_deterministic(&self, node: &Node) -> bool {
        !self.nondeterministic.contains(node.op_type.as_str())
    }

    fn window(&self, _: &Graph, _: NodeId) -> Option<Window> {
        None
    }

    fn channel_axis(&self, _: &Graph, _: ValueId) -> Option<usize> {
        Some(self.channel_axis)
    }

    fn format(&self) -> &str {
        &self.format
    }

    fn flops(&self, g: &Graph, n: NodeId) -> u64 {
        let out = g.node(n).outputs.iter().flatten().next();
        out.and_then(|&v| g.value(v).ty.static_dims())
            .map_or(1, |d| {
                // Dims come from files: saturate rather than overflow.
                d.iter()
                    .fold(1u64, |acc, &x| acc.saturating_mul(x.max(1) as u64))
            })
    }
}
