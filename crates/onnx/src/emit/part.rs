//! One part as a standalone ONNX model.

use std::collections::{BTreeSet, HashMap};

use prost::Message;

use crate::proto::{
    tensor_proto::DataLocation, tensor_shape_proto::dimension, tensor_shape_proto::Dimension,
    type_proto, FunctionProto, GraphProto, LeanModelProto, ModelProto, NodeProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};
use crate::{elem_to_code, OnnxModel, WeightsFile};
use cleave_ir::{Dim, Model, TensorType, ValueId};
use cleave_partition::Plan;

use super::error::EmitError;

/// Builds part `k` (0-based) of `plan` from the source model: its nodes (placed and copied
/// constants) in source order, the initializers and model-local functions it uses, typed
/// inputs and outputs, and everything model-level (IR version, opsets, producer, metadata).
pub fn part_model(
    source: &OnnxModel,
    model: &Model,
    plan: &Plan,
    k: usize,
) -> Result<ModelProto, EmitError> {
    part_model_with(&SourceIndex::new(source)?, model, plan, k, None)?.into_proto(source)
}

/// A part as built: its nodes decoded, or the source's node records copied byte for byte
/// (no decoding and re-encoding of nodes the part writes unchanged).
pub(crate) enum PartModel {
    Decoded(ModelProto),
    Records(LeanModelProto),
}

impl PartModel {
    pub(crate) fn encoded_len(&self) -> usize {
        match self {
            PartModel::Decoded(m) => m.encoded_len(),
            PartModel::Records(m) => m.encoded_len(),
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        match self {
            PartModel::Decoded(m) => m.encode_to_vec(),
            PartModel::Records(m) => m.encode_to_vec(),
        }
    }

    fn into_proto(self, source: &OnnxModel) -> Result<ModelProto, EmitError> {
        match self {
            PartModel::Decoded(m) => Ok(m),
            PartModel::Records(m) => {
                let path = source.path.clone();
                let bytes = bytes::Bytes::from(m.encode_to_vec());
                let back = OnnxModel::from_bytes(bytes, path)?;
                Ok(back.proto()?.into_owned())
            }
        }
    }
}

/// The source graph's named entries, looked up by name: built once for all parts, so that a
/// part costs its own size, not the source's.
pub(crate) struct SourceIndex<'a> {
    source: &'a OnnxModel,
    sg: &'a GraphProto,
    /// Declared types of graph inputs, outputs and value_info, by tensor name.
    declared: HashMap<&'a str, &'a ValueInfoProto>,
    /// Position in the source's `value_info`, `initializer`, `sparse_initializer`.
    value_info: HashMap<&'a str, usize>,
    initializer: HashMap<&'a str, usize>,
    sparse: HashMap<&'a str, usize>,
}

impl<'a> SourceIndex<'a> {
    pub(crate) fn new(source: &'a OnnxModel) -> Result<SourceIndex<'a>, EmitError> {
        let sg = source
            .without_nodes()
            .graph
            .as_ref()
            .ok_or_else(|| EmitError::Source("the source model has no graph".into()))?;
        let declared = sg
            .input
            .iter()
            .chain(sg.output.iter())
            .chain(sg.value_info.iter())
            .map(|v| (v.name(), v))
            .collect();
        let value_info = sg
            .value_info
            .iter()
            .enumerate()
            .map(|(i, v)| (v.name(), i))
            .collect();
        let initializer = sg
            .initializer
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name(), i))
            .collect();
        let sparse = sg
            .sparse_initializer
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.values.as_ref().map(|v| (v.name(), i)))
            .collect();
        Ok(SourceIndex {
            source,
            sg,
            declared,
            value_info,
            initializer,
            sparse,
        })
    }

    /// Positions of `names` in one of the index's lists, in source order.
    fn positions<'n>(
        list: &HashMap<&str, usize>,
        names: impl Iterator<Item = &'n str>,
    ) -> Vec<usize> {
        let mut at: Vec<usize> = names.filter_map(|n| list.get(n).copied()).collect();
        at.sort_unstable();
        at.dedup();
        at
    }
}

