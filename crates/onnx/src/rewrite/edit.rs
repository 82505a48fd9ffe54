//! Edits against a protobuf graph, recorded while matching and applied in one go.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::proto::{
    attribute_proto::AttributeType, tensor_shape_proto, type_proto, AttributeProto, GraphProto,
    NodeProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use cleave_ir::{Graph, NodeId, ValueId};

pub(crate) struct Edits<'g> {
    g: &'g Graph,
    /// The protobuf position of each IR node's record (see [`super::node_records`]).
    records: &'g [usize],
    /// Rewrites applied this round.
    pub count: usize,
    pub notes: Vec<String>,
    touched: Vec<bool>,
    /// Protobuf positions of the records to drop.
    removed: HashSet<usize>,
    /// New nodes placed where the record at position `i` stood (before it, if it stays).
    inserted: BTreeMap<usize, Vec<NodeProto>>,
    inits: Vec<TensorProto>,
    /// Reads of the key become reads of the value.
    reads: HashMap<String, String>,
    /// A producer's output renamed (key → value).
    writes: HashMap<String, String>,
    origins: Vec<(String, Vec<String>)>,
    taken: HashSet<String>,
}

impl<'g> Edits<'g> {
    pub fn new(g: &'g Graph, records: &'g [usize]) -> Self {
        let mut taken: HashSet<String> = g.values.iter().map(|v| v.name.to_string()).collect();
        taken.extend(g.nodes.iter().map(|n| n.name.to_string()));
        Edits {
            g,
            records,
            count: 0,
            notes: Vec::new(),
            touched: vec![false; g.nodes.len()],
            removed: HashSet::new(),
            inserted: BTreeMap::new(),
            inits: Vec::new(),
            reads: HashMap::new(),
            writes: HashMap::new(),
            origins: Vec::new(),
            taken,
        }
    }

    /// Reserves nodes for one rewrite; false if an earlier rewrite this round touched any,
    /// or one feeds a value another rewrite renamed.
    pub fn claim(&mut self, nodes: &[NodeId]) -> bool {
        let renamed = |n: &NodeId| {
            self.g
                .node(*n)
                .all_inputs()
                .any(|v| self.reads.contains_key(self.g.value(v).name.as_str()))
        };
        if nodes.iter().any(|n| self.touched[n.index()] || renamed(n)) {
            return false;
        }
        for n in nodes {
            self.touched[n.index()] = true;
        }
        true
    }

    /// Reserves nodes a rewrite only removes: reading a renamed value does not matter then,
    /// since the removed records are never rewritten.
    pub fn claim_for_removal(&mut self, nodes: &[NodeId]) -> bool {
        if nodes.iter().any(|n| self.touched[n.index()]) {
            return false;
        }
        for n in nodes {
            self.touched[n.index()] = true;
        }
        true
    }

    pub fn remove(&mut self, n: NodeId) {
        self.removed.insert(self.records[n.index()]);
    }

    pub fn insert_at(&mut self, n: NodeId, node: NodeProto) {
        self.inserted
            .entry(self.records[n.index()])
            .or_default()
            .push(node);
    }

    pub fn initializer(&mut self, t: TensorProto) {
        self.inits.push(t);
    }

    /// A name used nowhere in the graph, built from `base`.
    pub fn fresh(&mut self, base: &str) -> String {
        let mut name = base.to_string();
        let mut k = 1;
        while self.taken.contains(&name) {
            name = format!("{base}_{k}");
            k += 1;
        }
        self.taken.insert(name.clone());
        name
    }

    /// Claims a name that must be exactly this (tile names); false if it is in use.
    pub fn take_exact(&mut self, name: &str) -> bool {
        self.taken.insert(name.to_string())
    }

    pub fn origin(&mut self, new_label: &str, old: &[NodeId]) {
        self.origins.push((
            new_label.to_string(),
            old.iter()
                .map(|&n| self.g.node_label(n).to_string())
                .collect(),
        ));
    }

