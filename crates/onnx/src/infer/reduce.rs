//! Reductions and arg-reductions.

use cleave_ir::{Dim, ElemType, TensorType};

use super::dims::axis;
use super::Cx;
use crate::op_registry::OpRegistry;

const REDUCE: &[&str] = &[
    "ReduceMean",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
];

pub(crate) fn register(r: &mut OpRegistry) {
    r.shapes(&["ArgMax", "ArgMin"], crate::validate::axis_only);
    r.shapes(REDUCE, |o| {
        if let (Some(rank), Some(v)) = (o.rank(0), o.list("axes", 1)) {
            if v.iter().any(|&a| !(-rank..rank).contains(&a)) {
                return Err(format!("axes {v:?} out of range for rank {rank}"));
            }
        }
        Ok(())
    });
    r.add(REDUCE, |cx| {
        // Axes moved from attribute to input in opset 18 (ReduceSum already in 13).
        let since = if cx.node.op_type == "ReduceSum" {
            13
        } else {
            18
        };
        let shape = reduced(cx, since);
        vec![TensorType {
            elem: cx.elem(0),
            shape,
        }]
    });
    r.add(&["ArgMax", "ArgMin"], |cx| {
        let shape = cx.shape(0).and_then(|s| {
            let a = axis(cx.attr_i("axis").unwrap_or(0), s.len())?;
            Some(reduce_dims(
                s,
                &[a],
                cx.attr_i("keepdims").unwrap_or(1) != 0,
            ))
        });
        vec![TensorType {
            elem: Some(ElemType::I64),
            shape,
        }]
    });
}

fn reduced(cx: &Cx, since: i64) -> Option<Vec<Dim>> {
    let s = cx.shape(0)?;
    let keep = cx.attr_i("keepdims").unwrap_or(1) != 0;
    let axes = if cx.ints_absent("axes", 1, since) {
        if cx.attr_i("noop_with_empty_axes").unwrap_or(0) != 0 {
            return Some(s.to_vec());
        }
        (0..s.len()).collect()
    } else {
        let given = cx.ints_attr_or_input("axes", 1, since)?;
        if given.is_empty() && cx.attr_i("noop_with_empty_axes").unwrap_or(0) != 0 {
            return Some(s.to_vec());
        }
        if given.is_empty() {
            (0..s.len()).collect()
        } else {
            given
                .iter()
                .map(|&a| axis(a, s.len()))
                .collect::<Option<Vec<_>>>()?
        }
    };
    Some(reduce_dims(s, &axes, keep))
}

fn reduce_dims(s: &[Dim], axes: &[usize], keep: bool) -> Vec<Dim> {
    s.iter()
        .enumerate()
        .filter_map(|(i, d)| match (axes.contains(&i), keep) {
            (true, true) => Some(Dim::Fixed(1)),
            (true, false) => None,
            (false, _) => Some(d.clone()),
        })
        .collect()
}
