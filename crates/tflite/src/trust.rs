//! What the engines that run TFLite and circle files take on trust, checked before they see a
//! file. The flatbuffer verifier proves a file's tables are well formed; LiteRT and onert
//! then believe what the tables say: that a tensor's buffer holds as many bytes as its dims
//! ask, that an operator's options are the kind its code reads, that quantization arrays
//! agree, that every index points somewhere. A file that lies about any of these made them
//! read or write out of bounds (issue 68: onert's stack overwritten by a rank-100 input,
//! LiteRT crashed by a zero point out of its type's range).

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::codes;
use crate::model::{FlatModel, Format};
use crate::schema::{circle, tflite};
use crate::to_ir::buffer_bytes;

/// What one engine needs beyond what every engine needs.
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineNeeds {
    /// The largest rank of the main subgraph's inputs and outputs its API can describe
    /// (onert's `nnfw_tensorinfo` holds 6 dims and writes as many as the rank says).
    pub max_io_rank: Option<usize>,
    /// Every tensor has a name (onert reads each tensor's name without checking it is there).
    pub named_tensors: bool,
    /// Every operator whose code reads options has them (onert's loader does not check).
    pub options_present: bool,
}

impl EngineNeeds {
    /// LiteRT's: what every engine needs.
    pub const LITERT: EngineNeeds = EngineNeeds {
        max_io_rank: None,
        named_tensors: false,
        options_present: false,
    };
    /// onert's (runtime 1.30, `NNFW_MAX_RANK` 6).
    pub const ONERT: EngineNeeds = EngineNeeds {
        max_io_rank: Some(6),
        named_tensors: true,
        options_present: true,
    };
}

/// Whether a model keeps state from one run to the next (resource variables, or variable
/// tensors such as an LSTM's): a session of it cannot be loaded again without losing it.
pub fn keeps_state(m: &FlatModel) -> bool {
    let root = m.root();
    let codes: Vec<i32> = root
        .operator_codes()
        .into_iter()
        .flatten()
        .map(|c| codes::builtin_code(m.format, &c))
        .collect();
    root.subgraphs().into_iter().flatten().any(|sg| {
        let variable_tensor = sg.tensors().into_iter().flatten().any(|t| t.is_variable());
        let variable_op = sg.operators().into_iter().flatten().any(|op| {
            codes
                .get(op.opcode_index() as usize)
                .and_then(|&c| codes::op_name(m.format, c))
                .and_then(crate::builtins::op)
                .is_some_and(|d| d.variable)
        });
        variable_tensor || variable_op
    })
}

/// No engine describes tensors of more dims than this; a larger rank is a corrupt file.
const MAX_RANK: usize = 16;

