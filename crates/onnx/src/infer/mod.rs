//! Tensor type inference for the IR, with ONNX operator semantics.
//!
//! Later stages give every part boundary an element type and a shape, and the ONNX checker
//! rejects a graph input or output without them. Types from the file (`value_info`) are kept;
//! missing ones are computed here, op by op in topological order, from a table of rules (one
//! module per op family). Small integer tensors (shapes, axes) are evaluated along the way, so
//! `Reshape`, `ConstantOfShape` or `Slice` get static shapes where the model allows it.

mod cx;
mod dims;
mod elementwise;
mod fold;
mod nn;
mod reduce;
mod shape_ops;

use std::collections::HashMap;

use cleave_ir::{Graph, Model, NodeId, TensorType, ValueId};

pub(crate) use cx::Cx;

/// Computes the output types of a node; entries may be partly or wholly unknown.
pub(crate) type Rule = fn(&Cx) -> Vec<TensorType>;

pub(crate) struct Registry {
    rules: HashMap<&'static str, Rule>,
}

impl Registry {
    pub(crate) fn add(&mut self, ops: &[&'static str], rule: Rule) {
        for op in ops {
            self.rules.insert(op, rule);
        }
    }

    fn new() -> Registry {
        let mut r = Registry {
            rules: HashMap::new(),
        };
        elementwise::register(&mut r);
        nn::register(&mut r);
        reduce::register(&mut r);
        shape_ops::register(&mut r);
        r
    }
}

/// What inference could not settle.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct InferReport {
    /// Values of the top-level graph whose element type or rank is still unknown.
    pub untyped: Vec<String>,
    /// Op types (`domain::op`) that have no inference rule and produced untyped values.
    pub unknown_ops: Vec<String>,
}

/// Fills in missing element types and shapes of the model's top-level graph.
pub fn infer_types(model: &mut Model) -> InferReport {
    let registry = Registry::new();
    let opset = model.opset("").unwrap_or(21);
    let mut consts: HashMap<ValueId, Vec<i64>> = HashMap::new();
    let g = &mut model.graph;
    for (id, w) in g.weights() {
        if w.element_count() <= fold::MAX_ELEMENTS {
            if let Some(v) = w.to_i64s() {
                consts.insert(id, v);
            }
        }
    }
    let order: Vec<NodeId> = g.topo_order().to_vec();
    let mut unknown_ops = std::collections::BTreeSet::new();
    for n in order {
        let node = g.node(n);
        let rule = if node.domain.is_empty() || node.domain == "ai.onnx" {
            registry.rules.get(node.op_type.as_str())
        } else {
            None
        };
        let needs = node
            .outputs
            .iter()
            .flatten()
            .any(|&o| !g.value(o).ty.is_complete());
        let (inferred, folded) = {
            let cx = Cx::new(g, node, &consts, opset);
            let inferred = match (needs, rule) {
                (true, Some(rule)) => rule(&cx),
                (true, None) => {
                    unknown_ops.insert(op_key(&node.domain, &node.op_type));
                    Vec::new()
                }
                (false, _) => Vec::new(),
            };
            (inferred, fold::evaluate(&cx))
        };
        let outs: Vec<Option<ValueId>> = g.node(n).outputs.clone();
        for (slot, ty) in inferred.into_iter().enumerate() {
            if let Some(Some(v)) = outs.get(slot) {
                merge(&mut g.value_mut(*v).ty, ty);
            }
        }
        if let (Some(values), Some(Some(v))) = (folded, outs.first()) {
            consts.insert(*v, values);
        }
    }
    InferReport {
        untyped: untyped(g),
        unknown_ops: unknown_ops.into_iter().collect(),
    }
}

fn op_key(domain: &str, op: &str) -> String {
    if domain.is_empty() {
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
                if *o == cleave_ir::Dim::Unknown {
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
        .map(|v| v.name.clone())
        .collect()
}
