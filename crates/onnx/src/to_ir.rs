//! ONNX protobuf → format-neutral IR.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use crate::is_default_domain;
use bytes::Bytes;
use cleave_ir::{
    AttrValue, Attribute, Dim, ElemType, Function, Graph, GraphBuilder, Model, NodeSpec, Opset,
    SourceRef, TensorType, Weight, WeightData,
};

use crate::dtype::elem_from_code;
use crate::error::OnnxError;
use crate::external::{external_path, is_external};
use crate::io::OnnxModel;
use crate::proto::{
    attribute_proto::AttributeType, tensor_shape_proto::dimension, type_proto, AttributeProto,
    GraphProto, NodeProto, TensorProto, TypeProto,
};

struct Ctx<'a> {
    path: &'a Path,
    base: PathBuf,
}

/// Converts a loaded ONNX model to the IR and checks its integrity. Types come from the
/// file's `value_info`; call [`crate::infer_types`] to fill in the rest.
pub fn to_ir(m: &OnnxModel) -> Result<Model, OnnxError> {
    let ctx = Ctx {
        path: &m.path,
        base: m.base_dir(),
    };
    let p = m.without_nodes();
    let g = p.graph.as_ref().ok_or_else(|| OnnxError::NoGraph {
        path: m.path.clone(),
    })?;
    let graph = convert_graph(g, (m.node_count(), m.nodes()), &ctx, false)?;
    let mut functions = Vec::with_capacity(p.functions.len());
    for f in &p.functions {
        let mut b = GraphBuilder::new(f.name());
        for i in &f.input {
            b.input(i, TensorType::default());
        }
        for n in &f.node {
            b.node(node_spec(Cow::Borrowed(n), &ctx)?);
        }
        for o in &f.output {
            b.output(o);
        }
        for vi in &f.value_info {
            if let Some(t) = &vi.r#type {
                b.value_type(vi.name(), tensor_type(t));
            }
        }
        let body = b.finish(true).map_err(|source| OnnxError::Function {
            path: m.path.clone(),
            function: f.name().to_string(),
            source: Box::new(source),
        })?;
        functions.push(Function {
            domain: f.domain().to_string(),
            name: f.name().to_string(),
            overload: f.overload().to_string(),
            body,
        });
    }
    Ok(Model {
        format: "onnx",
        format_version: p.ir_version(),
        opsets: p
            .opset_import
            .iter()
            .map(|o| Opset {
                domain: ir_domain(o.domain()),
                version: o.version(),
            })
            .collect(),
        producer: p.producer_name().to_string(),
        state: cleave_ir::recognised_state(&graph),
        graph,
        functions,
    })
}

/// The nodes of a graph held in memory, as [`convert_graph`] takes them.
fn borrowed(
    g: &GraphProto,
) -> (
    usize,
    impl Iterator<Item = Result<Cow<'_, NodeProto>, OnnxError>>,
) {
    (g.node.len(), g.node.iter().map(|n| Ok(Cow::Borrowed(n))))
}

/// `g` with its nodes, and how many, taken from `nodes` (the main graph's may be held
/// undecoded).
fn convert_graph<'n>(
    g: &GraphProto,
    (count, nodes): (
        usize,
        impl Iterator<Item = Result<Cow<'n, NodeProto>, OnnxError>>,
    ),
    ctx: &Ctx,
    allow_outer: bool,
) -> Result<Graph, OnnxError> {
    let mut b = GraphBuilder::new(g.name());
    // Most nodes write one tensor.
    let values = g.input.len() + g.initializer.len() + g.sparse_initializer.len();
    b.reserve(count, values.saturating_add(count));
    let constants: std::collections::HashSet<&str> = g
        .initializer
        .iter()
        .map(|t| t.name())
        .chain(
            g.sparse_initializer
                .iter()
                .filter_map(|s| s.values.as_ref().map(|v| v.name())),
        )
        .collect();
    for i in &g.input {
        // Before IR version 4 every initializer is also listed as an input; either way a
        // tensor with stored data is a constant, not something the caller feeds.
        if constants.contains(i.name()) {
            continue;
        }
        b.input(
            i.name(),
            i.r#type.as_ref().map(tensor_type).unwrap_or_default(),
        );
    }
    for t in &g.initializer {
        b.weight(t.name(), weight(t, ctx)?);
    }
    for s in &g.sparse_initializer {
        if let Some(v) = &s.values {
            let elem = elem_from_code(v.data_type()).unwrap_or(ElemType::Other(0));
            b.weight(
                v.name(),
                Weight {
                    elem,
                    dims: s.dims.clone(),
                    data: WeightData::Opaque,
                },
            );
        }
    }
    for (i, n) in nodes.enumerate() {
        let mut spec = node_spec(n?, ctx)?;
        // Protobuf's 2 GiB message limit keeps a node list far below u32::MAX entries.
        spec.source = u32::try_from(i).ok().map(SourceRef);
        b.node(spec);
    }
    for vi in g
        .value_info
        .iter()
        .chain(g.input.iter())
        .chain(g.output.iter())
    {
        if let Some(t) = &vi.r#type {
            b.value_type(vi.name(), tensor_type(t));
        }
    }
    for o in &g.output {
        b.output(o.name());
    }
    b.finish(allow_outer).map_err(|source| OnnxError::Graph {
        path: ctx.path.to_path_buf(),
        source: Box::new(source),
    })
}