/// Checks `m` against what an engine with `needs` trusts; the first lie found, in words that
/// name the subgraph, operator or tensor.
pub fn check_for_engine(m: &FlatModel, needs: EngineNeeds) -> Result<(), String> {
    let root = m.root();
    let subgraphs = root.subgraphs().ok_or("the model has no subgraphs")?;
    if subgraphs.is_empty() {
        return Err("the model has no subgraphs".into());
    }
    let codes_len = root.operator_codes().map_or(0, |c| c.len());
    let ios: Vec<Io> = subgraphs
        .iter()
        .map(|g| {
            (
                g.inputs().map_or(0, |v| v.len()),
                g.outputs().map_or(0, |v| v.len()),
            )
        })
        .collect();
    let buffers = root.buffers().map_or(0, |b| b.len());
    for (si, sg) in subgraphs.iter().enumerate() {
        let tensors = sg
            .tensors()
            .map(|t| t.iter().collect::<Vec<_>>())
            .unwrap_or_default();
        let at = |i: i32, what: &str| -> Result<(), String> {
            let ok = i == -1 && what != "input" && what != "output"
                || usize::try_from(i).is_ok_and(|i| i < tensors.len());
            if ok {
                Ok(())
            } else {
                Err(format!(
                    "subgraph {si}: {what} tensor index {i} is out of range ({} tensors)",
                    tensors.len()
                ))
            }
        };
        for (ti, t) in tensors.iter().enumerate() {
            tensor(m, t, buffers, needs).map_err(|e| {
                format!(
                    "subgraph {si}, tensor '{}' (#{ti}): {e}",
                    t.name().unwrap_or("")
                )
            })?;
        }
        for i in sg.inputs().into_iter().flatten() {
            at(i, "input")?;
        }
        for i in sg.outputs().into_iter().flatten() {
            at(i, "output")?;
        }
        // Who gives each tensor its value: the subgraph's caller, the file (constant data), or
        // one operator. A second writer made onert read a tensor it had not yet planned.
        let mut given: Vec<Option<String>> = tensors
            .iter()
            .map(|t| {
                let data = buffer_bytes(m, t.buffer()).ok().flatten().is_some();
                (data && !t.is_variable()).then(|| "the file's constant data".to_string())
            })
            .collect();
        for i in sg.inputs().into_iter().flatten() {
            let g = &mut given[i as usize];
            if let Some(by) = g.replace("the subgraph's caller".into()) {
                return Err(format!(
                    "subgraph {si}: input tensor #{i} is also given by {by}"
                ));
            }
        }
        for (oi, op) in sg.operators().into_iter().flatten().enumerate() {
            for i in op.outputs().into_iter().flatten().filter(|&i| i >= 0) {
                let Some(g) = usize::try_from(i).ok().and_then(|i| given.get_mut(i)) else {
                    continue;
                };
                if let Some(by) = g.replace(format!("operator #{oi}")) {
                    return Err(format!(
                        "subgraph {si}: tensor #{i} is written by operator #{oi} and by {by}"
                    ));
                }
            }
            let code = op.opcode_index() as usize;
            if code >= codes_len {
                return Err(format!(
                    "subgraph {si}, operator #{oi}: operator code {code} is out of range ({codes_len} codes)"
                ));
            }
            for i in op.inputs().into_iter().flatten() {
                at(i, "operator input")?;
            }
            for i in op.outputs().into_iter().flatten() {
                at(i, "operator output")?;
            }
            for i in op.intermediates().into_iter().flatten() {
                at(i, "intermediate")?;
            }
            operator(m, &op, &ios, needs)
                .map_err(|e| format!("subgraph {si}, operator #{oi}: {e}"))?;
        }
        // What an operator reads, something gives: onert ran an operator on a tensor no one
        // had written (a body's constant whose data was cut away) and crashed. A variable
        // starts from its own data or zeros, and a tensor of no elements has nothing to give
        // (Keras writes empty shape constants so).
        for (oi, op) in sg.operators().into_iter().flatten().enumerate() {
            for i in op.inputs().into_iter().flatten().filter(|&i| i >= 0) {
                let t = &tensors[i as usize];
                let empty = t.shape().is_some_and(|s| s.iter().any(|d| d == 0));
                if given[i as usize].is_none() && !t.is_variable() && !empty {
                    return Err(format!(
                        "subgraph {si}, operator #{oi} reads tensor '{}' (#{i}), which nothing gives: no input of the subgraph, no constant data, no operator's output",
                        t.name().unwrap_or("")
                    ));
                }
            }
        }
        if si == 0 {
            if let Some(max) = needs.max_io_rank {
                for i in sg
                    .inputs()
                    .into_iter()
                    .flatten()
                    .chain(sg.outputs().into_iter().flatten())
                {
                    let t = &tensors[i as usize];
                    let rank = t
                        .shape_signature()
                        .or_else(|| t.shape())
                        .map_or(0, |s| s.len());
                    if rank > max {
                        return Err(format!(
                            "tensor '{}' has rank {rank}; this engine describes inputs and outputs of at most {max} dims",
                            t.name().unwrap_or("")
                        ));
                    }
                }
            }
        }
    }
    for (gi, sig) in root.signature_defs().into_iter().flatten().enumerate() {
        let sg = usize::try_from(sig.subgraph_index())
            .ok()
            .filter(|&i| i < subgraphs.len());
        let Some(sg) = sg else {
            return Err(format!(
                "signature #{gi}: subgraph {} is out of range",
                sig.subgraph_index()
            ));
        };
        let count = subgraphs.get(sg).tensors().map_or(0, |t| t.len());
        for map in sig
            .inputs()
            .into_iter()
            .flatten()
            .chain(sig.outputs().into_iter().flatten())
        {
            if map.tensor_index() as usize >= count {
                return Err(format!(
                    "signature #{gi}: '{}' names tensor {} of subgraph {sg}, which has {count}",
                    map.name().unwrap_or(""),
                    map.tensor_index()
                ));
            }
        }
    }
    Ok(())
}

