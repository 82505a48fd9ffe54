//! Common subexpression elimination, as ONNX Runtime's basic level does: a node that applies
//! the same op with the same attributes to the same values as an earlier one is dropped and
//! its readers read the earlier node's outputs. Weights count as the same value when their
//! element type, dims and bytes are equal, so two branches built from identical constants
//! merge (the light models' ConstantOfShape weights do).

use std::collections::HashMap;

use bytes::Bytes;
use cleave_ir::{ElemType, NodeId, ValueDef, ValueId};
use prost::Message;

use super::edit::Edits;
use super::tensor::bytes_of;
use super::PassCx;

/// What makes two nodes compute the same thing.
#[derive(PartialEq, Eq, Hash)]
struct Key {
    domain: String,
    op: String,
    attrs: Vec<u8>,
    inputs: Vec<Option<ValueId>>,
    outputs: usize,
}

pub(crate) fn eliminate_common_subexpressions(cx: &PassCx, e: &mut Edits) {
    let g = &cx.model.graph;
    let view = cx.view();
    // Each value's representative: the first value known to hold the same thing. Only
    // weights that share element type and dims with another are read and compared.
    let mut canon: Vec<ValueId> = (0..g.values.len() as u32).map(ValueId).collect();
    let mut by_type: HashMap<(ElemType, &[i64]), Vec<ValueId>> = HashMap::new();
    for (v, value) in canon.iter().zip(&g.values) {
        if let ValueDef::Weight(w) = &value.def {
            by_type.entry((w.elem, &w.dims)).or_default().push(*v);
        }
    }
    for group in by_type.values().filter(|same| same.len() > 1) {
        let mut first_with: HashMap<Bytes, ValueId> = HashMap::new();
        for &v in group {
            if let ValueDef::Weight(w) = &g.value(v).def {
                if let Some(b) = bytes_of(w) {
                    canon[v.index()] = *first_with.entry(b).or_insert(v);
                }
            }
        }
    }
    let mut seen: HashMap<Key, NodeId> = HashMap::new();
    for &n in g.topo_order() {
        let node = g.node(n);
        if node.has_subgraphs() || !crate::is_deterministic(node) {
            continue;
        }
        let record = cx.record(n);
        let key = Key {
            domain: node.domain.clone(),
            op: node.op_type.to_string(),
            attrs: record
                .attribute
                .iter()
                .flat_map(|a| a.encode_to_vec())
                .collect(),
            inputs: node
                .inputs
                .iter()
                .map(|i| i.map(|v| canon[v.index()]))
                .collect(),
            outputs: node.outputs.len(),
        };
        let Some(&first) = seen.get(&key) else {
            seen.insert(key, n);
            continue;
        };
        let pairs: Vec<(ValueId, ValueId)> = g
            .node(first)
            .outputs
            .iter()
            .zip(&node.outputs)
            .filter_map(|(a, b)| Some(((*a)?, (*b)?)))
            .collect();
        let all_outputs_there = node
            .outputs
            .iter()
            .zip(&g.node(first).outputs)
            .all(|(b, a)| b.is_none() || a.is_some());
        let movable = pairs.iter().all(|&(_, b)| {
            !view.is_graph_output(b)
                && !g
                    .consumers(b)
                    .iter()
                    .any(|&c| g.node(c).implicit_inputs.contains(&b))
        });
        if !all_outputs_there || !movable || !e.claim_for_removal(&[n]) {
            continue;
        }
        for &(a, b) in &pairs {
            e.bypass(n, a, b);
            canon[b.index()] = canon[a.index()];
        }
        e.remove(n);
        e.count += 1;
    }
}
