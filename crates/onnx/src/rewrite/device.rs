//! Rewrites a device's profile enables: identity Power removal and group-conv merge (CPU),
//! joining (VPU); tiling is in `tiling`.

use std::collections::BTreeMap;

use crate::proto::NodeProto;
use bytes::Bytes;
use cleave_ir::{ElemType, NodeId, ValueDef, ValueId, Weight};

use super::edit::{attr_int, attr_ints, node, Edits};
use super::onnx_view::{ConvSignature, OnnxView};
use super::tensor::{bytes_of, concat_columns, i64_tensor, tensor};
use super::PassCx;
use cleave_fuse::Rule;

pub(super) fn weight<'a>(cx: &'a PassCx, v: Option<ValueId>) -> Option<&'a Weight> {
    match &cx.model.graph.value(v?).def {
        ValueDef::Weight(w) => Some(w),
        _ => None,
    }
}

pub(super) fn name(cx: &PassCx, v: ValueId) -> String {
    cx.model.graph.value(v).name.to_string()
}

/// Pow(x, 1), Mul(x, 1), Add(x, 0) whose output has the shape of `x`.
pub(crate) fn identity_power(cx: &PassCx, e: &mut Edits) {
    let g = &cx.model.graph;
    let view = cx.view();
    for &n in g.topo_order() {
        if !cx.enabled(n, Rule::IdentityPower) {
            continue;
        }
        let (neutral, commutes) = match view.op(n) {
            "Pow" => (1.0, false),
            "Mul" => (1.0, true),
            "Add" => (0.0, true),
            _ => continue,
        };
        let (Some(a), Some(b), Some(Some(y))) = (
            view.input(n, 0),
            view.input(n, 1),
            g.node(n).outputs.first().copied(),
        ) else {
            continue;
        };
        let is_neutral = |v: ValueId| {
            weight(cx, Some(v))
                .and_then(Weight::to_f64s)
                .is_some_and(|xs| !xs.is_empty() && xs.iter().all(|&x| x == neutral))
        };
        let x = if is_neutral(b) {
            a
        } else if commutes && is_neutral(a) {
            b
        } else {
            continue;
        };
        let (tx, ty) = (&g.value(x).ty, &g.value(y).ty);
        if !tx.is_complete() || tx != ty || !tx.elem.is_some_and(ElemType::is_float) {
            continue;
        }
        if e.claim(&[n]) && e.bypass(n, x, y) {
            e.origin(g.node_label(n), &[n]);
            e.count += 1;
        }
    }
}

/// A Split node, or the split sizes as attribute (opset < 13) or input (opset ≥ 13).
pub(super) fn split_node(
    cx: &PassCx,
    e: &mut Edits,
    label: &str,
    input: String,
    outputs: Vec<String>,
    axis: i64,
    sizes: &[i64],
) -> NodeProto {
    let name = e.fresh(label);
    if cx.opset >= 13 {
        let sizes_name = e.fresh(&format!("{name}_sizes"));
        e.initializer(i64_tensor(&sizes_name, sizes));
        node(
            "Split",
            &name,
            vec![input, sizes_name],
            outputs,
            vec![attr_int("axis", axis)],
        )
    } else {
        node(
            "Split",
            &name,
            vec![input],
            outputs,
            vec![attr_int("axis", axis), attr_ints("split", sizes)],
        )
    }
}

pub(super) fn set_int(n: &mut NodeProto, attr: &str, v: i64) {
    n.attribute.retain(|a| a.name() != attr);
    n.attribute.push(attr_int(attr, v));
}

fn axis_is_channels(axis: i64, rank: Option<usize>) -> bool {
    axis == 1 || rank.is_some_and(|r| axis == 1 - r as i64)
}