fn tensor(
    m: &FlatModel,
    t: &tflite::Tensor,
    buffers: usize,
    needs: EngineNeeds,
) -> Result<(), String> {
    if needs.named_tensors && t.name().is_none() {
        return Err("it has no name".into());
    }
    let shape: Vec<i32> = t.shape().map(|s| s.iter().collect()).unwrap_or_default();
    let signature: Vec<i32> = t
        .shape_signature()
        .map(|s| s.iter().collect())
        .unwrap_or_default();
    for dims in [&shape, &signature] {
        if dims.len() > MAX_RANK {
            return Err(format!("rank {} (at most {MAX_RANK})", dims.len()));
        }
    }
    if let Some(d) = shape.iter().chain(&signature).find(|&&d| d < -1) {
        return Err(format!("a dim of {d}"));
    }
    if !signature.is_empty() && signature.len() != shape.len() {
        return Err(format!(
            "shape {shape:?} and shape_signature {signature:?} differ in rank"
        ));
    }
    let elem = codes::elem_type(m.format, t.type_().0);
    let count = shape
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(u64::try_from(d).ok()?));
    let bytes = elem
        .bits()
        .and_then(|bits| count?.checked_mul(u64::from(bits)))
        .map(|bits| bits.div_ceil(8));
    if shape.iter().all(|&d| d >= 0) && elem.bits().is_some() && bytes.is_none() {
        return Err(format!("shape {shape:?} holds more bytes than a file can"));
    }
    let buffer = t.buffer() as usize;
    if buffer != 0 && buffer >= buffers {
        return Err(format!(
            "buffer {buffer} is out of range ({buffers} buffers)"
        ));
    }
    // Sparse tensors store fewer bytes than their dims; strings and resources have no width.
    if t.sparsity().is_none() {
        if let (Some(data), Some(want)) = (buffer_bytes(m, t.buffer())?, bytes) {
            if data.len() as u64 != want {
                return Err(format!(
                    "its buffer holds {} bytes, its shape {shape:?} of {elem} needs {want}",
                    data.len()
                ));
            }
        }
    }
    quantization(m.format, t, &shape)
}

