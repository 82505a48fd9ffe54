//! What the onnx checker holds each node of the default and `ai.onnx.ml` domains to: how many
//! inputs and outputs, which attributes of which kind, which of them required. The table is
//! generated from onnx's own operator schemas (`scripts/gen/gen_onnx_schemas.py`), so the counts
//! and names are onnx's, not a hand copy.

use crate::op_registry::OpCache;
use rustc_hash::FxHashMap;
use std::sync::OnceLock;

use cleave_ir::{AttrValue, ElemType, Node};

#[rustfmt::skip]
mod table;

/// Ops onnxruntime defines in the ONNX domain outside onnx's schemas: LayerNormalization and
/// SimplifiedLayerNormalization before opset 17 (its transformer optimizer writes them into
/// models of any opset), and the experimental ops onnx removed, kept for old models.
const ORT_ONNX_DOMAIN: &[&str] = &[
    "LayerNormalization",
    "SimplifiedLayerNormalization",
    "Affine",
    "Crop",
    "DynamicSlice",
    "GivenTensorFill",
    "GRUUnit",
    "ImageScaler",
    "MeanVarianceNormalization",
    "ParametricSoftplus",
    "Scale",
    "ScaledTanh",
    "ThresholdedRelu",
];

/// No upper bound (a variadic input or output).
const MANY: u32 = u32::MAX;

// Every kind onnx defines, including two that no operator of this release takes.
#[allow(dead_code)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Float,
    Int,
    String,
    Tensor,
    Graph,
    Floats,
    Ints,
    Strings,
    Tensors,
    Graphs,
    Sparse,
    Type,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Float => "float",
            Kind::Int => "int",
            Kind::String => "string",
            Kind::Tensor => "tensor",
            Kind::Graph => "graph",
            Kind::Floats => "floats",
            Kind::Ints => "ints",
            Kind::Strings => "strings",
            Kind::Tensors => "tensors",
            Kind::Graphs => "graphs",
            Kind::Sparse => "sparse tensor",
            Kind::Type => "type",
        }
    }

    /// Whether `v` is of this kind. A reference to a caller's attribute and a kind an old file
    /// left unset are taken on trust, as the checker takes them.
    fn admits(self, v: &AttrValue) -> bool {
        match v {
            AttrValue::Ref(_) => true,
            AttrValue::Opaque(k) => *k == "undefined" || *k == self.name(),
            other => other.kind() == self.name(),
        }
    }
}

struct Attr(&'static str, Kind, bool);

/// A formal input: its type (a variable of `Schema::types` or a type itself), whether it
/// repeats, and whether its repeats share one type.
struct Operand(&'static str, bool, bool);

/// A type variable's mask has bit `code` set for each element type (ONNX's numbering) it
/// admits; this bit says it also admits sequences, maps or optionals, left unchecked.
const OTHER: u64 = 1 << 63;

struct Schema {
    domain: &'static str,
    op: &'static str,
    since: i64,
    deprecated: bool,
    inputs: (u32, u32),
    outputs: (u32, u32),
    attrs: &'static [Attr],
    operands: &'static [Operand],
    types: &'static [(&'static str, u64)],
}

/// Every version of each operator, oldest first.
fn versions(domain: &str, op: &str) -> Option<&'static [&'static Schema]> {
    // Fx hashing: every node of a model is looked up, a million for the largest.
    type Index = FxHashMap<&'static str, FxHashMap<&'static str, Vec<&'static Schema>>>;
    static INDEX: OnceLock<Index> = OnceLock::new();
    let index = INDEX.get_or_init(|| {
        let mut index = Index::default();
        for s in table::SCHEMAS {
            index
                .entry(s.domain)
                .or_default()
                .entry(s.op)
                .or_default()
                .push(s);
        }
        index
    });
    index.get(domain)?.get(op).map(Vec::as_slice)
}

fn range(n: usize, (lo, hi): (u32, u32)) -> Option<String> {
    let n = u32::try_from(n).unwrap_or(u32::MAX);
    if (lo..=hi).contains(&n) {
        return None;
    }
    Some(match (lo, hi) {
        (lo, hi) if lo == hi => format!("{lo}"),
        (lo, MANY) => format!("at least {lo}"),
        (lo, hi) => format!("{lo} to {hi}"),
    })
}

