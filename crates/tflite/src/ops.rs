//! What the neutral stages need to know of TFLite's operators (circle's are a superset), read
//! from the builtins table (`builtins.rs`).

use cleave_ir::{Graph, Node, NodeId, OpClass, OpSemantics, StateGroup, ValueId, Window};

use crate::builtins::{self, Flops};

/// TFLite operator semantics: NHWC tensors, OHWI convolution filters, `[1, H, W, C*M]`
/// depthwise filters, activations fused into the op's options.
#[derive(Clone, Copy, Debug, Default)]
pub struct TfliteSemantics;

impl OpSemantics for TfliteSemantics {
    fn class(&self, node: &Node) -> OpClass {
        if !node.domain.is_empty() {
            return OpClass::Other;
        }
        builtins::op(&node.op_type)
            .and_then(|d| d.class)
            .unwrap_or(OpClass::Other)
    }

    /// Each resource's handles (VAR_HANDLE by container and shared name, HASHTABLE by table
    /// id) with every op that reads the handle.
    fn shared_state(&self, g: &Graph) -> Vec<StateGroup> {
        let mut groups: Vec<StateGroup> = Vec::new();
        for (i, node) in g.nodes.iter().enumerate() {
            let resource = node
                .domain
                .is_empty()
                .then(|| builtins::op(&node.op_type).and_then(|d| d.resource))
                .flatten();
            let Some(resource) = resource else {
                continue;
            };
            let name = resource(node);
            let mut nodes = vec![NodeId(i as u32)];
            for v in node.outputs.iter().flatten() {
                nodes.extend(g.consumers(*v).iter().copied());
            }
            match groups.iter_mut().find(|s| s.name == name) {
                Some(s) => s.nodes.extend(nodes),
                None => groups.push(StateGroup { name, nodes }),
            }
        }
        groups
    }

    /// CALL_ONCE (a model's initialiser of its variables) belongs to no part of its own: the
    /// writer puts it in every part that holds a variable.
    fn constant_nodes(&self, g: &Graph) -> Vec<bool> {
        let mut constant = g.constant_nodes(|n| self.is_deterministic(n));
        for (c, node) in constant.iter_mut().zip(&g.nodes) {
            *c |= node.domain.is_empty()
                && builtins::op(&node.op_type).is_some_and(|d| d.initialiser);
        }
        constant
    }

    fn is_deterministic(&self, node: &Node) -> bool {
        !(node.domain.is_empty() && builtins::op(&node.op_type).is_some_and(|d| d.stateful))
            // A custom op's behaviour is unknown: never fold or copy it as a constant.
            && node.domain.is_empty()
    }

    fn window(&self, g: &Graph, n: NodeId) -> Option<Window> {
        let node = g.node(n);
        if !node.domain.is_empty() {
            return None;
        }
        (builtins::op(&node.op_type)?.window?)(g, n)
    }

    fn format(&self) -> &str {
        // circle's op names are TFLite's plus its own: one vocabulary.
        "tflite"
    }

    fn channel_axis(&self, g: &Graph, v: ValueId) -> Option<usize> {
        g.value(v).ty.rank()?.checked_sub(1)
    }

    fn flops(&self, g: &Graph, n: NodeId) -> u64 {
        let node = g.node(n);
        let out_elems = node
            .outputs
            .iter()
            .flatten()
            .next()
            .and_then(|&v| g.value(v).ty.static_dims())
            .map_or(1, |d| {
                d.iter()
                    .fold(1u64, |a, &x| a.saturating_mul(x.max(1) as u64))
            });
        let weight_dims = || {
            node.inputs
                .get(1)
                .copied()
                .flatten()
                .and_then(|w| g.value(w).ty.static_dims())
        };
        let flops = if node.domain.is_empty() {
            builtins::op(&node.op_type).map_or(Flops::Output, |d| d.flops)
        } else {
            Flops::Output
        };
        let per_output = match flops {
            // Each output: a multiply and an add per filter tap.
            Flops::Conv => weight_dims().map_or(1, |w| {
                w.iter()
                    .skip(1)
                    .fold(2u64, |a, &x| a.saturating_mul(x.max(1) as u64))
            }),
            Flops::DepthwiseConv => weight_dims().map_or(1, |w| {
                w.iter()
                    .skip(1)
                    .take(2)
                    .fold(2u64, |a, &x| a.saturating_mul(x.max(1) as u64))
            }),
            Flops::FullyConnected => weight_dims()
                .and_then(|w| w.last().copied())
                .map_or(1, |k| 2u64.saturating_mul(k.max(1) as u64)),
            Flops::Output => 1,
        };
        out_elems.saturating_mul(per_output)
    }
}
