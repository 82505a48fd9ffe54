//! Constant folding on a real engine: every node computed from constants alone
//! (ConstantOfShape weights, Range, Shape→Gather→Concat chains, Cast, arithmetic…) is run
//! once by the evaluator the caller supplies, and the values the rest of the graph reads
//! become initializers.

use std::collections::HashSet;

use cleave_ir::{ElemType, NodeId, ValueDef, ValueId};

use super::edit::Edits;
use super::tensor::{bytes_of, tensor};
use super::PassCx;
use crate::emit::value_info;
use crate::proto::{GraphProto, ModelProto, TensorProto};

pub(crate) fn fold_by_engine(cx: &PassCx, e: &mut Edits) {
    let Some(evaluator) = cx.evaluator else {
        return;
    };
    let g = &cx.model.graph;
    let Some(plan) = plan(cx) else {
        return;
    };
    for (v, why) in &plan.left {
        e.notes.push(format!(
            "fold_constants: '{}' stays computed at run time: {why}",
            g.value(*v).name
        ));
    }
    if plan.fold.is_empty() {
        return;
    }
    let model = match constant_model(cx, &plan) {
        Ok(m) => m,
        Err(why) => {
            e.notes
                .push(format!("fold_constants: not evaluated: {why}"));
            return;
        }
    };
    let computed = cleave_workdir::private_tempdir("cleave-")
        .map_err(|err| format!("no temporary folder: {err}"))
        .and_then(|dir| {
            let path = dir.path().join("constants.onnx");
            std::fs::write(&path, crate::encode_model(&model))
                .map_err(|err| format!("{}: {err}", path.display()))?;
            evaluator.evaluate(&path)
        });
    let computed = match computed {
        Ok(c) => c,
        Err(why) => {
            e.notes.push(format!(
                "fold_constants: {} constant nodes left unfolded, the engine could not run them: {why}",
                plan.remove.len()
            ));
            return;
        }
    };
    let mut inits = Vec::with_capacity(plan.fold.len());
    for &v in &plan.fold {
        let value = g.value(v);
        let found = computed.iter().find(|c| c.name == value.name);
        let want = value.ty.static_dims();
        match found {
            Some(c)
                if Some(c.elem) == value.ty.elem
                    && want.as_deref().is_some_and(|d| same_dims(d, &c.dims)) =>
            {
                let dims: Vec<i64> = want.unwrap_or_default();
                inits.push(tensor(&value.name, c.elem, &dims, c.data.clone()));
            }
            Some(c) => {
                e.notes.push(format!(
                    "fold_constants: nothing folded: the engine computed '{}' as {}{:?} where inference says {}",
                    value.name, c.elem, c.dims, value.ty
                ));
                return;
            }
            None => {
                e.notes.push(format!(
                    "fold_constants: nothing folded: the engine returned no '{}'",
                    value.name
                ));
                return;
            }
        }
    }
    if !e.claim(&plan.remove) {
        return;
    }
    for t in inits {
        e.initializer(t);
    }
    for &n in &plan.remove {
        e.remove(n);
    }
    e.count += plan.remove.len();
}

/// Element types every engine hands back as plain little-endian bytes.
fn plain(e: ElemType) -> bool {
    use ElemType::*;
    matches!(
        e,
        F32 | F16 | BF16 | F64 | I8 | U8 | I16 | U16 | I32 | U32 | I64 | U64 | Bool
    )
}

fn same_dims(want: &[i64], got: &[usize]) -> bool {
    want.len() == got.len()
        && want
            .iter()
            .zip(got)
            .all(|(&w, &g)| u64::try_from(w).ok() == u64::try_from(g).ok())
}

struct Plan {
    /// Values read outside the constant subgraph that become initializers.
    fold: Vec<ValueId>,
    /// Constant nodes that no longer need to run, in topological order.
    remove: Vec<NodeId>,
    /// Every node the evaluation runs, in topological order.
    run: Vec<NodeId>,
    /// Values that stay computed at run time, and why.
    left: Vec<(ValueId, String)>,
}

