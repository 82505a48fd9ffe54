//! A TFLite or circle model's main subgraph as cleave's IR.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use cleave_frontend::FrontendError;
use cleave_ir::{
    Attribute, Dim, GraphBuilder, Model, NodeSpec, Opset, Quantization, SourceRef, TensorType,
    Weight, WeightData,
};

use crate::builtins::{self, int};
use crate::codes::{builtin_code, elem_type, op_name, CUSTOM};
use crate::model::{FlatModel, Format};
use crate::schema::tflite;

/// The domain of custom operators (their op type is the custom code); builtins have "".
pub const CUSTOM_DOMAIN: &str = "custom";

/// The IR of a model and how its tensors were named.
#[derive(Clone)]
pub struct Converted {
    pub model: Model,
    /// The IR name of each tensor of the main subgraph, by tensor index: the tensor's own
    /// name where it is non-empty and unique, else `NAME#INDEX`.
    pub names: Vec<String>,
    /// Renamed tensors and other things a user should know about the file.
    pub notes: Vec<String>,
}

/// One operator's decoded code.
pub struct OpKind {
    pub op_type: String,
    pub domain: String,
}

/// The op type and domain of operator code `index`.
pub fn op_kind(fm: &FlatModel, index: usize) -> Result<OpKind, String> {
    let codes = fm.root().operator_codes();
    let count = codes.map_or(0, |c| c.len());
    let code = codes
        .filter(|_| index < count)
        .map(|c| c.get(index))
        .ok_or_else(|| format!("operator code {index} out of range ({count} codes)"))?;
    let builtin = builtin_code(fm.format, &code);
    if builtin == CUSTOM {
        let name = code.custom_code().unwrap_or_default();
        if name.is_empty() {
            return Err(format!(
                "operator code {index} is CUSTOM with no custom code"
            ));
        }
        return Ok(OpKind {
            op_type: name.to_string(),
            domain: CUSTOM_DOMAIN.to_string(),
        });
    }
    let op_type =
        op_name(fm.format, builtin).map_or_else(|| format!("BUILTIN_{builtin}"), str::to_string);
    Ok(OpKind {
        op_type,
        domain: String::new(),
    })
}

fn err(fm: &FlatModel, m: impl ToString) -> FrontendError {
    FrontendError::new(&fm.path, m)
}

/// Tensor names made unique: duplicates and empty names get their index appended.
fn unique_names(tensors: &[tflite::Tensor]) -> (Vec<String>, usize) {
    let mut count: HashMap<&str, usize> = HashMap::new();
    for t in tensors {
        *count.entry(t.name().unwrap_or_default()).or_default() += 1;
    }
    let mut taken: HashSet<String> = count
        .iter()
        .filter(|(n, &c)| c == 1 && !n.is_empty())
        .map(|(n, _)| n.to_string())
        .collect();
    let mut renamed = 0;
    let names = tensors
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let name = t.name().unwrap_or_default();
            if !name.is_empty() && count.get(name) == Some(&1) {
                return name.to_string();
            }
            renamed += 1;
            let base = if name.is_empty() { "tensor" } else { name };
            let mut candidate = format!("{base}#{i}");
            while !taken.insert(candidate.clone()) {
                candidate.push('_');
            }
            candidate
        })
        .collect();
    (names, renamed)
}

/// The tensor's type: `shape_signature` where present (its -1s are unknown dims), else
/// `shape`.
fn tensor_type(format: Format, t: &tflite::Tensor) -> TensorType {
    let elem = elem_type(format, t.type_().0);
    let dims = t.shape_signature().or_else(|| t.shape());
    let shape = dims.map_or_else(Vec::new, |d| {
        d.iter()
            .map(|x| {
                if x < 0 {
                    Dim::Unknown
                } else {
                    Dim::Fixed(i64::from(x))
                }
            })
            .collect()
    });
    TensorType {
        elem: Some(elem),
        shape: Some(shape),
    }
}

fn quantization(t: &tflite::Tensor) -> Option<Quantization> {
    let q = t.quantization()?;
    let scale: Vec<f32> = q.scale().map(|v| v.iter().collect()).unwrap_or_default();
    if scale.is_empty() {
        return None;
    }
    let zero_point: Vec<i64> = q
        .zero_point()
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    let axis = (scale.len() > 1)
        .then(|| usize::try_from(q.quantized_dimension()).ok())
        .flatten();
    Some(Quantization {
        scale,
        zero_point,
        axis,
    })
}