/// Split(axis 1) → k Convs with equal parameters → Concat(axis 1), in the same order, becomes
/// one Conv with `group` × k whose weights are the k weights stacked.
pub(crate) fn group_conv(cx: &PassCx, e: &mut Edits) {
    let g = &cx.model.graph;
    let view = cx.view();
    for &concat in g.topo_order() {
        if view.op(concat) != "Concat" || !cx.enabled(concat, Rule::GroupConv) {
            continue;
        }
        let Some(y) = view.single_output(concat) else {
            continue;
        };
        if !axis_is_channels(view.int_attr(concat, "axis").unwrap_or(0), view.rank(y)) {
            continue;
        }
        let convs: Option<Vec<NodeId>> = g
            .node(concat)
            .inputs
            .iter()
            .map(|v| g.value((*v)?).producer())
            .collect();
        let Some(convs) = convs.filter(|c| c.len() >= 2) else {
            continue;
        };
        let Some(split) = view.input(convs[0], 0).and_then(|v| g.value(v).producer()) else {
            continue;
        };
        let split_outs = g.node(split).outputs.clone();
        let shape_ok = view.op(split) == "Split"
            && split_outs.len() == convs.len()
            && axis_is_channels(
                view.int_attr(split, "axis").unwrap_or(0),
                view.input(split, 0).and_then(|x| view.rank(x)),
            );
        if !shape_ok {
            continue;
        }
        let sig0 = view.conv_signature(convs[0]);
        let w0 = weight(cx, view.input(convs[0], 1));
        let has_bias = view.input(convs[0], 2).is_some();
        let each_ok = convs.iter().enumerate().all(|(i, &c)| {
            let w = weight(cx, view.input(c, 1));
            view.op(c) == "Conv"
                && view.sole_consumer(c) == Some(concat)
                && split_outs[i].is_some_and(|s| {
                    view.input(c, 0) == Some(s) && g.consumers(s) == [c] && !view.is_graph_output(s)
                })
                && sig0.is_some()
                && view.conv_signature(c) == sig0
                && w.zip(w0)
                    .is_some_and(|(w, w0)| w.dims == w0.dims && w.elem == w0.elem)
                && view.input(c, 2).is_some() == has_bias
                && (!has_bias || weight(cx, view.input(c, 2)).is_some())
                && convs[..i].iter().all(|&d| d != c)
        });
        let equal_splits = split_outs
            .iter()
            .map(|s| s.and_then(|s| view.channels(s)))
            .collect::<Option<Vec<_>>>()
            .is_some_and(|c| c.windows(2).all(|w| w[0] == w[1]));
        if !each_ok || !equal_splits {
            continue;
        }
        let (Some(sig), Some(w0), Some(x)) = (sig0, w0, view.input(split, 0)) else {
            continue;
        };
        let stack = |slot: usize| -> Option<Vec<u8>> {
            let mut out = Vec::new();
            for &c in &convs {
                out.extend_from_slice(&bytes_of(weight(cx, view.input(c, slot))?)?);
            }
            Some(out)
        };
        let (Some(w_raw), b_raw) = (stack(1), has_bias.then(|| stack(2))) else {
            continue;
        };
        if b_raw.as_ref().is_some_and(Option::is_none) {
            continue;
        }
        let mut members = vec![split, concat];
        members.extend(&convs);
        if !e.claim(&members) {
            continue;
        }
        let k = convs.len() as i64;
        let mut w_dims = w0.dims.clone();
        w_dims[0] *= k;
        let conv_name = e.fresh(&format!("{}_grouped", g.node_label(convs[0])));
        let w_name = e.fresh(&format!("{conv_name}_W"));
        e.initializer(tensor(&w_name, w0.elem, &w_dims, w_raw));
        let mut inputs = vec![name(cx, x), w_name];
        if let Some(Some(b)) = b_raw {
            let b_name = e.fresh(&format!("{conv_name}_B"));
            e.initializer(tensor(&b_name, w0.elem, &[w_dims[0]], b));
            inputs.push(b_name);
        }
        let mut new = cx.record(convs[0]).clone();
        new.name = Some(conv_name.clone());
        new.input = inputs;
        new.output = vec![name(cx, y)];
        set_int(&mut new, "group", sig.window.group.saturating_mul(k));
        e.insert_at(concat, new);
        for &m in &members {
            e.remove(m);
        }
        let mut order = vec![split];
        order.extend(&convs);
        order.push(concat);
        e.origin(&conv_name, &order);
        e.count += 1;
    }
}

#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
enum JoinKey {
    Conv(
        Vec<i64>,
        Vec<i64>,
        Vec<i64>,
        Vec<i64>,
        String,
        i64,
        ElemType,
    ),
    MatMul(i64, ElemType),
}

fn conv_key(s: ConvSignature, elem: ElemType) -> JoinKey {
    JoinKey::Conv(
        s.window.kernel,
        s.window.strides,
        s.window.dilations,
        s.window.pads,
        s.auto_pad,
        s.in_per_group,
        elem,
    )
}