    /// Removes `n`, which passes `x` through unchanged as `y`: readers of `y` read `x`, or,
    /// when `y` is a graph output, `x`'s producer writes `y` directly. False (nothing done)
    /// when neither is possible.
    pub fn bypass(&mut self, n: NodeId, x: ValueId, y: ValueId) -> bool {
        let g = self.g;
        let is_out = |v: ValueId| g.outputs.contains(&v);
        let read_inside = |v: ValueId| {
            g.consumers(v)
                .iter()
                .any(|&c| g.node(c).implicit_inputs.contains(&v))
        };
        if read_inside(y) {
            return false;
        }
        if !is_out(y) {
            self.reads
                .insert(g.value(y).name.to_string(), g.value(x).name.to_string());
        } else {
            let Some(p) = g.value(x).producer() else {
                return false;
            };
            if is_out(x) || g.consumers(x) != [n] || self.touched[p.index()] {
                return false;
            }
            self.touched[p.index()] = true;
            self.writes
                .insert(g.value(x).name.to_string(), g.value(y).name.to_string());
        }
        self.remove(n);
        true
    }

    pub(crate) fn record_origins(&self, origins: &mut HashMap<String, Vec<String>>) {
        for (new, old) in &self.origins {
            let mut names: Vec<String> = old
                .iter()
                .flat_map(|o| origins.get(o).cloned().unwrap_or_else(|| vec![o.clone()]))
                .collect();
            names.dedup();
            origins.insert(new.clone(), names);
        }
    }

    /// `inits_as_inputs`: the model's IR version is below 4, where every initializer must
    /// also be listed as a graph input.
    pub(crate) fn apply(self, graph: &mut GraphProto, inits_as_inputs: bool) {
        let old = std::mem::take(&mut graph.node);
        let mut inserted = self.inserted;
        for (i, mut node) in old.into_iter().enumerate() {
            if let Some(new) = inserted.remove(&i) {
                graph.node.extend(new);
            }
            if !self.removed.contains(&i) {
                for o in node.output.iter_mut() {
                    if let Some(to) = self.writes.get(o) {
                        *o = to.clone();
                    }
                }
                graph.node.push(node);
            }
        }
        for node in graph.node.iter_mut() {
            for i in node.input.iter_mut() {
                while let Some(to) = self.reads.get(i) {
                    *i = to.clone();
                }
            }
        }
        if inits_as_inputs {
            graph.input.extend(self.inits.iter().map(input_of));
        }
        graph.initializer.extend(self.inits);
        clean(graph);
    }
}

/// Drops initializers nothing reads any more (and their IR < 4 input entries) and value_info
/// of tensors that no longer exist.
fn clean(graph: &mut GraphProto) {
    let mut read = HashSet::new();
    reads(graph, &mut read);
    read.extend(graph.output.iter().map(|o| o.name().to_string()));
    let dead: HashSet<String> = graph
        .initializer
        .iter()
        .map(|t| t.name().to_string())
        .filter(|n| !read.contains(n))
        .collect();
    graph.initializer.retain(|t| !dead.contains(t.name()));
    graph.input.retain(|i| !dead.contains(i.name()));
    let mut exists: HashSet<String> = graph
        .node
        .iter()
        .flat_map(|n| n.output.iter().cloned())
        .collect();
    exists.extend(graph.input.iter().map(|i| i.name().to_string()));
    exists.extend(graph.initializer.iter().map(|t| t.name().to_string()));
    graph.value_info.retain(|v| exists.contains(v.name()));
}

fn input_of(t: &TensorProto) -> ValueInfoProto {
    let dims = t
        .dims
        .iter()
        .map(|&d| tensor_shape_proto::Dimension {
            value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
            ..Default::default()
        })
        .collect();
    let tensor = type_proto::Tensor {
        elem_type: t.data_type,
        shape: Some(TensorShapeProto { dim: dims }),
    };
    ValueInfoProto {
        name: t.name.clone(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(tensor)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn reads(g: &GraphProto, into: &mut HashSet<String>) {
    for n in &g.node {
        into.extend(n.input.iter().filter(|i| !i.is_empty()).cloned());
        for a in &n.attribute {
            for sub in a.g.iter().chain(&a.graphs) {
                reads(sub, into);
            }
        }
    }
}

pub(crate) fn node(
    op: &str,
    name: &str,
    inputs: Vec<String>,
    outputs: Vec<String>,
    attrs: Vec<AttributeProto>,
) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        name: Some(name.into()),
        input: inputs,
        output: outputs,
        attribute: attrs,
        ..Default::default()
    }
}

pub(crate) fn attr_int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

pub(crate) fn attr_ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    }
}

pub(crate) fn attr_float(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Float as i32),
        f: Some(v),
        ..Default::default()
    }
}
