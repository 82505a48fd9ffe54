//! Tensor type inference for the IR, with ONNX operator semantics.
//!
//! Later stages give every part boundary an element type and a shape, and the ONNX checker
//! rejects a graph input or output without them. Types from the file (`value_info`) are kept;
//! missing ones are computed here, op by op in topological order, from a table of rules (one
//! module per op family). Small integer tensors (shapes, axes) are evaluated along the way, so
//! `Reshape`, `ConstantOfShape` or `Slice` get static shapes where the model allows it.

mod control_flow;
pub(crate) mod cx;
mod dims;
mod domains;
mod elementwise;
mod fold;
mod fold_nd;
mod late_ops;
mod nn;
mod reduce;
mod shape_ops;
mod slicing;

use std::collections::HashMap;

use cleave_ir::{Dim, Graph, Model, NodeId, TensorType};

use crate::op_registry::OpRegistry;
use crate::registry;

pub(crate) use cx::{Cx, Values};

/// Every op family's entries in the registry (called once, by [`crate::registry`]).
pub(crate) fn register_families(t: &mut OpRegistry) {
    control_flow::register(t);
    elementwise::register(t);
    nn::register(t);
    reduce::register(t);
    shape_ops::register(t);
    slicing::register(t);
    domains::register(t);
    late_ops::register(t);
}

/// What inference could not settle.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct InferReport {
    /// Values of the top-level graph whose element type or rank is still unknown.
    pub untyped: Vec<String>,
    /// Op types (`domain::op`) that have no inference rule and produced untyped values.
    pub unknown_ops: Vec<String>,
}

/// Fills in missing element types and shapes of the model's top-level graph, and of the
/// subgraphs (If branches, Loop and Scan bodies) inside it.
pub fn infer_types(model: &mut Model) -> InferReport {
    let registry = registry();
    let opset = model.opset("").unwrap_or(21);
    let mut unknown_ops = std::collections::BTreeSet::new();
    infer_nested(
        registry,
        &mut model.graph,
        &HashMap::new(),
        opset,
        &mut unknown_ops,
        0,
    );
    InferReport {
        untyped: untyped(&model.graph),
        unknown_ops: unknown_ops.into_iter().collect(),
    }
}

/// What [`infer_types`] reports, read from a model it has typed: the top-level values still
/// untyped, and the op types without a rule whose outputs (at any depth) are untyped.
pub fn type_report(model: &Model) -> InferReport {
    fn ops(
        registry: &'static OpRegistry,
        g: &Graph,
        found: &mut std::collections::BTreeSet<String>,
    ) {
        for node in &g.nodes {
            let untyped = node
                .outputs
                .iter()
                .flatten()
                .any(|&o| !g.value(o).ty.is_complete());
            if untyped && registry.rule(&node.domain, &node.op_type).is_none() {
                found.insert(op_key(&node.domain, &node.op_type));
            }
            for a in &node.attrs {
                match &a.value {
                    cleave_ir::AttrValue::Graph(sub) => ops(registry, sub, found),
                    cleave_ir::AttrValue::Graphs(subs) => {
                        subs.iter().for_each(|s| ops(registry, s, found))
                    }
                    _ => {}
                }
            }
        }
    }
    let mut found = std::collections::BTreeSet::new();
    ops(registry(), &model.graph, &mut found);
    InferReport {
        untyped: untyped(&model.graph),
        unknown_ops: found.into_iter().collect(),
    }
}

/// Depth of nested subgraphs followed; a deeper one keeps the types its file gives.
const MAX_NESTING: usize = 16;

