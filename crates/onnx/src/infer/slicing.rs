//! Ops that cut, join or make tensors (slices, splits, gathers, pads, shapes, constants,
//! ranges): their output shapes often need constant inputs.

use cleave_ir::{AttrValue, Dim, ElemType, TensorType};

use super::dims::{axis, fixed};
use super::fold::{static_shape, MAX_ELEMENTS};
use super::Cx;
use crate::dtype::elem_from_code;
use crate::op_registry::OpRegistry;
use crate::op_registry::Operands;
use crate::validate::{axis_in_range, axis_only, int};

pub(crate) fn register(r: &mut OpRegistry) {
    register_folds(r);
    r.rank_keeping(&["Pad", "Slice", "CenterCropPad"]);
    r.nondeterministic(&[
        "RandomNormal",
        "RandomUniform",
        "RandomNormalLike",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
    ]);
    r.shapes(&["Gather", "GatherElements"], axis_only);
    r.shapes(&["Concat"], |o| {
        axis_in_range(o, false)?;
        let ranks: Vec<(usize, i64)> = (0..o.n.inputs.len())
            .filter_map(|i| o.rank(i).map(|r| (i, r)))
            .collect();
        if let Some(&(i0, r0)) = ranks.first() {
            if let Some((i, r)) = ranks.iter().find(|(_, r)| *r != r0) {
                return Err(format!("input {i} has rank {r}, input {i0} rank {r0}"));
            }
        }
        Ok(())
    });
    r.shapes(&["Split"], |o| {
        axis_in_range(o, false)?;
        split_shapes(o)
    });
    r.shapes(&["Pad"], |o| {
        if let (Some(r), Some(p)) = (o.rank(0), o.list("pads", 1)) {
            // Opset 18 pads only the axes it is given.
            let axes = o.int_constant(3).map_or(r, |a| a.len() as i64);
            if p.len() as i64 != 2 * axes {
                return Err(format!(
                    "pads {p:?} has {} entries; {axes} padded axes need {}",
                    p.len(),
                    2 * axes
                ));
            }
            // Negative pads crop; they may not crop more than the axis holds.
            let dims = o.dims(0).unwrap_or_default();
            if o.int_constant(3).is_none() && dims.len() as i64 == r {
                let half = dims.len();
                for (a, d) in dims.iter().enumerate() {
                    let (Some(d), Some(&b), Some(&e)) = (d, p.get(a), p.get(a + half)) else {
                        continue;
                    };
                    if i128::from(*d) + i128::from(b) + i128::from(e) < 0 {
                        return Err(format!(
                            "pads {p:?} crop {} from axis {a}, which holds {d}",
                            -(i128::from(b) + i128::from(e))
                        ));
                    }
                }
            }
        }
        Ok(())
    });
    r.shapes(&["ConstantOfShape"], |o| {
        let Some(shape) = o.int_constant(0) else {
            return Ok(());
        };
        match shape.iter().find(|&&x| x < 0) {
            Some(bad) => Err(format!("shape {shape:?}: {bad} is negative")),
            None => Ok(()),
        }
    });
    r.shapes(&["Slice"], |o| {
        if let Some(steps) = o.int_constant(4).filter(|s| s.contains(&0)) {
            return Err(format!("steps {steps:?}: a step of 0 never advances"));
        }
        if let (Some(r), Some(axes)) = (o.rank(0), o.list("axes", 3)) {
            if let Some(a) = axes.iter().find(|&&a| a < -r || a >= r) {
                return Err(format!("axes {axes:?}: {a} is out of range for rank {r}"));
            }
        }
        Ok(())
    });
    r.shapes(&["Range"], |o| {
        let delta = o.constant(2).as_deref().and_then(<[f64]>::first).copied();
        if delta == Some(0.0) {
            return Err("delta 0 never reaches the limit".into());
        }
        Ok(())
    });
    r.add(&["Concat"], |cx| {
        let shapes: Option<Vec<&[Dim]>> = (0..cx.n_inputs())
            .filter(|&i| cx.has_input(i))
            .map(|i| cx.shape(i))
            .collect();
        let shape = shapes.and_then(|shapes| {
            let first = shapes.first()?;
            let a = axis(cx.attr_i("axis")?, first.len())?;
            let mut out = first.to_vec();
            out[a] = shapes
                .iter()
                .map(|s| s.get(a).and_then(Dim::fixed))
                .sum::<Option<i64>>()
                .map_or(Dim::Unknown, Dim::Fixed);
            Some(out)
        });
        let elem = (0..cx.n_inputs()).find_map(|i| cx.elem(i));
        vec![TensorType { elem, shape }]
    });
    r.add(&["Split"], split);
    r.add(&["Slice"], |cx| {
        vec![TensorType {
            elem: cx.elem(0),
            shape: slice(cx),
        }]
    });
    r.add(&["Gather"], |cx| {
        let shape = match (cx.shape(0), cx.shape(1)) {
            (Some(d), Some(i)) => axis(cx.attr_i("axis").unwrap_or(0), d.len()).map(|a| {
                let mut out = d[..a].to_vec();
                out.extend_from_slice(i);
                out.extend_from_slice(&d[a + 1..]);
                out
            }),
            _ => None,
        };
        vec![TensorType {
            elem: cx.elem(0),
            shape,
        }]
    });
    r.add(&["GatherElements"], |cx| {
        vec![TensorType {
            elem: cx.elem(0),
            shape: cx.ty(1).shape,
        }]
    });
    r.add(&["Shape"], |cx| {
        let len = cx.rank(0).map(|r| {
            let (start, end) = shape_range(cx, r);
            Dim::Fixed(end.saturating_sub(start) as i64)
        });
        vec![TensorType {
            elem: Some(ElemType::I64),
            shape: Some(vec![len.unwrap_or(Dim::Unknown)]),
        }]
    });
    r.add(&["Size"], |_| vec![TensorType::fixed(ElemType::I64, &[])]);
    r.add(&["ConstantOfShape"], |cx| {
        let elem = match cx.attr("value") {
            Some(AttrValue::Tensor(t)) => Some(t.elem),
            _ => Some(ElemType::F32),
        };
        let shape = cx
            .dims_value(0)
            .map(<[Dim]>::to_vec)
            .or_else(|| Some(vec![Dim::Unknown; cx.len_1d(0)?]));
        vec![TensorType { elem, shape }]
    });
    r.add(&["Constant"], |cx| {
        let attr = cx.node.attrs.first();
        let ty = match attr.map(|a| (a.name.as_str(), &a.value)) {
            Some((_, AttrValue::Tensor(t))) => t.ty(),
            Some(("value_float", _)) => TensorType::fixed(ElemType::F32, &[]),
            Some(("value_int", _)) => TensorType::fixed(ElemType::I64, &[]),
            Some(("value_string", _)) => TensorType::fixed(ElemType::Str, &[]),
            Some(("value_floats", AttrValue::Floats(v))) => {
                TensorType::fixed(ElemType::F32, &[v.len() as i64])
            }
            Some(("value_ints", AttrValue::Ints(v))) => {
                TensorType::fixed(ElemType::I64, &[v.len() as i64])
            }
            Some(("value_strings", AttrValue::Strings(v))) => {
                TensorType::fixed(ElemType::Str, &[v.len() as i64])
            }
            _ => TensorType::default(),
        };
        vec![ty]
    });
    r.add(&["Pad"], |cx| {
        vec![TensorType {
            elem: cx.elem(0),
            shape: pad(cx),
        }]
    });
    r.add(&["Range"], |cx| {
        let n = match (cx.ints(0), cx.ints(1), cx.ints(2)) {
            (Some([s]), Some([l]), Some([d])) if *d != 0 => {
                Dim::Fixed(((l - s) as f64 / *d as f64).ceil().max(0.0) as i64)
            }
            _ => Dim::Unknown,
        };
        vec![TensorType {
            elem: cx.elem(0),
            shape: Some(vec![n]),
        }]
    });
    r.add(&["NonZero"], |cx| {
        let r = cx.rank(0).map_or(Dim::Unknown, |r| Dim::Fixed(r as i64));
        vec![TensorType {
            elem: Some(ElemType::I64),
            shape: Some(vec![r, Dim::Unknown]),
        }]
    });
    r.add(&["EyeLike"], |cx| {
        let elem = cx
            .attr_i("dtype")
            .and_then(|c| elem_from_code(c as i32))
            .or(cx.elem(0));
        cx.like_input(elem)
    });
    r.add(&["RandomNormal", "RandomUniform"], |cx| {
        let elem = cx
            .attr_i("dtype")
            .and_then(|c| elem_from_code(c as i32))
            .or(Some(ElemType::F32));
        vec![TensorType {
            elem,
            shape: cx.attr_ints("shape").map(fixed),
        }]
    });
    r.add(
        &["RandomNormalLike", "RandomUniformLike", "Bernoulli"],
        |cx| {
            let elem = cx
                .attr_i("dtype")
                .and_then(|c| elem_from_code(c as i32))
                .or(cx.elem(0));
            cx.like_input(elem)
        },
    );
}

