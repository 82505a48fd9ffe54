//! What ONNX's operators mean to the format-neutral stages ([`OnnxSemantics`]), read from the
//! op registry (`op_registry.rs`).

use cleave_ir::{AttrValue, Graph, Node, NodeId, OpClass, OpSemantics, ValueId, Window};

use crate::op_registry::is_default_domain;
use crate::registry;

/// Whether the node gives the same outputs for the same inputs every time.
pub fn is_deterministic(node: &Node) -> bool {
    !(is_default_domain(&node.domain)
        && registry()
            .default_op(&node.op_type)
            .is_some_and(|e| e.nondeterministic))
}

/// ONNX's operator semantics: classes from the op registry, NCHW channels, windows with ONNX's
/// attribute defaults.
#[derive(Clone, Copy, Debug, Default)]
pub struct OnnxSemantics;

impl OpSemantics for OnnxSemantics {
    fn class(&self, node: &Node) -> OpClass {
        if !is_default_domain(&node.domain) {
            return OpClass::Other;
        }
        registry()
            .default_op(&node.op_type)
            .and_then(|e| e.class)
            .unwrap_or(OpClass::Other)
    }

    fn is_deterministic(&self, node: &Node) -> bool {
        is_deterministic(node)
    }

    fn reads_shape_only(&self, node: &Node) -> bool {
        is_default_domain(&node.domain) && matches!(node.op_type.as_str(), "Shape" | "Size")
    }

    fn window(&self, g: &Graph, n: NodeId) -> Option<Window> {
        let node = g.node(n);
        let kernel = match self.class(node) {
            OpClass::Conv => {
                let w = node.inputs.get(1).copied().flatten()?;
                g.value(w).ty.static_dims()?.get(2..)?.to_vec()
            }
            OpClass::MaxPool | OpClass::AveragePool => ints(node, "kernel_shape")?.to_vec(),
            _ => return None,
        };
        let spatial = kernel.len();
        Some(Window {
            strides: ints(node, "strides").map_or(vec![1; spatial], <[i64]>::to_vec),
            dilations: ints(node, "dilations").map_or(vec![1; spatial], <[i64]>::to_vec),
            pads: ints(node, "pads").map_or(vec![0; 2 * spatial], <[i64]>::to_vec),
            explicit_pads: auto_pad(node) == "NOTSET",
            ceil_mode: matches!(node.attr("ceil_mode"), Some(AttrValue::Int(c)) if *c != 0),
            group: match node.attr("group") {
                Some(AttrValue::Int(g)) => *g,
                _ => 1,
            },
            kernel,
        })
    }

    fn channel_axis(&self, _: &Graph, _: ValueId) -> Option<usize> {
        // ONNX's convolutions, pools and normalisations are NCHW.
        Some(1)
    }

    fn flops(&self, g: &Graph, n: NodeId) -> u64 {
        crate::cost::node_flops(g, g.node(n))
    }

    /// Any QuantizeLinear read by a DequantizeLinear, in whatever domain (the
    /// `com.microsoft` ones included).
    fn inseparable(&self, g: &Graph, producer: NodeId, consumer: NodeId) -> bool {
        g.node(producer).op_type == "QuantizeLinear"
            && g.node(consumer).op_type == "DequantizeLinear"
    }

    /// No built-in profile has an `[formats.onnx]` table, so ONNX models read each profile's
    /// general table, as before profiles had per-format tables.
    fn format(&self) -> &str {
        "onnx"
    }
}

fn ints<'a>(node: &'a Node, name: &str) -> Option<&'a [i64]> {
    match node.attr(name)? {
        AttrValue::Ints(v) => Some(v),
        _ => None,
    }
}

/// `auto_pad`, `NOTSET` when absent.
pub(crate) fn auto_pad(node: &Node) -> &str {
    match node.attr("auto_pad") {
        Some(AttrValue::String(s)) => std::str::from_utf8(s).unwrap_or(""),
        _ => "NOTSET",
    }
}
