//! A rough cost model: floating-point operations per node, from inferred shapes. Used to cut
//! a model into pipeline stages of about equal work.

use cleave_ir::{Graph, Node};

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
    let flops = match node.op_type.as_str() {
        "Conv" | "ConvInteger" => {
            // Each output element reads Cin/group × kernel inputs.
            let w = dims(g, node, 1).unwrap_or_default();
            let per = w.iter().skip(1).fold(1i64, |acc, &x| acc.saturating_mul(x));
            out.saturating_mul(2).saturating_mul(per.max(1) as u64)
        }
        "ConvTranspose" => {
            let w = dims(g, node, 1).unwrap_or_default();
            let per = w.iter().skip(1).fold(1i64, |acc, &x| acc.saturating_mul(x));
            elements(g, node.inputs.first().copied().flatten())
                .saturating_mul(2)
                .saturating_mul(per.max(1) as u64)
        }
        "Gemm" | "MatMul" | "MatMulInteger" => {
            let a = dims(g, node, 0).unwrap_or_default();
            let k = match (node.op_type.as_str(), node.attr("transA")) {
                ("Gemm", Some(cleave_ir::AttrValue::Int(1))) => a.first().copied(),
                _ => a.last().copied(),
            };
            out.saturating_mul(2)
                .saturating_mul(k.unwrap_or(1).max(1) as u64)
        }
        _ => out,
    };
    flops.max(1)
}