/// `start..end` of the dims that `Shape` returns (opset 15 added the attributes).
pub(crate) fn shape_range(cx: &Cx, rank: usize) -> (usize, usize) {
    let clamp = |v: i64| -> usize {
        let v = if v < 0 { v + rank as i64 } else { v };
        v.clamp(0, rank as i64) as usize
    };
    let start = clamp(cx.attr_i("start").unwrap_or(0));
    let end = clamp(cx.attr_i("end").unwrap_or(rank as i64));
    (start, end.max(start))
}

fn split(cx: &Cx) -> Vec<TensorType> {
    let n = cx.n_outputs();
    let elem = cx.elem(0);
    let Some(s) = cx.shape(0) else {
        return vec![TensorType { elem, shape: None }; n];
    };
    let Some(a) = axis(cx.attr_i("axis").unwrap_or(0), s.len()) else {
        return Vec::new();
    };
    let sizes: Option<Vec<i64>> = if cx.opset >= 13 && cx.has_input(1) {
        cx.ints(1).map(<[i64]>::to_vec)
    } else if let Some(v) = cx.attr_ints("split") {
        Some(v.to_vec())
    } else {
        s[a].fixed().filter(|&len| len >= 0).map(|len| {
            let parts = cx.attr_i("num_outputs").unwrap_or(n as i64).max(1);
            let chunk = len / parts + i64::from(len % parts != 0);
            // Only the node's outputs get a size, however many parts the attribute claims.
            (0..n as i64)
                .map(|i| len.saturating_sub(i.saturating_mul(chunk)).clamp(0, chunk))
                .collect()
        })
    };
    (0..n)
        .map(|i| {
            let mut d = s.to_vec();
            d[a] = sizes
                .as_ref()
                .and_then(|v| v.get(i))
                .map_or(Dim::Unknown, |&x| Dim::Fixed(x));
            TensorType {
                elem,
                shape: Some(d),
            }
        })
        .collect()
}