/// The IR spells ONNX's default domain as the empty string, however the file spells it.
fn ir_domain(d: &str) -> String {
    if is_default_domain(d) {
        String::new()
    } else {
        d.to_string()
    }
}

/// A decoded node's strings are moved into the spec; a borrowed one's are copied.
fn node_spec(n: Cow<'_, NodeProto>, ctx: &Ctx) -> Result<NodeSpec, OnnxError> {
    let mut attrs = Vec::with_capacity(n.attribute.len());
    for a in &n.attribute {
        attrs.push(Attribute {
            name: a.name().to_string(),
            value: attr_value(a, ctx)?,
        });
    }
    let domain = ir_domain(n.domain());
    let (name, op_type, inputs, outputs) = match n {
        Cow::Owned(n) => (
            n.name.unwrap_or_default(),
            n.op_type.unwrap_or_default(),
            n.input,
            n.output,
        ),
        Cow::Borrowed(n) => (
            n.name().to_string(),
            n.op_type().to_string(),
            n.input.clone(),
            n.output.clone(),
        ),
    };
    Ok(NodeSpec {
        name,
        op_type,
        domain,
        inputs,
        outputs,
        attrs,
        source: None,
    })
}

fn attr_value(a: &AttributeProto, ctx: &Ctx) -> Result<AttrValue, OnnxError> {
    if let Some(r) = &a.ref_attr_name {
        return Ok(AttrValue::Ref(r.clone()));
    }
    let kind = match a.r#type() {
        AttributeType::Undefined => guess_kind(a),
        k => k,
    };
    Ok(match kind {
        AttributeType::Float => AttrValue::Float(a.f()),
        AttributeType::Int => AttrValue::Int(a.i()),
        AttributeType::String => AttrValue::String(a.s.clone().unwrap_or_default()),
        AttributeType::Tensor => match &a.t {
            Some(t) => AttrValue::Tensor(weight(t, ctx)?),
            None => AttrValue::Opaque("tensor"),
        },
        AttributeType::Graph => match &a.g {
            Some(g) => AttrValue::Graph(Box::new(convert_graph(g, borrowed(g), ctx, true)?)),
            None => AttrValue::Opaque("graph"),
        },
        AttributeType::Floats => AttrValue::Floats(a.floats.clone()),
        AttributeType::Ints => AttrValue::Ints(a.ints.clone()),
        AttributeType::Strings => AttrValue::Strings(a.strings.clone()),
        AttributeType::Tensors => AttrValue::Tensors(
            a.tensors
                .iter()
                .map(|t| weight(t, ctx))
                .collect::<Result<_, _>>()?,
        ),
        AttributeType::Graphs => AttrValue::Graphs(
            a.graphs
                .iter()
                .map(|g| convert_graph(g, borrowed(g), ctx, true))
                .collect::<Result<_, _>>()?,
        ),
        AttributeType::SparseTensor | AttributeType::SparseTensors => {
            AttrValue::Opaque("sparse tensor")
        }
        AttributeType::TypeProto | AttributeType::TypeProtos => AttrValue::Opaque("type"),
        AttributeType::Undefined => AttrValue::Opaque("undefined"),
    })
}

