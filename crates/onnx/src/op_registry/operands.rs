//! What a registered shape check reads: a node's inputs as type inference and the file know
//! them.

use cleave_ir::{AttrValue, Graph, Node, TensorType, ValueDef, Weight};

/// A node's inputs as type inference and the file know them.
pub(crate) struct Operands<'a> {
    pub(crate) g: &'a Graph,
    pub n: &'a Node,
}

impl Operands<'_> {
    fn ty(&self, i: usize) -> Option<&TensorType> {
        let v = self.n.inputs.get(i).copied().flatten()?;
        Some(&self.g.value(v).ty)
    }

    pub(crate) fn rank(&self, i: usize) -> Option<i64> {
        self.ty(i)?.rank().and_then(|r| i64::try_from(r).ok())
    }

    /// Each dim of input `i`, `None` where it is not a known number.
    pub(crate) fn dims(&self, i: usize) -> Option<Vec<Option<i64>>> {
        let shape = self.ty(i)?.shape.as_ref()?;
        Some(shape.iter().map(|d| d.fixed()).collect())
    }

    /// Input `i` when it is a constant: an initializer or a Constant node's tensor.
    fn weight(&self, i: usize) -> Option<&Weight> {
        let v = self.n.inputs.get(i).copied().flatten()?;
        match &self.g.value(v).def {
            ValueDef::Weight(w) => Some(w),
            ValueDef::Node(p, 0) => {
                let p = self.g.nodes.get(p.0 as usize)?;
                match (p.op_type.as_str(), p.attr("value")?) {
                    ("Constant", AttrValue::Tensor(w)) => Some(w),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// The values of input `i` when it is a constant.
    pub(crate) fn constant(&self, i: usize) -> Option<Vec<f64>> {
        self.weight(i)?.to_f64s()
    }

    /// Integer constants (shapes, axes, sizes); a float constant is not one.
    pub(crate) fn int_constant(&self, i: usize) -> Option<Vec<i64>> {
        self.weight(i)
            .filter(|w| !w.elem.is_float())
            .and_then(|w| w.to_i64s())
    }

    /// An attribute's list, or input `i` when the attribute is absent (opsets moved `axes`,
    /// `pads` and `split` from attributes to inputs).
    pub(crate) fn list(&self, attr: &str, i: usize) -> Option<Vec<i64>> {
        match self.n.attr(attr) {
            Some(AttrValue::Ints(v)) => Some(v.clone()),
            _ => self.int_constant(i),
        }
    }
}
