//! What the onnx checker refuses and cleave's later stages would trip on, found before any
//! work is done: each problem named by its node (or tensor) and cause, in one sentence.

use cleave_ir::{AttrValue, ElemType, Graph, Model, Node, WeightData};

use crate::registry;
use crate::schema;

mod shapes;
pub use shapes::typed;
pub(crate) use shapes::{axis_in_range, axis_only, show};

/// The newest default-domain opset whose operators cleave knows (onnx 1.22).
pub const MAX_OPSET: i64 = 27;

/// What a refusal is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject {
    Model,
    Tensor(String),
    Node { label: String, op: String },
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Subject::Model => write!(f, "the model"),
            Subject::Tensor(name) => write!(f, "tensor '{name}'"),
            Subject::Node { label, op } => write!(f, "node '{label}' ({op})"),
        }
    }
}

/// A refusal: what it is about, and the cause.
pub type Refusal = (Subject, String);

/// `cause`, refused about node `i` of `g`.
pub(crate) fn at_node(g: &Graph, i: usize, cause: String) -> Refusal {
    let n = &g.nodes[i];
    let label = g.node_label(cleave_ir::NodeId(i as u32));
    (
        Subject::Node {
            label: label.to_string(),
            op: n.op_type.to_string(),
        },
        cause,
    )
}

/// The first problem found.
pub fn validate(m: &Model) -> Result<(), Refusal> {
    for o in &m.opsets {
        let default = o.domain.is_empty() || o.domain == "ai.onnx";
        let name = if default { "ai.onnx" } else { &o.domain };
        if default && o.version > MAX_OPSET {
            return Err((
                Subject::Model,
                format!(
                    "imports opset {} of ai.onnx; cleave knows operators up to opset {MAX_OPSET}",
                    o.version
                ),
            ));
        }
        if o.version < 1 {
            return Err((
                Subject::Model,
                format!("imports opset {} of {name}; opsets start at 1", o.version),
            ));
        }
    }
    let opsets = Opsets {
        onnx: m.opset("").or(m.opset("ai.onnx")).unwrap_or(MAX_OPSET),
        ml: m.opset(ML),
    };
    graph(&m.graph, opsets)
}

const ML: &str = "ai.onnx.ml";

/// The versions the model imports of the domains whose operators onnx defines.
#[derive(Clone, Copy)]
struct Opsets {
    onnx: i64,
    ml: Option<i64>,
}

