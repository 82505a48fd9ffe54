use crate::attr::Attribute;
use crate::error::GraphError;
use crate::graph::NameIndex;
use crate::graph::{label, Graph, Node, NodeId, Slots, Value, ValueDef, ValueId};
use crate::types::TensorType;
use crate::weight::Weight;

/// A node as a front-end reads it: tensors by name, `""` for an omitted optional slot.
#[derive(Clone, Debug, Default)]
pub struct NodeSpec {
    pub name: String,
    pub op_type: String,
    pub domain: String,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub attrs: Vec<Attribute>,
    /// The node's record in the source file (see [`crate::SourceRef`]).
    pub source: Option<crate::SourceRef>,
}

impl NodeSpec {
    /// A node of `op_type` in the default domain, reading and writing tensors by name.
    pub fn new(name: &str, op_type: &str, inputs: &[&str], outputs: &[&str]) -> NodeSpec {
        NodeSpec {
            name: name.into(),
            op_type: op_type.into(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: outputs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }
}

/// Collects a graph by names, in any order, then checks and indexes it in [`finish`].
///
/// Each addition is resolved as it comes: a tensor's name is moved into the value it names,
/// and a read of a tensor defined earlier becomes its id at once, so a node costs its IR size,
/// not also a copy of its strings until the end. Reads of tensors not yet defined wait for
/// [`finish`]. Values are numbered in the order they are defined (inputs and weights first
/// when the front-end adds them first).
///
/// [`finish`]: GraphBuilder::finish
#[derive(Debug, Default)]
pub struct GraphBuilder {
    name: String,
    table: Table,
    graph_inputs: Vec<ValueId>,
    nodes: Vec<Node>,
    /// Reads of names not defined when their node was added.
    pending: Vec<Pending>,
    outputs: Vec<String>,
    /// Types given for names not defined yet.
    types: rustc_hash::FxHashMap<String, TensorType>,
    op_types: crate::op_type::OpTypes,
    /// The first integrity error; what is added after it is ignored.
    error: Option<GraphError>,
}

/// A read of `name` by `node`: its input slot, or `None` for a read by one of its subgraphs.
#[derive(Debug)]
struct Pending {
    node: NodeId,
    slot: Option<usize>,
    name: String,
}

#[derive(Debug, Default)]
struct Table {
    values: Vec<Value>,
    names: NameIndex,
    outer: Vec<ValueId>,
}

impl Table {
    /// Defines `name`; a name defined before gives back the value that has it.
    fn define(&mut self, name: String, ty: TensorType, def: ValueDef) -> Result<ValueId, ValueId> {
        if let Some(old) = self.find(&name) {
            return Err(old);
        }
        let id = ValueId(self.values.len() as u32);
        self.values.push(Value {
            name: name.into(),
            ty,
            def,
            quant: None,
        });
        self.names.insert_new(id, &self.values);
        Ok(id)
    }

    fn duplicate(&self, old: ValueId, second: String) -> GraphError {
        let first = match &self.values[old.index()].def {
            ValueDef::Input => "a graph input",
            ValueDef::Weight(_) => "a constant (initializer)",
            ValueDef::Node(..) | ValueDef::Outer => "an earlier node",
        };
        GraphError::DuplicateProducer {
            tensor: self.values[old.index()].name.to_string(),
            first: first.to_string(),
            second,
        }
    }

    fn find(&self, name: &str) -> Option<ValueId> {
        self.names.get(name, &self.values)
    }

    /// Looks a name up; an unknown one is an outer-scope read where that is allowed.
    fn resolve(&mut self, name: &str, allow_outer: bool) -> Option<ValueId> {
        if let Some(id) = self.find(name) {
            return Some(id);
        }
        if !allow_outer {
            return None;
        }
        let id = ValueId(self.values.len() as u32);
        self.values.push(Value {
            name: name.into(),
            ty: TensorType::default(),
            def: ValueDef::Outer,
            quant: None,
        });
        self.names.insert_new(id, &self.values);
        self.outer.push(id);
        Some(id)
    }
}

fn is_untyped(ty: &TensorType) -> bool {
    ty.elem.is_none() && ty.shape.is_none()
}

impl GraphBuilder {
    pub fn new(name: impl Into<String>) -> Self {
        GraphBuilder {
            name: name.into(),
            ..Default::default()
        }
    }

    /// Room for `nodes` nodes and `values` tensors, so the tables of a large graph are
    /// allocated once instead of regrowing.
    pub fn reserve(&mut self, nodes: usize, values: usize) -> &mut Self {
        self.nodes.reserve(nodes);
        self.table.values.reserve(values);
        self.table.names.reserve(values, &self.table.values);
        self
    }

    /// A type given by `value_type` before the value was defined wins over an unknown one.
    fn declared(&mut self, name: &str, ty: TensorType) -> TensorType {
        match self.types.remove(name) {
            Some(given) if is_untyped(&ty) => given,
            _ => ty,
        }
    }

    fn define_named(&mut self, name: String, ty: TensorType, def: ValueDef, who: &str) {
        if self.error.is_some() {
            return;
        }
        let ty = self.declared(&name, ty);
        if let Err(old) = self.table.define(name, ty, def) {
            self.error = Some(self.table.duplicate(old, who.to_string()));
        }
    }

    pub fn input(&mut self, name: impl Into<String>, ty: TensorType) -> &mut Self {
        let before = self.table.values.len();
        self.define_named(name.into(), ty, ValueDef::Input, "a graph input");
        if self.table.values.len() > before {
            self.graph_inputs.push(ValueId(before as u32));
        }
        self
    }

    pub fn weight(&mut self, name: impl Into<String>, weight: Weight) -> &mut Self {
        let ty = weight.ty();
        let def = ValueDef::Weight(Box::new(weight));
        self.define_named(name.into(), ty, def, "a constant (initializer)");
        self
    }

    pub fn node(&mut self, spec: NodeSpec) -> &mut Self {
        if self.error.is_some() {
            return self;
        }
        let id = NodeId(self.nodes.len() as u32);
        let NodeSpec {
            name,
            op_type,
            domain,
            inputs,
            outputs,
            attrs,
            source,
        } = spec;
        // Outputs first, so that a node reading its own output is a cycle, not a dangling read.
        let mut outs = Slots::with_capacity(outputs.len());
        for (slot, o) in outputs.into_iter().enumerate() {
            if o.is_empty() {
                outs.push(None);
                continue;
            }
            let ty = self.types.remove(&o).unwrap_or_default();
            match self.table.define(o, ty, ValueDef::Node(id, slot)) {
                Ok(v) => outs.push(Some(v)),
                Err(old) => {
                    let label = if name.is_empty() {
                        outs.iter().flatten().next().map_or_else(
                            || self.table.values[old.index()].name.clone(),
                            |v| self.table.values[v.index()].name.clone(),
                        )
                    } else {
                        name.into()
                    };
                    let who = format!("node '{label}' ({op_type})");
                    self.error = Some(self.table.duplicate(old, who));
                    return self;
                }
            }
        }
        let mut ins = Slots::with_capacity(inputs.len());
        for (slot, i) in inputs.into_iter().enumerate() {
            let found = if i.is_empty() {
                None
            } else if let Some(v) = self.table.find(&i) {
                Some(v)
            } else {
                self.pending.push(Pending {
                    node: id,
                    slot: Some(slot),
                    name: i,
                });
                None
            };
            ins.push(found);
        }
        let mut implicit = Vec::new();
        for sub in attrs.iter().flat_map(|a| subgraphs_of(a)) {
            for &o in &sub.outer {
                let n = &sub.value(o).name;
                match self.table.find(n) {
                    Some(v) => {
                        if !implicit.contains(&v) && !ins.contains(&Some(v)) {
                            implicit.push(v);
                        }
                    }
                    None => self.pending.push(Pending {
                        node: id,
                        slot: None,
                        name: n.to_string(),
                    }),
                }
            }
        }
        let op_type = self.op_types.intern(&op_type);
        self.nodes.push(Node {
            name: name.into(),
            op_type,
            domain,
            inputs: ins,
            outputs: outs,
            attrs,
            implicit_inputs: implicit,
            source,
        });
        self
    }

    pub fn output(&mut self, name: impl Into<String>) -> &mut Self {
        self.outputs.push(name.into());
        self
    }

    /// Records what is known of a tensor's type (ONNX `value_info`, graph outputs). A node's
    /// output takes the last type given; an input or a constant keeps its own when it has one.
    pub fn value_type(&mut self, name: impl Into<String>, ty: TensorType) -> &mut Self {
        let name = name.into();
        match self.table.find(&name) {
            Some(id) => {
                let v = &mut self.table.values[id.index()];
                if matches!(v.def, ValueDef::Node(..)) || is_untyped(&v.ty) {
                    v.ty = ty;
                }
            }
            None => {
                self.types.insert(name, ty);
            }
        }
        self
    }

    /// Checks integrity and builds the graph.
    ///
    /// With `allow_outer`, names defined nowhere in this graph are reads from an enclosing
    /// scope (subgraphs); otherwise they are errors.
    pub fn finish(self, allow_outer: bool) -> Result<Graph, GraphError> {
        let GraphBuilder {
            name,
            mut table,
            graph_inputs,
            mut nodes,
            pending,
            outputs,
            types,
            op_types: _,
            error,
        } = self;
        if let Some(e) = error {
            return Err(e);
        }
        for p in pending {
            let Some(v) = table.resolve(&p.name, allow_outer) else {
                let node = &nodes[p.node.index()];
                return Err(GraphError::UndefinedTensor {
                    node: label(node, &table.values).to_string(),
                    op: node.op_type.to_string(),
                    tensor: p.name,
                });
            };
            let node = &mut nodes[p.node.index()];
            match p.slot {
                Some(slot) => node.inputs[slot] = Some(v),
                None => {
                    if !node.implicit_inputs.contains(&v) && !node.inputs.contains(&Some(v)) {
                        node.implicit_inputs.push(v);
                    }
                }
            }
        }
        let mut graph_outputs = Vec::with_capacity(outputs.len());
        for o in outputs {
            let id = table
                .resolve(&o, allow_outer)
                .ok_or(GraphError::UndefinedOutput { tensor: o })?;
            graph_outputs.push(id);
        }
        for (n, ty) in types {
            if let Some(id) = table.find(&n) {
                let v = &mut table.values[id.index()];
                if is_untyped(&v.ty) {
                    v.ty = ty;
                }
            }
        }
        let (reader_at, readers) = readers(&nodes, table.values.len());
        let mut graph = Graph {
            name,
            nodes,
            values: table.values,
            inputs: graph_inputs,
            outputs: graph_outputs,
            outer: table.outer,
            names: table.names,
            topo: Vec::new(),
            reader_at,
            readers,
        };
        graph.topo = topological_order(&graph)?;
        Ok(graph)
    }
}

/// Each value's readers, each once, in node order, as offsets into one flat list.
fn readers(nodes: &[Node], values: usize) -> (Vec<u32>, Vec<NodeId>) {
    // A node reading a value twice (x + x) counts once: `last[v]` is the last node that
    // was counted as reading `v`, and nodes are visited in order.
    let mut last = vec![u32::MAX; values];
    let mut count = vec![0u32; values + 1];
    for (i, node) in nodes.iter().enumerate() {
        for v in node.all_inputs() {
            if last[v.index()] != i as u32 {
                last[v.index()] = i as u32;
                count[v.index() + 1] += 1;
            }
        }
    }
    for v in 0..values {
        count[v + 1] += count[v];
    }
    let mut fill = count.clone();
    let mut readers = vec![NodeId(0); count[values] as usize];
    last.fill(u32::MAX);
    for (i, node) in nodes.iter().enumerate() {
        for v in node.all_inputs() {
            if last[v.index()] != i as u32 {
                last[v.index()] = i as u32;
                readers[fill[v.index()] as usize] = NodeId(i as u32);
                fill[v.index()] += 1;
            }
        }
    }
    (count, readers)
}

fn subgraphs_of(a: &Attribute) -> Vec<&Graph> {
    match &a.value {
        crate::AttrValue::Graph(g) => vec![g.as_ref()],
        crate::AttrValue::Graphs(gs) => gs.iter().collect(),
        _ => Vec::new(),
    }
}

/// Depth-first post-order over producers, visiting roots in source order: a source order that
/// is already topological comes out unchanged. Iterative, so deep graphs cannot overflow.
fn topological_order(g: &Graph) -> Result<Vec<NodeId>, GraphError> {
    const WHITE: u8 = 0;
    const GRAY: u8 = 1;
    const BLACK: u8 = 2;
    let n = g.nodes.len();
    let mut color = vec![WHITE; n];
    let mut order = Vec::with_capacity(n);
    // Every node's inputs in one flat list: a Vec per node would be a million allocations.
    let mut starts = Vec::with_capacity(n + 1);
    let mut flat = Vec::new();
    for node in &g.nodes {
        starts.push(flat.len());
        flat.extend(node.all_inputs());
    }
    starts.push(flat.len());
    let inputs = |node: usize| &flat[starts[node]..starts[node + 1]];
    // (node, next input to look at, the tensor through which the parent reached this node)
    let mut stack: Vec<(usize, usize, Option<ValueId>)> = Vec::new();
    for root in 0..n {
        if color[root] != WHITE {
            continue;
        }
        color[root] = GRAY;
        stack.push((root, 0, None));
        while let Some(top) = stack.last_mut() {
            let (node, next) = (top.0, top.1);
            if let Some(&v) = inputs(node).get(next) {
                top.1 += 1;
                let Some(p) = g.value(v).producer() else {
                    continue;
                };
                match color[p.index()] {
                    WHITE => {
                        color[p.index()] = GRAY;
                        stack.push((p.index(), 0, Some(v)));
                    }
                    GRAY => return Err(cycle_error(g, &stack, p.index(), v)),
                    _ => {}
                }
            } else {
                color[node] = BLACK;
                order.push(NodeId(node as u32));
                stack.pop();
            }
        }
    }
    Ok(order)
}

/// The stack runs consumer → producer; the cycle is reported in data-flow order.
fn cycle_error(
    g: &Graph,
    stack: &[(usize, usize, Option<ValueId>)],
    start: usize,
    closing: ValueId,
) -> GraphError {
    let at = stack.iter().position(|e| e.0 == start).unwrap_or(0);
    let mut nodes = vec![g.node_label(NodeId(start as u32)).to_string()];
    let mut tensors = vec![g.value(closing).name.to_string()];
    for e in stack[at + 1..].iter().rev() {
        nodes.push(g.node_label(NodeId(e.0 as u32)).to_string());
        tensors.push(e.2.map(|v| g.value(v).name.to_string()).unwrap_or_default());
    }
    GraphError::Cycle { nodes, tensors }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ElemType;

    fn f32s(dims: &[i64]) -> TensorType {
        TensorType::fixed(ElemType::F32, dims)
    }

    #[test]
    fn reorders_only_what_is_out_of_order() {
        let mut b = GraphBuilder::new("g");
        b.input("x", f32s(&[1]));
        b.node(NodeSpec::new("c", "Relu", &["b_out"], &["y"]));
        b.node(NodeSpec::new("a", "Relu", &["x"], &["a_out"]));
        b.node(NodeSpec::new("b", "Relu", &["a_out"], &["b_out"]));
        b.output("y");
        let g = b.finish(false).unwrap();
        let names: Vec<_> = g.topo_order().iter().map(|&n| g.node_label(n)).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(g.depth(), 3);
        assert_eq!(g.consumers(g.find("a_out").unwrap()), [NodeId(2)]);
    }

    #[test]
    fn names_the_reader_of_an_undefined_tensor() {
        let mut b = GraphBuilder::new("g");
        b.input("x", f32s(&[1]));
        b.node(NodeSpec::new("r", "Relu", &["nope"], &["y"]));
        let err = b.finish(false).unwrap_err();
        assert_eq!(
            err,
            GraphError::UndefinedTensor {
                node: "r".into(),
                op: "Relu".into(),
                tensor: "nope".into()
            }
        );
    }

    #[test]
    fn names_both_producers_of_a_tensor() {
        let mut b = GraphBuilder::new("g");
        b.input("x", f32s(&[1]));
        b.node(NodeSpec::new("a", "Relu", &["x"], &["y"]));
        b.node(NodeSpec::new("b", "Neg", &["x"], &["y"]));
        let msg = b.finish(false).unwrap_err().to_string();
        assert!(
            msg.contains("'y'")
                && msg.contains("an earlier node")
                && msg.contains("node 'b' (Neg)"),
            "{msg}"
        );
        let mut b = GraphBuilder::new("g");
        b.input("x", f32s(&[1]));
        b.node(NodeSpec::new("a", "Relu", &["x"], &["x"]));
        assert!(b
            .finish(false)
            .unwrap_err()
            .to_string()
            .contains("a graph input"));
    }

    #[test]
    fn reports_a_cycle_in_data_flow_order() {
        let mut b = GraphBuilder::new("g");
        b.input("x", f32s(&[1]));
        b.node(NodeSpec::new("a", "Add", &["x", "c_out"], &["a_out"]));
        b.node(NodeSpec::new("b", "Relu", &["a_out"], &["b_out"]));
        b.node(NodeSpec::new("c", "Relu", &["b_out"], &["c_out"]));
        b.output("c_out");
        match b.finish(false).unwrap_err() {
            GraphError::Cycle { nodes, tensors } => {
                assert_eq!(nodes.len(), 3);
                // Whatever node the report starts at, each tensor leads to the next node.
                let flow = [("a", "a_out"), ("b", "b_out"), ("c", "c_out")];
                for (n, t) in nodes.iter().zip(&tensors) {
                    assert!(flow.contains(&(n.as_str(), t.as_str())), "{n} -[{t}]->");
                }
            }
            e => panic!("expected a cycle, got {e}"),
        }
    }

    #[test]
    fn self_loop_is_a_cycle() {
        let mut b = GraphBuilder::new("g");
        b.node(NodeSpec::new("a", "Relu", &["y"], &["y"]));
        let msg = b.finish(false).unwrap_err().to_string();
        assert_eq!(msg, "graph has a cycle: 'a' -[y]-> 'a'");
    }

    #[test]
    fn subgraph_reads_become_implicit_inputs() {
        let mut body = GraphBuilder::new("then");
        body.node(NodeSpec::new("inner", "Relu", &["outer_t"], &["z"]));
        body.output("z");
        let body = body.finish(true).unwrap();
        assert_eq!(body.outer.len(), 1);
        let mut b = GraphBuilder::new("g");
        b.input("cond", TensorType::fixed(ElemType::Bool, &[]));
        b.input("x", f32s(&[1]));
        b.node(NodeSpec::new("p", "Neg", &["x"], &["outer_t"]));
        let mut spec = NodeSpec::new("if", "If", &["cond"], &["y"]);
        spec.attrs.push(Attribute {
            name: "then_branch".into(),
            value: crate::AttrValue::Graph(Box::new(body)),
        });
        b.node(spec);
        b.output("y");
        let g = b.finish(false).unwrap();
        let if_node = g.node(NodeId(1));
        assert_eq!(if_node.implicit_inputs, vec![g.find("outer_t").unwrap()]);
        assert_eq!(g.consumers(g.find("outer_t").unwrap()), [NodeId(1)]);
    }

    #[test]
    fn constant_nodes_are_those_fed_only_by_constants() {
        let mut b = GraphBuilder::new("g");
        b.input("x", f32s(&[2]));
        b.weight(
            "shape",
            Weight {
                elem: ElemType::I64,
                dims: vec![1],
                data: crate::WeightData::Bytes(2i64.to_le_bytes().to_vec().into()),
            },
        );
        b.node(NodeSpec::new("fill", "ConstantOfShape", &["shape"], &["w"]));
        b.node(NodeSpec::new("neg", "Neg", &["w"], &["w2"]));
        b.node(NodeSpec::new("rand", "RandomNormal", &[], &["r"]));
        b.node(NodeSpec::new("add", "Add", &["x", "w2"], &["y"]));
        let g = b.finish(false).unwrap();
        let c = g.constant_nodes(|n| n.op_type != "RandomNormal");
        assert_eq!(c, vec![true, true, false, false]);
    }

    #[test]
    fn top_level_graph_rejects_undefined_outputs() {
        let mut b = GraphBuilder::new("g");
        b.output("ghost");
        assert_eq!(
            b.finish(false).unwrap_err(),
            GraphError::UndefinedOutput {
                tensor: "ghost".into()
            }
        );
    }
}
