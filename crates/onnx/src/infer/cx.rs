use std::collections::HashMap;

use cleave_ir::{AttrValue, Dim, ElemType, Graph, Node, TensorType, ValueId};

/// The known elements of small integer tensors (shapes, axes, sizes): `dims` holds every
/// tracked tensor, its elements numbers, symbols or unknown, as `Shape` of a dynamic tensor
/// gives them; `ints` only those whose elements are all numbers.
#[derive(Default)]
pub(crate) struct Values {
    dims: HashMap<ValueId, Vec<Dim>>,
    ints: HashMap<ValueId, Vec<i64>>,
}

impl Values {
    pub fn insert(&mut self, id: ValueId, v: Vec<Dim>) {
        if let Some(ints) = v.iter().map(Dim::fixed).collect::<Option<Vec<i64>>>() {
            self.ints.insert(id, ints);
        }
        self.dims.insert(id, v);
    }
}

/// What a rule sees of one node: its inputs' types, their constant values, its attributes.
pub(crate) struct Cx<'a> {
    pub g: &'a Graph,
    pub node: &'a Node,
    consts: &'a Values,
    pub opset: i64,
}

impl<'a> Cx<'a> {
    pub fn new(g: &'a Graph, node: &'a Node, consts: &'a Values, opset: i64) -> Self {
        Cx {
            g,
            node,
            consts,
            opset,
        }
    }

    pub fn input_id(&self, i: usize) -> Option<ValueId> {
        self.node.inputs.get(i).copied().flatten()
    }

    pub fn has_input(&self, i: usize) -> bool {
        self.input_id(i).is_some()
    }

    pub fn n_inputs(&self) -> usize {
        self.node.inputs.len()
    }

    pub fn n_outputs(&self) -> usize {
        self.node.outputs.len()
    }

    /// One output shaped as input 0, of element type `elem` (casts, comparisons,
    /// quantisation, scalers).
    pub fn like_input(&self, elem: Option<ElemType>) -> Vec<TensorType> {
        vec![TensorType {
            elem,
            shape: self.ty(0).shape,
        }]
    }

    pub fn ty(&self, i: usize) -> TensorType {
        self.input_id(i)
            .map(|v| self.g.value(v).ty.clone())
            .unwrap_or_default()
    }

    pub fn elem(&self, i: usize) -> Option<ElemType> {
        self.input_id(i).and_then(|v| self.g.value(v).ty.elem)
    }

    pub fn shape(&self, i: usize) -> Option<&'a [Dim]> {
        self.input_id(i)
            .and_then(|v| self.g.value(v).ty.shape.as_deref())
    }

    pub fn rank(&self, i: usize) -> Option<usize> {
        self.shape(i).map(<[Dim]>::len)
    }

    /// The input's values, when it is a known small integer tensor.
    pub fn ints(&self, i: usize) -> Option<&'a [i64]> {
        self.input_id(i)
            .and_then(|v| self.consts.ints.get(&v))
            .map(Vec::as_slice)
    }

    /// The input's elements as dims, where it is a tracked integer tensor whose elements may
    /// be symbolic (a shape computed from a dynamic tensor).
    pub fn dims_value(&self, i: usize) -> Option<&'a [Dim]> {
        self.input_id(i)
            .and_then(|v| self.consts.dims.get(&v))
            .map(Vec::as_slice)
    }

    /// How many elements a 1-D input has, from its value or its type: the rank of the shape
    /// it describes, even when the values themselves are unknown.
    pub fn len_1d(&self, i: usize) -> Option<usize> {
        if let Some(v) = self.dims_value(i) {
            return Some(v.len());
        }
        match self.shape(i)? {
            [Dim::Fixed(n)] => usize::try_from(*n).ok(),
            _ => None,
        }
    }

    pub fn attr(&self, name: &str) -> Option<&'a AttrValue> {
        self.node.attr(name)
    }

    pub fn attr_i(&self, name: &str) -> Option<i64> {
        match self.attr(name)? {
            AttrValue::Int(i) => Some(*i),
            _ => None,
        }
    }

    pub fn attr_ints(&self, name: &str) -> Option<&'a [i64]> {
        match self.attr(name)? {
            AttrValue::Ints(v) => Some(v),
            _ => None,
        }
    }

    pub fn attr_floats(&self, name: &str) -> Option<&'a [f32]> {
        match self.attr(name)? {
            AttrValue::Floats(v) => Some(v),
            _ => None,
        }
    }

    pub fn attr_str(&self, name: &str) -> Option<&'a str> {
        match self.attr(name)? {
            AttrValue::String(s) => std::str::from_utf8(s).ok(),
            _ => None,
        }
    }

    /// An axes-like list: from the attribute before `input_since`, from input `slot` after.
    pub fn ints_attr_or_input(
        &self,
        name: &str,
        slot: usize,
        input_since: i64,
    ) -> Option<Vec<i64>> {
        if self.opset >= input_since && self.has_input(slot) {
            return self.ints(slot).map(<[i64]>::to_vec);
        }
        self.attr_ints(name).map(<[i64]>::to_vec)
    }

    /// True when the list above is absent, as opposed to present but not constant.
    pub fn ints_absent(&self, name: &str, slot: usize, input_since: i64) -> bool {
        if self.opset >= input_since {
            !self.has_input(slot)
        } else {
            self.attr(name).is_none()
        }
    }
}