/// Slice's starts, ends, axes and steps, from inputs (opset 10+) or attributes.
type SliceArgs = (Vec<i64>, Vec<i64>, Option<Vec<i64>>, Option<Vec<i64>>);

fn slice(cx: &Cx) -> Option<Vec<Dim>> {
    let s = cx.shape(0)?;
    let (starts, ends, axes, steps): SliceArgs = if cx.opset >= 10 {
        let opt = |i: usize| {
            if cx.has_input(i) {
                cx.ints(i).map(<[i64]>::to_vec).map(Some)
            } else {
                Some(None)
            }
        };
        (cx.ints(1)?.to_vec(), cx.ints(2)?.to_vec(), opt(3)?, opt(4)?)
    } else {
        (
            cx.attr_ints("starts")?.to_vec(),
            cx.attr_ints("ends")?.to_vec(),
            cx.attr_ints("axes").map(<[i64]>::to_vec),
            None,
        )
    };
    let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    let mut out = s.to_vec();
    for (k, &a) in axes.iter().enumerate() {
        let a = axis(a, s.len())?;
        let (st, en, step) = (*starts.get(k)?, *ends.get(k)?, *steps.get(k)?);
        out[a] = match s[a].fixed() {
            Some(len) if step != 0 => Dim::Fixed(super::fold_nd::slice_len(len, st, en, step)),
            _ => Dim::Unknown,
        };
    }
    Some(out)
}

