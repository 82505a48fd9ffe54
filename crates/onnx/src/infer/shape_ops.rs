//! Ops that give a tensor another shape and keep its elements: reshapes, flattening,
//! transposes, unit axes added or removed, broadcasting and tiling.

use cleave_ir::{Dim, TensorType};

use super::dims::{axis, broadcast, fixed, product_dim};
use super::fold::{same_elements, static_shape};
use super::Cx;
use crate::op_registry::OpRegistry;
use crate::op_registry::Operands;
use crate::validate::{axis_in_range, int, ints, show};

pub(crate) fn register(r: &mut OpRegistry) {
    // What these give of tracked elements: the same elements in another shape.
    r.fold(
        &["Reshape", "Flatten", "Squeeze", "Unsqueeze"],
        same_elements,
    );
    r.fold(&["Transpose"], |cx| {
        let shape = static_shape(cx, 0)?;
        let perm = match cx.attr_ints("perm") {
            Some(p) => p
                .iter()
                .map(|&a| usize::try_from(a).ok())
                .collect::<Option<Vec<_>>>()?,
            None => (0..shape.len()).rev().collect(),
        };
        super::fold_nd::transpose(cx.dims_value(0)?, &shape, &perm)
    });
    r.rank_keeping(&["Tile"]);
    r.check(&["Transpose"], |n, _| {
        if let Some(p) = crate::validate::ints(n, "perm") {
            let mut seen = vec![false; p.len()];
            for &a in p {
                let slot = usize::try_from(a).ok().and_then(|a| seen.get_mut(a));
                match slot {
                    Some(s) if !*s => *s = true,
                    _ => return Err(format!("perm {p:?} is not a permutation")),
                }
            }
        }
        Ok(())
    });
    r.shapes(&["Flatten"], |o| axis_in_range(o, true));
    r.shapes(&["Transpose"], |o| {
        if let (Some(rank), Some(p)) = (o.rank(0), ints(o.n, "perm")) {
            if i64::try_from(p.len()).ok() != Some(rank) {
                return Err(format!(
                    "perm {p:?} has {} entries; its input has rank {rank}",
                    p.len()
                ));
            }
        }
        Ok(())
    });
    r.shapes(&["Squeeze", "Unsqueeze"], squeeze_shapes);
    r.shapes(&["Reshape"], reshape_shapes);
    r.shapes(&["Tile"], |o| {
        let Some(reps) = o.int_constant(1) else {
            return Ok(());
        };
        if let Some(bad) = reps.iter().find(|&&x| x < 0) {
            return Err(format!("repeats {reps:?}: {bad} is negative"));
        }
        if let Some(r) = o.rank(0).filter(|&r| r != reps.len() as i64) {
            return Err(format!(
                "repeats {reps:?} has {} entries; the input has rank {r}",
                reps.len()
            ));
        }
        // Known dims times their repeats, unknown ones as 1: past 2^63 no tensor holds it.
        let dims = o.dims(0).unwrap_or_default();
        let total = reps.iter().enumerate().try_fold(1i64, |acc, (a, &k)| {
            let d = dims.get(a).copied().flatten().unwrap_or(1).max(1);
            acc.checked_mul(k.max(1))?.checked_mul(d)
        });
        if total.is_none() {
            return Err(format!(
                "repeats {reps:?} make an output of more than 2^63 elements"
            ));
        }
        Ok(())
    });
    r.shapes(&["Expand"], expand_shapes);
    r.add(&["Reshape"], |cx| {
        vec![TensorType {
            elem: cx.elem(0),
            shape: reshape(cx),
        }]
    });
    r.add(&["Flatten"], |cx| {
        let shape = cx.shape(0).and_then(|s| {
            let a = cx.attr_i("axis").unwrap_or(1);
            let a = if a < 0 { a + s.len() as i64 } else { a } as usize;
            if a > s.len() {
                return None;
            }
            let (outer, inner) = s.split_at(a);
            Some(vec![product_dim(outer), product_dim(inner)])
        });
        vec![TensorType {
            elem: cx.elem(0),
            shape,
        }]
    });
    r.add(&["Transpose"], |cx| {
        let shape = cx.shape(0).and_then(|s| {
            let perm: Vec<i64> = cx
                .attr_ints("perm")
                .map_or_else(|| (0..s.len() as i64).rev().collect(), <[i64]>::to_vec);
            perm.iter()
                .map(|&p| s.get(usize::try_from(p).ok()?).cloned())
                .collect()
        });
        vec![TensorType {
            elem: cx.elem(0),
            shape,
        }]
    });
    r.add(&["Unsqueeze"], |cx| {
        let shape = cx.shape(0).and_then(|s| {
            let Some(axes) = cx.ints_attr_or_input("axes", 1, 13) else {
                let n = if cx.opset >= 13 {
                    cx.len_1d(1)?
                } else {
                    return None;
                };
                return Some(vec![Dim::Unknown; s.len() + n]);
            };
            let rank = s.len() + axes.len();
            let axes: Vec<usize> = axes.iter().map(|&a| axis(a, rank)).collect::<Option<_>>()?;
            let mut rest = s.iter();
            (0..rank)
                .map(|i| {
                    if axes.contains(&i) {
                        Some(Dim::Fixed(1))
                    } else {
                        rest.next().cloned()
                    }
                })
                .collect()
        });
        vec![TensorType {
            elem: cx.elem(0),
            shape,
        }]
    });
    r.add(&["Squeeze"], |cx| {
        let shape = cx.shape(0).and_then(|s| {
            let axes: Vec<usize> = if cx.ints_absent("axes", 1, 13) {
                if s.iter().any(|d| d.fixed().is_none()) {
                    return None;
                }
                (0..s.len()).filter(|&i| s[i] == Dim::Fixed(1)).collect()
            } else {
                let Some(axes) = cx.ints_attr_or_input("axes", 1, 13) else {
                    let n = if cx.opset >= 13 {
                        cx.len_1d(1)?
                    } else {
                        return None;
                    };
                    return Some(vec![Dim::Unknown; s.len().checked_sub(n)?]);
                };
                axes.iter()
                    .map(|&a| axis(a, s.len()))
                    .collect::<Option<_>>()?
            };
            Some(
                s.iter()
                    .enumerate()
                    .filter(|(i, _)| !axes.contains(i))
                    .map(|(_, d)| d.clone())
                    .collect(),
            )
        });
        vec![TensorType {
            elem: cx.elem(0),
            shape,
        }]
    });
    r.add(&["Expand"], |cx| {
        let target = cx
            .dims_value(1)
            .map(<[Dim]>::to_vec)
            .or_else(|| Some(vec![Dim::Unknown; cx.len_1d(1)?]));
        let shape = match (cx.shape(0), target) {
            (Some(s), Some(t)) => Some(broadcast(&[s, &t])),
            _ => None,
        };
        vec![TensorType {
            elem: cx.elem(0),
            shape,
        }]
    });
    r.add(&["Tile"], |cx| {
        let shape = match (cx.shape(0), cx.ints(1)) {
            (Some(s), Some(reps)) if s.len() == reps.len() => Some(
                s.iter()
                    .zip(reps)
                    .map(|(d, &r)| super::dims::map_fixed(d, |n| n.checked_mul(r)))
                    .collect(),
            ),
            _ => None,
        };
        vec![TensorType {
            elem: cx.elem(0),
            shape,
        }]
    });
}

