//! What the neutral stages need to know of TFLite's operators (circle's are a superset), read
//! from the op table (`op_table.rs`).

use cleave_ir::{
    AttrValue, Graph, Node, NodeId, OpClass, OpSemantics, StateGroup, ValueId, Window,
};

use crate::op_table::{self, Flops};

/// TFLite operator semantics: NHWC tensors, OHWI convolution filters, `[1, H, W, C*M]`
/// depthwise filters, activations fused into the op's options.
#[derive(Clone, Copy, Debug, Default)]
pub struct TfliteSemantics;

fn int_attr(node: &Node, name: &str) -> Option<i64> {
    match node.attr(name)? {
        AttrValue::Int(v) => Some(*v),
        _ => None,
    }
}

fn str_attr<'a>(node: &'a Node, name: &str) -> Option<&'a [u8]> {
    match node.attr(name)? {
        AttrValue::String(s) => Some(s),
        _ => None,
    }
}

impl OpSemantics for TfliteSemantics {
    fn class(&self, node: &Node) -> OpClass {
        if !node.domain.is_empty() {
            return OpClass::Other;
        }
        op_table::op(&node.op_type)
            .and_then(|d| d.class)
            .unwrap_or(OpClass::Other)
    }

    /// Each resource's handles (VAR_HANDLE by container and shared name, HASHTABLE by table
    /// id) with every op that reads the handle.
    fn shared_state(&self, g: &Graph) -> Vec<StateGroup> {
        let mut groups: Vec<StateGroup> = Vec::new();
        for (i, node) in g.nodes.iter().enumerate() {
            let name = match node.op_type.as_str() {
                "VAR_HANDLE" => {
                    let container = str_attr(node, "container").unwrap_or_default();
                    let shared = str_attr(node, "shared_name").unwrap_or_default();
                    let mut name = String::from_utf8_lossy(shared).into_owned();
                    if !container.is_empty() {
                        name = format!("{}/{name}", String::from_utf8_lossy(container));
                    }
                    name
                }
                "HASHTABLE" => format!("table {}", int_attr(node, "table_id").unwrap_or(0)),
                _ => continue,
            };
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
            *c |= node.domain.is_empty() && node.op_type == "CALL_ONCE";
        }
        constant
    }

    fn is_deterministic(&self, node: &Node) -> bool {
        !(node.domain.is_empty() && op_table::op(&node.op_type).is_some_and(|d| d.stateful))
            // A custom op's behaviour is unknown: never fold or copy it as a constant.
            && node.domain.is_empty()
    }

    fn window(&self, g: &Graph, n: NodeId) -> Option<Window> {
        let node = g.node(n);
        let (kernel, group) = match node.op_type.as_str() {
            "CONV_2D" | "DEPTHWISE_CONV_2D" => {
                let w = g.value((*node.inputs.get(1)?)?).ty.static_dims()?;
                let [_, h, wd, i] = w[..] else { return None };
                let group = if node.op_type == "DEPTHWISE_CONV_2D" {
                    // Depthwise: one group per input channel.
                    let input = g.value((*node.inputs.first()?)?).ty.static_dims()?;
                    *input.last()?
                } else {
                    let input = g.value((*node.inputs.first()?)?).ty.static_dims();
                    input
                        .and_then(|d| d.last().copied())
                        .filter(|&c| i > 0 && c % i == 0)
                        .map_or(1, |c| c / i)
                };
                (vec![h, wd], group)
            }
            "MAX_POOL_2D" | "AVERAGE_POOL_2D" | "L2_POOL_2D" => (
                vec![
                    int_attr(node, "filter_height")?,
                    int_attr(node, "filter_width")?,
                ],
                1,
            ),
            _ => return None,
        };
        let same = str_attr(node, "padding")? == b"SAME";
        let dil = |k| int_attr(node, k).unwrap_or(1);
        Some(Window {
            kernel,
            strides: vec![int_attr(node, "stride_h")?, int_attr(node, "stride_w")?],
            dilations: vec![dil("dilation_h_factor"), dil("dilation_w_factor")],
            pads: vec![0; 4],
            explicit_pads: !same,
            ceil_mode: false,
            group,
        })
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
            op_table::op(&node.op_type).map_or(Flops::Output, |d| d.flops)
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
