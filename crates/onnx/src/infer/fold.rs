//! Evaluation of small integer tensors (shapes, axes, sizes) so that shape-computing
//! subgraphs, as PyTorch exports them (`Shape → Gather → Unsqueeze → Concat → Reshape`),
//! give static shapes.

use cleave_ir::{AttrValue, Dim};

use super::dims::axis;
use super::Cx;

/// Larger integer tensors are data, not shapes: not worth tracking.
pub(crate) const MAX_ELEMENTS: u64 = 64;

/// The integer value of the node's first output, when its inputs are known.
pub(crate) fn evaluate(cx: &Cx) -> Option<Vec<i64>> {
    let is_int = |i: usize| cx.elem(i).is_some_and(|e| !e.is_float());
    let v = match cx.node.op_type.as_str() {
        "Constant" => match cx.node.attrs.first().map(|a| &a.value)? {
            AttrValue::Tensor(t) if t.element_count() <= MAX_ELEMENTS => t.to_i64s()?,
            AttrValue::Int(i) => vec![*i],
            AttrValue::Ints(v) => v.clone(),
            _ => return None,
        },
        "Shape" => {
            let s = cx.shape(0)?;
            let (start, end) = super::shape_ops::shape_range(cx, s.len());
            s[start..end]
                .iter()
                .map(Dim::fixed)
                .collect::<Option<_>>()?
        }
        "Size" => vec![super::dims::product(cx.shape(0)?)?],
        "Identity" | "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" => cx.ints(0)?.to_vec(),
        "Cast" if cx.attr_i("to").is_some_and(|t| matches!(t, 6 | 7)) && is_int(0) => {
            cx.ints(0)?.to_vec()
        }
        "Gather" => {
            let data = cx.ints(0)?;
            if cx.rank(0)? != 1 {
                return None;
            }
            cx.ints(1)?
                .iter()
                .map(|&i| data.get(axis(i, data.len())?).copied())
                .collect::<Option<_>>()?
        }
        "Concat" => {
            let mut out = Vec::new();
            for i in 0..cx.n_inputs() {
                out.extend_from_slice(cx.ints(i)?);
            }
            out
        }
        "Slice" if cx.opset >= 10 && cx.rank(0)? == 1 => {
            let data = cx.ints(0)?;
            let (start, end) = (*cx.ints(1)?.first()?, *cx.ints(2)?.first()?);
            let step = if cx.has_input(4) {
                *cx.ints(4)?.first()?
            } else {
                1
            };
            if step != 1 {
                return None;
            }
            let len = data.len() as i64;
            let clamp = |v: i64| (if v < 0 { v + len } else { v }).clamp(0, len) as usize;
            data.get(clamp(start)..clamp(end).max(clamp(start)))?
                .to_vec()
        }
        "Add" | "Sub" | "Mul" | "Div" if is_int(0) && is_int(1) => {
            let (a, b) = (cx.ints(0)?, cx.ints(1)?);
            let f = |x: i64, y: i64| -> Option<i64> {
                match cx.node.op_type.as_str() {
                    "Add" => x.checked_add(y),
                    "Sub" => x.checked_sub(y),
                    "Mul" => x.checked_mul(y),
                    _ => x.checked_div(y),
                }
            };
            match (a.len(), b.len()) {
                (n, m) if n == m => a
                    .iter()
                    .zip(b)
                    .map(|(&x, &y)| f(x, y))
                    .collect::<Option<_>>()?,
                (_, 1) => a.iter().map(|&x| f(x, b[0])).collect::<Option<_>>()?,
                (1, _) => b.iter().map(|&y| f(a[0], y)).collect::<Option<_>>()?,
                _ => return None,
            }
        }
        _ => return None,
    };
    (v.len() as u64 <= MAX_ELEMENTS).then_some(v)
}