/// The bytes of buffer `index`, sliced out of the file without copying: its inline data, or
/// for models past 2 GiB, `offset`/`size` from the start of the file.
pub fn buffer_bytes(fm: &FlatModel, index: u32) -> Result<Option<Bytes>, String> {
    if index == 0 {
        return Ok(None);
    }
    let buffers = fm.root().buffers();
    let count = buffers.map_or(0, |b| b.len());
    let i = index as usize;
    let buf = buffers
        .filter(|_| i < count)
        .map(|b| b.get(i))
        .ok_or_else(|| format!("buffer {index} out of range ({count} buffers)"))?;
    if buf.offset() > 1 {
        let range = usize::try_from(buf.offset())
            .ok()
            .zip(usize::try_from(buf.size()).ok())
            .and_then(|(o, n)| Some(o..o.checked_add(n)?))
            .filter(|r| r.end <= fm.data.len())
            .ok_or_else(|| {
                format!(
                    "buffer {index}: offset {} size {} passes the end of the file ({} bytes)",
                    buf.offset(),
                    buf.size(),
                    fm.data.len()
                )
            })?;
        return Ok(Some(fm.data.slice(range)));
    }
    Ok(buf
        .data()
        .filter(|d| !d.is_empty())
        .map(|d| fm.data.slice_ref(d.bytes())))
}

/// The options the neutral stages and profiles look at, as attributes (`builtins.rs` says
/// which); the part writer copies every option from the file, so nothing is lost by leaving
/// the rest out.
fn attributes(op_type: &str, op: &tflite::Operator) -> Vec<Attribute> {
    let mut a = Vec::new();
    if let Some(options) = builtins::op(op_type).and_then(|d| d.options) {
        options(op, &mut a);
    }
    a.extend(
        subgraph_refs(op_type, op)
            .into_iter()
            .map(|(name, index)| int(name, index)),
    );
    a
}

/// Elements of a static shape (None when a dim is unknown or the count overflows).
fn static_count(ty: &TensorType) -> Option<u64> {
    ty.shape.as_ref()?.iter().try_fold(1u64, |acc, d| {
        acc.checked_mul(u64::try_from(d.fixed()?).ok()?)
    })
}

/// A constant's buffer must hold exactly its dims times its element size (sub-byte types
/// packed), as LiteRT requires; strings and unknown dims are not checked here.
fn check_buffer_len(ty: &TensorType, len: usize, buffer: u32) -> Result<(), String> {
    let (Some(elem), Some(shape)) = (ty.elem, ty.shape.as_ref()) else {
        return Ok(());
    };
    let Some(bits) = elem.bits() else {
        return Ok(());
    };
    if shape.iter().any(|d| d.fixed().is_none()) {
        return Ok(());
    }
    let dims: Vec<i64> = shape.iter().filter_map(|d| d.fixed()).collect();
    let describe = || format!("{} {dims:?}", elem.name());
    let need = static_count(ty)
        .and_then(|n| n.checked_mul(u64::from(bits)))
        .map(|b| b.div_ceil(8))
        .ok_or_else(|| format!("{} has more elements than any buffer can hold", describe()))?;
    if u64::try_from(len).ok() != Some(need) {
        return Err(format!(
            "buffer {buffer} holds {len} bytes, but {} needs {need}",
            describe()
        ));
    }
    Ok(())
}

