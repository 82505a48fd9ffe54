//! The device-independent level: constants folded, pass-through nodes removed, BatchNorm
//! folded into the Conv before it.

use cleave_ir::{AttrValue, ElemType, NodeId, ValueDef, ValueId, Weight};

use super::edit::Edits;
use super::onnx_view::OnnxView;
use super::tensor::{bytes_of, f32_bytes, f32s, tensor};
use super::PassCx;

/// Replaces nodes whose outputs can be computed here by initializers: Constant, layout ops
/// (Identity, Reshape, Squeeze, Unsqueeze, Flatten) on weights, and Shape of a static tensor.
/// Also removes nodes whose outputs nothing reads.
pub(crate) fn fold_constants(cx: &PassCx, e: &mut Edits) {
    let g = &cx.model.graph;
    let view = cx.view();
    for &n in g.topo_order() {
        let node = g.node(n);
        let outs: Vec<ValueId> = node.outputs.iter().flatten().copied().collect();
        if outs
            .iter()
            .all(|&v| g.consumers(v).is_empty() && !view.is_graph_output(v))
            && !node.has_subgraphs()
        {
            if e.claim(&[n]) {
                e.remove(n);
                e.count += 1;
            }
            continue;
        }
        if node.has_subgraphs()
            || !crate::is_deterministic(node)
            || outs.len() != 1
            || view.is_graph_output(outs[0])
        {
            continue;
        }
        let out = outs[0];
        let Some((elem, dims, raw)) = evaluate(cx, n, out) else {
            continue;
        };
        if e.claim(&[n]) {
            e.initializer(tensor(&g.value(out).name, elem, &dims, raw));
            e.remove(n);
            e.count += 1;
        }
    }
}

fn evaluate(cx: &PassCx, n: NodeId, out: ValueId) -> Option<(ElemType, Vec<i64>, Vec<u8>)> {
    let g = &cx.model.graph;
    let node = g.node(n);
    let view = cx.view();
    match view.op(n) {
        "Constant" => {
            let a = node.attrs.first()?;
            match (&a.name[..], &a.value) {
                ("value", AttrValue::Tensor(w)) => {
                    Some((w.elem, w.dims.clone(), bytes_of(w)?.to_vec()))
                }
                ("value_float", AttrValue::Float(f)) => {
                    Some((ElemType::F32, vec![], f.to_le_bytes().to_vec()))
                }
                ("value_floats", AttrValue::Floats(v)) => {
                    Some((ElemType::F32, vec![v.len() as i64], f32_bytes(v)))
                }
                ("value_int", AttrValue::Int(i)) => {
                    Some((ElemType::I64, vec![], i.to_le_bytes().to_vec()))
                }
                ("value_ints", AttrValue::Ints(v)) => Some((
                    ElemType::I64,
                    vec![v.len() as i64],
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                )),
                _ => None,
            }
        }
        "Identity" | "Reshape" | "Squeeze" | "Unsqueeze" | "Flatten" => {
            // The same elements in the same order: only the dims change.
            let w = weight(cx, view.input(n, 0)?)?;
            let dims = view.dims(out)?;
            (dims.iter().product::<i64>() as u64 == w.element_count()).then_some(())?;
            Some((w.elem, dims, bytes_of(w)?.to_vec()))
        }
        "Shape" => {
            let dims = view.dims(view.input(n, 0)?)?;
            let len = dims.len() as i64;
            let clamp = |v: i64| (if v < 0 { v + len } else { v }).clamp(0, len) as usize;
            let start = clamp(view.int_attr(n, "start").unwrap_or(0));
            let end = clamp(view.int_attr(n, "end").unwrap_or(len));
            let v = dims.get(start..end.max(start))?;
            Some((
                ElemType::I64,
                vec![v.len() as i64],
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            ))
        }
        _ => None,
    }
}

fn weight<'a>(cx: &'a PassCx, v: ValueId) -> Option<&'a Weight> {
    match &cx.model.graph.value(v).def {
        ValueDef::Weight(w) => Some(w),
        _ => None,
    }
}

/// Identity and Dropout (at inference Dropout passes its input through).
pub(crate) fn remove_identity(cx: &PassCx, e: &mut Edits) {
    let g = &cx.model.graph;
    let view = cx.view();
    for &n in g.topo_order() {
        let node = g.node(n);
        let pass_through = match view.op(n) {
            "Identity" => true,
            "Dropout" => {
                let mask_unused = node
                    .outputs
                    .get(1)
                    .copied()
                    .flatten()
                    .is_none_or(|m| g.consumers(m).is_empty() && !view.is_graph_output(m));
                let training = node.inputs.get(2).copied().flatten();
                let inference = training.is_none_or(|t| {
                    weight(cx, t)
                        .and_then(Weight::to_i64s)
                        .is_some_and(|v| v.iter().all(|&x| x == 0))
                });
                mask_unused && inference
            }
            _ => false,
        };
        let (Some(x), Some(Some(y))) = (view.input(n, 0), node.outputs.first().copied()) else {
            continue;
        };
        if pass_through && e.claim(&[n]) && e.bypass(n, x, y) {
            e.count += 1;
        }
    }
}

