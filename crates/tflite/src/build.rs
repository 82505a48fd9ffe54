//! Building a standalone model from a selection of the main subgraph's operators: tensors,
//! buffers, operator codes and subgraphs compacted and renumbered, control-flow bodies
//! copied with their owners, one signature regenerated.

use std::collections::{BTreeSet, HashMap};

use crate::model::FlatModel;

/// Dims cleave writes for a main-subgraph tensor in place of the file's: an input fixed by
/// `--shape`, or a tensor whose dims a run showed (`--learn-dims`). Converters write a
/// placeholder (often 1) in `shape` where a dim is computed at run time; a part whose input
/// is such a tensor cannot be prepared with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorDims {
    /// What the tensor is prepared with (`Tensor.shape`).
    pub shape: Vec<i32>,
    /// The `shape_signature` to write; `None` keeps the file's, whose -1s stay dynamic.
    pub signature: Option<Vec<i32>>,
}

/// What goes into one written model.
pub struct Selection<'a> {
    /// Operators of the main subgraph, in the order to keep (source order).
    pub ops: Vec<usize>,
    /// Tensor indices of the new model's inputs and outputs.
    pub inputs: Vec<usize>,
    pub outputs: Vec<usize>,
    /// The name every main-subgraph tensor gets in the new model.
    pub names: &'a [String],
    /// Dims written in place of the file's, by main-subgraph tensor index.
    pub dims: &'a HashMap<usize, TensorDims>,
    pub description: String,
    /// Keep the source's metadata (a whole model with extra outputs); parts drop it, as it
    /// describes the whole model's inputs and outputs.
    pub keep_metadata: bool,
}

/// A model ready to pack: its tables, and each new buffer's source buffer index.
pub struct Built<M> {
    pub model: M,
    pub buffers: Vec<u32>,
}

fn index(i: usize) -> Result<i32, String> {
    i32::try_from(i).map_err(|_| format!("index {i} does not fit the schema's 32 bits"))
}

/// Renumbers a set of indices in first-seen order.
#[derive(Default)]
struct Renumber {
    map: HashMap<u32, u32>,
    order: Vec<u32>,
}

impl Renumber {
    fn get(&mut self, old: u32) -> u32 {
        *self.map.entry(old).or_insert_with(|| {
            self.order.push(old);
            (self.order.len() - 1) as u32
        })
    }
}