fn quantization(format: Format, t: &tflite::Tensor, shape: &[i32]) -> Result<(), String> {
    let Some(q) = t.quantization() else {
        return Ok(());
    };
    let scales: Vec<f32> = q.scale().map(|v| v.iter().collect()).unwrap_or_default();
    let zeros: Vec<i64> = q
        .zero_point()
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    if scales.is_empty() && zeros.is_empty() {
        return Ok(());
    }
    if scales.len() != zeros.len() {
        return Err(format!(
            "quantization has {} scales and {} zero points",
            scales.len(),
            zeros.len()
        ));
    }
    if let Some(s) = scales.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
        return Err(format!(
            "quantization scale {s} (a scale is finite and above 0)"
        ));
    }
    let range = match codes::elem_type(format, t.type_().0) {
        cleave_ir::ElemType::I8 => Some((-128, 127)),
        cleave_ir::ElemType::U8 => Some((0, 255)),
        cleave_ir::ElemType::I16 => Some((-32768, 32767)),
        cleave_ir::ElemType::I4 => Some((-8, 7)),
        cleave_ir::ElemType::U4 => Some((0, 15)),
        _ => None,
    };
    if let Some((lo, hi)) = range {
        if let Some(z) = zeros.iter().find(|&&z| z < lo || z > hi) {
            return Err(format!(
                "quantization zero point {z} is outside its type's range [{lo}, {hi}]"
            ));
        }
    }
    if scales.len() > 1 {
        let axis = q.quantized_dimension();
        let dim = usize::try_from(axis).ok().and_then(|a| shape.get(a));
        match dim {
            None => {
                return Err(format!(
                    "quantized_dimension {axis} is not an axis of shape {shape:?}"
                ))
            }
            Some(&d) if i64::from(d) != scales.len() as i64 => {
                return Err(format!(
                    "{} per-channel scales for dim {axis} of shape {shape:?}",
                    scales.len()
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// An enum value of the schema with its name.
type Named<T> = (T, &'static str);

/// The options union tag each builtin code reads, by format: the options type named like
/// the operator (`CONV_2D` reads `Conv2DOptions`), and the operators that share one.
fn expected_options(format: Format) -> &'static HashMap<i32, u8> {
    static TFLITE: OnceLock<HashMap<i32, u8>> = OnceLock::new();
    static CIRCLE: OnceLock<HashMap<i32, u8>> = OnceLock::new();
    let (cell, ops, options): (_, Vec<Named<i32>>, Vec<Named<u8>>) = match format {
        Format::Tflite => (
            &TFLITE,
            tflite::BuiltinOperator::ENUM_VALUES
                .iter()
                .filter_map(|o| Some((o.0, o.variant_name()?)))
                .collect(),
            tflite::BuiltinOptions::ENUM_VALUES
                .iter()
                .filter_map(|o| Some((o.0, o.variant_name()?)))
                .collect(),
        ),
        Format::Circle => (
            &CIRCLE,
            circle::BuiltinOperator::ENUM_VALUES
                .iter()
                .filter_map(|o| Some((o.0, o.variant_name()?)))
                .collect(),
            circle::BuiltinOptions::ENUM_VALUES
                .iter()
                .filter_map(|o| Some((o.0, o.variant_name()?)))
                .collect(),
        ),
    };
    cell.get_or_init(|| {
        let key = |s: &str| s.replace('_', "").to_ascii_lowercase();
        let by_name: HashMap<String, u8> = options
            .iter()
            .map(|(tag, name)| (key(name.strip_suffix("Options").unwrap_or(name)), *tag))
            .collect();
        let shared = |op: &str| -> Option<&'static str> {
            Some(match op {
                "AVERAGE_POOL_2D" | "MAX_POOL_2D" | "L2_POOL_2D" => "Pool2D",
                "L2_NORMALIZATION" => "L2Norm",
                "MAXIMUM" | "MINIMUM" => "MaximumMinimum",
                "MEAN" | "SUM" | "REDUCE_PROD" | "REDUCE_MAX" | "REDUCE_MIN" | "REDUCE_ANY"
                | "REDUCE_ALL" => "Reducer",
                "UNIDIRECTIONAL_SEQUENCE_RNN" => "SequenceRNN",
                "RANDOM_STANDARD_NORMAL" | "RANDOM_UNIFORM" | "MULTINOMIAL" => "Random",
                "CONV_3D_TRANSPOSE" => "Conv3D",
                _ => return None,
            })
        };
        ops.iter()
            .filter_map(|(code, name)| {
                let wanted = shared(name).map_or_else(|| key(name), key);
                Some((*code, *by_name.get(&wanted)?))
            })
            .collect()
    })
}

/// How many inputs (at least, at most) and outputs a builtin takes, for the builtins whose
/// count every engine agrees on (TFLite's kernels check it and refuse; onert's loader reads
/// operands by position without checking).
fn arity(name: &str) -> Option<((usize, usize), usize)> {
    const MANY: usize = usize::MAX;
    Some(match name {
        "ADD"
        | "SUB"
        | "MUL"
        | "DIV"
        | "MAXIMUM"
        | "MINIMUM"
        | "SQUARED_DIFFERENCE"
        | "POW"
        | "EQUAL"
        | "NOT_EQUAL"
        | "LESS"
        | "LESS_EQUAL"
        | "GREATER"
        | "GREATER_EQUAL"
        | "LOGICAL_AND"
        | "LOGICAL_OR"
        | "FLOOR_DIV"
        | "FLOOR_MOD"
        | "PRELU"
        | "BATCH_MATMUL"
        | "MEAN"
        | "SUM"
        | "REDUCE_PROD"
        | "REDUCE_MAX"
        | "REDUCE_MIN"
        | "REDUCE_ANY"
        | "REDUCE_ALL"
        | "TRANSPOSE"
        | "GATHER"
        | "GATHER_ND"
        | "EXPAND_DIMS"
        | "TILE"
        | "ARG_MAX"
        | "ARG_MIN"
        | "FILL"
        | "RESIZE_BILINEAR"
        | "RESIZE_NEAREST_NEIGHBOR"
        | "PAD"
        | "MIRROR_PAD"
        | "SPACE_TO_BATCH_ND"
        | "BATCH_TO_SPACE_ND" => ((2, 2), 1),
        "RELU"
        | "RELU6"
        | "RELU_N1_TO_1"
        | "RELU_0_TO_1"
        | "LOGISTIC"
        | "TANH"
        | "EXP"
        | "LOG"
        | "SQRT"
        | "RSQRT"
        | "ABS"
        | "NEG"
        | "FLOOR"
        | "CEIL"
        | "ROUND"
        | "SIN"
        | "COS"
        | "SQUARE"
        | "QUANTIZE"
        | "DEQUANTIZE"
        | "SOFTMAX"
        | "LOG_SOFTMAX"
        | "HARD_SWISH"
        | "ELU"
        | "LEAKY_RELU"
        | "CAST"
        | "LOGICAL_NOT"
        | "ZEROS_LIKE"
        | "L2_NORMALIZATION"
        | "LOCAL_RESPONSE_NORMALIZATION"
        | "AVERAGE_POOL_2D"
        | "MAX_POOL_2D"
        | "L2_POOL_2D"
        | "SHAPE"
        | "RANK"
        | "SQUEEZE"
        | "DEPTH_TO_SPACE"
        | "SPACE_TO_DEPTH" => ((1, 1), 1),
        "CONV_2D" | "DEPTHWISE_CONV_2D" | "FULLY_CONNECTED" => ((2, 3), 1),
        "TRANSPOSE_CONV" => ((3, 4), 1),
        "RESHAPE" => ((1, 2), 1),
        "CONCATENATION" | "PACK" | "ADD_N" => ((1, MANY), 1),
        "PADV2" => ((2, 3), 1),
        "SLICE" | "SELECT" | "SELECT_V2" => ((3, 3), 1),
        "STRIDED_SLICE" => ((4, 4), 1),
        _ => return None,
    })
}

/// Whether a builtin takes input `i` as absent (`-1`): a convolution's bias, a recurrent op's
/// optional tensors. Any other input is read, and an absent one crashed LiteRT at load.
fn takes_absent_input(name: &str, i: usize) -> bool {
    match name {
        "CONV_2D" | "DEPTHWISE_CONV_2D" | "FULLY_CONNECTED" | "CONV_3D" => i == 2,
        "TRANSPOSE_CONV" | "CONV_3D_TRANSPOSE" => i == 3,
        "LSTM"
        | "UNIDIRECTIONAL_SEQUENCE_LSTM"
        | "BIDIRECTIONAL_SEQUENCE_LSTM"
        | "BIDIRECTIONAL_SEQUENCE_RNN"
        | "UNIDIRECTIONAL_SEQUENCE_RNN"
        | "RNN"
        | "SVDF"
        | "CUSTOM" => true,
        _ => name.starts_with("STABLEHLO_") || arity(name).is_none(),
    }
}

/// The builtins whose options hold what the op cannot run without (an axis, a stride, a fused
/// activation, a subgraph), which onert's loader reads without checking they are there. An
/// empty options table (PAD's) is no loss, and models leave it out.
fn options_read(name: &str) -> bool {
    matches!(
        name,
        "ADD"
            | "SUB"
            | "MUL"
            | "DIV"
            | "CONV_2D"
            | "DEPTHWISE_CONV_2D"
            | "TRANSPOSE_CONV"
            | "FULLY_CONNECTED"
            | "AVERAGE_POOL_2D"
            | "MAX_POOL_2D"
            | "L2_POOL_2D"
            | "CONCATENATION"
            | "SOFTMAX"
            | "LEAKY_RELU"
            | "STRIDED_SLICE"
            | "SPLIT"
            | "SPLIT_V"
            | "PACK"
            | "UNPACK"
            | "GATHER"
            | "MEAN"
            | "SUM"
            | "REDUCE_MAX"
            | "REDUCE_MIN"
            | "REDUCE_PROD"
            | "RESIZE_BILINEAR"
            | "RESIZE_NEAREST_NEIGHBOR"
            | "IF"
            | "WHILE"
    )
}

/// The subgraph's (inputs, outputs) counts.
type Io = (usize, usize);

fn operator(
    m: &FlatModel,
    op: &tflite::Operator,
    ios: &[Io],
    needs: EngineNeeds,
) -> Result<(), String> {
    let codes = m.root().operator_codes().ok_or("no operator codes")?;
    let code = codes::builtin_code(m.format, &codes.get(op.opcode_index() as usize));
    let name = codes::op_name(m.format, code).unwrap_or("an unknown operator");
    let tag = op.builtin_options_type().0;
    let want = expected_options(m.format).get(&code).copied();
    match want {
        Some(want) if tag != 0 && tag != want => {
            return Err(format!(
                "{name} carries options of kind {tag}, but reads kind {want}"
            ))
        }
        Some(want) if tag == 0 && needs.options_present && options_read(name) => {
            return Err(format!(
                "{name} has no options; this engine reads its options (kind {want}) without checking they are there"
            ))
        }
        _ => {}
    }
    let inputs: Vec<i32> = op.inputs().map(|v| v.iter().collect()).unwrap_or_default();
    let outputs = op.outputs().map_or(0, |v| v.len());
    if let Some(((lo, hi), outs)) = arity(name) {
        if inputs.len() < lo || inputs.len() > hi {
            let want = match (lo, hi) {
                (lo, hi) if lo == hi => format!("{lo}"),
                (lo, usize::MAX) => format!("at least {lo}"),
                (lo, hi) => format!("{lo} to {hi}"),
            };
            return Err(format!(
                "{name} has {} inputs; it takes {want}",
                inputs.len()
            ));
        }
        if outputs != outs {
            return Err(format!("{name} has {outputs} outputs; it gives {outs}"));
        }
    }
    for (i, _) in inputs.iter().enumerate().filter(|(_, &t)| t == -1) {
        if !takes_absent_input(name, i) {
            return Err(format!(
                "{name}'s input {i} is absent (-1); it reads that input"
            ));
        }
    }
    if let Some(refs) = crate::builtins::op(name).and_then(|d| d.subgraphs) {
        let io = |index: i64| usize::try_from(index).ok().and_then(|i| ios.get(i));
        for (field, index) in refs(op) {
            let Some(&(sg_in, sg_out)) = io(index) else {
                return Err(format!(
                    "{name}'s {field} {index} is out of range ({} subgraphs)",
                    ios.len()
                ));
            };
            // What a body receives and gives back is the operator's own operands: IF passes
            // all but its condition.
            let (want_in, want_out) = match (name, field) {
                ("IF", _) => (inputs.len().saturating_sub(1), outputs),
                ("WHILE", "cond_subgraph_index") => (inputs.len(), 1),
                ("WHILE", _) | ("CALL", _) => (inputs.len(), outputs),
                _ => continue,
            };
            if (sg_in, sg_out) != (want_in, want_out) {
                return Err(format!(
                    "{name}'s {field} {index} takes {sg_in} inputs and gives {sg_out} outputs; the operator passes {want_in} and expects {want_out}"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operators_read_the_options_named_like_them() {
        let t = expected_options(Format::Tflite);
        let code = |n| codes::op_code(Format::Tflite, n).unwrap();
        assert_eq!(t[&code("CONV_2D")], tflite::BuiltinOptions::Conv2DOptions.0);
        assert_eq!(
            t[&code("MAX_POOL_2D")],
            tflite::BuiltinOptions::Pool2DOptions.0
        );
        assert_eq!(t[&code("MEAN")], tflite::BuiltinOptions::ReducerOptions.0);
        assert_eq!(t[&code("ADD")], tflite::BuiltinOptions::AddOptions.0);
        assert!(!t.contains_key(&code("RELU")));
        let c = expected_options(Format::Circle);
        let code = |n| codes::op_code(Format::Circle, n).unwrap();
        assert_eq!(
            c[&code("INSTANCE_NORM")],
            circle::BuiltinOptions::InstanceNormOptions.0
        );
    }
}