fn infer_nested(
    registry: &'static OpRegistry,
    g: &mut Graph,
    outer: &HashMap<String, TensorType>,
    opset: i64,
    unknown_ops: &mut std::collections::BTreeSet<String>,
    depth: usize,
) {
    for v in g.values.iter_mut() {
        if matches!(v.def, cleave_ir::ValueDef::Outer) {
            if let Some(t) = outer.get(v.name.as_str()) {
                merge(&mut v.ty, t.clone());
            }
        }
    }
    let mut consts = Values::default();
    for (id, w) in g.weights() {
        if w.element_count() <= fold::MAX_ELEMENTS {
            if let Some(v) = w.to_i64s() {
                consts.insert(id, dims::fixed(&v));
            }
        }
    }
    let order: Vec<NodeId> = g.topo_order().to_vec();
    for n in order {
        if g.node(n).has_subgraphs() && depth < MAX_NESTING {
            infer_subgraphs(registry, g, n, outer, opset, unknown_ops, depth);
        }
        let node = g.node(n);
        let rule = registry.rule(&node.domain, &node.op_type);
        let outputs = || node.outputs.iter().flatten().map(|&o| &g.value(o).ty);
        let untyped = outputs().any(|ty| !ty.is_complete());
        // A declared type may also leave dims open, or symbolic, that a rule can fix.
        let open = untyped
            || outputs()
                .flat_map(|ty| ty.shape.iter().flatten())
                .any(|d| d.fixed().is_none());
        let (mut inferred, folded) = {
            let cx = Cx::new(g, node, &consts, opset);
            let inferred = match rule {
                Some(rule) if open => rule(&cx),
                None if untyped => {
                    unknown_ops.insert(op_key(&node.domain, &node.op_type));
                    Vec::new()
                }
                _ => Vec::new(),
            };
            (inferred, fold::evaluate(&cx))
        };
        keep_rank(g, n, &mut inferred);
        let outs = g.node(n).outputs.clone();
        for (slot, ty) in inferred.into_iter().enumerate() {
            if let Some(Some(v)) = outs.get(slot) {
                merge(&mut g.value_mut(*v).ty, ty);
            }
        }
        if let (Some(values), Some(Some(v))) = (folded, outs.first()) {
            consts.insert(*v, values);
        }
    }
}

/// Types the subgraphs of node `n` from what is known around them: values they read from
/// enclosing scopes, and the formal inputs of Loop and Scan bodies.
fn infer_subgraphs(
    registry: &'static OpRegistry,
    g: &mut Graph,
    n: NodeId,
    outer: &HashMap<String, TensorType>,
    opset: i64,
    unknown_ops: &mut std::collections::BTreeSet<String>,
    depth: usize,
) {
    let mut scope = outer.clone();
    for v in &g.values {
        if v.ty.elem.is_some() || v.ty.shape.is_some() {
            scope.insert(v.name.to_string(), v.ty.clone());
        }
    }
    let node = g.node(n);
    let op = node.op_type.clone();
    let inputs: Vec<TensorType> = node
        .inputs
        .iter()
        .map(|i| i.map(|v| g.value(v).ty.clone()).unwrap_or_default())
        .collect();
    let scan_formal = (op == "Scan").then(|| scan_formals(&inputs, &node.attrs, opset));
    let node = &mut g.nodes[n.index()];
    for attr in node.attrs.iter_mut() {
        let cleave_ir::AttrValue::Graph(body) = &mut attr.value else {
            continue;
        };
        if op == "Loop" {
            // Formal inputs: iteration number, condition, then the carried values.
            let mut formal = vec![
                TensorType::fixed(cleave_ir::ElemType::I64, &[]),
                TensorType::fixed(cleave_ir::ElemType::Bool, &[]),
            ];
            formal.extend(inputs.iter().skip(2).cloned());
            for (&v, t) in body.inputs.iter().zip(formal) {
                let ty = &mut body.values[v.index()].ty;
                merge(ty, t);
            }
        }
        if let Some(formal) = &scan_formal {
            for (&v, t) in body.inputs.iter().zip(formal.iter().cloned()) {
                merge(&mut body.values[v.index()].ty, t);
            }
        }
        infer_nested(registry, body, &scope, opset, unknown_ops, depth + 1);
    }
}