fn reshape(cx: &Cx) -> Option<Vec<Dim>> {
    let target: Vec<Dim> = if cx.opset >= 5 {
        match cx.dims_value(1) {
            Some(v) => v.to_vec(),
            // Values unknown, count known: the rank is.
            None => return Some(vec![Dim::Unknown; cx.len_1d(1)?]),
        }
    } else {
        fixed(cx.attr_ints("shape")?)
    };
    let input = cx.shape(0);
    let allow_zero = cx.attr_i("allowzero").unwrap_or(0) != 0;
    let mut out: Vec<Dim> = target
        .iter()
        .enumerate()
        .map(|(i, d)| match d {
            Dim::Fixed(0) if !allow_zero => input
                .and_then(|s| s.get(i).cloned())
                .unwrap_or(Dim::Unknown),
            Dim::Fixed(-1) => Dim::Unknown,
            d => d.clone(),
        })
        .collect();
    if let (Some(hole), Some(input)) = (target.iter().position(|d| *d == Dim::Fixed(-1)), input) {
        let others: Vec<Dim> = out
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != hole)
            .map(|(_, d)| d.clone())
            .collect();
        out[hole] = quotient(input, &others);
    }
    Some(out)
}

/// `product(num) / product(den)` as a dim, cancelling equal symbols first, so that
/// `[N, 3, 4] → [N, -1]` gives 12 and `[1, N, 8] → [8, -1]` gives `N`.
fn quotient(num: &[Dim], den: &[Dim]) -> Dim {
    let mut num: Vec<&Dim> = num.iter().filter(|d| **d != Dim::Fixed(1)).collect();
    let mut rest = Vec::new();
    for d in den.iter().filter(|d| **d != Dim::Fixed(1)) {
        match d {
            Dim::Param(_) => match num.iter().position(|n| *n == d) {
                Some(i) => {
                    num.remove(i);
                }
                None => return Dim::Unknown,
            },
            Dim::Fixed(_) => rest.push(d),
            Dim::Unknown => return Dim::Unknown,
        }
    }
    // Dims come from the file: a product that overflows is unknown, not a panic.
    let product = |ds: &[&Dim]| {
        ds.iter()
            .try_fold(1i64, |acc, d| acc.checked_mul(d.fixed()?))
    };
    let den_n = product(&rest);
    let (syms, nums): (Vec<&Dim>, Vec<&Dim>) = num.into_iter().partition(|d| d.fixed().is_none());
    let num_n = product(&nums);
    match (syms.as_slice(), num_n, den_n) {
        ([], Some(a), Some(b)) if b != 0 && a % b == 0 => Dim::Fixed(a / b),
        ([s], Some(a), Some(b)) if a == b && matches!(s, Dim::Param(_)) => (*s).clone(),
        _ => Dim::Unknown,
    }
}