/// Sibling Convs (group 1) or MatMuls (constant 2-D weights) reading the same tensor with the
/// same attributes become one op, whose output a Split cuts back into the original tensors.
pub(crate) fn join(cx: &PassCx, e: &mut Edits) {
    let g = &cx.model.graph;
    let view = cx.view();
    for xi in 0..g.values.len() {
        let x = ValueId(xi as u32);
        let mut buckets: BTreeMap<JoinKey, Vec<NodeId>> = BTreeMap::new();
        for &c in g.consumers(x) {
            if !cx.enabled(c, Rule::Join)
                || view.input(c, 0) != Some(x)
                || view.single_output(c).is_none()
            {
                continue;
            }
            let Some(w) = weight(cx, view.input(c, 1)) else {
                continue;
            };
            let key = match view.op(c) {
                "Conv"
                    if view.int_attr(c, "group").unwrap_or(1) == 1
                        && view
                            .input(c, 2)
                            .is_none_or(|b| weight(cx, Some(b)).is_some()) =>
                {
                    view.conv_signature(c).map(|s| conv_key(s, w.elem))
                }
                "MatMul" if w.dims.len() == 2 && view.rank(x).is_some_and(|r| r >= 2) => {
                    Some(JoinKey::MatMul(w.dims[0], w.elem))
                }
                _ => None,
            };
            if let Some(k) = key {
                buckets.entry(k).or_default().push(c);
            }
        }
        for (key, nodes) in buckets {
            if nodes.len() >= 2 {
                join_bucket(cx, e, x, &key, &nodes);
            }
        }
    }
}

fn join_bucket(cx: &PassCx, e: &mut Edits, x: ValueId, key: &JoinKey, nodes: &[NodeId]) {
    let g = &cx.model.graph;
    let view = cx.view();
    let ws: Option<Vec<(Bytes, Vec<i64>)>> = nodes
        .iter()
        .map(|&n| weight(cx, view.input(n, 1)).and_then(|w| Some((bytes_of(w)?, w.dims.clone()))))
        .collect();
    let Some(ws) = ws else { return };
    let elem = weight(cx, view.input(nodes[0], 1)).map_or(ElemType::F32, |w| w.elem);
    let is_conv = matches!(key, JoinKey::Conv(..));
    let any_bias = is_conv && nodes.iter().any(|&n| view.input(n, 2).is_some());
    let Some(elem_bytes) = elem.bits().map(|b| b as usize / 8).filter(|&b| b > 0) else {
        return;
    };
    let sizes: Vec<i64> = ws
        .iter()
        .map(|(_, d)| if is_conv { d[0] } else { d[1] })
        .collect();
    let biases: Option<Vec<u8>> = if any_bias {
        let mut out = Vec::new();
        for (&n, &m) in nodes.iter().zip(&sizes) {
            match view.input(n, 2) {
                Some(b) => match weight(cx, Some(b)).and_then(bytes_of) {
                    Some(raw) => out.extend_from_slice(&raw),
                    None => return,
                },
                // A missing bias is zeros in the weights' own type (all-zero bytes).
                None => {
                    let Some(len) = usize::try_from(m)
                        .ok()
                        .and_then(|m| m.checked_mul(elem_bytes))
                    else {
                        return;
                    };
                    out.extend(std::iter::repeat_n(0u8, len));
                }
            }
        }
        Some(out)
    } else {
        None
    };
    let Some(total) = sizes.iter().try_fold(0i64, |a, &b| a.checked_add(b)) else {
        return;
    };
    if !e.claim(nodes) {
        return;
    }
    let (w_raw, w_dims) = if is_conv {
        let mut d = ws[0].1.clone();
        d[0] = total;
        (ws.iter().flat_map(|(b, _)| b.iter().copied()).collect(), d)
    } else {
        (concat_columns(&ws, elem_bytes), vec![ws[0].1[0], total])
    };
    let first = nodes[0];
    let label = g.node_label(first).to_string();
    let joined = e.fresh(&format!("{label}_joined"));
    let joined_out = e.fresh(&format!("{joined}_out"));
    let w_name = e.fresh(&format!("{joined}_W"));
    e.initializer(tensor(&w_name, elem, &w_dims, w_raw));
    let mut inputs = vec![name(cx, x), w_name];
    if let Some(b) = biases {
        let b_name = e.fresh(&format!("{joined}_B"));
        // The bias has the weights' element type (float16 Convs have float16 biases).
        e.initializer(tensor(&b_name, elem, &[total], b));
        inputs.push(b_name);
    }
    let mut op = cx.record(first).clone();
    op.name = Some(joined.clone());
    op.input = inputs;
    op.output = vec![joined_out.clone()];
    let axis = if is_conv {
        1
    } else {
        view.single_output(first)
            .and_then(|y| view.rank(y))
            .map_or(-1, |r| r as i64 - 1)
    };
    let outputs: Vec<String> = nodes
        .iter()
        .filter_map(|&n| view.single_output(n))
        .map(|v| name(cx, v))
        .collect();
    let split = split_node(
        cx,
        e,
        &format!("{joined}_split"),
        joined_out,
        outputs,
        axis,
        &sizes,
    );
    e.origin(&joined, nodes);
    e.origin(split.name(), nodes);
    let at = *nodes.iter().min().unwrap_or(&first);
    e.insert_at(at, op);
    e.insert_at(at, split);
    for &n in nodes {
        e.remove(n);
    }
    e.count += 1;
}
