//! A rough cost model: floating-point operations per node, from inferred shapes and each op's
//! way of counting in the op registry. Used to cut a model into pipeline stages of about equal
//! work.

use cleave_ir::{Graph, Node};

use crate::op_registry::Flops;
use crate::registry;

fn elements(g: &Graph, v: Option<cleave_ir::ValueId>) -> u64 {
    v.and_then(|v| g.value(v).ty.static_dims()).map_or(1, |d| {
        d.iter()
            .fold(1u64, |acc, &x| acc.saturating_mul(x.max(1) as u64))
    })
}

fn dims(g: &Graph, node: &Node, slot: usize) -> Option<Vec<i64>> {
    node.inputs
        .get(slot)
        .copied()
        .flatten()
        .and_then(|v| g.value(v).ty.static_dims())
}

/// Estimated FLOPs of one node (at least 1): multiply-adds count two.
pub fn node_flops(g: &Graph, node: &Node) -> u64 {
    let out = elements(g, node.outputs.first().copied().flatten());
    let kind = if crate::op_registry::is_default_domain(&node.domain) {
        registry()
            .default_op(&node.op_type)
            .map_or(Flops::Output, |e| e.flops)
    } else {
        Flops::Output
    };
    let per_weight = || {
        // Each weight reads (or scatters to) Cin/group × kernel elements.
        let w = dims(g, node, 1).unwrap_or_default();
        w.iter()
            .skip(1)
            .fold(1i64, |acc, &x| acc.saturating_mul(x))
            .max(1) as u64
    };
    let flops = match kind {
        Flops::Conv => out.saturating_mul(2).saturating_mul(per_weight()),
        Flops::ConvTranspose => elements(g, node.inputs.first().copied().flatten())
            .saturating_mul(2)
            .saturating_mul(per_weight()),
        Flops::MatMul | Flops::Gemm => {
            let a = dims(g, node, 0).unwrap_or_default();
            let k = match (kind, node.attr("transA")) {
                (Flops::Gemm, Some(cleave_ir::AttrValue::Int(1))) => a.first().copied(),
                _ => a.last().copied(),
            };
            out.saturating_mul(2)
                .saturating_mul(k.unwrap_or(1).max(1) as u64)
        }
        Flops::Output => out,
    };
    flops.max(1)
}