/// Refuses subgraphs that reach themselves through IF, WHILE, CALL_ONCE or CALL (LiteRT
/// would refuse them at load), naming the cycle.
fn check_subgraph_cycles(fm: &FlatModel) -> Result<(), String> {
    let Some(subgraphs) = fm.root().subgraphs() else {
        return Ok(());
    };
    let n = subgraphs.len();
    let mut calls: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (s, sg) in subgraphs.iter().enumerate() {
        for op in sg.operators().iter().flat_map(|o| o.iter()) {
            let Ok(kind) = op_kind(fm, op.opcode_index() as usize) else {
                continue;
            };
            for (_, index) in subgraph_refs(&kind.op_type, &op) {
                if let Some(t) = usize::try_from(index).ok().filter(|&t| t < n) {
                    calls[s].push(t);
                }
            }
        }
    }
    // Depth-first from the main subgraph, iteratively (a crafted file may nest deeply).
    let mut state = vec![0u8; n]; // 0 unseen, 1 on the path, 2 done
    let mut path: Vec<(usize, usize)> = vec![(0, 0)];
    if n > 0 {
        state[0] = 1;
    }
    while let Some(&mut (s, ref mut next)) = path.last_mut() {
        if let Some(&t) = calls[s].get(*next) {
            *next += 1;
            match state[t] {
                0 => {
                    state[t] = 1;
                    path.push((t, 0));
                }
                1 => {
                    let start = path.iter().position(|&(p, _)| p == t).unwrap_or(0);
                    let cycle: Vec<String> = path[start..]
                        .iter()
                        .map(|&(p, _)| p.to_string())
                        .chain(std::iter::once(t.to_string()))
                        .collect();
                    return Err(format!(
                        "subgraphs call each other in a cycle ({}), which no interpreter can run",
                        cycle.join(" → ")
                    ));
                }
                _ => {}
            }
        } else {
            state[s] = 2;
            path.pop();
        }
    }
    Ok(())
}

/// The subgraphs an operator runs, by option name (IF's branches, WHILE's condition and body,
/// CALL_ONCE's initialiser, CALL's callee), as `builtins.rs` reads them.
pub fn subgraph_refs(op_type: &str, op: &tflite::Operator) -> Vec<(&'static str, i64)> {
    builtins::op(op_type)
        .and_then(|d| d.subgraphs)
        .map_or_else(Vec::new, |refs| refs(op))
}