/// Conv → BatchNormalization (inference mode, constant parameters) becomes one Conv with
/// rescaled weights: W'ₖ = Wₖ·sₖ, B'ₖ = (Bₖ − meanₖ)·sₖ + biasₖ with sₖ = scaleₖ / √(varₖ + ε).
pub(crate) fn fold_batchnorm(cx: &PassCx, e: &mut Edits) {
    let g = &cx.model.graph;
    let view = cx.view();
    for &bn in g.topo_order() {
        if view.op(bn) != "BatchNormalization"
            || view.int_attr(bn, "training_mode").unwrap_or(0) != 0
            || view.int_attr(bn, "spatial").unwrap_or(1) != 1
        {
            continue;
        }
        let node = g.node(bn);
        let extra_outputs_unused = node
            .outputs
            .iter()
            .skip(1)
            .flatten()
            .all(|&v| g.consumers(v).is_empty() && !view.is_graph_output(v));
        let (Some(x), Some(Some(y))) = (view.input(bn, 0), node.outputs.first().copied()) else {
            continue;
        };
        let Some(conv) = g
            .value(x)
            .producer()
            .filter(|&c| view.op(c) == "Conv" && view.sole_consumer(c) == Some(bn))
        else {
            continue;
        };
        if !extra_outputs_unused {
            continue;
        }
        let Some(folded) = fold(cx, conv, bn) else {
            continue;
        };
        if !e.claim(&[conv, bn]) {
            continue;
        }
        let (w_dims, w_raw, b_raw) = folded;
        let conv_inputs = &g.node(conv).inputs;
        let name_of =
            |v: Option<ValueId>| v.map(|v| g.value(v).name.to_string()).unwrap_or_default();
        let w_name = e.fresh(&format!("{}_bn", name_of(conv_inputs[1])));
        let b_name = e.fresh(&format!("{}_bias_bn", g.node_label(conv)));
        e.initializer(tensor(&w_name, ElemType::F32, &w_dims, w_raw));
        e.initializer(tensor(&b_name, ElemType::F32, &[w_dims[0]], b_raw));
        let mut new = cx.record(conv).clone();
        new.input = vec![name_of(conv_inputs[0]), w_name, b_name];
        new.output = vec![g.value(y).name.to_string()];
        e.insert_at(conv, new);
        e.remove(conv);
        e.remove(bn);
        e.origin(g.node_label(conv), &[conv, bn]);
        e.count += 1;
    }
}

/// Conv → Mul or Add by a constant with one value per output channel (or one value) becomes
/// one Conv: W'ₖ = Wₖ·sₖ, B'ₖ = Bₖ·sₖ for Mul, B'ₖ = Bₖ + aₖ for Add (ONNX Runtime's basic
/// ConvMulFusion and ConvAddFusion; caffe2 exports write BatchNorm's affine part this way).
pub(crate) fn fold_conv_mul_add(cx: &PassCx, e: &mut Edits) {
    let g = &cx.model.graph;
    let view = cx.view();
    for &op in g.topo_order() {
        let is_mul = match view.op(op) {
            "Mul" => true,
            "Add" => false,
            _ => continue,
        };
        let (Some(a), Some(b), Some(Some(y))) = (
            view.input(op, 0),
            view.input(op, 1),
            g.node(op).outputs.first().copied(),
        ) else {
            continue;
        };
        // The Conv's output on one side, a weight on the other.
        let Some((conv, k)) = [(a, b), (b, a)].into_iter().find_map(|(x, k)| {
            let c = g
                .value(x)
                .producer()
                .filter(|&c| view.op(c) == "Conv" && view.sole_consumer(c) == Some(op))?;
            weight(cx, k).map(|_| (c, k))
        }) else {
            continue;
        };
        let Some((w_dims, w_raw, b_raw)) = fold_affine(cx, conv, k, is_mul) else {
            continue;
        };
        if !e.claim(&[conv, op]) {
            continue;
        }
        let conv_inputs = &g.node(conv).inputs;
        let name_of =
            |v: Option<ValueId>| v.map(|v| g.value(v).name.to_string()).unwrap_or_default();
        let suffix = if is_mul { "mul" } else { "add" };
        let mut new = cx.record(conv).clone();
        let w_name = if is_mul {
            let n = e.fresh(&format!("{}_{suffix}", name_of(conv_inputs[1])));
            e.initializer(tensor(&n, ElemType::F32, &w_dims, w_raw));
            n
        } else {
            name_of(conv_inputs[1])
        };
        let b_name = e.fresh(&format!("{}_bias_{suffix}", g.node_label(conv)));
        e.initializer(tensor(&b_name, ElemType::F32, &[w_dims[0]], b_raw));
        new.input = vec![name_of(conv_inputs[0]), w_name, b_name];
        new.output = vec![g.value(y).name.to_string()];
        e.insert_at(conv, new);
        e.remove(conv);
        e.remove(op);
        e.origin(g.node_label(conv), &[conv, op]);
        e.count += 1;
    }
}

