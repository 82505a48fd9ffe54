//! Fused groups: chains of nodes a device runs as one runtime layer.
//!
//! Every member except the last has exactly one consumer, the next member, and is no graph
//! output. So the only edges leaving a group leave from its last member, and contracting a
//! group into one unit can never create a cycle between parts.

use cleave_ir::{Graph, NodeId, OpClass, OpSemantics, ValueId};

use crate::pattern::View;
use crate::rules::Rule;

/// Nodes fused into one runtime layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// The rule that formed the group (the most specific step reached).
    pub rule: Rule,
    /// Members in data-flow order; the first is the anchor, whose op names the runtime layer.
    pub nodes: Vec<NodeId>,
}

impl Group {
    pub fn anchor(&self) -> NodeId {
        self.nodes[0]
    }
}

/// The fused groups `rules` form on `g`. `constant[i]` says node `i` computes a constant
/// (such nodes never join a group; they are inputs like weights). Groups never overlap: nodes
/// are visited in topological order and a node already in a group starts or joins no other.
/// Rewrite rules in `rules` are ignored here: front-ends apply them (they change the graph).
pub fn find_groups(
    g: &Graph,
    constant: &[bool],
    rules: &[Rule],
    sem: &dyn OpSemantics,
) -> Vec<Group> {
    let view = View::with_classes(g, constant, sem);
    let on = |r: Rule| rules.contains(&r);
    let mut claimed = vec![false; g.nodes.len()];
    let mut groups = Vec::new();
    for &n in g.topo_order() {
        if claimed[n.index()] || view.is_constant_node(n) {
            continue;
        }
        let found = match view.class(n) {
            OpClass::Conv
                if on(Rule::ConvSimple) || on(Rule::ConvDepthwise) || on(Rule::ConvSum) =>
            {
                cpu_conv(&view, n, rules)
            }
            OpClass::AveragePool if on(Rule::PoolFakeQuantize) => {
                fake_quantize(&view, n).map(|q| (Rule::PoolFakeQuantize, vec![n, q.0, q.1]))
            }
            OpClass::FullyConnected | OpClass::MatMul if on(Rule::FcActivation) => view
                .sole_consumer(n)
                .filter(|&a| is_activation(&view, a))
                .map(|a| (Rule::FcActivation, vec![n, a])),
            _ => None,
        }
        .or_else(|| vpu(&view, n, rules));
        if let Some((rule, nodes)) = found {
            if nodes
                .iter()
                .all(|m| !claimed[m.index()] && !view.is_constant_node(*m))
            {
                for m in &nodes {
                    claimed[m.index()] = true;
                }
                groups.push(Group { rule, nodes });
            }
        }
    }
    groups
}

/// Conv, simple layers, then optionally a depthwise Conv and/or an Add (each followed by
/// more simple layers).
fn cpu_conv(view: &View, conv: NodeId, rules: &[Rule]) -> Option<(Rule, Vec<NodeId>)> {
    let mut chain = vec![conv];
    let mut rule = Rule::ConvSimple;
    extend_simple(view, &mut chain);
    if rules.contains(&Rule::ConvDepthwise) {
        let last = *chain.last()?;
        if let Some(dw) = view
            .sole_consumer(last)
            .filter(|&d| is_depthwise(view, d, last))
        {
            chain.push(dw);
            rule = Rule::ConvDepthwise;
            extend_simple(view, &mut chain);
        }
    }
    if rules.contains(&Rule::ConvSum) {
        let last = *chain.last()?;
        if let Some(add) = view
            .sole_consumer(last)
            .filter(|&a| is_legal_sum(view, conv, last, a))
        {
            chain.push(add);
            rule = Rule::ConvSum;
            extend_simple(view, &mut chain);
        }
    }
    (chain.len() > 1).then_some((rule, chain))
}

