//! What rules ask of the graph: op meanings, constants, sole consumers, attributes, static
//! shapes.

use std::collections::HashSet;

use cleave_ir::{AttrValue, Graph, Node, NodeId, OpClass, OpSemantics, ValueDef, ValueId, Window};

/// A graph with the facts every rule needs. Front-ends' rewrites match through it too.
pub struct View<'a> {
    pub g: &'a Graph,
    pub sem: &'a dyn OpSemantics,
    constant: &'a [bool],
    outputs: HashSet<ValueId>,
    /// Each node's class, looked up once when the view serves a whole-graph search: rules
    /// ask it of a node several times, and a lookup hashes the op's name.
    classes: Option<Vec<OpClass>>,
}

impl<'a> View<'a> {
    pub fn new(g: &'a Graph, constant: &'a [bool], sem: &'a dyn OpSemantics) -> Self {
        View {
            g,
            sem,
            constant,
            outputs: g.outputs.iter().copied().collect(),
            classes: None,
        }
    }

    /// A view for a search over every node: each node's class is looked up once, here.
    pub fn with_classes(g: &'a Graph, constant: &'a [bool], sem: &'a dyn OpSemantics) -> Self {
        View {
            classes: Some(g.nodes.iter().map(|n| sem.class(n)).collect()),
            ..View::new(g, constant, sem)
        }
    }

    pub fn node(&self, n: NodeId) -> &'a Node {
        self.g.node(n)
    }

    pub fn class(&self, n: NodeId) -> OpClass {
        match &self.classes {
            Some(c) => c[n.index()],
            None => self.sem.class(self.g.node(n)),
        }
    }

    /// The node's convolution or pooling window, defaults filled in.
    pub fn window(&self, n: NodeId) -> Option<Window> {
        self.sem.window(self.g, n)
    }

    pub fn is_constant_node(&self, n: NodeId) -> bool {
        self.constant.get(n.index()).copied().unwrap_or(false)
    }

    /// A weight, or computed from weights alone.
    pub fn is_const(&self, v: ValueId) -> bool {
        match self.g.value(v).def {
            ValueDef::Weight(_) => true,
            ValueDef::Node(p, _) => self.is_constant_node(p),
            _ => false,
        }
    }

    pub fn is_graph_output(&self, v: ValueId) -> bool {
        self.outputs.contains(&v)
    }

    pub fn input(&self, n: NodeId, slot: usize) -> Option<ValueId> {
        self.g.node(n).inputs.get(slot).copied().flatten()
    }

    /// The node's only output (nodes with several outputs never join a chain).
    pub fn single_output(&self, n: NodeId) -> Option<ValueId> {
        let mut outs = self.g.node(n).outputs.iter().flatten().copied();
        match (outs.next(), outs.next()) {
            (Some(v), None) => Some(v),
            _ => None,
        }
    }

    /// The one node that reads `n`'s only output, when nothing else sees that tensor (no other
    /// consumer, not a graph output, not read from inside a subgraph).
    pub fn sole_consumer(&self, n: NodeId) -> Option<NodeId> {
        let v = self.single_output(n)?;
        let readers = self.g.consumers(v);
        if self.is_graph_output(v) || readers.len() != 1 {
            return None;
        }
        let c = readers[0];
        let explicit = self
            .g
            .node(c)
            .inputs
            .iter()
            .flatten()
            .filter(|&&i| i == v)
            .count();
        (explicit > 0 && !self.g.node(c).implicit_inputs.contains(&v)).then_some(c)
    }

    pub fn int_attr(&self, n: NodeId, name: &str) -> Option<i64> {
        match self.g.node(n).attr(name)? {
            AttrValue::Int(i) => Some(*i),
            _ => None,
        }
    }

    pub fn ints_attr(&self, n: NodeId, name: &str) -> Option<&'a [i64]> {
        match self.g.node(n).attr(name)? {
            AttrValue::Ints(v) => Some(v),
            _ => None,
        }
    }

    pub fn float_attr(&self, n: NodeId, name: &str) -> Option<f32> {
        match self.g.node(n).attr(name)? {
            AttrValue::Float(f) => Some(*f),
            _ => None,
        }
    }

    pub fn str_attr(&self, n: NodeId, name: &str) -> Option<&'a str> {
        match self.g.node(n).attr(name)? {
            AttrValue::String(s) => std::str::from_utf8(s).ok(),
            _ => None,
        }
    }

    pub fn dims(&self, v: ValueId) -> Option<Vec<i64>> {
        self.g.value(v).ty.static_dims()
    }

    pub fn rank(&self, v: ValueId) -> Option<usize> {
        self.g.value(v).ty.rank()
    }

    /// The channel count of `v`, when known.
    pub fn channels(&self, v: ValueId) -> Option<i64> {
        let axis = self.sem.channel_axis(self.g, v)?;
        self.g.value(v).ty.shape.as_ref()?.get(axis)?.fixed()
    }
}