/// Models older than IR version 2 leave `type` unset; the field that is present tells.
fn guess_kind(a: &AttributeProto) -> AttributeType {
    if a.f.is_some() {
        AttributeType::Float
    } else if a.i.is_some() {
        AttributeType::Int
    } else if a.s.is_some() {
        AttributeType::String
    } else if a.t.is_some() {
        AttributeType::Tensor
    } else if a.g.is_some() {
        AttributeType::Graph
    } else if !a.floats.is_empty() {
        AttributeType::Floats
    } else if !a.ints.is_empty() {
        AttributeType::Ints
    } else if !a.strings.is_empty() {
        AttributeType::Strings
    } else if !a.tensors.is_empty() {
        AttributeType::Tensors
    } else if !a.graphs.is_empty() {
        AttributeType::Graphs
    } else {
        AttributeType::Undefined
    }
}

pub(crate) fn tensor_type(t: &TypeProto) -> TensorType {
    let Some(type_proto::Value::TensorType(tt)) = &t.value else {
        return TensorType::default();
    };
    TensorType {
        elem: elem_from_code(tt.elem_type()),
        shape: tt.shape.as_ref().map(|s| {
            s.dim
                .iter()
                .map(|d| match &d.value {
                    // Some exporters write -1 for a dynamic dim.
                    Some(dimension::Value::DimValue(v)) if *v >= 0 => Dim::Fixed(*v),
                    Some(dimension::Value::DimParam(p)) => Dim::Param(p.clone()),
                    _ => Dim::Unknown,
                })
                .collect()
        }),
    }
}

/// A standalone tensor (a `.pb` file, say) as an IR weight; external data resolves against
/// `base`, and errors name `path`.
pub fn weight_from_tensor(t: &TensorProto, path: &Path, base: &Path) -> Result<Weight, OnnxError> {
    weight(
        t,
        &Ctx {
            path,
            base: base.to_path_buf(),
        },
    )
}

/// A tensor of `m`'s file (an initializer, say) as an IR weight, external data resolved.
pub fn to_ir_weight(t: &TensorProto, m: &OnnxModel) -> Result<Weight, OnnxError> {
    weight(
        t,
        &Ctx {
            path: &m.path,
            base: m.base_dir(),
        },
    )
}

fn weight(t: &TensorProto, ctx: &Ctx) -> Result<Weight, OnnxError> {
    let elem = elem_from_code(t.data_type()).unwrap_or(ElemType::Other(0));
    let data = if is_external(t) {
        let (r, path) = external_path(t, ctx.path, &ctx.base)?;
        WeightData::External {
            path,
            offset: r.offset,
            length: r.length,
        }
    } else if t.segment.is_some() {
        WeightData::Opaque
    } else if let Some(raw) = &t.raw_data {
        WeightData::Bytes(raw.clone())
    } else if elem == ElemType::Str {
        WeightData::Strings(t.string_data.clone())
    } else {
        typed_bytes(t, elem)
    };
    Ok(Weight {
        elem,
        dims: t.dims.clone(),
        data,
    })
}

/// Weights stored in the typed repeated fields, as little-endian bytes. These fields are
/// already decoded into vectors by protobuf, so this is the one place a weight is copied.
fn typed_bytes(t: &TensorProto, elem: ElemType) -> WeightData {
    use ElemType::*;
    fn le<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Bytes {
        v.iter().flat_map(|&x| f(x)).collect::<Vec<u8>>().into()
    }
    let b = match elem {
        F32 | C64 => le(&t.float_data, f32::to_le_bytes),
        F64 | C128 => le(&t.double_data, f64::to_le_bytes),
        I64 => le(&t.int64_data, i64::to_le_bytes),
        U64 => le(&t.uint64_data, u64::to_le_bytes),
        U32 => le(&t.uint64_data, |x| (x as u32).to_le_bytes()),
        I32 => le(&t.int32_data, i32::to_le_bytes),
        I16 | U16 | F16 | BF16 => le(&t.int32_data, |x| (x as u16).to_le_bytes()),
        I8 | U8 | Bool | F8E4M3FN | F8E4M3FNUZ | F8E5M2 | F8E5M2FNUZ | F8E8M0 | U4 | I4
        | F4E2M1 | U2 | I2 => le(&t.int32_data, |x| [x as u8]),
        Str | Other(_) => return WeightData::Opaque,
    };
    WeightData::Bytes(b)
}
