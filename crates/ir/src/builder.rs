use crate::attr::Attribute;
use crate::error::GraphError;
use crate::graph::{Graph, NameIndex, Node, NodeId, Value, ValueDef, ValueId};
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
/// [`finish`]: GraphBuilder::finish
#[derive(Debug, Default)]
pub struct GraphBuilder {
    name: String,
    inputs: Vec<(String, TensorType)>,
    weights: Vec<(String, Weight)>,
    nodes: Vec<NodeSpec>,
    outputs: Vec<String>,
    types: rustc_hash::FxHashMap<String, TensorType>,
}

struct Table {
    values: Vec<Value>,
    names: NameIndex,
    outer: Vec<ValueId>,
    allow_outer: bool,
}

impl Table {
    fn define(
        &mut self,
        name: &str,
        ty: TensorType,
        def: ValueDef,
        who: impl Fn() -> String,
    ) -> Result<ValueId, GraphError> {
        if let Some(&old) = self.names.get(name) {
            return Err(GraphError::DuplicateProducer {
                tensor: name.to_string(),
                first: self.describe(old),
                second: who(),
            });
        }
        let id = ValueId(self.values.len() as u32);
        self.values.push(Value {
            name: name.to_string(),
            ty,
            def,
            quant: None,
            consumers: Vec::new(),
        });
        self.names.insert(name.to_string(), id);
        Ok(id)
    }

    fn describe(&self, id: ValueId) -> String {
        match &self.values[id.index()].def {
            ValueDef::Input => "a graph input".to_string(),
            ValueDef::Weight(_) => "a constant (initializer)".to_string(),
            ValueDef::Node(..) | ValueDef::Outer => "an earlier node".to_string(),
        }
    }

    /// Looks a name up; an unknown one is an outer-scope read where that is allowed.
    fn resolve(&mut self, name: &str) -> Option<ValueId> {
        if let Some(&id) = self.names.get(name) {
            return Some(id);
        }
        if !self.allow_outer {
            return None;
        }
        let id = ValueId(self.values.len() as u32);
        self.values.push(Value {
            name: name.to_string(),
            ty: TensorType::default(),
            def: ValueDef::Outer,
            quant: None,
            consumers: Vec::new(),
        });
        self.names.insert(name.to_string(), id);
        self.outer.push(id);
        Some(id)
    }
}

impl GraphBuilder {
    pub fn new(name: impl Into<String>) -> Self {
        GraphBuilder {
            name: name.into(),
            ..Default::default()
        }
    }

    pub fn input(&mut self, name: impl Into<String>, ty: TensorType) -> &mut Self {
        self.inputs.push((name.into(), ty));
        self
    }

    pub fn weight(&mut self, name: impl Into<String>, weight: Weight) -> &mut Self {
        self.weights.push((name.into(), weight));
        self
    }

    pub fn node(&mut self, spec: NodeSpec) -> &mut Self {
        self.nodes.push(spec);
        self
    }

    pub fn output(&mut self, name: impl Into<String>) -> &mut Self {
        self.outputs.push(name.into());
        self
    }

    /// Records what is known of a tensor's type (ONNX `value_info`, graph outputs).
    pub fn value_type(&mut self, name: impl Into<String>, ty: TensorType) -> &mut Self {
        self.types.insert(name.into(), ty);
        self
    }