fn graph(g: &Graph, opsets: Opsets) -> Result<(), Refusal> {
    for v in &g.values {
        if let Some(ElemType::Other(code)) = v.ty.elem {
            return Err((
                Subject::Tensor(v.name.to_string()),
                format!("element type {code} is not an ONNX type"),
            ));
        }
    }
    for (id, w) in g.weights() {
        let name = &g.value(id).name;
        let what = || Subject::Tensor(name.to_string());
        if let ElemType::Other(_) = w.elem {
            return Err((what(), "its element type is not an ONNX type".into()));
        }
        if w.dims.iter().any(|&d| d < 0) {
            return Err((what(), format!("negative dimension in {:?}", w.dims)));
        }
        match &w.data {
            WeightData::Bytes(b) => {
                if let Some(need) = crate::data_file::tensor_bytes(w.elem, &w.dims) {
                    if need != Some(b.len() as u64) {
                        return Err((
                            what(),
                            format!(
                                "holds {} bytes, but {} {:?} needs {}",
                                b.len(),
                                w.elem.name(),
                                w.dims,
                                need.map_or("more than 2^64".to_string(), |n| n.to_string())
                            ),
                        ));
                    }
                }
            }
            WeightData::External {
                path,
                offset,
                length,
            } => external(path, *offset, *length, (w.elem, &w.dims))
                .map_err(|cause| (what(), format!("external data {cause}")))?,
            WeightData::Strings(_) | WeightData::Opaque => {}
        }
    }
    for (i, n) in g.nodes.iter().enumerate() {
        let default = n.domain.is_empty() || n.domain == "ai.onnx";
        // Before inference, a value's type is what the file states.
        let elem = |i: usize| -> Option<ElemType> {
            let v = n.inputs.get(i).copied().flatten()?;
            g.value(v).ty.elem
        };
        let checked = if default {
            schema::check(n, "", "ai.onnx", opsets.onnx, elem).and_then(|()| node(n, opsets.onnx))
        } else if let (ML, Some(v)) = (n.domain.as_str(), opsets.ml) {
            schema::check(n, ML, ML, v, elem)
        } else {
            Ok(())
        };
        checked.map_err(|cause| at_node(g, i, cause))?;
        for a in &n.attrs {
            match &a.value {
                AttrValue::Graph(sub) => graph(sub, opsets)?,
                AttrValue::Graphs(subs) => {
                    for s in subs {
                        graph(s, opsets)?;
                    }
                }
                AttrValue::Tensor(_) | AttrValue::Tensors(_) => {
                    attr_external(g, i, a)?;
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// A tensor attribute's external data (a Constant's value), as an initializer's is checked.
fn attr_external(g: &Graph, i: usize, a: &cleave_ir::Attribute) -> Result<(), Refusal> {
    let tensors: Vec<&cleave_ir::Weight> = match &a.value {
        AttrValue::Tensor(w) => vec![w],
        AttrValue::Tensors(ws) => ws.iter().collect(),
        _ => Vec::new(),
    };
    for w in tensors {
        weight_external(w).map_err(|cause| {
            (
                Subject::Node {
                    label: g.node_label(cleave_ir::NodeId(i as u32)).to_string(),
                    op: g.nodes[i].op_type.to_string(),
                },
                format!("attribute '{}': external data {cause}", a.name),
            )
        })?;
    }
    Ok(())
}

/// [`external`] for a weight whose bytes lie in external data; nothing for any other.
fn weight_external(w: &cleave_ir::Weight) -> Result<(), String> {
    match &w.data {
        WeightData::External {
            path,
            offset,
            length,
        } => external(path, *offset, *length, (w.elem, &w.dims)),
        _ => Ok(()),
    }
}

/// The external data checks of [`validate`] alone, through every subgraph: for `convert`,
/// which writes a model out as it is, but must neither copy nor wait on data that no engine
/// would read as its tensor.
pub fn external_data(g: &Graph) -> Result<(), Refusal> {
    for (id, w) in g.weights() {
        weight_external(w).map_err(|cause| {
            (
                Subject::Tensor(g.value(id).name.to_string()),
                format!("external data {cause}"),
            )
        })?;
    }
    for (i, n) in g.nodes.iter().enumerate() {
        for a in &n.attrs {
            match &a.value {
                AttrValue::Graph(sub) => external_data(sub)?,
                AttrValue::Graphs(subs) => subs.iter().try_for_each(external_data)?,
                AttrValue::Tensor(_) | AttrValue::Tensors(_) => attr_external(g, i, a)?,
                _ => {}
            }
        }
    }
    Ok(())
}

/// An external tensor's file is a regular file holding exactly the bytes its type needs where
/// the tensor says: checked at load (the file's metadata only; nothing is read), so a part
/// never receives bytes that no engine reads as the tensor, and nothing later opens a FIFO.
fn external(
    path: &std::path::Path,
    offset: u64,
    length: Option<u64>,
    ty: (ElemType, &[i64]),
) -> Result<(), String> {
    let size = crate::data_file::regular_metadata(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len();
    crate::data_file::checked_length(path, offset, length, ty, size).map(|_| ())
}

pub(crate) fn ints<'a>(n: &'a Node, name: &str) -> Option<&'a [i64]> {
    match n.attr(name)? {
        AttrValue::Ints(v) => Some(v),
        _ => None,
    }
}

pub(crate) fn int(n: &Node, name: &str) -> Option<i64> {
    match n.attr(name)? {
        AttrValue::Int(v) => Some(*v),
        _ => None,
    }
}

/// `name` (one value or a list) is at least `min`.
pub(crate) fn at_least(n: &Node, name: &str, min: i64) -> Result<(), String> {
    if let Some(v) = ints(n, name) {
        if let Some(bad) = v.iter().find(|&&x| x < min) {
            return Err(format!("{name} {v:?}: {bad} is below {min}"));
        }
    }
    if let Some(v) = int(n, name) {
        if v < min {
            return Err(format!("{name} {v} is below {min}"));
        }
    }
    Ok(())
}

/// Attribute values outside what the operator defines: the element types every op may name,
/// then the op's own check from the op registry.
fn node(n: &Node, opset: i64) -> Result<(), String> {
    for name in ["to", "dtype", "output_dtype"] {
        // Cast needs a type; the others take 0 for "as the input".
        if let Some(code) = int(n, name).filter(|&c| c != 0 || name == "to") {
            let known = i32::try_from(code)
                .ok()
                .and_then(crate::elem_from_code)
                .is_some_and(|e| !matches!(e, ElemType::Other(_)));
            if !known {
                return Err(format!("{name} {code} is not an ONNX element type"));
            }
        }
    }
    if let Some(check) = registry().default_op(&n.op_type).and_then(|e| e.check) {
        check(n, opset)?;
    }
    Ok(())
}