/// What a Scan body sees of the node's inputs: each state as it is, each scan input less the
/// axis it is scanned along (opset 8 also drops the batch axis of every input, and has a first
/// input of sequence lengths that the body does not see).
fn scan_formals(
    inputs: &[TensorType],
    attrs: &[cleave_ir::Attribute],
    opset: i64,
) -> Vec<TensorType> {
    let attr = |name: &str| attrs.iter().find(|a| a.name == name).map(|a| &a.value);
    let n_scan = match attr("num_scan_inputs") {
        Some(cleave_ir::AttrValue::Int(m)) => usize::try_from(*m).unwrap_or(0),
        _ => 0,
    };
    let batch = opset < 9;
    let inputs = &inputs[usize::from(batch).min(inputs.len())..];
    let n_state = inputs.len().saturating_sub(n_scan);
    let axes: &[i64] = match attr("scan_input_axes") {
        Some(cleave_ir::AttrValue::Ints(a)) if !batch => a,
        _ => &[],
    };
    inputs
        .iter()
        .enumerate()
        .map(|(k, t)| {
            let mut t = t.clone();
            let Some(shape) = t.shape.as_mut() else {
                return t;
            };
            let mut drop = Vec::new();
            if batch && !shape.is_empty() {
                drop.push(0);
            }
            if k >= n_state {
                let rank = i64::try_from(shape.len()).unwrap_or(0);
                let a = if batch {
                    1
                } else {
                    axes.get(k - n_state).copied().unwrap_or(0)
                };
                let a = if a < 0 { a + rank } else { a };
                match usize::try_from(a).ok().filter(|&a| a < shape.len()) {
                    Some(a) => drop.push(a),
                    None => {
                        t.shape = None;
                        return t;
                    }
                }
            }
            drop.sort_unstable();
            drop.dedup();
            for a in drop.into_iter().rev() {
                shape.remove(a);
            }
            t
        })
        .collect()
}

/// Gives an output of a rank-keeping op the rank of its input when its rule could not.
fn keep_rank(g: &Graph, n: NodeId, inferred: &mut Vec<TensorType>) {
    let node = g.node(n);
    let keeps = crate::op_registry::is_default_domain(&node.domain)
        && registry()
            .default_op(&node.op_type)
            .is_some_and(|e| e.rank_keeping);
    if !keeps {
        return;
    }
    let Some(rank) = node
        .inputs
        .first()
        .copied()
        .flatten()
        .and_then(|v| g.value(v).ty.rank())
    else {
        return;
    };
    let n_out = node.outputs.len();
    if inferred.len() < n_out {
        inferred.resize(n_out, TensorType::default());
    }
    for (slot, t) in inferred.iter_mut().enumerate() {
        if t.shape.is_none() {
            t.shape = Some(vec![Dim::Unknown; rank]);
        }
        if t.elem.is_none() {
            // TopK's second output is its indices; every other output keeps the input's type.
            t.elem = if node.op_type == "TopK" && slot == 1 {
                Some(cleave_ir::ElemType::I64)
            } else {
                node.inputs
                    .first()
                    .copied()
                    .flatten()
                    .and_then(|v| g.value(v).ty.elem)
            };
        }
    }
}

/// `op` for the default domain, `domain::op` otherwise.
pub(crate) fn op_key(domain: &str, op: &str) -> String {
    if domain.is_empty() || domain == "ai.onnx" {
        op.to_string()
    } else {
        format!("{domain}::{op}")
    }
}

/// Keeps what the file said; fills only what it left open.
fn merge(have: &mut TensorType, new: TensorType) {
    if have.elem.is_none() {
        have.elem = new.elem;
    }
    match (&mut have.shape, new.shape) {
        (None, s) => have.shape = s,
        (Some(old), Some(new)) if old.len() == new.len() => {
            for (o, n) in old.iter_mut().zip(new) {
                // A number inference proves beats a symbol an exporter wrote for the unknown.
                let better = matches!(
                    (&*o, &n),
                    (Dim::Unknown, _) | (Dim::Param(_), Dim::Fixed(_))
                );
                if better {
                    *o = n;
                }
            }
        }
        _ => {}
    }
}

/// Values whose element type or rank is unknown.
pub fn untyped(g: &Graph) -> Vec<String> {
    g.values
        .iter()
        .filter(|v| !v.ty.is_complete())
        .map(|v| v.name.to_string())
        .collect()
}
