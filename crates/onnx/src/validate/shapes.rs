//! The checks that need inferred ranks and shapes, or the values of constant inputs: axes in
//! range, attribute lists as long as the rank, operands that fit each other, shape arguments a
//! kernel can honour. Each op's check is registered with the op, in its family's module
//! (`OpRegistry::shapes`); this module runs them after type inference, before any stage reads an
//! axis, and holds what they share. Each check speaks only where what it needs is known; an
//! unknown dim is never a reason to refuse.

use cleave_ir::{AttrValue, Graph, Model};

use super::{at_node, int, Refusal, Subject};
use crate::op_registry::Operands;
use crate::registry;

pub fn typed(m: &Model) -> Result<(), Refusal> {
    typed_graph(&m.graph)
}

fn typed_graph(g: &Graph) -> Result<(), Refusal> {
    for (i, n) in g.nodes.iter().enumerate() {
        let check = (n.domain.is_empty() || n.domain == "ai.onnx")
            .then(|| registry().default_op(&n.op_type).and_then(|e| e.shapes))
            .flatten();
        if let Some(check) = check {
            check(&Operands { g, n }).map_err(|cause| at_node(g, i, cause))?;
        }
        for a in &n.attrs {
            match &a.value {
                AttrValue::Graph(sub) => typed_graph(sub)?,
                AttrValue::Graphs(subs) => {
                    for s in subs {
                        typed_graph(s)?;
                    }
                }
                _ => {}
            }
        }
    }
    // A tensor of more than 2^63 elements fits no memory and no engine's index.
    for v in &g.values {
        let Some(dims) = v.ty.static_dims() else {
            continue;
        };
        if dims
            .iter()
            .try_fold(1i64, |acc, &d| acc.checked_mul(d.max(0)))
            .is_none()
        {
            return Err((
                Subject::Tensor(v.name.to_string()),
                format!("dims {dims:?} hold more than 2^63 elements"),
            ));
        }
    }
    Ok(())
}

/// Dims for a message: `[1, ?, 3]`.
pub(crate) fn show(dims: &[Option<i64>]) -> String {
    let d: Vec<String> = dims
        .iter()
        .map(|d| d.map_or("?".into(), |d| d.to_string()))
        .collect();
    format!("[{}]", d.join(", "))
}

/// The `axis` attribute names an axis of the first input (or one past its last, `past_end`,
/// where the op may split after it).
pub(crate) fn axis_in_range(o: &Operands, past_end: bool) -> Result<(), String> {
    let (Some(rank), Some(a)) = (o.rank(0), int(o.n, "axis")) else {
        return Ok(());
    };
    let hi = if past_end { rank + 1 } else { rank };
    if (-rank..hi).contains(&a) {
        Ok(())
    } else {
        Err(format!("axis {a} is out of range for rank {rank}"))
    }
}

/// The `axis` check alone, for ops that have no other shape check.
pub(crate) fn axis_only(o: &Operands) -> Result<(), String> {
    axis_in_range(o, false)
}
