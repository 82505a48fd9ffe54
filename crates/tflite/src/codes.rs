//! Where the two schemas disagree on a code: operator codes, element types.

use cleave_ir::ElemType;

use crate::model::Format;
use crate::schema::{circle, tflite};

/// The builtin operator code `CUSTOM`, the same in both schemas.
pub const CUSTOM: i32 = 32;
/// Codes at or above this are stored only in `builtin_code`; the byte-wide
/// `deprecated_builtin_code` holds this placeholder instead.
pub const PLACEHOLDER_FOR_GREATER_OP_CODES: i32 = 127;

/// An operator code's builtin number. TFLite writers fill both fields and readers take the
/// larger; circle stores its negative codes in the byte field, so there the byte field wins
/// unless it holds the placeholder (ONE's `mio_circle::builtin_code_neutral`).
pub fn builtin_code(format: Format, code: &tflite::OperatorCode) -> i32 {
    let deprecated = i32::from(code.deprecated_builtin_code());
    let extended = code.builtin_code().0;
    match format {
        Format::Tflite => deprecated.max(extended),
        Format::Circle if deprecated == PLACEHOLDER_FOR_GREATER_OP_CODES => extended,
        Format::Circle => deprecated,
    }
}

/// The two fields that store `code` in `format`.
pub fn encode_builtin_code(format: Format, code: i32) -> (i8, i32) {
    let small = if (i32::from(i8::MIN)..PLACEHOLDER_FOR_GREATER_OP_CODES).contains(&code) {
        code as i8
    } else {
        PLACEHOLDER_FOR_GREATER_OP_CODES as i8
    };
    match format {
        // TFLite's byte field holds only non-negative codes.
        Format::Tflite => (small.max(0), code),
        Format::Circle => (small, code),
    }
}

/// The schema's name for a builtin code, e.g. `CONV_2D`.
pub fn op_name(format: Format, code: i32) -> Option<&'static str> {
    match format {
        Format::Tflite => tflite::BuiltinOperator(code).variant_name(),
        Format::Circle => circle::BuiltinOperator(code).variant_name(),
    }
}

/// The builtin code for a name in `format`'s schema.
pub fn op_code(format: Format, name: &str) -> Option<i32> {
    match format {
        Format::Tflite => tflite::BuiltinOperator::ENUM_VALUES
            .iter()
            .find(|op| op.variant_name() == Some(name))
            .map(|op| op.0),
        Format::Circle => circle::BuiltinOperator::ENUM_VALUES
            .iter()
            .find(|op| op.variant_name() == Some(name))
            .map(|op| op.0),
    }
}

/// A tensor type code as cleave's element type.
pub fn elem_type(format: Format, code: i8) -> ElemType {
    use ElemType::*;
    match (code, format) {
        (0, _) => F32,
        (1, _) => F16,
        (2, _) => I32,
        (3, _) => U8,
        (4, _) => I64,
        (5, _) => Str,
        (6, _) => Bool,
        (7, _) => I16,
        (8, _) => C64,
        (9, _) => I8,
        (10, _) => F64,
        (11, _) => C128,
        (12, _) => U64,
        (15, _) => U32,
        (16, _) => U16,
        (17, _) => I4,
        (18, Format::Tflite) => BF16,
        (19, Format::Tflite) => I2,
        (20, Format::Tflite) | (-1, Format::Circle) => U4,
        (21, Format::Tflite) => F8E4M3FN,
        (22, Format::Tflite) => F8E5M2,
        // RESOURCE, VARIANT and circle's GGML/MX block types: no element cleave can size.
        (other, _) => Other(i32::from(other)),
    }
}

/// The schema's name for a tensor type code.
pub fn type_name(format: Format, code: i8) -> String {
    let name = match format {
        Format::Tflite => tflite::TensorType(code).variant_name(),
        Format::Circle => circle::TensorType(code).variant_name(),
    };
    name.map_or_else(|| format!("type {code}"), str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_codes_round_trip_in_both_formats() {
        for format in [Format::Tflite, Format::Circle] {
            for name in ["CONV_2D", "CUSTOM", "CUMSUM", "REDUCE_WINDOW"] {
                let code = op_code(format, name).unwrap();
                assert_eq!(op_name(format, code), Some(name));
                let (small, big) = encode_builtin_code(format, code);
                let mut fbb = flatbuffers::FlatBufferBuilder::new();
                let oc = tflite::OperatorCode::create(
                    &mut fbb,
                    &tflite::OperatorCodeArgs {
                        deprecated_builtin_code: small,
                        builtin_code: tflite::BuiltinOperator(big),
                        ..Default::default()
                    },
                );
                fbb.finish_minimal(oc);
                let read = flatbuffers::root::<tflite::OperatorCode>(fbb.finished_data()).unwrap();
                assert_eq!(builtin_code(format, &read), code, "{name} in {format:?}");
            }
        }
        // circle's own negative codes survive only circle's rule.
        let code = op_code(Format::Circle, "INSTANCE_NORM").unwrap();
        assert_eq!(code, -2);
        assert_eq!(op_code(Format::Tflite, "INSTANCE_NORM"), None);
        let (small, big) = encode_builtin_code(Format::Circle, code);
        assert_eq!((small, big), (-2, -2));
    }

    #[test]
    fn types_that_differ_between_the_schemas() {
        assert_eq!(elem_type(Format::Tflite, 20), ElemType::U4);
        assert_eq!(elem_type(Format::Circle, -1), ElemType::U4);
        assert_eq!(elem_type(Format::Circle, 20), ElemType::Other(20));
        assert_eq!(type_name(Format::Circle, -1), "UINT4");
        assert_eq!(type_name(Format::Tflite, 20), "UINT4");
    }
}
