//! Facts about ONNX operators that passes outside this crate need.

use cleave_ir::Node;

/// Ops whose result differs from run to run: never folded or copied as constants.
const NONDETERMINISTIC: &[&str] = &[
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Multinomial",
    "Bernoulli",
];

/// Whether the node gives the same outputs for the same inputs every time.
pub fn is_deterministic(node: &Node) -> bool {
    let default_domain = node.domain.is_empty() || node.domain == "ai.onnx";
    !(default_domain && NONDETERMINISTIC.contains(&node.op_type.as_str()))
}
