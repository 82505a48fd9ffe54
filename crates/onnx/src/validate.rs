//! What the onnx checker refuses and cleave's later stages would trip on, found before any
//! work is done: each problem named by its node (or tensor) and cause, in one sentence.

use cleave_ir::{AttrValue, ElemType, Graph, Model, Node, WeightData};

/// The newest default-domain opset whose operators cleave knows (onnx 1.22).
pub const MAX_OPSET: i64 = 27;

/// The first problem found, as (what, cause): `what` is `node 'NAME' (OpType)`,
/// `tensor 'NAME'` or `the model`.
pub fn validate(m: &Model) -> Result<(), (String, String)> {
    for o in &m.opsets {
        if (o.domain.is_empty() || o.domain == "ai.onnx") && o.version > MAX_OPSET {
            return Err((
                "the model".into(),
                format!(
                    "imports opset {} of ai.onnx; cleave knows operators up to opset {MAX_OPSET}",
                    o.version
                ),
            ));
        }
    }
    graph(&m.graph)
}

fn graph(g: &Graph) -> Result<(), (String, String)> {
    for (id, w) in g.weights() {
        let name = &g.value(id).name;
        let what = || format!("tensor '{name}'");
        if let ElemType::Other(_) = w.elem {
            return Err((what(), "its element type is not an ONNX type".into()));
        }
        if w.dims.iter().any(|&d| d < 0) {
            return Err((what(), format!("negative dimension in {:?}", w.dims)));
        }
        if let (WeightData::Bytes(b), Some(bits)) = (&w.data, w.elem.bits()) {
            let need = w
                .element_count()
                .checked_mul(u64::from(bits))
                .map(|b| b.div_ceil(8));
            if need != Some(b.len() as u64) {
                return Err((
                    what(),
                    format!(
                        "holds {} bytes, but {} {:?} needs {}",
                        b.len(),
                        w.elem.name(),
                        w.dims,
                        need.map_or("more than 2^64".to_string(), |n| n.to_string())
                    ),
                ));
            }
        }
    }
    for (i, n) in g.nodes.iter().enumerate() {
        let default = n.domain.is_empty() || n.domain == "ai.onnx";
        if default {
            node(n).map_err(|cause| {
                let label = g.node_label(cleave_ir::NodeId(i as u32));
                (format!("node '{label}' ({})", n.op_type), cause)
            })?;
        }
        for a in &n.attrs {
            match &a.value {
                AttrValue::Graph(sub) => graph(sub)?,
                AttrValue::Graphs(subs) => {
                    for s in subs {
                        graph(s)?;
                    }
                }
                _ => {}
            }
        }
    }
    Ok(())
}

fn ints<'a>(n: &'a Node, name: &str) -> Option<&'a [i64]> {
    match n.attr(name)? {
        AttrValue::Ints(v) => Some(v),
        _ => None,
    }
}

fn int(n: &Node, name: &str) -> Option<i64> {
    match n.attr(name)? {
        AttrValue::Int(v) => Some(*v),
        _ => None,
    }
}

/// Attribute values outside what the operator defines.
fn node(n: &Node) -> Result<(), String> {
    let at_least = |name: &str, min: i64| -> Result<(), String> {
        if let Some(v) = ints(n, name) {
            if let Some(bad) = v.iter().find(|&&x| x < min) {
                return Err(format!("{name} {v:?}: {bad} is below {min}"));
            }
        }
        if let Some(v) = int(n, name) {
            if v < min {
                return Err(format!("{name} {v} is below {min}"));
            }
        }
        Ok(())
    };
    match n.op_type.as_str() {
        "DepthToSpace" | "SpaceToDepth" => at_least("blocksize", 1)?,
        "Conv" | "ConvTranspose" | "ConvInteger" | "QLinearConv" | "MaxPool" | "AveragePool"
        | "LpPool" | "DeformConv" => {
            at_least("strides", 1)?;
            at_least("dilations", 1)?;
            at_least("kernel_shape", 1)?;
            at_least("group", 1)?;
            at_least("pads", 0)?;
        }
        "Transpose" => {
            if let Some(p) = ints(n, "perm") {
                let mut seen = vec![false; p.len()];
                for &a in p {
                    let slot = usize::try_from(a).ok().and_then(|a| seen.get_mut(a));
                    match slot {
                        Some(s) if !*s => *s = true,
                        _ => return Err(format!("perm {p:?} is not a permutation")),
                    }
                }
            }
        }
        _ => {}
    }
    Ok(())
}
