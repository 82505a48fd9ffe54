//! Evaluation of small integer tensors (shapes, axes, sizes) so that shape-computing
//! subgraphs, as PyTorch exports them (`Shape → Gather → Unsqueeze → Concat → Reshape`),
//! give static shapes. Each op's fold is registered with the op by its family; this module
//! runs them and holds what they share: dim arithmetic and comparison.

use cleave_ir::Dim;

use super::Cx;
use crate::registry;

/// Larger integer tensors are data, not shapes: not worth tracking.
pub(crate) const MAX_ELEMENTS: u64 = 64;

/// The elements of the node's first output as dims (numbers, symbols or unknown), when it
/// is a small integer tensor whose elements its op's fold can follow from its inputs.
pub(crate) fn evaluate(cx: &Cx) -> Option<Vec<Dim>> {
    let default = cx.node.domain.is_empty() || cx.node.domain == "ai.onnx";
    if !default {
        return None;
    }
    let fold = registry().default_op(&cx.node.op_type)?.fold?;
    fold(cx).filter(|v| v.len() as u64 <= MAX_ELEMENTS)
}

/// Whether input `i` holds integers (the tracked elements of a float tensor are data).
pub(crate) fn is_int(cx: &Cx, i: usize) -> bool {
    cx.elem(i).is_some_and(|e| !e.is_float())
}

/// Input 0's elements unchanged: ops that only move or retype them.
pub(crate) fn same_elements(cx: &Cx) -> Option<Vec<Dim>> {
    Some(cx.dims_value(0)?.to_vec())
}

/// One element of integer arithmetic on dims. A symbol survives only the identities
/// (`+ 0`, `- 0`, `* 1`, `/ 1`); anything else on a symbol is unknown rather than an
/// expression that grows with every layer.
pub(crate) fn arith(op: &str, x: &Dim, y: &Dim) -> Dim {
    match (x, y) {
        (Dim::Fixed(a), Dim::Fixed(b)) => {
            let r = match op {
                "Add" => a.checked_add(*b),
                "Sub" => a.checked_sub(*b),
                "Mul" => a.checked_mul(*b),
                // ONNX integer Div truncates, as Rust's does.
                _ => a.checked_div(*b),
            };
            r.map_or(Dim::Unknown, Dim::Fixed)
        }
        (d, Dim::Fixed(0)) if matches!(op, "Add" | "Sub") => d.clone(),
        (Dim::Fixed(0), d) if op == "Add" => d.clone(),
        (d, Dim::Fixed(1)) if matches!(op, "Mul" | "Div") => d.clone(),
        (Dim::Fixed(1), d) if op == "Mul" => d.clone(),
        _ => Dim::Unknown,
    }
}

/// One element of a comparison of dims, as 1 or 0. A symbol equals itself; anything else
/// about symbols is unknown.
pub(crate) fn compare(op: &str, x: &Dim, y: &Dim) -> Dim {
    let r = match (x, y) {
        (Dim::Fixed(a), Dim::Fixed(b)) => match op {
            "Equal" => a == b,
            "Greater" => a > b,
            "Less" => a < b,
            "GreaterOrEqual" => a >= b,
            _ => a <= b,
        },
        (Dim::Param(a), Dim::Param(b)) if a == b => {
            matches!(op, "Equal" | "GreaterOrEqual" | "LessOrEqual")
        }
        // A symbol is a dim, never negative: PyTorch's `expand` tests each dim for -1.
        (Dim::Param(_), Dim::Fixed(b)) if *b < 0 => matches!(op, "Greater" | "GreaterOrEqual"),
        (Dim::Fixed(a), Dim::Param(_)) if *a < 0 => matches!(op, "Less" | "LessOrEqual"),
        _ => return Dim::Unknown,
    };
    Dim::Fixed(i64::from(r))
}

/// A binary op on two tracked tensors of equal length, or one of them a single element.
pub(crate) fn elementwise(cx: &Cx, f: fn(&str, &Dim, &Dim) -> Dim) -> Option<Vec<Dim>> {
    let (a, b) = (cx.dims_value(0)?, cx.dims_value(1)?);
    let op = cx.node.op_type.as_str();
    Some(match (a.len(), b.len()) {
        (n, m) if n == m => a.iter().zip(b).map(|(x, y)| f(op, x, y)).collect(),
        (_, 1) => a.iter().map(|x| f(op, x, &b[0])).collect(),
        (1, _) => b.iter().map(|y| f(op, &a[0], y)).collect(),
        _ => return None,
    })
}

/// `Where` on tracked tensors of equal length (or single elements): each element from `x`
/// where the condition is known true, from `y` where known false, else known only where the
/// two agree.
pub(crate) fn select(cx: &Cx) -> Option<Vec<Dim>> {
    let (c, x, y) = (cx.dims_value(0)?, cx.dims_value(1)?, cx.dims_value(2)?);
    let n = c.len().max(x.len()).max(y.len());
    let at = |v: &[Dim], i: usize| -> Option<Dim> {
        match v.len() {
            1 => Some(v[0].clone()),
            m if m == n => Some(v[i].clone()),
            _ => None,
        }
    };
    (0..n)
        .map(|i| {
            let (x, y) = (at(x, i)?, at(y, i)?);
            Some(match at(c, i)? {
                Dim::Fixed(0) => y,
                Dim::Fixed(_) => x,
                _ if x == y && x != Dim::Unknown => x,
                _ => Dim::Unknown,
            })
        })
        .collect()
}

/// A static shape as sizes, for indexing the flat elements of a folded tensor.
pub(crate) fn static_shape(cx: &Cx, i: usize) -> Option<Vec<usize>> {
    let shape = cx.shape(i)?;
    if let [_] = shape {
        // A 1-D tensor's length is that of its tracked elements, whatever its type says.
        return Some(vec![cx.dims_value(i)?.len()]);
    }
    shape
        .iter()
        .map(|d| usize::try_from(d.fixed()?).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{arith, compare};
    use cleave_ir::Dim;

    #[test]
    fn symbols_survive_identities_and_equal_themselves() {
        let n = || Dim::Param("n".into());
        assert_eq!(arith("Mul", &n(), &Dim::Fixed(1)), n());
        assert_eq!(arith("Mul", &n(), &Dim::Fixed(2)), Dim::Unknown);
        assert_eq!(arith("Div", &Dim::Fixed(7), &Dim::Fixed(0)), Dim::Unknown);
        assert_eq!(compare("Equal", &n(), &n()), Dim::Fixed(1));
        assert_eq!(compare("Less", &n(), &n()), Dim::Fixed(0));
        assert_eq!(compare("Equal", &n(), &Dim::Fixed(1)), Dim::Unknown);
        // A dim is never negative.
        assert_eq!(compare("Equal", &n(), &Dim::Fixed(-1)), Dim::Fixed(0));
        assert_eq!(compare("Greater", &n(), &Dim::Fixed(-1)), Dim::Fixed(1));
        assert_eq!(compare("LessOrEqual", &Dim::Fixed(-1), &n()), Dim::Fixed(1));
        assert_eq!(compare("Greater", &n(), &Dim::Fixed(0)), Dim::Unknown);
        assert_eq!(
            compare("Greater", &Dim::Fixed(3), &Dim::Fixed(1)),
            Dim::Fixed(1)
        );
    }
}