/// [`part_model`] whose initializers found in `shared` reference that file instead of holding
/// their bytes.
pub(crate) fn part_model_with(
    index: &SourceIndex,
    model: &Model,
    plan: &Plan,
    k: usize,
    shared: Option<&WeightsFile>,
) -> Result<PartModel, EmitError> {
    let (source, sg) = (index.source, index.sg);
    let sp = source.without_nodes();
    let g = &model.graph;
    let part = &plan.parts[k];
    // Each IR node finds its NodeProto through its source handle; sorting the handles keeps
    // the source's order, which is topological.
    let mut records = part
        .nodes
        .iter()
        .chain(&part.constant_nodes)
        .map(|&n| {
            let node = g.node(n);
            node.source
                .filter(|r| r.index() < source.node_count())
                .ok_or_else(|| {
                    EmitError::Source(format!(
                        "node '{}' has no record in the source model",
                        g.node_label(n)
                    ))
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    records.sort_unstable();
    // Copies that read another tensor here (a stage's own cache for layer 0's), by record.
    let renamed: HashMap<usize, Vec<(&str, &str)>> = part
        .constant_nodes
        .iter()
        .filter_map(|&n| {
            let node = g.node(n);
            let names: Vec<(&str, &str)> = node
                .all_inputs()
                .filter_map(|v| {
                    let to = part.reads(n, v);
                    (to != v).then(|| (g.value(v).name.as_str(), g.value(to).name.as_str()))
                })
                .collect();
            let record = node.source?.index();
            (!names.is_empty()).then_some((record, names))
        })
        .collect();
    let rename = |n: &mut NodeProto, names: &[(&str, &str)]| {
        for input in &mut n.input {
            if let Some((_, to)) = names.iter().find(|(from, _)| from == input) {
                *input = (*to).to_string();
            }
        }
    };
    // Node records are copied as they lie in the file unless a model-local function must be
    // found among the ops the nodes call (that needs them decoded).
    let raw: Option<Vec<bytes::Bytes>> = if sp.functions.is_empty() {
        records
            .iter()
            .map(|r| source.raw_node(r.index()).cloned())
            .collect()
    } else {
        None
    };
    // A node's tensors (a Constant's value, a subgraph's initializers) may lie in external
    // data too; the part's folder has no such file, so they are written into the part.
    let raw = match raw {
        Some(raws) => Some(
            raws.into_iter()
                .zip(&records)
                .map(|(b, r)| {
                    let b = inline_record_tensors(b, source)?;
                    let Some(names) = renamed.get(&r.index()) else {
                        return Ok(b);
                    };
                    let mut n = NodeProto::decode(b).map_err(|e| {
                        EmitError::Source(format!("a node record does not decode: {e}"))
                    })?;
                    rename(&mut n, names);
                    Ok(n.encode_to_vec().into())
                })
                .collect::<Result<Vec<_>, EmitError>>()?,
        ),
        None => None,
    };
    let nodes = if raw.is_some() {
        Vec::new()
    } else {
        records
            .iter()
            .map(|r| match source.node(r.index()) {
                Ok(Some(n)) => Ok(n.into_owned()),
                Ok(None) => Err(EmitError::Source(format!(
                    "node record {} is not in the source model",
                    r.index()
                ))),
                Err(e) => Err(EmitError::from(e)),
            })
            .collect::<Result<Vec<NodeProto>, _>>()?
            .into_iter()
            .zip(&records)
            .map(|(mut n, r)| {
                if let Some(names) = renamed.get(&r.index()) {
                    rename(&mut n, names);
                }
                inline_node_tensors(&mut n, source).map(|_| n)
            })
            .collect::<Result<Vec<NodeProto>, _>>()?
    };

    let typed = |v: ValueId| -> Result<ValueInfoProto, EmitError> {
        let value = g.value(v);
        // The inferred type holds what the file declares and what inference added (fixed
        // dims among them); a declaration wins only where cleave has no type of its own
        // (sequences, maps) or none complete.
        let declared = index
            .declared
            .get(value.name.as_str())
            .filter(|d| d.r#type.as_ref().is_some_and(complete));
        if let Some(d) = declared {
            if !is_tensor(d) || !value.ty.is_complete() {
                return Ok((*d).clone());
            }
        }
        if !value.ty.is_complete() {
            return Err(EmitError::Untyped {
                part: k + 1,
                tensor: value.name.to_string(),
                ty: value.ty.to_string(),
                origin: untyped_origin(g, v),
            });
        }
        Ok(value_info(&value.name, &value.ty))
    };

    let weight_names = || part.weights.iter().map(|&w| g.value(w).name.as_str());
    let mut initializer = Vec::new();
    for i in SourceIndex::positions(&index.initializer, weight_names()) {
        let t = &sg.initializer[i];
        match shared.and_then(|w| w.reference(t)) {
            Some(external) => initializer.push(external),
            None => initializer.push(inline_external(t, source)?),
        }
    }
    let sparse_initializer = SourceIndex::positions(&index.sparse, weight_names())
        .into_iter()
        .map(|i| sg.sparse_initializer[i].clone())
        .collect();

    let mut input = Vec::with_capacity(part.inputs.len());
    for &v in &part.inputs {
        input.push(typed(v)?);
    }
    if sp.ir_version() < 4 {
        // Before IR version 4 the checker wants every initializer listed as an input.
        for t in &initializer {
            let vi = index
                .declared
                .get(t.name())
                .map(|d| (*d).clone())
                .unwrap_or_else(|| {
                    let ty = TensorType::fixed(
                        crate::elem_from_code(t.data_type()).unwrap_or(cleave_ir::ElemType::F32),
                        &t.dims,
                    );
                    value_info(t.name(), &ty)
                });
            input.push(vi);
        }
    }
    let mut output = Vec::with_capacity(part.outputs.len());
    for &v in &part.outputs {
        output.push(typed(v)?);
    }
    // What the part's nodes write, read from the IR (whose nodes are the records').
    let produced: BTreeSet<&str> = part
        .nodes
        .iter()
        .chain(&part.constant_nodes)
        .flat_map(|&n| g.node(n).outputs.iter().flatten())
        .map(|&v| g.value(v).name.as_str())
        .collect();
    let outputs: BTreeSet<&str> = part
        .outputs
        .iter()
        .map(|&v| g.value(v).name.as_str())
        .collect();
    let value_info = SourceIndex::positions(
        &index.value_info,
        produced.iter().copied().filter(|n| !outputs.contains(n)),
    )
    .into_iter()
    .map(|i| sg.value_info[i].clone())
    .collect();
    let quantization_annotation = sg
        .quantization_annotation
        .iter()
        .filter(|q| {
            produced.contains(q.tensor_name())
                || part
                    .inputs
                    .iter()
                    .any(|&v| g.value(v).name == q.tensor_name())
        })
        .cloned()
        .collect();

    let graph = GraphProto {
        node: nodes,
        name: Some(format!("{}_part{:05}", sg.name(), k + 1)),
        initializer,
        sparse_initializer,
        doc_string: sg.doc_string.clone(),
        input,
        output,
        value_info,
        quantization_annotation,
        metadata_props: sg.metadata_props.clone(),
    };
    let functions = used_functions(&graph.node, &sp.functions);
    let model = ModelProto {
        graph: Some(graph),
        functions,
        ..model_level(sp)
    };
    Ok(match raw {
        Some(records) => PartModel::Records(crate::io::with_records(model, records)),
        None => PartModel::Decoded(model),
    })
}

/// Everything of the model but its graph and functions.
fn model_level(sp: &ModelProto) -> ModelProto {
    ModelProto {
        ir_version: sp.ir_version,
        opset_import: sp.opset_import.clone(),
        producer_name: sp.producer_name.clone(),
        producer_version: sp.producer_version.clone(),
        domain: sp.domain.clone(),
        model_version: sp.model_version,
        doc_string: sp.doc_string.clone(),
        graph: None,
        metadata_props: sp.metadata_props.clone(),
        training_info: Vec::new(),
        functions: Vec::new(),
        configuration: sp.configuration.clone(),
    }
}

fn is_tensor(d: &ValueInfoProto) -> bool {
    matches!(
        d.r#type.as_ref().and_then(|t| t.value.as_ref()),
        Some(type_proto::Value::TensorType(_))
    )
}

fn complete(t: &TypeProto) -> bool {
    match &t.value {
        Some(type_proto::Value::TensorType(tt)) => {
            tt.elem_type.is_some_and(|e| e != 0)
                && tt.shape.as_ref().is_some_and(|s| {
                    s.dim
                        .iter()
                        .all(|d| !matches!(d.value, Some(dimension::Value::DimValue(v)) if v < 0))
                })
        }
        Some(_) => true,
        None => false,
    }
}

/// The node where a tensor's missing element type or rank starts: walking up through
/// producers whose own inputs lack one, the first whose inputs are all typed (its rule could
/// not settle its output), or the graph input that came untyped.
pub fn untyped_origin(g: &cleave_ir::Graph, v: ValueId) -> String {
    let mut at = v;
    // Each step moves to a distinct upstream value, so the walk ends within the graph's size.
    for _ in 0..=g.values.len() {
        let Some(p) = g.value(at).producer() else {
            return format!("graph input '{}' is declared without one", g.value(at).name);
        };
        let node = g.node(p);
        let next = node
            .inputs
            .iter()
            .flatten()
            .copied()
            .find(|&i| !g.value(i).ty.is_complete());
        match next {
            Some(i) if i != at => at = i,
            _ => {
                let op = crate::infer::op_key(&node.domain, &node.op_type);
                return format!(
                    "node '{}' ({op}) gives it, and cleave's shape inference cannot tell its output's rank",
                    g.node_label(p)
                );
            }
        }
    }
    "its producers form a cycle".to_string()
}

/// A typed graph input/output; symbolic dimensions stay `dim_param`. A dim that inference could
/// not tell gets a `dim_param` of its own (`<tensor>:<axis>`), so that tools which expect every
/// dim named, or count on a name to tell dims apart, see one; no two such dims share a name.
pub fn value_info(name: &str, ty: &TensorType) -> ValueInfoProto {
    let shape = ty.shape.as_ref().map(|dims| TensorShapeProto {
        dim: dims
            .iter()
            .enumerate()
            .map(|(axis, d)| Dimension {
                value: Some(match d {
                    Dim::Fixed(n) => dimension::Value::DimValue(*n),
                    Dim::Param(p) => dimension::Value::DimParam(p.clone()),
                    Dim::Unknown => dimension::Value::DimParam(format!("{name}:{axis}")),
                }),
                denotation: None,
            })
            .collect(),
    });
    ValueInfoProto {
        name: Some(name.to_string()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: ty.elem.map(elem_to_code),
                shape,
            })),
            denotation: None,
        }),
        doc_string: None,
        metadata_props: Vec::new(),
    }
}

/// Parts live in another folder than the source, so its external data locations would not
/// resolve there: without a shared weights file their bytes are written into the part.
fn inline_external(t: &TensorProto, source: &OnnxModel) -> Result<TensorProto, EmitError> {
    if t.data_location != Some(DataLocation::External as i32) {
        return Ok(t.clone());
    }
    let ir = crate::to_ir_weight(t, source).map_err(|e| EmitError::Source(e.to_string()))?;
    let bytes = crate::read_weight(&ir)
        .map_err(|e| EmitError::Source(format!("tensor '{}': {e}", t.name())))?;
    let mut out = t.clone();
    out.data_location = None;
    out.external_data.clear();
    out.raw_data = Some(bytes);
    Ok(out)
}

/// A node record with its external tensors written in; the record itself where it has none
/// (an external reference names a `location`, so a record without those bytes has none).
fn inline_record_tensors(
    record: bytes::Bytes,
    source: &OnnxModel,
) -> Result<bytes::Bytes, EmitError> {
    if !record.windows(8).any(|w| w == b"location") {
        return Ok(record);
    }
    let mut n = NodeProto::decode(record.clone())
        .map_err(|e| EmitError::Source(format!("a node record does not decode: {e}")))?;
    Ok(if inline_node_tensors(&mut n, source)? {
        n.encode_to_vec().into()
    } else {
        record
    })
}

/// Writes every external tensor of the node's attributes (and of their subgraphs) into it;
/// whether there was one.
fn inline_node_tensors(n: &mut NodeProto, source: &OnnxModel) -> Result<bool, EmitError> {
    let mut changed = false;
    for a in &mut n.attribute {
        for t in a.t.iter_mut().chain(a.tensors.iter_mut()) {
            if t.data_location == Some(DataLocation::External as i32) {
                *t = inline_external(t, source)?;
                changed = true;
            }
        }
        for g in a.g.iter_mut().chain(a.graphs.iter_mut()) {
            for t in &mut g.initializer {
                if t.data_location == Some(DataLocation::External as i32) {
                    *t = inline_external(t, source)?;
                    changed = true;
                }
            }
            for inner in &mut g.node {
                changed |= inline_node_tensors(inner, source)?;
            }
        }
    }
    Ok(changed)
}

/// The model-local functions that the nodes call, directly or through other functions or
/// subgraphs.
fn used_functions(nodes: &[NodeProto], all: &[FunctionProto]) -> Vec<FunctionProto> {
    let mut want: BTreeSet<(String, String)> = BTreeSet::new();
    let mut stack: Vec<&NodeProto> = nodes.iter().collect();
    while let Some(n) = stack.pop() {
        let key = (n.domain().to_string(), n.op_type().to_string());
        if let Some(f) = all
            .iter()
            .find(|f| f.domain() == key.0 && f.name() == key.1)
        {
            if want.insert(key) {
                stack.extend(f.node.iter());
            }
        }
        for a in &n.attribute {
            for sub in a.g.iter().chain(a.graphs.iter()) {
                stack.extend(sub.node.iter());
            }
        }
    }
    all.iter()
        .filter(|f| want.contains(&(f.domain().to_string(), f.name().to_string())))
        .cloned()
        .collect()
}

/// The source model with `extra` tensors added as graph outputs, typed, so an engine computes
/// them: the reference for comparing boundary tensors.
pub fn with_outputs(
    source: &OnnxModel,
    model: &Model,
    extra: &[ValueId],
) -> Result<ModelProto, EmitError> {
    let mut m = source.proto()?.into_owned();
    let g = m
        .graph
        .as_mut()
        .ok_or_else(|| EmitError::Source("the source model has no graph".into()))?;
    for &v in extra {
        let value = model.graph.value(v);
        if g.output.iter().any(|o| o.name() == value.name) {
            continue;
        }
        if value.ty.elem.is_none() {
            // What nothing types (an op inference has no rule for) is an output by name: the
            // engine that runs the copy knows its type.
            g.output.push(ValueInfoProto {
                name: Some(value.name.to_string()),
                ..Default::default()
            });
            continue;
        }
        g.output.push(value_info(&value.name, &value.ty));
    }
    Ok(m)
}