/// Axes in range, none twice; Squeeze's of size 1.
fn squeeze_shapes(o: &Operands) -> Result<(), String> {
    let (Some(rank), Some(v)) = (o.rank(0), o.list("axes", 1)) else {
        return Ok(());
    };
    let squeeze = o.n.op_type == "Squeeze";
    // Unsqueeze's axes index its output, which has one more dim per axis.
    let out = if squeeze { rank } else { rank + v.len() as i64 };
    let mut seen = Vec::with_capacity(v.len());
    for &a in &v {
        if !(-out..out).contains(&a) {
            return Err(format!("axes {v:?}: {a} is out of range for rank {out}"));
        }
        let a = if a < 0 { a + out } else { a };
        if seen.contains(&a) {
            return Err(format!("axes {v:?} name axis {a} twice"));
        }
        seen.push(a);
    }
    if squeeze {
        let dims = o.dims(0).unwrap_or_default();
        for &a in &seen {
            if let Some(Some(d)) = usize::try_from(a).ok().and_then(|a| dims.get(a)) {
                if *d != 1 {
                    return Err(format!("axes {v:?}: axis {a} has size {d}, not 1"));
                }
            }
        }
    }
    Ok(())
}

/// A target shape with non-negative dims that broadcasts with the input's.
fn expand_shapes(o: &Operands) -> Result<(), String> {
    let Some(shape) = o.int_constant(1) else {
        return Ok(());
    };
    if let Some(bad) = shape.iter().find(|&&x| x < 0) {
        return Err(format!("shape {shape:?}: {bad} is negative"));
    }
    if let Some(dims) = o.dims(0) {
        for (d, s) in dims.iter().rev().zip(shape.iter().rev()) {
            if let Some(d) = *d {
                if d != *s && d != 1 && *s != 1 {
                    return Err(format!(
                        "shape {shape:?} does not broadcast with the input's {}",
                        show(&dims)
                    ));
                }
            }
        }
    }
    Ok(())
}

/// A target shape with at most one -1 that holds the input's elements.
fn reshape_shapes(o: &Operands) -> Result<(), String> {
    let Some(shape) = o.int_constant(1) else {
        return Ok(());
    };
    if shape.iter().filter(|&&d| d == -1).count() > 1 {
        return Err(format!("shape {shape:?} has more than one -1"));
    }
    if let Some(bad) = shape.iter().find(|&&d| d < -1) {
        return Err(format!("shape {shape:?}: {bad} is below -1"));
    }
    let allow_zero = int(o.n, "allowzero").unwrap_or(0) != 0;
    let input = o.dims(0);
    // The target's dims as numbers: a 0 copies the input's dim unless allowzero.
    let mut known: Option<i64> = Some(1);
    for (i, &d) in shape.iter().enumerate() {
        let d = match d {
            -1 => continue,
            0 if !allow_zero => match input.as_ref().map(|x| x.get(i).copied()) {
                Some(Some(Some(x))) => x,
                Some(None) => {
                    return Err(format!(
                        "shape {shape:?} copies dim {i} (a 0), which the input's {} lacks",
                        show(input.as_deref().unwrap_or_default())
                    ))
                }
                _ => {
                    known = None;
                    continue;
                }
            },
            d => d,
        };
        known = match known.map(|k| k.checked_mul(d)) {
            Some(None) => return Err(format!("shape {shape:?} has more than 2^63 elements")),
            Some(Some(k)) => Some(k),
            None => None,
        };
    }
    let total = input
        .as_ref()
        .and_then(|x| x.iter().try_fold(1i64, |t, d| t.checked_mul((*d)?)));
    if let (Some(total), Some(known)) = (total, known) {
        let fits = if shape.contains(&-1) {
            known != 0 && total % known == 0 || known == 0 && total == 0
        } else {
            known == total
        };
        if !fits {
            return Err(format!(
                "shape {shape:?} cannot hold the input's {total} elements ({})",
                show(input.as_deref().unwrap_or_default())
            ));
        }
    }
    Ok(())
}