    /// Checks integrity and builds the graph.
    ///
    /// With `allow_outer`, names defined nowhere in this graph are reads from an enclosing
    /// scope (subgraphs); otherwise they are errors.
    pub fn finish(self, allow_outer: bool) -> Result<Graph, GraphError> {
        let GraphBuilder {
            name,
            inputs,
            weights,
            nodes,
            outputs,
            mut types,
        } = self;
        // Every tensor is defined once: sized up front, the tables never regrow.
        let capacity =
            inputs.len() + weights.len() + nodes.iter().map(|n| n.outputs.len()).sum::<usize>();
        let mut t = Table {
            values: Vec::with_capacity(capacity),
            names: NameIndex::with_capacity_and_hasher(capacity, Default::default()),
            outer: Vec::new(),
            allow_outer,
        };
        let mut graph_inputs = Vec::with_capacity(inputs.len());
        for (n, ty) in inputs {
            let id = t.define(&n, ty, ValueDef::Input, || "a graph input".to_string())?;
            graph_inputs.push(id);
        }
        for (n, w) in weights {
            let ty = w.ty();
            t.define(&n, ty, ValueDef::Weight(Box::new(w)), || {
                "a constant (initializer)".to_string()
            })?;
        }
        // Outputs first, so a node may read a tensor produced further down the list.
        let mut out_ids = Vec::with_capacity(nodes.len());
        for (i, spec) in nodes.iter().enumerate() {
            let id = NodeId(i as u32);
            let mut outs = Vec::with_capacity(spec.outputs.len());
            for (slot, o) in spec.outputs.iter().enumerate() {
                if o.is_empty() {
                    outs.push(None);
                    continue;
                }
                let ty = types.remove(o).unwrap_or_default();
                let who = || format!("node '{}' ({})", label(spec), spec.op_type);
                outs.push(Some(t.define(o, ty, ValueDef::Node(id, slot), who)?));
            }
            out_ids.push(outs);
        }
        let mut built = Vec::with_capacity(nodes.len());
        for (spec, outs) in nodes.into_iter().zip(out_ids) {
            let mut ins = Vec::with_capacity(spec.inputs.len());
            for i in &spec.inputs {
                if i.is_empty() {
                    ins.push(None);
                    continue;
                }
                let id = t.resolve(i).ok_or_else(|| undefined(&spec, i))?;
                ins.push(Some(id));
            }
            let mut implicit = Vec::new();
            for sub in spec.attrs.iter().flat_map(|a| subgraphs_of(a)) {
                for &o in &sub.outer {
                    let n = &sub.value(o).name;
                    let id = t.resolve(n).ok_or_else(|| undefined(&spec, n))?;
                    if !implicit.contains(&id) && !ins.contains(&Some(id)) {
                        implicit.push(id);
                    }
                }
            }
            built.push(Node {
                name: spec.name,
                op_type: spec.op_type,
                domain: spec.domain,
                inputs: ins,
                outputs: outs,
                attrs: spec.attrs,
                implicit_inputs: implicit,
                source: spec.source,
            });
        }
        let mut graph_outputs = Vec::with_capacity(outputs.len());
        for o in &outputs {
            let id = t
                .resolve(o)
                .ok_or_else(|| GraphError::UndefinedOutput { tensor: o.clone() })?;
            graph_outputs.push(id);
        }
        for (n, ty) in types {
            if let Some(&id) = t.names.get(&n) {
                let v = &mut t.values[id.index()];
                if v.ty.elem.is_none() && v.ty.shape.is_none() {
                    v.ty = ty;
                }
            }
        }
        for (i, node) in built.iter().enumerate() {
            for v in node.all_inputs() {
                let c = &mut t.values[v.index()].consumers;
                if c.last() != Some(&NodeId(i as u32)) {
                    c.push(NodeId(i as u32));
                }
            }
        }
        let mut graph = Graph {
            name,
            nodes: built,
            values: t.values,
            inputs: graph_inputs,
            outputs: graph_outputs,
            outer: t.outer,
            names: t.names,
            topo: Vec::new(),
        };
        graph.topo = topological_order(&graph)?;
        Ok(graph)
    }
}

fn label(spec: &NodeSpec) -> &str {
    if spec.name.is_empty() {
        spec.outputs
            .iter()
            .find(|o| !o.is_empty())
            .map_or("", String::as_str)
    } else {
        &spec.name
    }
}

fn undefined(spec: &NodeSpec, tensor: &str) -> GraphError {
    GraphError::UndefinedTensor {
        node: label(spec).to_string(),
        op: spec.op_type.clone(),
        tensor: tensor.to_string(),
    }
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
    let inputs: Vec<Vec<ValueId>> = g
        .nodes
        .iter()
        .map(|node| node.all_inputs().collect())
        .collect();
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
            if next < inputs[node].len() {
                top.1 += 1;
                let v = inputs[node][next];
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
    let mut tensors = vec![g.value(closing).name.clone()];
    for e in stack[at + 1..].iter().rev() {
        nodes.push(g.node_label(NodeId(e.0 as u32)).to_string());
        tensors.push(e.2.map(|v| g.value(v).name.clone()).unwrap_or_default());
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
        assert_eq!(g.value(g.find("a_out").unwrap()).consumers, vec![NodeId(2)]);
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
        assert_eq!(
            g.value(g.find("outer_t").unwrap()).consumers,
            vec![NodeId(1)]
        );
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