/// Converts the main subgraph (the first) to the IR.
pub fn to_ir(fm: &FlatModel) -> Result<Converted, FrontendError> {
    let root = fm.root();
    let subgraphs = root
        .subgraphs()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| err(fm, "the model has no subgraph"))?;
    check_subgraph_cycles(fm).map_err(|m| err(fm, m))?;
    let sg = subgraphs.get(0);
    let tensors: Vec<tflite::Tensor> = sg.tensors().map(|t| t.iter().collect()).unwrap_or_default();
    let (names, renamed) = unique_names(&tensors);
    let mut notes = Vec::new();
    if renamed > 0 {
        notes.push(format!(
            "{renamed} tensor(s) have an empty or repeated name; cleave calls them NAME#INDEX (their index in the main subgraph), in parts too"
        ));
    }
    let tensor = |what: &str, i: i32| -> Result<usize, FrontendError> {
        usize::try_from(i)
            .ok()
            .filter(|&i| i < tensors.len())
            .ok_or_else(|| {
                err(
                    fm,
                    format!(
                        "{what} reads tensor {i}, out of range ({} tensors)",
                        tensors.len()
                    ),
                )
            })
    };
    let sg_inputs: Vec<usize> = sg
        .inputs()
        .map(|v| {
            v.iter()
                .map(|i| tensor("the main subgraph's input list", i))
                .collect()
        })
        .transpose()?
        .unwrap_or_default();
    let sg_outputs: Vec<usize> = sg
        .outputs()
        .map(|v| {
            v.iter()
                .map(|i| tensor("the main subgraph's output list", i))
                .collect()
        })
        .transpose()?
        .unwrap_or_default();
    if fm.format == Format::Tflite && root.external_buffers().is_some_and(|b| !b.is_empty()) {
        return Err(err(
            fm,
            "the model keeps weights in external buffer groups, which cleave does not read yet",
        ));
    }

    let mut b = GraphBuilder::new(sg.name().unwrap_or("main"));
    let input_set: HashSet<usize> = sg_inputs.iter().copied().collect();
    for &i in &sg_inputs {
        b.input(names[i].clone(), tensor_type(fm.format, &tensors[i]));
    }
    let operators: Vec<tflite::Operator> = sg
        .operators()
        .map(|o| o.iter().collect())
        .unwrap_or_default();
    // Weights are added before the nodes, so the IR numbers inputs, constants, then node
    // outputs, as for ONNX; a tensor some operator writes is not a constant.
    let mut produced = vec![false; tensors.len()];
    for op in &operators {
        for i in op.outputs().iter().flat_map(|v| v.iter()) {
            if let Some(p) = usize::try_from(i).ok().and_then(|i| produced.get_mut(i)) {
                *p = true;
            }
        }
    }
    let mut variables = 0;
    for (i, t) in tensors.iter().enumerate() {
        if input_set.contains(&i) {
            continue;
        }
        let ty = tensor_type(fm.format, t);
        if produced[i] {
            b.value_type(names[i].clone(), ty);
            continue;
        }
        let data = buffer_bytes(fm, t.buffer())
            .map_err(|m| err(fm, format!("tensor '{}': {m}", names[i])))?;
        let dims = ty
            .shape
            .iter()
            .flatten()
            .map(|d| d.fixed().unwrap_or(0))
            .collect();
        let elem = ty.elem.unwrap_or(cleave_ir::ElemType::Other(-128));
        let weight = match data {
            Some(bytes) if t.sparsity().is_none() => {
                check_buffer_len(&ty, bytes.len(), t.buffer())
                    .map_err(|m| err(fm, format!("tensor '{}': {m}", names[i])))?;
                WeightData::Bytes(bytes)
            }
            Some(_) => WeightData::Opaque,
            None if t.is_variable() => {
                variables += 1;
                WeightData::Opaque
            }
            // A zero-element constant (Keras writes `shape` inputs of [0]) has no bytes to
            // store, and its buffer is empty; it is still a constant, as LiteRT reads it.
            None if static_count(&ty) == Some(0) => WeightData::Bytes(Bytes::new()),
            None => continue,
        };
        b.weight(
            names[i].clone(),
            Weight {
                elem,
                dims,
                data: weight,
            },
        );
    }
    let subgraph_count = subgraphs.len();
    for (k, op) in operators.iter().enumerate() {
        let kind = op_kind(fm, op.opcode_index() as usize)
            .map_err(|m| err(fm, format!("operator {k}: {m}")))?;
        let what = format!("operator {k} ({})", kind.op_type);
        let ins = op
            .inputs()
            .map(|v| {
                v.iter()
                    .map(|i| {
                        if i == -1 {
                            Ok(String::new())
                        } else {
                            tensor(&what, i).map(|i| names[i].clone())
                        }
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?
            .unwrap_or_default();
        let mut outs = Vec::new();
        for i in op.outputs().iter().flat_map(|v| v.iter()) {
            if i == -1 {
                outs.push(String::new());
                continue;
            }
            let i = tensor(&what, i)?;
            if input_set.contains(&i) {
                return Err(err(
                    fm,
                    format!("{what} writes tensor '{}', a graph input", names[i]),
                ));
            }
            outs.push(names[i].clone());
        }
        for (name, index) in subgraph_refs(&kind.op_type, op) {
            if usize::try_from(index).map_or(true, |i| i >= subgraph_count || i == 0) {
                return Err(err(fm, format!("{what}: {name} {index} is not a subgraph other than the main one ({subgraph_count} subgraphs)")));
            }
        }
        let name = outs
            .iter()
            .find(|o| !o.is_empty())
            .cloned()
            .unwrap_or_else(|| format!("{}#{k}", kind.op_type));
        let attrs = attributes(&kind.op_type, op);
        b.node(NodeSpec {
            name,
            op_type: kind.op_type,
            domain: kind.domain,
            inputs: ins,
            outputs: outs,
            attrs,
            source: Some(SourceRef(k as u32)),
        });
    }
    if variables > 0 {
        notes.push(format!(
            "{variables} variable tensor(s) (state kept between runs) are copied into every part that reads them, each copy with its own state"
        ));
    }
    for &i in &sg_outputs {
        b.output(names[i].clone());
    }
    let mut graph = b
        .finish(false)
        .map_err(|e| err(fm, format!("invalid graph: {e}")))?;
    for (i, t) in tensors.iter().enumerate() {
        if let (Some(q), Some(v)) = (quantization(t), graph.find(&names[i])) {
            graph.value_mut(v).quant = Some(Box::new(q));
        }
    }
    let model = Model {
        format: fm.format.name(),
        format_version: i64::from(root.version()),
        opsets: vec![Opset {
            domain: String::new(),
            version: i64::from(root.version()),
        }],
        producer: root.description().unwrap_or_default().to_string(),
        state: cleave_ir::recognised_state(&graph),
        graph,
        functions: Vec::new(),
    };
    Ok(Converted {
        model,
        names,
        notes,
    })
}
