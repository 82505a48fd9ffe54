//! Rewrites a device's profile enables: identity Power removal and group-conv merge (CPU),
//! joining and tiling (VPU).

use std::collections::BTreeMap;

use crate::proto::NodeProto;
use bytes::Bytes;
use cleave_ir::{ElemType, NodeId, ValueDef, ValueId, Weight};

use super::edit::{attr_int, attr_ints, node, Edits};
use super::onnx_view::{ConvSignature, OnnxView};
use super::tensor::{bytes_of, concat_columns, i64_tensor, slice_dim0, tensor};
use super::PassCx;
use cleave_fuse::Rule;

fn weight<'a>(cx: &'a PassCx, v: Option<ValueId>) -> Option<&'a Weight> {
    match &cx.model.graph.value(v?).def {
        ValueDef::Weight(w) => Some(w),
        _ => None,
    }
}

fn name(cx: &PassCx, v: ValueId) -> String {
    cx.model.graph.value(v).name.clone()
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
fn split_node(
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

fn set_int(n: &mut NodeProto, attr: &str, v: i64) {
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

/// Convs (group 1) and pools whose input + output + weights exceed the device's `tile_bytes`
/// are cut over output channels into `<name>@soc=M/N` tiles joined by a Concat. Only the
/// output channels are tiled: a node whose input alone exceeds the budget is left whole.
pub(crate) fn tile(cx: &PassCx, e: &mut Edits) {
    let g = &cx.model.graph;
    let view = cx.view();
    for &n in g.topo_order() {
        let Some(budget) = cx
            .tile_bytes
            .get(n.index())
            .copied()
            .flatten()
            .filter(|_| cx.enabled(n, Rule::Tile))
        else {
            continue;
        };
        let is_conv = view.op(n) == "Conv";
        let is_pool = matches!(
            view.op(n),
            "MaxPool" | "AveragePool" | "GlobalAveragePool" | "GlobalMaxPool"
        );
        if !is_conv && !is_pool {
            continue;
        }
        let (Some(x), Some(y)) = (view.input(n, 0), view.single_output(n)) else {
            continue;
        };
        let bytes = |v: ValueId| g.value(v).ty.byte_size();
        let (Some(in_b), Some(out_b), Some(channels)) = (bytes(x), bytes(y), view.channels(y))
        else {
            continue;
        };
        let w = if is_conv {
            weight(cx, view.input(n, 1))
        } else {
            None
        };
        if is_conv
            && (w.is_none()
                || view.int_attr(n, "group").unwrap_or(1) != 1
                || view
                    .input(n, 2)
                    .is_some_and(|b| weight(cx, Some(b)).is_none()))
        {
            continue;
        }
        let params: u64 = w.map_or(0, Weight::byte_len)
            + view
                .input(n, 2)
                .and_then(|b| weight(cx, Some(b)))
                .map_or(0, Weight::byte_len);
        // A pool tile reads only its channels; a conv tile reads the whole input.
        let need = |k: u64| {
            if is_conv {
                in_b + out_b.div_ceil(k) + params.div_ceil(k)
            } else {
                (in_b + out_b).div_ceil(k)
            }
        };
        if need(1) <= budget {
            continue;
        }
        let label = g.node_label(n).to_string();
        let Some(tiles) = (2..=channels.max(1) as u64).find(|&k| need(k) <= budget) else {
            e.notes.push(format!("tile: {label}: even one output channel per tile needs more than tile_bytes ({budget} B): spatial tiling is not implemented, left whole"));
            continue;
        };
        // A fused activation after the Conv goes into each tile, so the tiles stay Conv+act
        // pairs (the VPU fuses before it tiles); channel tiling commutes with it.
        let act = view.sole_consumer(n).filter(|&a| {
            is_conv
                && cx.enabled(a, Rule::VpuConvActivation)
                && view.input(a, 0) == Some(y)
                && view.single_output(a).is_some()
                && (matches!(view.op(a), "Relu" | "LeakyRelu")
                    || (view.op(a) == "Clip"
                        && g.node(a)
                            .inputs
                            .iter()
                            .skip(1)
                            .flatten()
                            .all(|&v| view.is_const(v))))
        });
        let claimed = match act {
            Some(a) => e.claim(&[n, a]),
            None => e.claim(&[n]),
        };
        if !claimed {
            continue;
        }
        let k = tiles as i64;
        let sizes: Vec<i64> = (0..k)
            .map(|m| channels / k + i64::from(m < channels % k))
            .collect();
        let tile_names: Vec<String> = (1..=k).map(|m| format!("{label}@soc={m}/{k}")).collect();
        if !tile_names.iter().all(|t| e.take_exact(t)) {
            e.notes.push(format!(
                "tile: {label}: a node named {label}@soc=… already exists, left whole"
            ));
            continue;
        }
        let outs: Vec<String> = (1..=k)
            .map(|m| e.fresh(&format!("{}@soc={m}/{k}", name(cx, y))))
            .collect();
        let proto = cx.record(n);
        let mut new_nodes = Vec::new();
        let tile_inputs: Vec<Vec<String>> = if is_conv {
            let Some(w) = w else { continue };
            let (Some(w_raw), b) = (
                bytes_of(w),
                view.input(n, 2).and_then(|b| weight(cx, Some(b))),
            ) else {
                continue;
            };
            let b_raw = b.and_then(bytes_of);
            let mut start = 0;
            let mut ins = Vec::new();
            for (m, &size) in sizes.iter().enumerate() {
                let mut dims = w.dims.clone();
                dims[0] = size;
                let w_name = e.fresh(&format!(
                    "{}@soc={}/{k}",
                    name(cx, view.input(n, 1).unwrap_or(x)),
                    m + 1
                ));
                e.initializer(tensor(
                    &w_name,
                    w.elem,
                    &dims,
                    slice_dim0(&w_raw, &w.dims, start, start + size),
                ));
                let mut i = vec![name(cx, x), w_name];
                if let (Some(b), Some(raw)) = (b, &b_raw) {
                    let b_name = e.fresh(&format!("{label}_B@soc={}/{k}", m + 1));
                    e.initializer(tensor(
                        &b_name,
                        b.elem,
                        &[size],
                        slice_dim0(raw, &b.dims, start, start + size),
                    ));
                    i.push(b_name);
                }
                ins.push(i);
                start += size;
            }
            ins
        } else {
            let parts: Vec<String> = (1..=k)
                .map(|m| e.fresh(&format!("{}@soc={m}/{k}", name(cx, x))))
                .collect();
            new_nodes.push(split_node(
                cx,
                e,
                &format!("{label}@split"),
                name(cx, x),
                parts.clone(),
                1,
                &sizes,
            ));
            parts.into_iter().map(|p| vec![p]).collect()
        };
        let mut joined = outs.clone();
        let mut final_out = y;
        for (m, ((t, ins), out)) in tile_names.iter().zip(tile_inputs).zip(&outs).enumerate() {
            let mut tile = proto.clone();
            tile.name = Some(t.clone());
            tile.input = ins;
            tile.output = vec![out.clone()];
            new_nodes.push(tile);
            e.origin(t, &[n]);
            if let Some((a, a_out)) = act.and_then(|a| Some((a, view.single_output(a)?))) {
                let a_label = g.node_label(a).to_string();
                let a_name = e.fresh(&format!("{a_label}@soc={}/{k}", m + 1));
                let a_tile_out = e.fresh(&format!("{}@soc={}/{k}", name(cx, a_out), m + 1));
                let mut at = cx.record(a).clone();
                at.name = Some(a_name.clone());
                at.input[0] = out.clone();
                at.output = vec![a_tile_out.clone()];
                new_nodes.push(at);
                e.origin(&a_name, &[a]);
                joined[m] = a_tile_out;
                final_out = a_out;
            }
        }
        let concat = e.fresh(&format!("{label}@concat"));
        new_nodes.push(node(
            "Concat",
            &concat,
            joined,
            vec![name(cx, final_out)],
            vec![attr_int("axis", 1)],
        ));
        e.origin(&concat, &[n]);
        for nn in new_nodes {
            e.insert_at(n, nn);
        }
        e.remove(n);
        if let Some(a) = act {
            e.remove(a);
        }
        e.count += 1;
    }
}
