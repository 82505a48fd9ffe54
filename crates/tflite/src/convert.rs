//! TFLite ⇄ circle. The two schemas lay out every table alike, so a model is re-packed in its
//! own schema's layout, with the codes that differ remapped, and finished with the other
//! identifier; whatever the target cannot express is refused, naming it.

use crate::build;
use crate::codes::{encode_builtin_code, op_name, PLACEHOLDER_FOR_GREATER_OP_CODES};
use crate::model::{FlatModel, Format};
use crate::pack::{self, Layout, INLINE_LIMIT};
use crate::schema::{circle, tflite};

/// The converted file and what the user should know (debug information dropped).
pub struct Converted {
    pub bytes: Vec<u8>,
    pub notes: Vec<String>,
}

/// Converts `fm` to `target`; the same format is a plain re-encoding.
pub fn convert(fm: &FlatModel, target: Format) -> Result<Converted, String> {
    let mut notes = Vec::new();
    let (bytes, layout) = match fm.format {
        Format::Tflite => {
            let mut b = build::tflite::whole(fm, &Default::default());
            if target == Format::Circle {
                tflite_to_circle(&mut b.model, &mut notes)?;
            }
            let (slices, layout) = slices(fm, &b.buffers)?;
            let refs: Vec<&[u8]> = slices.iter().map(|s| s.as_ref()).collect();
            (
                pack::tflite::pack(&b.model, &refs, layout, target.identifier()),
                layout,
            )
        }
        Format::Circle => {
            let mut b = build::circle::whole(fm, &Default::default());
            if target == Format::Tflite {
                circle_to_tflite(&mut b.model)?;
            }
            let (slices, layout) = slices(fm, &b.buffers)?;
            let refs: Vec<&[u8]> = slices.iter().map(|s| s.as_ref()).collect();
            (
                pack::circle::pack(&b.model, &refs, layout, target.identifier()),
                layout,
            )
        }
    };
    if layout == Layout::Offsets {
        notes.push("weights past 2 GB: buffers placed after the flatbuffer (Buffer.offset)".into());
    }
    Ok(Converted { bytes, notes })
}

fn slices(fm: &FlatModel, buffers: &[u32]) -> Result<(Vec<bytes::Bytes>, Layout), String> {
    let s = build::buffer_slices(fm, buffers)?;
    let total: u64 = s.iter().map(|b| b.len() as u64).sum();
    Ok((
        s,
        if total > INLINE_LIMIT {
            Layout::Offsets
        } else {
            Layout::Inline
        },
    ))
}

/// The builtin code an operator code holds, by TFLite's rule.
fn tflite_code(c: &tflite::OperatorCodeT) -> i32 {
    i32::from(c.deprecated_builtin_code).max(c.builtin_code.0)
}

/// The builtin code an operator code holds, by circle's rule.
fn circle_code(c: &circle::OperatorCodeT) -> i32 {
    if i32::from(c.deprecated_builtin_code) == PLACEHOLDER_FOR_GREATER_OP_CODES {
        c.builtin_code.0
    } else {
        i32::from(c.deprecated_builtin_code)
    }
}

fn tensor_name(t: &Option<String>, i: usize) -> String {
    match t.as_deref() {
        Some(n) if !n.is_empty() => format!("'{n}'"),
        _ => format!("#{i}"),
    }
}