/// Appends simple layers (activations, per-channel scale/shift, PRelu, fake quantization)
/// while each is the sole reader of the chain's tensor.
fn extend_simple(view: &View, chain: &mut Vec<NodeId>) {
    while let Some(last) = chain.last().copied() {
        let Some(next) = view.sole_consumer(last) else {
            return;
        };
        let Some(x) = view.single_output(last) else {
            return;
        };
        if view.class(next) == OpClass::Quantize {
            match fake_quantize(view, last) {
                Some((q, dq)) => chain.extend([q, dq]),
                None => return,
            }
        } else if is_simple(view, next, x) {
            chain.push(next);
        } else {
            return;
        }
    }
}

fn is_simple(view: &View, n: NodeId, x: ValueId) -> bool {
    let node = view.node(n);
    if view.input(n, 0) != Some(x) && !matches!(view.class(n), OpClass::Mul | OpClass::Add) {
        return false;
    }
    match view.class(n) {
        OpClass::Relu | OpClass::Elu | OpClass::Sigmoid => true,
        OpClass::Clip => node
            .inputs
            .iter()
            .skip(1)
            .flatten()
            .all(|&v| view.is_const(v)),
        OpClass::PRelu => view
            .input(n, 1)
            .is_some_and(|s| view.is_const(s) && per_channel(view, s, x)),
        OpClass::Mul | OpClass::Add => {
            let other = match (view.input(n, 0), view.input(n, 1)) {
                (Some(a), Some(b)) if a == x && b != x => b,
                (Some(a), Some(b)) if b == x && a != x => a,
                _ => return false,
            };
            view.is_const(other) && per_channel(view, other, x)
        }
        _ => false,
    }
}

/// A constant broadcast over channels only: one value, or C values on the channel axis, so
/// the result has the shape of `x` (a ScaleShift).
fn per_channel(view: &View, c: ValueId, x: ValueId) -> bool {
    let (Some(cd), Some(rank)) = (view.dims(c), view.rank(x)) else {
        return false;
    };
    // Dims come from the file: a product that overflows is no single value.
    let count = cd.iter().try_fold(1i64, |n, &d| n.checked_mul(d));
    if count == Some(1) {
        return cd.len() <= rank;
    }
    if cd.len() > rank || rank < 2 {
        return false;
    }
    let mut padded = vec![1; rank - cd.len()];
    padded.extend(cd);
    let channels = view.channels(x);
    let Some(axis) = view.sem.channel_axis(view.g, x) else {
        return false;
    };
    padded.iter().enumerate().all(|(i, &d)| {
        if i == axis {
            Some(d) == channels
        } else {
            d == 1
        }
    })
}

/// `n`'s output → quantize → dequantize, both with constant parameters: FakeQuantize as
/// formats without that op spell it.
fn fake_quantize(view: &View, n: NodeId) -> Option<(NodeId, NodeId)> {
    let q = view
        .sole_consumer(n)
        .filter(|&q| view.class(q) == OpClass::Quantize)?;
    let dq = view
        .sole_consumer(q)
        .filter(|&d| view.class(d) == OpClass::Dequantize)?;
    let params_const = |m: NodeId| {
        view.node(m)
            .inputs
            .iter()
            .skip(1)
            .flatten()
            .all(|&v| view.is_const(v))
    };
    (view.input(q, 0) == view.single_output(n)
        && view.input(dq, 0) == view.single_output(q)
        && params_const(q)
        && params_const(dq))
    .then_some((q, dq))
}

fn is_activation(view: &View, n: NodeId) -> bool {
    matches!(
        view.class(n),
        OpClass::Relu
            | OpClass::Elu
            | OpClass::Sigmoid
            | OpClass::Tanh
            | OpClass::LeakyRelu
            | OpClass::HardSigmoid
            | OpClass::Softplus
    ) || (view.class(n) == OpClass::Clip
        && view
            .node(n)
            .inputs
            .iter()
            .skip(1)
            .flatten()
            .all(|&v| view.is_const(v)))
}

