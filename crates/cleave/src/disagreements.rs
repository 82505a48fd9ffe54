//! Where two engines are known to disagree on a tensor without either being at fault, and
//! which to trust: the evidence, and the script that measures it again, are in
//! docs/engine-disagreements.md. `verify` says it beside a difference it explains.

use cleave_ir::ElemType;

/// What to say of a tensor of `elem` made by `op_type` (as the format names it) from a first
/// input of `input`, on which the engines `engines` (registry names, in either order) differ
/// by at most `max_abs`, where that difference is known and understood.
pub fn known_disagreement(
    op_type: &str,
    input: Option<ElemType>,
    elem: ElemType,
    max_abs: f64,
    engines: [&str; 2],
) -> Option<&'static str> {
    let pair = |a: &str, b: &str| engines == [a, b] || engines == [b, a];
    // onert 0.1.0 quantizes float32 to int8 as if to uint8 (`clip(round(x/s)+zp, 0, 255)`, the
    // byte read as int8): bit for bit so on every zero point and scale tried, through its C
    // API and its Python binding. Its uint8→int8 QUANTIZE is right.
    if op_type == "QUANTIZE"
        && input == Some(ElemType::F32)
        && elem == ElemType::I8
        && pair("onert", "litert")
    {
        return Some(
            "onert 0.1.0 quantizes float32 to int8 as if to uint8 (clamped to [0, 255], the \
             byte read as int8: what should be negative comes out 0, what passes 127 wraps \
             negative); LiteRT matches TFLite's definition exactly, so trust it \
             (docs/engine-disagreements.md). Tensors computed from this one differ for the \
             same reason",
        );
    }
    // Convolutions: 21 single-op cases and a chain, each engine matching one rounding rule
    // exactly, never more than a step apart. ADD: a step apart on every seed of synth_int8.
    if matches!(op_type, "CONV_2D" | "DEPTHWISE_CONV_2D" | "ADD")
        && elem == ElemType::I8
        && max_abs <= 1.0
        && pair("onert", "litert")
    {
        return Some(
            "one quantized step apart: the engines round the rescaling differently, and \
             neither is at fault (onert as TFLite's reference kernels do, LiteRT's CPU \
             accelerator to nearest, the closer to the exact value; \
             docs/engine-disagreements.md). Tensors computed from this one may differ by more \
             for the same reason",
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_known_differences_between_onert_and_litert_are_explained() {
        let f32 = Some(ElemType::F32);
        let say = |op, elem, d, e: [&str; 2]| known_disagreement(op, f32, elem, d, e).is_some();
        assert!(say("CONV_2D", ElemType::I8, 1.0, ["onert", "litert"]));
        assert!(say(
            "DEPTHWISE_CONV_2D",
            ElemType::I8,
            1.0,
            ["litert", "onert"]
        ));
        assert!(!say("CONV_2D", ElemType::I8, 2.0, ["onert", "litert"]));
        assert!(!say("CONV_2D", ElemType::U8, 1.0, ["onert", "litert"]));
        assert!(!say("MEAN", ElemType::I8, 1.0, ["onert", "litert"]));
        assert!(say("ADD", ElemType::I8, 1.0, ["onert", "litert"]));
        assert!(!say("CONV_2D", ElemType::I8, 1.0, ["tract", "litert"]));
        assert!(say("QUANTIZE", ElemType::I8, 128.0, ["onert", "litert"]));
        assert!(!say("QUANTIZE", ElemType::U8, 128.0, ["onert", "litert"]));
        let from_u8 = Some(ElemType::U8);
        let e = ["onert", "litert"];
        assert!(known_disagreement("QUANTIZE", from_u8, ElemType::I8, 1.0, e).is_none());
    }
}
