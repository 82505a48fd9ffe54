//! What ONNX rewrites ask of a [`View`] beyond operator meanings: the op type as ONNX spells
//! it, and the full convolution signature two Convs must share to be merged.

use cleave_fuse::View;
use cleave_ir::{NodeId, OpSemantics, Window};

use crate::op_registry::is_default_domain;
use crate::ops::auto_pad;
use crate::OnnxSemantics;

/// Conv attributes that must be equal for two Convs to be merged or joined: the window with
/// ONNX's defaults filled in (so "absent" and "explicit default" compare equal), plus what the
/// window leaves out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ConvSignature {
    pub window: Window,
    /// Kept whole: SAME_UPPER and SAME_LOWER pad differently.
    pub auto_pad: String,
    pub in_per_group: i64,
}

pub(crate) trait OnnxView {
    /// The op type of a default-domain node; `""` for any other domain.
    fn op(&self, n: NodeId) -> &str;
    fn conv_signature(&self, n: NodeId) -> Option<ConvSignature>;
}

impl OnnxView for View<'_> {
    fn op(&self, n: NodeId) -> &str {
        let node = self.g.node(n);
        if is_default_domain(&node.domain) {
            &node.op_type
        } else {
            ""
        }
    }

    fn conv_signature(&self, n: NodeId) -> Option<ConvSignature> {
        let w = self.dims(self.input(n, 1)?)?;
        Some(ConvSignature {
            window: OnnxSemantics.window(self.g, n)?,
            auto_pad: auto_pad(self.g.node(n)).to_string(),
            in_per_group: *w.get(1)?,
        })
    }
}