/// A Conv reading `prev`'s output whose group equals its input and output channels.
fn is_depthwise(view: &View, dw: NodeId, prev: NodeId) -> bool {
    if view.class(dw) != OpClass::Conv || view.input(dw, 0) != view.single_output(prev) {
        return false;
    }
    let (Some(w), Some(group)) = (
        view.input(dw, 1).and_then(|w| view.dims(w)),
        view.window(dw).map(|s| s.group),
    ) else {
        return false;
    };
    let c_in = view.input(dw, 0).and_then(|x| view.channels(x));
    let weights_const = view.input(dw, 1).is_some_and(|w| view.is_const(w));
    weights_const && w.len() >= 3 && w[0] == group && w[1] == 1 && c_in == Some(group) && group > 1
}

/// Add(chain, other) where `other` is a different tensor that the anchor Conv does not read
/// (the sum is done in place of that input) and the shapes match (no broadcast).
fn is_legal_sum(view: &View, conv: NodeId, last: NodeId, add: NodeId) -> bool {
    if !matches!(view.class(add), OpClass::Add | OpClass::Sum) || view.node(add).inputs.len() != 2 {
        return false;
    }
    let Some(x) = view.single_output(last) else {
        return false;
    };
    let other = match (view.input(add, 0), view.input(add, 1)) {
        (Some(a), Some(b)) if a == x && b != x => b,
        (Some(a), Some(b)) if b == x && a != x => a,
        _ => return false,
    };
    if view.node(conv).inputs.iter().flatten().any(|&i| i == other) || view.is_const(other) {
        return false;
    }
    let (tx, to) = (&view.g.value(x).ty, &view.g.value(other).ty);
    tx.is_complete() && tx == to
}

/// The VPU's pairs.
fn vpu(view: &View, n: NodeId, rules: &[Rule]) -> Option<(Rule, Vec<NodeId>)> {
    let on = |r: Rule| rules.contains(&r);
    let next = view.sole_consumer(n)?;
    let reads = view.input(next, 0) == view.single_output(n);
    let (op, next_op) = (view.class(n), view.class(next));
    let relu_like = matches!(next_op, OpClass::Relu | OpClass::LeakyRelu)
        || (next_op == OpClass::Clip && is_activation(view, next));
    let found = match op {
        OpClass::Conv
            if on(Rule::VpuConvPool)
                && next_op == OpClass::MaxPool
                && conv_3x3_s1_p1(view, n)
                && pool_2x2_s2_p0(view, next) =>
        {
            Rule::VpuConvPool
        }
        OpClass::Conv if on(Rule::VpuConvActivation) && relu_like => Rule::VpuConvActivation,
        OpClass::MaxPool
        | OpClass::AveragePool
        | OpClass::GlobalAveragePool
        | OpClass::GlobalMaxPool
            if on(Rule::VpuPoolRelu) && next_op == OpClass::Relu =>
        {
            Rule::VpuPoolRelu
        }
        OpClass::FullyConnected if on(Rule::VpuFcRelu) && next_op == OpClass::Relu => {
            Rule::VpuFcRelu
        }
        OpClass::Add | OpClass::Mul | OpClass::Max
            if on(Rule::VpuEltwiseActivation) && relu_like =>
        {
            Rule::VpuEltwiseActivation
        }
        _ => return None,
    };
    reads.then_some((found, vec![n, next]))
}

fn conv_3x3_s1_p1(view: &View, n: NodeId) -> bool {
    view.window(n).is_some_and(|s| {
        s.kernel == [3, 3]
            && s.strides == [1, 1]
            && s.dilations == [1, 1]
            && s.pads == [1, 1, 1, 1]
            && s.explicit_pads
    })
}

fn pool_2x2_s2_p0(view: &View, n: NodeId) -> bool {
    view.window(n).is_some_and(|s| {
        s.kernel == [2, 2]
            && s.strides == [2, 2]
            && s.pads == [0, 0, 0, 0]
            && s.explicit_pads
            && s.dilations.iter().all(|&d| d == 1)
            && !s.ceil_mode
    })
}
