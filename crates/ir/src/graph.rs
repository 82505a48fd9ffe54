use crate::attr::{AttrValue, Attribute};
use crate::types::TensorType;
use crate::weight::Weight;

mod names;

pub(crate) use names::NameIndex;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

/// Where a node came from: the position of its record in the source file (an ONNX graph's
/// node list, a TFLite subgraph's operator list), as the front-end that loaded it numbered
/// them. Rewrites and part writers find a node's record through it, never by assuming the IR
/// keeps the source's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceRef(pub u32);

impl SourceRef {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl NodeId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl ValueId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// How a value comes to exist.
#[derive(Clone, Debug)]
pub enum ValueDef {
    /// Fed by the caller: a graph input (or, in a subgraph, a formal input).
    Input,
    /// A constant stored with the model. Boxed: most values are not weights, and a value's
    /// size is paid once per tensor of the largest graphs.
    Weight(Box<Weight>),
    /// Output number `1` of node `0`.
    Node(NodeId, usize),
    /// Read by a subgraph from the scope that encloses it.
    Outer,
}

/// How a quantized tensor's integers map to real numbers: `real = scale * (q - zero_point)`,
/// one pair for the whole tensor or one per index of `axis`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Quantization {
    pub scale: Vec<f32>,
    pub zero_point: Vec<i64>,
    /// The axis the pairs run along when there is more than one.
    pub axis: Option<usize>,
}

/// A node's or tensor's name: held inline when it fits in 24 bytes, as most do.
pub type Name = compact_str::CompactString;

/// A tensor of the graph.
#[derive(Clone, Debug)]
pub struct Value {
    pub name: Name,
    pub ty: TensorType,
    pub def: ValueDef,
    /// Quantization parameters, for formats that keep them on tensors (boxed, as above).
    pub quant: Option<Box<Quantization>>,
}

impl Value {
    pub fn producer(&self) -> Option<NodeId> {
        match self.def {
            ValueDef::Node(n, _) => Some(n),
            _ => None,
        }
    }

    pub fn weight(&self) -> Option<&Weight> {
        match &self.def {
            ValueDef::Weight(w) => Some(w),
            _ => None,
        }
    }
}

/// A node's inputs or outputs: up to two held inline, without an allocation (most nodes read
/// one or two tensors and write one).
pub type Slots = smallvec::SmallVec<[Option<ValueId>; 2]>;

/// An operation. `inputs`/`outputs` keep the source's positions: `None` is an omitted
/// optional slot.
#[derive(Clone, Debug)]
pub struct Node {
    pub name: Name,
    pub op_type: crate::OpType,
    pub domain: String,
    pub inputs: Slots,
    pub outputs: Slots,
    pub attrs: Vec<Attribute>,
    /// Values of this graph that the node's subgraphs read from the enclosing scope. They are
    /// real inputs of the node: a partitioner must see these edges.
    pub implicit_inputs: Vec<ValueId>,
    /// The node's record in the source file, when it came from one.
    pub source: Option<SourceRef>,
}

impl Node {
    pub fn attr(&self, name: &str) -> Option<&AttrValue> {
        self.attrs.iter().find(|a| a.name == name).map(|a| &a.value)
    }

    pub fn has_subgraphs(&self) -> bool {
        self.attrs
            .iter()
            .any(|a| matches!(a.value, AttrValue::Graph(_) | AttrValue::Graphs(_)))
    }

    pub fn subgraphs(&self) -> impl Iterator<Item = &Graph> {
        self.attrs.iter().flat_map(|a| match &a.value {
            AttrValue::Graph(g) => std::slice::from_ref(g.as_ref()).iter(),
            AttrValue::Graphs(gs) => gs.iter(),
            _ => [].iter(),
        })
    }

    /// Every value the node reads: its explicit inputs, then its subgraphs' outer reads.
    pub fn all_inputs(&self) -> impl Iterator<Item = ValueId> + '_ {
        self.inputs
            .iter()
            .flatten()
            .copied()
            .chain(self.implicit_inputs.iter().copied())
    }
}

/// A node's name, or its first output's when it has none (see [`Graph::node_label`]).
pub(crate) fn label<'a>(node: &'a Node, values: &'a [Value]) -> &'a str {
    if !node.name.is_empty() {
        return &node.name;
    }
    node.outputs
        .iter()
        .flatten()
        .next()
        .map_or("", |v| values[v.index()].name.as_str())
}

/// A computation graph with its producer/consumer index and a topological order.
///
/// Built only through [`crate::GraphBuilder`], which checks its integrity, so a `Graph`
/// always has one producer per value, no undefined read and no cycle.
#[derive(Clone, Debug)]
pub struct Graph {
    pub name: String,
    pub nodes: Vec<Node>,
    pub values: Vec<Value>,
    /// Real inputs, in source order. Constants are never here, even where the source format
    /// listed them as inputs.
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    /// Values read from an enclosing scope (non-empty only for subgraphs).
    pub outer: Vec<ValueId>,
    pub(crate) names: NameIndex,
    pub(crate) topo: Vec<NodeId>,
    /// Readers of value `v`: `readers[reader_at[v]..reader_at[v + 1]]` (one flat list: a
    /// vector per value would be a million allocations in the largest graphs).
    pub(crate) reader_at: Vec<u32>,
    pub(crate) readers: Vec<NodeId>,
}