/// Which constant values to fold within the byte limit, and which nodes that frees.
fn plan(cx: &PassCx) -> Option<Plan> {
    let g = &cx.model.graph;
    let view = cx.view();
    let constant = |n: NodeId| cx.constant[n.index()];
    let mut fold = Vec::new();
    let mut left = Vec::new();
    let mut stays = Vec::new();
    let mut total = 0u64;
    for &n in g.topo_order() {
        if !constant(n) {
            continue;
        }
        for v in g.node(n).outputs.iter().flatten().copied() {
            let value = g.value(v);
            if !g.consumers(v).iter().any(|&c| !constant(c)) {
                continue;
            }
            if view.is_graph_output(v) {
                stays.push(v);
                continue;
            }
            let size = value
                .ty
                .byte_size()
                .filter(|_| value.ty.elem.is_some_and(plain));
            match size.and_then(|b| total.checked_add(b)) {
                Some(t) if t <= cx.fold_limit => {
                    total = t;
                    fold.push(v);
                }
                Some(_) => {
                    stays.push(v);
                    left.push((
                        v,
                        format!(
                            "{} bytes would pass the folding limit of {} bytes",
                            size.unwrap_or(0),
                            cx.fold_limit
                        ),
                    ));
                }
                None => {
                    stays.push(v);
                    left.push((
                        v,
                        format!("its type {} has no static size or plain elements", value.ty),
                    ));
                }
            }
        }
    }
    if fold.is_empty() && left.is_empty() {
        return None;
    }
    // A node that must stay (it computes a value left unfolded) cannot have its other
    // outputs folded too: the initializer would give that name a second producer.
    loop {
        let keep = ancestors(cx, &stays);
        let (moved, kept): (Vec<_>, Vec<_>) = fold
            .iter()
            .partition(|&&v| g.value(v).producer().is_some_and(|p| keep.contains(&p)));
        if moved.is_empty() {
            let run_set = ancestors(cx, &fold);
            let run: Vec<NodeId> = g
                .topo_order()
                .iter()
                .copied()
                .filter(|n| run_set.contains(n))
                .collect();
            let remove = run.iter().copied().filter(|n| !keep.contains(n)).collect();
            return Some(Plan {
                fold,
                remove,
                run,
                left,
            });
        }
        stays.extend(moved);
        fold = kept;
    }
}

/// The constant nodes `values` are computed from.
fn ancestors(cx: &PassCx, values: &[ValueId]) -> HashSet<NodeId> {
    let g = &cx.model.graph;
    let mut seen = HashSet::new();
    let mut stack: Vec<NodeId> = values
        .iter()
        .filter_map(|&v| g.value(v).producer())
        .collect();
    while let Some(n) = stack.pop() {
        if !cx.constant[n.index()] || !seen.insert(n) {
            continue;
        }
        stack.extend(g.node(n).all_inputs().filter_map(|v| g.value(v).producer()));
    }
    seen
}

/// A model of the nodes to run, the weights they read, and the values to fold as outputs.
fn constant_model(cx: &PassCx, plan: &Plan) -> Result<ModelProto, String> {
    let g = &cx.model.graph;
    let mut initializer: Vec<TensorProto> = Vec::new();
    let mut seen = HashSet::new();
    for &n in &plan.run {
        for v in g.node(n).all_inputs() {
            let ValueDef::Weight(w) = &g.value(v).def else {
                continue;
            };
            let name = &g.value(v).name;
            if !seen.insert(v) {
                continue;
            }
            let stored = cx
                .proto
                .initializer
                .iter()
                .find(|t| t.name.as_deref() == Some(name.as_str()))
                .filter(|t| !crate::external::is_external(t));
            initializer.push(match stored {
                Some(t) => t.clone(),
                None => {
                    let raw = bytes_of(w)
                        .ok_or_else(|| format!("the bytes of weight '{name}' cannot be read"))?;
                    tensor(name, w.elem, &w.dims, raw.to_vec())
                }
            });
        }
    }
    let graph = GraphProto {
        name: Some("constants".into()),
        node: plan.run.iter().map(|&n| cx.record(n).clone()).collect(),
        initializer,
        output: plan
            .fold
            .iter()
            .map(|&v| value_info(&g.value(v).name, &g.value(v).ty))
            .collect(),
        ..Default::default()
    };
    Ok(ModelProto {
        // Before IR version 4 every initializer had to be a graph input as well.
        ir_version: Some(cx.source.ir_version.unwrap_or(4).max(4)),
        opset_import: cx.source.opset_import.clone(),
        functions: cx.source.functions.clone(),
        graph: Some(graph),
        ..Default::default()
    })
}