/// The node against its operator's schema at `opset` of `domain` (`""` or `ai.onnx.ml`): `Err`
/// with the cause when the checker would refuse it.
pub fn check(
    n: &Node,
    domain: &str,
    domain_name: &str,
    opset: i64,
    elem: impl Fn(usize) -> Option<ElemType>,
) -> Result<(), String> {
    thread_local! {
        // Every node is checked; see `OpCache`.
        static DEFAULT: OpCache<Option<&'static [&'static Schema]>> = const { OpCache::new() };
    }
    let all = if domain.is_empty() {
        DEFAULT.with(|c| c.get(&n.op_type, || versions("", &n.op_type)))
    } else {
        versions(domain, &n.op_type)
    }
    .unwrap_or_default();
    let Some(s) = all.iter().rev().find(|s| s.since <= opset) else {
        if domain.is_empty() && ORT_ONNX_DOMAIN.contains(&n.op_type.as_str()) {
            // onnxruntime runs it under its own definition; cleave takes it as it does.
            return Ok(());
        }
        return Err(match all.first() {
            None => format!(
                "{} is not an operator of {domain_name} (onnx {})",
                n.op_type,
                table::ONNX
            ),
            Some(first) => format!(
                "{} is defined from opset {} of {domain_name}; the model imports opset {opset}",
                n.op_type, first.since
            ),
        });
    };
    if s.deprecated {
        // Deprecated operators (Upsample from opset 10) still run in onnxruntime; their
        // schema says nothing more.
        return Ok(());
    }
    if let Some(want) = range(n.inputs.len(), s.inputs) {
        return Err(format!(
            "has {} input{}; {} at opset {} takes {want}",
            n.inputs.len(),
            if n.inputs.len() == 1 { "" } else { "s" },
            n.op_type,
            s.since
        ));
    }
    if let Some(want) = range(n.outputs.len(), s.outputs) {
        return Err(format!(
            "has {} output{}; {} at opset {} gives {want}",
            n.outputs.len(),
            if n.outputs.len() == 1 { "" } else { "s" },
            n.op_type,
            s.since
        ));
    }
    for a in &n.attrs {
        match s.attrs.iter().find(|d| d.0 == a.name) {
            None => {
                return Err(format!(
                    "attribute '{}' is not one of {} at opset {}",
                    a.name, n.op_type, s.since
                ))
            }
            Some(d) if !d.1.admits(&a.value) => {
                return Err(format!(
                    "attribute '{}' is {}; {} wants {}",
                    a.name,
                    article(a.value.kind()),
                    n.op_type,
                    article(d.1.name())
                ))
            }
            Some(_) => {}
        }
    }
    if let Some(missing) = s.attrs.iter().find(|d| d.2 && n.attr(d.0).is_none()) {
        return Err(format!(
            "lacks the required attribute '{}' ({})",
            missing.0,
            missing.1.name()
        ));
    }
    types(n, s, elem)
}

/// Each input's element type admitted by its type variable, and inputs that share a variable
/// of one type. Only types the file states are asked for: a guess must not refuse a model.
fn types(n: &Node, s: &Schema, elem: impl Fn(usize) -> Option<ElemType>) -> Result<(), String> {
    let mut bound: Vec<(&str, usize, ElemType)> = Vec::new();
    for i in 0..n.inputs.len() {
        let Some(formal) = s.operands.get(i).or(s.operands.last().filter(|o| o.1)) else {
            break;
        };
        let Some(e) = elem(i) else { continue };
        let code = crate::elem_to_code(e);
        let mask = match s.types.iter().find(|t| t.0 == formal.0) {
            Some(t) => t.1,
            None => continue,
        };
        if mask & OTHER != 0 {
            continue;
        }
        let admitted = u32::try_from(code)
            .ok()
            .and_then(|c| 1u64.checked_shl(c))
            .is_some_and(|bit| mask & bit != 0);
        if !admitted {
            let names: Vec<String> = (1..63i32)
                .filter(|&c| mask & (1u64 << c) != 0)
                .filter_map(|c| crate::elem_from_code(c).map(|e| e.name()))
                .collect();
            return Err(format!(
                "input {i} is {}; {} takes {} in {{{}}}",
                e.name(),
                n.op_type,
                formal.0,
                names.join(", ")
            ));
        }
        let shared = !formal.1 || formal.2;
        if !shared {
            continue;
        }
        match bound.iter().find(|b| b.0 == formal.0) {
            Some(&(_, j, other)) if other != e => {
                return Err(format!(
                    "input {i} is {} and input {j} {}; {} takes both as {}",
                    e.name(),
                    other.name(),
                    n.op_type,
                    formal.0
                ))
            }
            Some(_) => {}
            None => bound.push((formal.0, i, e)),
        }
    }
    Ok(())
}

fn article(kind: &str) -> String {
    let an = kind.starts_with(['a', 'e', 'i', 'o', 'u']);
    format!("{} {kind}", if an { "an" } else { "a" })
}