impl Graph {
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    pub fn value(&self, id: ValueId) -> &Value {
        &self.values[id.index()]
    }

    pub fn value_mut(&mut self, id: ValueId) -> &mut Value {
        &mut self.values[id.index()]
    }

    /// Nodes that read `v`, each once, in node order. Subgraph reads count for the node
    /// that owns the subgraph.
    pub fn consumers(&self, v: ValueId) -> &[NodeId] {
        match (
            self.reader_at.get(v.index()),
            self.reader_at.get(v.index() + 1),
        ) {
            (Some(&a), Some(&b)) => &self.readers[a as usize..b as usize],
            _ => &[],
        }
    }

    pub fn find(&self, name: &str) -> Option<ValueId> {
        self.names.get(name, &self.values)
    }

    /// Node ids in an order where every producer comes before its consumers. It keeps the
    /// source order wherever the source order is already topological.
    pub fn topo_order(&self) -> &[NodeId] {
        &self.topo
    }

    /// How a node is addressed by users: its name, or its first output's name if it has none.
    pub fn node_label(&self, id: NodeId) -> &str {
        label(self.node(id), &self.values)
    }

    pub fn weights(&self) -> impl Iterator<Item = (ValueId, &Weight)> {
        self.values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.weight().map(|w| (ValueId(i as u32), w)))
    }

    /// For each node, whether it computes a constant: all it reads are weights or outputs of
    /// such nodes. `deterministic` says which ops give the same result every time (a random
    /// generator with no inputs is not a constant). Nodes with subgraphs never count.
    pub fn constant_nodes(&self, deterministic: impl Fn(&Node) -> bool) -> Vec<bool> {
        self.computed_from(deterministic, |_, _| false)
    }

    /// For each node, whether a decoder's stage can compute it again itself rather than
    /// receive it: the mask, positions and rotary tables, computed from weights, the small
    /// inputs (`attention_mask`, `position_ids`) and shapes. `state` are the caches' inputs and
    /// `tokens` the token ids: their values are a layer's work (the embedding is no copy), so
    /// a recomputable node reads them, and any tensor a layer computes, through `shape_only`
    /// nodes alone, and then only a tensor whose shape is declared in full, a cache only where
    /// another is declared alike (the stage reads the shape of one of its own tensors declared
    /// alike: [`Graph::same_shape_input`]).
    /// Every constant node is one.
    pub fn recomputable_nodes(
        &self,
        state: &[ValueId],
        tokens: Option<ValueId>,
        deterministic: impl Fn(&Node) -> bool,
        shape_only: impl Fn(&Node) -> bool,
    ) -> Vec<bool> {
        self.computed_from(deterministic, |node, v| {
            let input = matches!(self.value(v).def, ValueDef::Input);
            if input && !state.contains(&v) && Some(v) != tokens {
                true
            } else if Some(v) == tokens {
                shape_only(node)
            } else if input {
                shape_only(node) && self.same_shape_input(state, v).is_some()
            } else {
                shape_only(node) && self.shape_named(v)
            }
        })
    }

    /// Whether `v`'s shape is declared in full: every dim fixed or named.
    fn shape_named(&self, v: ValueId) -> bool {
        self.value(v)
            .ty
            .shape
            .as_ref()
            .is_some_and(|s| !s.iter().any(|d| matches!(d, crate::Dim::Unknown)))
    }

    /// One of `among`, not `v`, declared with the very shape of `v` (every dim fixed or named
    /// alike), so that reading its shape reads `v`'s.
    pub fn same_shape_input(&self, among: &[ValueId], v: ValueId) -> Option<ValueId> {
        if !self.shape_named(v) {
            return None;
        }
        let shape = &self.value(v).ty.shape;
        among
            .iter()
            .copied()
            .find(|&w| w != v && self.value(w).ty.shape == *shape)
    }

    /// For each node, whether it computes from weights and what `admit` lets the node read
    /// (graph inputs, or other nodes' outputs), through deterministic nodes without subgraphs.
    fn computed_from(
        &self,
        deterministic: impl Fn(&Node) -> bool,
        admit: impl Fn(&Node, ValueId) -> bool,
    ) -> Vec<bool> {
        let mut ok = vec![false; self.nodes.len()];
        for &n in &self.topo {
            let node = self.node(n);
            ok[n.index()] = deterministic(node)
                && !node.has_subgraphs()
                && node.all_inputs().all(|v| match &self.value(v).def {
                    ValueDef::Weight(_) => true,
                    ValueDef::Node(p, _) => ok[p.index()] || admit(node, v),
                    ValueDef::Input => admit(node, v),
                    ValueDef::Outer => false,
                });
        }
        ok
    }

    /// Longest path from any input to any node, counted in nodes (0 for an empty graph).
    pub fn depth(&self) -> usize {
        // u32: node ids are, so no path is longer (and a million-node graph's table halves).
        let mut level = vec![0u32; self.nodes.len()];
        let mut deepest = 0;
        for &n in &self.topo {
            let node = self.node(n);
            let l = 1 + node
                .all_inputs()
                .filter_map(|v| self.value(v).producer())
                .map(|p| level[p.index()])
                .max()
                .unwrap_or(0);
            level[n.index()] = l;
            deepest = deepest.max(l);
        }
        deepest as usize
    }
}