/// The folded weights and bias, when `k` holds one f32 per output channel of the Conv's
/// output [N, M, spatial…] (channel axis M, every other axis 1) or a single value.
fn fold_affine(cx: &PassCx, conv: NodeId, k: ValueId, is_mul: bool) -> Option<Folded> {
    let (w_dims, w, b) = conv_params(cx, conv)?;
    let m = b.len();
    let (k_dims, kv) = f32_weight(cx, Some(k))?;
    // Right-aligned against the output's rank (that of W): the channel axis sits at rank-1-1.
    let rank = w_dims.len();
    if k_dims.len() > rank {
        return None;
    }
    let per_channel = k_dims
        .iter()
        .enumerate()
        .all(|(i, &d)| d == 1 || (i + rank - k_dims.len() == 1 && d as usize == m));
    if !per_channel || (kv.len() != m && kv.len() != 1) {
        return None;
    }
    let at = |c: usize| f64::from(if kv.len() == 1 { kv[0] } else { kv[c] });
    let row = w.len() / m;
    if is_mul {
        let w2: Vec<f32> = w
            .iter()
            .enumerate()
            .map(|(i, &x)| (f64::from(x) * at(i / row)) as f32)
            .collect();
        let b2: Vec<f32> = (0..m).map(|c| (f64::from(b[c]) * at(c)) as f32).collect();
        Some((w_dims, f32_bytes(&w2), f32_bytes(&b2)))
    } else {
        let b2: Vec<f32> = (0..m).map(|c| (f64::from(b[c]) + at(c)) as f32).collect();
        Some((w_dims, Vec::new(), f32_bytes(&b2)))
    }
}

type Folded = (Vec<i64>, Vec<u8>, Vec<u8>);

/// A float32 weight's dims and values.
fn f32_weight(cx: &PassCx, v: Option<ValueId>) -> Option<(Vec<i64>, Vec<f32>)> {
    let w = weight(cx, v?)?;
    (w.elem == ElemType::F32).then_some(())?;
    Some((w.dims.clone(), f32s(&bytes_of(w)?)))
}

/// A Conv's constant float32 weights and bias (zeros when it has none): W's dims, W, B, with
/// one bias value per output channel.
fn conv_params(cx: &PassCx, conv: NodeId) -> Option<(Vec<i64>, Vec<f32>, Vec<f32>)> {
    let view = cx.view();
    let (w_dims, w) = f32_weight(cx, view.input(conv, 1))?;
    let m = *w_dims.first()? as usize;
    let b = match view.input(conv, 2) {
        Some(_) => f32_weight(cx, view.input(conv, 2))?.1,
        None => vec![0.0; m],
    };
    (m > 0 && b.len() == m && w.len() % m == 0).then_some((w_dims, w, b))
}

fn fold(cx: &PassCx, conv: NodeId, bn: NodeId) -> Option<Folded> {
    let view = cx.view();
    let (w_dims, w, b) = conv_params(cx, conv)?;
    let m = b.len();
    let params: Vec<Vec<f32>> = (1..5)
        .map(|i| f32_weight(cx, view.input(bn, i)).map(|p| p.1))
        .collect::<Option<_>>()?;
    if params.iter().any(|p| p.len() != m) {
        return None;
    }
    let eps = f64::from(view.float_attr(bn, "epsilon").unwrap_or(1e-5));
    let (scale, bias, mean, var) = (&params[0], &params[1], &params[2], &params[3]);
    let s: Vec<f64> = (0..m)
        .map(|k| f64::from(scale[k]) / (f64::from(var[k]) + eps).sqrt())
        .collect();
    let row = w.len() / m;
    let w2: Vec<f32> = w
        .iter()
        .enumerate()
        .map(|(i, &x)| (f64::from(x) * s[i / row]) as f32)
        .collect();
    let b2: Vec<f32> = (0..m)
        .map(|k| ((f64::from(b[k]) - f64::from(mean[k])) * s[k] + f64::from(bias[k])) as f32)
        .collect();
    Some((w_dims, f32_bytes(&w2), f32_bytes(&b2)))
}
