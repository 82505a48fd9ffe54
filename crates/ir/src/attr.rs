use bytes::Bytes;

use crate::graph::Graph;
use crate::weight::Weight;

/// A node attribute.
#[derive(Clone, Debug)]
pub struct Attribute {
    pub name: String,
    pub value: AttrValue,
}

#[derive(Clone, Debug)]
pub enum AttrValue {
    Float(f32),
    Int(i64),
    String(Bytes),
    Tensor(Weight),
    Graph(Box<Graph>),
    Floats(Vec<f32>),
    Ints(Vec<i64>),
    Strings(Vec<Bytes>),
    Tensors(Vec<Weight>),
    Graphs(Vec<Graph>),
    /// Inside a function body: the value is the caller's attribute of this name.
    Ref(String),
    /// A kind the IR carries without interpreting (sparse tensors, type protos).
    Opaque(&'static str),
}

impl AttrValue {
    pub fn kind(&self) -> &'static str {
        match self {
            AttrValue::Float(_) => "float",
            AttrValue::Int(_) => "int",
            AttrValue::String(_) => "string",
            AttrValue::Tensor(_) => "tensor",
            AttrValue::Graph(_) => "graph",
            AttrValue::Floats(_) => "floats",
            AttrValue::Ints(_) => "ints",
            AttrValue::Strings(_) => "strings",
            AttrValue::Tensors(_) => "tensors",
            AttrValue::Graphs(_) => "graphs",
            AttrValue::Ref(_) => "ref",
            AttrValue::Opaque(k) => k,
        }
    }
}