/// Generates the builder for one schema module.
macro_rules! builder {
    ($schema:ident) => {
        pub mod $schema {
            use std::collections::{BTreeSet, HashMap};

            use super::{index, Built, Renumber, Selection, TensorDims};
            use crate::codes::builtin_code;
            use crate::model::FlatModel;
            use crate::schema::$schema as s;
            use crate::schema::tflite;

            fn root(fm: &FlatModel) -> s::Model<'_> {
                // SAFETY: `FlatModel` verified these bytes against this schema when it loaded
                // them (the caller picks the module by `fm.format`), and they are immutable.
                unsafe { s::root_as_model_unchecked(&fm.data) }
            }

            /// Subgraph indices an operator's options name, mutably.
            fn subgraph_refs(op: &mut s::OperatorT) -> Vec<&mut i32> {
                match &mut op.builtin_options {
                    s::BuiltinOptionsT::IfOptions(o) => {
                        vec![&mut o.then_subgraph_index, &mut o.else_subgraph_index]
                    }
                    s::BuiltinOptionsT::WhileOptions(o) => {
                        vec![&mut o.cond_subgraph_index, &mut o.body_subgraph_index]
                    }
                    s::BuiltinOptionsT::CallOnceOptions(o) => vec![&mut o.init_subgraph_index],
                    _ => Vec::new(),
                }
            }

            fn call_ref(op: &mut s::OperatorT) -> Option<&mut u32> {
                match &mut op.builtin_options {
                    s::BuiltinOptionsT::CallOptions(o) => Some(&mut o.subgraph),
                    _ => None,
                }
            }

            fn op_name(fm: &FlatModel, codes: &[tflite::OperatorCode], op: &s::OperatorT) -> String {
                codes
                    .get(op.opcode_index as usize)
                    .and_then(|c| crate::codes::op_name(fm.format, builtin_code(fm.format, c)))
                    .unwrap_or("?")
                    .to_string()
            }

            /// Renumbers everything an operator refers to outside its subgraph.
            fn remap_op(
                fm: &FlatModel,
                codes: &[tflite::OperatorCode],
                op: &mut s::OperatorT,
                opcodes: &mut Renumber,
                subgraphs: &mut Renumber,
            ) -> Result<(), String> {
                let name = op_name(fm, codes, op);
                if crate::builtins::op(&name).is_some_and(|d| d.uncopied_subgraphs) {
                    return Err(format!(
                        "operator {name} runs subgraphs named in StableHLO options, which cleave does not copy into parts yet"
                    ));
                }
                op.opcode_index = opcodes.get(op.opcode_index);
                for r in subgraph_refs(op) {
                    let old = u32::try_from(*r).map_err(|_| format!("{name}: subgraph {r} is negative"))?;
                    *r = index(subgraphs.get(old) as usize)?;
                }
                if let Some(r) = call_ref(op) {
                    *r = subgraphs.get(*r);
                }
                Ok(())
            }

            fn set_dims(t: &mut s::TensorT, dims: Option<&TensorDims>) {
                if let Some(d) = dims {
                    t.shape = Some(d.shape.clone());
                    if let Some(sig) = &d.signature {
                        t.shape_signature = Some(sig.clone());
                    }
                }
            }

            fn has_data(fm: &FlatModel, buffer: u32) -> Result<bool, String> {
                Ok(crate::to_ir::buffer_bytes(fm, buffer)?.is_some())
            }

            /// A standalone model of `sel`'s operators.
            pub fn select(fm: &FlatModel, sel: &Selection) -> Result<Built<s::ModelT>, String> {
                let root = root(fm);
                let tfl = fm.root();
                let codes: Vec<tflite::OperatorCode> =
                    tfl.operator_codes().map(|c| c.iter().collect()).unwrap_or_default();
                let src_subgraphs = root.subgraphs().ok_or("the model has no subgraph")?;
                let main = src_subgraphs.get(0);
                let src_tensors = main.tensors().ok_or("the main subgraph has no tensors")?;
                let src_ops = main.operators();
                let mut opcodes = Renumber::default();
                let mut subgraphs = Renumber::default();
                subgraphs.get(0);
                let mut buffers = Renumber::default();
                buffers.get(0);

                // The main subgraph's tensors: every one the operators touch, plus the
                // boundary, in source order.
                let mut ops = Vec::with_capacity(sel.ops.len());
                let mut used: BTreeSet<usize> = sel.inputs.iter().chain(&sel.outputs).copied().collect();
                for &k in &sel.ops {
                    let src = src_ops.filter(|o| k < o.len()).map(|o| o.get(k)).ok_or_else(|| format!("operator {k} out of range"))?;
                    let op = src.unpack();
                    for list in [&op.inputs, &op.outputs, &op.intermediates] {
                        used.extend(list.iter().flatten().filter_map(|&i| usize::try_from(i).ok()));
                    }
                    ops.push(op);
                }
                let mut tensor_index: HashMap<usize, i32> = HashMap::new();
                let mut tensors = Vec::with_capacity(used.len());
                for &i in &used {
                    if i >= src_tensors.len() {
                        return Err(format!("tensor {i} out of range ({} tensors)", src_tensors.len()));
                    }
                    let mut t = src_tensors.get(i).unpack();
                    t.name = Some(sel.names.get(i).cloned().unwrap_or_default());
                    set_dims(&mut t, sel.dims.get(&i));
                    t.buffer = if has_data(fm, t.buffer)? { buffers.get(t.buffer) } else { 0 };
                    tensor_index.insert(i, index(tensors.len())?);
                    tensors.push(t);
                }
                let new = |i: &i32| -> i32 {
                    usize::try_from(*i).ok().and_then(|i| tensor_index.get(&i).copied()).unwrap_or(-1)
                };
                for op in &mut ops {
                    for list in [&mut op.inputs, &mut op.outputs, &mut op.intermediates] {
                        for i in list.iter_mut().flatten() {
                            *i = new(i);
                        }
                    }
                    remap_op(fm, &codes, op, &mut opcodes, &mut subgraphs)?;
                }
                let ids = |list: &[usize]| -> Vec<i32> { list.iter().map(|i| new(&index(*i).unwrap_or(-1))).collect() };
                let mut main_t = s::SubGraphT::default();
                main_t.tensors = Some(tensors);
                main_t.inputs = Some(ids(&sel.inputs));
                main_t.outputs = Some(ids(&sel.outputs));
                main_t.operators = Some(ops);
                main_t.name = main.name().map(str::to_string);
                let mut out_subgraphs = vec![main_t];

                // Bodies of control flow, copied whole; they may name further bodies.
                let mut next = 1;
                while next < subgraphs.order.len() {
                    let old = subgraphs.order[next] as usize;
                    if old >= src_subgraphs.len() {
                        return Err(format!("subgraph {old} out of range ({} subgraphs)", src_subgraphs.len()));
                    }
                    let mut sg = src_subgraphs.get(old).unpack();
                    for t in sg.tensors.iter_mut().flatten() {
                        t.buffer = if has_data(fm, t.buffer)? { buffers.get(t.buffer) } else { 0 };
                    }
                    for op in sg.operators.iter_mut().flatten() {
                        remap_op(fm, &codes, op, &mut opcodes, &mut subgraphs)?;
                    }
                    out_subgraphs.push(sg);
                    next += 1;
                }

                let src_codes = root.operator_codes().ok_or("the model has no operator codes")?;
                let operator_codes = opcodes
                    .order
                    .iter()
                    .map(|&c| {
                        src_codes
                            .iter()
                            .nth(c as usize)
                            .map(|c| c.unpack())
                            .ok_or_else(|| format!("operator code {c} out of range"))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let tensor_map = |list: &[usize]| -> Vec<s::TensorMapT> {
                    list.iter()
                        .map(|&i| s::TensorMapT {
                            name: sel.names.get(i).cloned(),
                            tensor_index: u32::try_from(new(&index(i).unwrap_or(-1))).unwrap_or(0),
                        })
                        .collect()
                };
                let signature = s::SignatureDefT {
                    inputs: Some(tensor_map(&sel.inputs)),
                    outputs: Some(tensor_map(&sel.outputs)),
                    signature_key: Some("serving_default".to_string()),
                    subgraph_index: 0,
                };
                let mut model = s::ModelT::default();
                model.version = root.version();
                model.operator_codes = Some(operator_codes);
                model.subgraphs = Some(out_subgraphs);
                model.description = Some(sel.description.clone());
                model.signature_defs = Some(vec![signature]);
                if sel.keep_metadata {
                    if let Some(meta) = root.metadata() {
                        let mut kept = Vec::new();
                        for m in meta.iter() {
                            let mut m = m.unpack();
                            m.buffer = buffers.get(m.buffer);
                            kept.push(m);
                        }
                        model.metadata = Some(kept);
                    }
                }
                Ok(Built { model, buffers: buffers.order })
            }

            /// The whole model as the object API reads it, buffers left out (they are
            /// packed from the file's own bytes), for saving and round trips; `dims` replace
            /// the main subgraph's.
            pub fn whole(fm: &FlatModel, dims: &HashMap<usize, TensorDims>) -> Built<s::ModelT> {
                let root = root(fm);
                let mut model = s::ModelT::default();
                model.version = root.version();
                model.operator_codes = root.operator_codes().map(|v| v.iter().map(|x| x.unpack()).collect());
                model.subgraphs = root.subgraphs().map(|v| v.iter().map(|x| x.unpack()).collect());
                if let Some(main) = model.subgraphs.as_mut().and_then(|v| v.first_mut()) {
                    for (i, t) in main.tensors.iter_mut().flatten().enumerate() {
                        set_dims(t, dims.get(&i));
                    }
                }
                model.description = root.description().map(str::to_string);
                model.metadata_buffer = root.metadata_buffer().map(|v| v.iter().collect());
                model.metadata = root.metadata().map(|v| v.iter().map(|x| x.unpack()).collect());
                model.signature_defs = root.signature_defs().map(|v| v.iter().map(|x| x.unpack()).collect());
                let count = root.buffers().map_or(0, |b| b.len()) as u32;
                Built { model, buffers: (0..count).collect() }
            }
        }
    };
}

builder!(tflite);
builder!(circle);

/// The buffers a built model refers to, as slices of the source file (empty where a buffer
/// holds nothing).
pub fn buffer_slices(fm: &FlatModel, buffers: &[u32]) -> Result<Vec<bytes::Bytes>, String> {
    buffers
        .iter()
        .map(|&b| Ok(crate::to_ir::buffer_bytes(fm, b)?.unwrap_or_default()))
        .collect()
}

/// Source operators in the order a part keeps them.
pub fn ordered(ops: impl IntoIterator<Item = usize>) -> Vec<usize> {
    ops.into_iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}