fn pad(cx: &Cx) -> Option<Vec<Dim>> {
    let s = cx.shape(0)?;
    let pads: Vec<i64> = if cx.opset >= 11 {
        cx.ints(1)?.to_vec()
    } else {
        cx.attr_ints("pads").or(cx.attr_ints("paddings"))?.to_vec()
    };
    let axes: Vec<usize> = if cx.opset >= 18 && cx.has_input(3) {
        cx.ints(3)?
            .iter()
            .map(|&a| axis(a, s.len()))
            .collect::<Option<_>>()?
    } else {
        (0..s.len()).collect()
    };
    if pads.len() != 2 * axes.len() {
        return None;
    }
    let mut out = s.to_vec();
    for (k, &a) in axes.iter().enumerate() {
        out[a] = super::dims::map_fixed(&s[a], |n| {
            n.checked_add(pads[k])?.checked_add(pads[k + axes.len()])
        });
    }
    Some(out)
}

/// Split sizes, one per output, that sum to the axis.
fn split_shapes(o: &Operands) -> Result<(), String> {
    let Some(sizes) = o.list("split", 1) else {
        return Ok(());
    };
    if let Some(bad) = sizes.iter().find(|&&s| s < 0) {
        return Err(format!("split {sizes:?}: {bad} is negative"));
    }
    if sizes.len() != o.n.outputs.len() {
        return Err(format!(
            "split {sizes:?} has {} sizes for {} outputs",
            sizes.len(),
            o.n.outputs.len()
        ));
    }
    let (Some(rank), Some(dims)) = (o.rank(0), o.dims(0)) else {
        return Ok(());
    };
    let axis = int(o.n, "axis").unwrap_or(0);
    let axis = if axis < 0 { axis + rank } else { axis };
    let dim = usize::try_from(axis)
        .ok()
        .and_then(|a| dims.get(a).copied().flatten());
    let sum = sizes.iter().try_fold(0i64, |t, &s| t.checked_add(s));
    if let Some(d) = dim {
        if sum != Some(d) {
            return Err(format!(
                "split {sizes:?} sums to {}, but axis {axis} has {d}",
                sum.map_or("more than 2^63".into(), |s| s.to_string())
            ));
        }
    }
    Ok(())
}

/// The elements these ops give when their inputs' are tracked (shapes, axes, sizes).
fn register_folds(r: &mut OpRegistry) {
    r.fold(&["Constant"], |cx| {
        Some(fixed(&match cx.node.attrs.first().map(|a| &a.value)? {
            AttrValue::Tensor(t) if t.element_count() <= MAX_ELEMENTS => t.to_i64s()?,
            AttrValue::Int(i) => vec![*i],
            AttrValue::Ints(v) => v.clone(),
            _ => return None,
        }))
    });
    r.fold(&["Shape"], |cx| {
        let s = cx.shape(0)?;
        let (start, end) = shape_range(cx, s.len());
        Some(s.get(start..end)?.to_vec())
    });
    r.fold(&["Size"], |cx| {
        Some(vec![
            super::dims::product(cx.shape(0)?).map_or(Dim::Unknown, Dim::Fixed)
        ])
    });
    r.fold(&["Gather"], |cx| {
        let data = cx.dims_value(0)?;
        if cx.rank(0)? != 1 {
            return None;
        }
        cx.ints(1)?
            .iter()
            .map(|&i| data.get(axis(i, data.len())?).cloned())
            .collect()
    });
    r.fold(&["Concat"], |cx| {
        let rank = cx.rank(0)?;
        let ax = axis(cx.attr_i("axis").unwrap_or(0), rank.max(1))?;
        if rank <= 1 || ax == 0 {
            // Along the outermost axis the flat elements simply follow one another.
            let mut out = Vec::new();
            for i in 0..cx.n_inputs() {
                out.extend_from_slice(cx.dims_value(i)?);
            }
            Some(out)
        } else {
            let mut parts = Vec::new();
            for i in 0..cx.n_inputs() {
                parts.push((cx.dims_value(i)?, static_shape(cx, i)?));
            }
            super::fold_nd::concat(&parts, ax)
        }
    });
    r.fold(&["Slice"], fold_slice);
    r.fold(&["ConstantOfShape"], |cx| {
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
        Some(vec![Dim::Fixed(fill); usize::try_from(count).ok()?])
    });
}

/// The elements a Slice of tracked elements keeps.
fn fold_slice(cx: &Cx) -> Option<Vec<Dim>> {
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
    super::fold_nd::slice(data, &shape, &starts, &ends, &axes, &steps)
}