fn tflite_to_circle(m: &mut tflite::ModelT, notes: &mut Vec<String>) -> Result<(), String> {
    for c in m.operator_codes.iter_mut().flatten() {
        let code = tflite_code(c);
        let name = op_name(Format::Tflite, code).unwrap_or("?");
        if op_name(Format::Circle, code) != Some(name) {
            return Err(format!(
                "operator {name} (code {code}) does not exist in circle 0.10"
            ));
        }
        // Fields circle already reads as the same code stay as they were.
        let as_circle = if i32::from(c.deprecated_builtin_code) == PLACEHOLDER_FOR_GREATER_OP_CODES
        {
            c.builtin_code.0
        } else {
            i32::from(c.deprecated_builtin_code)
        };
        if as_circle != code {
            let (small, big) = encode_builtin_code(Format::Circle, code);
            c.deprecated_builtin_code = small;
            c.builtin_code = tflite::BuiltinOperator(big);
        }
    }
    let max2 = circle::BuiltinOptions2::ENUM_MAX;
    let mut debug = 0;
    for (s, sg) in m.subgraphs.iter_mut().flatten().enumerate() {
        if sg.debug_metadata_index != -1 {
            debug += 1;
            sg.debug_metadata_index = -1;
        }
        for (i, t) in sg.tensors.iter_mut().flatten().enumerate() {
            let what = || format!("subgraph {s} tensor {}", tensor_name(&t.name, i));
            t.type_ = match t.type_.0 {
                20 => tflite::TensorType(-1),
                code @ 18.. => {
                    return Err(format!(
                        "{}: type {} has no circle equivalent",
                        what(),
                        crate::codes::type_name(Format::Tflite, code)
                    ))
                }
                code => tflite::TensorType(code),
            };
            if t.external_buffer != 0 {
                return Err(format!(
                    "{}: data in an external buffer, which circle cannot name",
                    what()
                ));
            }
            if let Some(q) = &t.quantization {
                if !matches!(
                    q.details,
                    tflite::QuantizationDetailsT::NONE
                        | tflite::QuantizationDetailsT::CustomQuantization(_)
                ) {
                    return Err(format!("{}: blockwise or multi-axis quantization, which circle 0.10 cannot express", what()));
                }
            }
        }
        for (k, op) in sg.operators.iter_mut().flatten().enumerate() {
            if op.builtin_options_2.builtin_options_2_type().0 > max2 {
                return Err(format!(
                    "subgraph {s} operator {k}: options circle 0.10 does not have"
                ));
            }
            if op.debug_metadata_index != -1 {
                debug += 1;
                op.debug_metadata_index = -1;
            }
        }
    }
    if debug > 0 {
        notes.push(format!(
            "{debug} debug-metadata reference(s) dropped: circle has no field for them"
        ));
    }
    Ok(())
}

fn circle_to_tflite(m: &mut circle::ModelT) -> Result<(), String> {
    for c in m.operator_codes.iter_mut().flatten() {
        let code = circle_code(c);
        let name = op_name(Format::Circle, code).unwrap_or("?");
        if op_name(Format::Tflite, code) != Some(name) {
            return Err(format!(
                "operator {name} (code {code}) exists only in circle; TFLite cannot run it"
            ));
        }
        if i32::from(c.deprecated_builtin_code).max(c.builtin_code.0) != code {
            let (small, big) = encode_builtin_code(Format::Tflite, code);
            c.deprecated_builtin_code = small;
            c.builtin_code = circle::BuiltinOperator(big);
        }
    }
    for (s, sg) in m.subgraphs.iter_mut().flatten().enumerate() {
        for (i, t) in sg.tensors.iter_mut().flatten().enumerate() {
            let what = || format!("subgraph {s} tensor {}", tensor_name(&t.name, i));
            t.type_ = match t.type_.0 {
                -1 => circle::TensorType(20),
                code @ ..=-2 => {
                    return Err(format!(
                        "{}: type {} has no TFLite equivalent",
                        what(),
                        crate::codes::type_name(Format::Circle, code)
                    ))
                }
                code => circle::TensorType(code),
            };
            if t.compression_type != circle::CompressionType::NONE {
                return Err(format!(
                    "{}: compressed (circle's compression_type), which TFLite cannot read",
                    what()
                ));
            }
            if let Some(q) = &t.quantization {
                if matches!(q.details, circle::QuantizationDetailsT::MXQuantization(_)) {
                    return Err(format!(
                        "{}: MX quantization, which TFLite cannot express",
                        what()
                    ));
                }
            }
        }
    }
    Ok(())
}
