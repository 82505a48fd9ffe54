//! Evaluation of small integer tensors (shapes, axes, sizes) so that shape-computing
//! subgraphs, as PyTorch exports them (`Shape → Gather → Unsqueeze → Concat → Reshape`),
//! give static shapes.

use cleave_ir::{AttrValue, Dim};

use super::dims::{axis, fixed};
use super::Cx;

/// Larger integer tensors are data, not shapes: not worth tracking.
pub(crate) const MAX_ELEMENTS: u64 = 64;

/// The elements of the node's first output as dims (numbers, symbols or unknown), when it
/// is a small integer tensor whose elements can be followed from its inputs.
pub(crate) fn evaluate(cx: &Cx) -> Option<Vec<Dim>> {
    let is_int = |i: usize| cx.elem(i).is_some_and(|e| !e.is_float());
    let v: Vec<Dim> = match cx.node.op_type.as_str() {
        "Constant" => fixed(&match cx.node.attrs.first().map(|a| &a.value)? {
            AttrValue::Tensor(t) if t.element_count() <= MAX_ELEMENTS => t.to_i64s()?,
            AttrValue::Int(i) => vec![*i],
            AttrValue::Ints(v) => v.clone(),
            _ => return None,
        }),
        "Shape" => {
            let s = cx.shape(0)?;
            let (start, end) = super::slicing::shape_range(cx, s.len());
            s.get(start..end)?.to_vec()
        }
        "Size" => vec![super::dims::product(cx.shape(0)?).map_or(Dim::Unknown, Dim::Fixed)],
        "Identity" | "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" => cx.dims_value(0)?.to_vec(),
        "Cast" if cx.attr_i("to").is_some_and(|t| matches!(t, 6 | 7)) && is_int(0) => {
            cx.dims_value(0)?.to_vec()
        }
        // To bool: a dim tested for zero, as exporters write `if x.shape[0]:`.
        "Cast" if cx.attr_i("to") == Some(9) && is_int(0) => cx
            .dims_value(0)?
            .iter()
            .map(|d| match d {
                Dim::Fixed(v) => Dim::Fixed(i64::from(*v != 0)),
                _ => Dim::Unknown,
            })
            .collect(),
        "Gather" => {
            let data = cx.dims_value(0)?;
            if cx.rank(0)? != 1 {
                return None;
            }
            cx.ints(1)?
                .iter()
                .map(|&i| data.get(axis(i, data.len())?).cloned())
                .collect::<Option<_>>()?
        }
        "Concat" => {
            let rank = cx.rank(0)?;
            let ax = axis(cx.attr_i("axis").unwrap_or(0), rank.max(1))?;
            if rank <= 1 || ax == 0 {
                // Along the outermost axis the flat elements simply follow one another.
                let mut out = Vec::new();
                for i in 0..cx.n_inputs() {
                    out.extend_from_slice(cx.dims_value(i)?);
                }
                out
            } else {
                let mut parts = Vec::new();
                for i in 0..cx.n_inputs() {
                    parts.push((cx.dims_value(i)?, static_shape(cx, i)?));
                }
                super::fold_nd::concat(&parts, ax)?
            }
        }
        "Slice" => {
            let data = cx.dims_value(0)?;
            let shape = static_shape(cx, 0)?;
            let (starts, ends, axes, steps) = if cx.opset >= 10 {
                let starts = cx.ints(1)?.to_vec();
                let axes = match cx.has_input(3) {
                    true => cx.ints(3)?.to_vec(),
                    false => (0..starts.len() as i64).collect(),
                };
                let steps = match cx.has_input(4) {
                    true => cx.ints(4)?.to_vec(),
                    false => vec![1; starts.len()],
                };
                (starts, cx.ints(2)?.to_vec(), axes, steps)
            } else {
                let starts = cx.attr_ints("starts")?.to_vec();
                let axes = match cx.attr_ints("axes") {
                    Some(a) => a.to_vec(),
                    None => (0..starts.len() as i64).collect(),
                };
                let n = starts.len();
                (starts, cx.attr_ints("ends")?.to_vec(), axes, vec![1; n])
            };
            let axes = axes
                .iter()
                .map(|&a| axis(a, shape.len()))
                .collect::<Option<Vec<_>>>()?;
            super::fold_nd::slice(data, &shape, &starts, &ends, &axes, &steps)?
        }
        "Transpose" => {
            let shape = static_shape(cx, 0)?;
            let perm = match cx.attr_ints("perm") {
                Some(p) => p
                    .iter()
                    .map(|&a| usize::try_from(a).ok())
                    .collect::<Option<Vec<_>>>()?,
                None => (0..shape.len()).rev().collect(),
            };
            super::fold_nd::transpose(cx.dims_value(0)?, &shape, &perm)?
        }
        "ConstantOfShape" => {
            let count = cx
                .ints(0)?
                .iter()
                .try_fold(1u64, |acc, &d| acc.checked_mul(u64::try_from(d).ok()?))?;
            if count > MAX_ELEMENTS {
                return None;
            }
            // A float fill (the default is float 0) is data, not a shape.
            let fill = match cx.attr("value") {
                Some(AttrValue::Tensor(t)) if !t.elem.is_float() => *t.to_i64s()?.first()?,
                _ => return None,
            };
            vec![Dim::Fixed(fill); usize::try_from(count).ok()?]
        }
        "Add" | "Sub" | "Mul" | "Div" if is_int(0) && is_int(1) => elementwise(cx, arith)?,
        // Comparisons of dims decide If branches: 1 for true, 0 for false.
        "Equal" | "Greater" | "Less" | "GreaterOrEqual" | "LessOrEqual"
            if is_int(0) && is_int(1) =>
        {
            elementwise(cx, compare)?
        }
        "Not" => cx
            .dims_value(0)?
            .iter()
            .map(|d| match d {
                Dim::Fixed(v) => Dim::Fixed(i64::from(*v == 0)),
                _ => Dim::Unknown,
            })
            .collect(),
        _ => return None,
    };
    (v.len() as u64 <= MAX_ELEMENTS).then_some(v)
}

/// One element of integer arithmetic on dims. A symbol survives only the identities
/// (`+ 0`, `- 0`, `* 1`, `/ 1`); anything else on a symbol is unknown rather than an
/// expression that grows with every layer.
fn arith(op: &str, x: &Dim, y: &Dim) -> Dim {
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
fn compare(op: &str, x: &Dim, y: &Dim) -> Dim {
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
        _ => return Dim::Unknown,
    };
    Dim::Fixed(i64::from(r))
}

/// A binary op on two tracked tensors of equal length, or one of them a single element.
fn elementwise(cx: &Cx, f: fn(&str, &Dim, &Dim) -> Dim) -> Option<Vec<Dim>> {
    let (a, b) = (cx.dims_value(0)?, cx.dims_value(1)?);
    let op = cx.node.op_type.as_str();
    Some(match (a.len(), b.len()) {
        (n, m) if n == m => a.iter().zip(b).map(|(x, y)| f(op, x, y)).collect(),
        (_, 1) => a.iter().map(|x| f(op, x, &b[0])).collect(),
        (1, _) => b.iter().map(|y| f(op, &a[0], y)).collect(),
        _ => return None,
    })
}

/// A static shape as sizes, for indexing the flat elements of a folded tensor.
fn static_shape(cx: &Cx, i: usize) -> Option<Vec<usize>> {
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
        assert_eq!(
            compare("Greater", &Dim::Fixed(3), &Dim::Fixed(1)),
            Dim::Fixed(1)
        );
    }
}
