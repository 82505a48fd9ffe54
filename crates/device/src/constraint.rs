use std::collections::BTreeMap;

use cleave_ir::{AttrValue, Graph, Node, OpSemantics, ValueDef, ValueId};
use serde::Deserialize;

/// Conditions under which a device runs an op. Every field is optional; all present ones
/// must hold.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Constraint {
    /// Element types allowed for the node's computed (non-constant) inputs and its outputs,
    /// by name (`float32`, `float16`, `int64`, ...).
    pub dtypes: Option<Vec<String>>,
    /// Ranks allowed for the first input.
    pub ranks: Option<Vec<usize>>,
    /// Largest rank allowed for any input whose rank is known (ONNX Runtime's CoreML limit).
    pub max_rank: Option<usize>,
    /// Allowed values per attribute. An absent attribute passes (its default is assumed
    /// acceptable unless listed under `require_attrs`); an empty list forbids the attribute.
    #[serde(default)]
    pub attrs: BTreeMap<String, Vec<toml::Value>>,
    /// Attributes that must be present: their ONNX default is not among the allowed values.
    #[serde(default)]
    pub require_attrs: Vec<String>,
    /// Input positions (0-based) that must be constant when present: a weight, or computed
    /// from weights alone ("weights and bias should be constant").
    #[serde(default)]
    pub const_inputs: Vec<usize>,
    /// Every input and output shape must be fully known and numeric.
    #[serde(default)]
    pub static_shape: bool,
    /// A limitation the profile states but cannot check; shown by `query`.
    pub note: Option<String>,
}

impl Constraint {
    /// Whether no condition is set (a note alone checks nothing).
    pub fn is_unconditional(&self) -> bool {
        self.dtypes.is_none()
            && self.ranks.is_none()
            && self.max_rank.is_none()
            && self.attrs.is_empty()
            && self.require_attrs.is_empty()
            && self.const_inputs.is_empty()
            && !self.static_shape
    }

    /// `None` when the node satisfies every condition, else why not.
    pub fn violation(&self, g: &Graph, node: &Node, sem: &dyn OpSemantics) -> Option<String> {
        // Lazily: most profiles set neither condition that reads these, and every node of a
        // million-node model is checked against each device.
        let tensors = || {
            node.inputs
                .iter()
                .flatten()
                .filter(|&&v| !matches!(g.value(v).def, ValueDef::Weight(_)))
                .chain(node.outputs.iter().flatten())
                .copied()
        };
        if let Some(allowed) = &self.dtypes {
            for v in tensors() {
                let value = g.value(v);
                match value.ty.elem {
                    Some(e) if allowed.contains(&e.name()) => {}
                    Some(e) => {
                        return Some(format!(
                            "element type {e} of '{}' is not one of {}",
                            value.name,
                            allowed.join(", ")
                        ))
                    }
                    None => return Some(format!("element type of '{}' is unknown", value.name)),
                }
            }
        }
        if let Some(ranks) = &self.ranks {
            let first = node.inputs.first().copied().flatten().map(|v| g.value(v));
            match first.and_then(|v| v.ty.rank()) {
                Some(r) if ranks.contains(&r) => {}
                Some(r) => return Some(format!("rank {r} input, supported ranks are {ranks:?}")),
                None => return Some("input rank is unknown".to_string()),
            }
        }
        if let Some(max) = self.max_rank {
            for v in node.inputs.iter().flatten().map(|&v| g.value(v)) {
                match v.ty.rank() {
                    Some(r) if r > max => {
                        return Some(format!("'{}' has rank {r}, more than {max}", v.name))
                    }
                    _ => {}
                }
            }
        }
        for name in &self.require_attrs {
            if node.attr(name).is_none() {
                return Some(format!(
                    "attribute {name} is absent and its default is not supported"
                ));
            }
        }
        for &k in &self.const_inputs {
            let Some(&Some(v)) = node.inputs.get(k) else {
                continue;
            };
            if !is_constant(g, v, sem) {
                return Some(format!("input {k} ('{}') is not constant", g.value(v).name));
            }
        }
        for (name, allowed) in &self.attrs {
            let Some(value) = node.attr(name) else {
                continue;
            };
            if allowed.is_empty() {
                return Some(format!("attribute {name} is not supported"));
            }
            if !allowed.iter().any(|a| attr_matches(value, a)) {
                return Some(format!(
                    "attribute {name}={} is not one of {}",
                    show(value),
                    allowed
                        .iter()
                        .map(|a| a.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        if self.static_shape {
            for v in tensors() {
                let value = g.value(v);
                if value.ty.static_dims().is_none() {
                    return Some(format!(
                        "'{}' has a dynamic shape ({})",
                        value.name,
                        readable(&value.ty)
                    ));
                }
            }
        }
        None
    }
}

/// A type with long symbolic dims cut down to the symbols they depend on: an exporter's
/// `floor(floor(height/2 - 1/2)/2) + 1` reads `f(height)`, so the summary stays short and
/// lines that differ only in such arithmetic group together.
fn readable(ty: &cleave_ir::TensorType) -> String {
    const LONG: usize = 16;
    let Some(dims) = &ty.shape else {
        return ty.to_string();
    };
    let dims: Vec<String> = dims
        .iter()
        .map(|d| match d {
            cleave_ir::Dim::Param(p) if p.len() > LONG => {
                let mut symbols: Vec<&str> = p
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .filter(|w| {
                        w.chars()
                            .next()
                            .is_some_and(|c| c.is_alphabetic() || c == '_')
                            && !matches!(*w, "floor" | "ceil" | "min" | "max" | "mod" | "Mod")
                    })
                    .collect();
                symbols.sort_unstable();
                symbols.dedup();
                format!("f({})", symbols.join(","))
            }
            other => other.to_string(),
        })
        .collect();
    let elem = ty.elem.map_or("?".to_string(), |e| e.to_string());
    format!("{elem}[{}]", dims.join(","))
}

/// Ancestors visited at most before a value is taken as not constant: keeps a check linear
/// in practice on long chains whose shapes are computed at run time.
const CONSTANT_WALK_LIMIT: usize = 4096;

/// A weight, or computed by deterministic nodes without subgraphs from weights alone (as
/// `Graph::constant_nodes`, asked for one value).
fn is_constant(g: &Graph, v: ValueId, sem: &dyn OpSemantics) -> bool {
    let mut stack = vec![v];
    let mut seen = std::collections::HashSet::new();
    while let Some(v) = stack.pop() {
        match &g.value(v).def {
            ValueDef::Weight(_) => {}
            ValueDef::Input | ValueDef::Outer => return false,
            ValueDef::Node(p, _) => {
                if !seen.insert(*p) {
                    continue;
                }
                let node = g.node(*p);
                if seen.len() > CONSTANT_WALK_LIMIT
                    || node.has_subgraphs()
                    || !sem.is_deterministic(node)
                {
                    return false;
                }
                stack.extend(node.all_inputs());
            }
        }
    }
    true
}

fn attr_matches(v: &AttrValue, want: &toml::Value) -> bool {
    match (v, want) {
        (AttrValue::Int(i), toml::Value::Integer(w)) => i == w,
        (AttrValue::Float(f), toml::Value::Float(w)) => (f64::from(*f) - w).abs() < 1e-6,
        (AttrValue::Float(f), toml::Value::Integer(w)) => f64::from(*f) == *w as f64,
        (AttrValue::String(s), toml::Value::String(w)) => s.as_ref() == w.as_bytes(),
        (AttrValue::Ints(v), toml::Value::Array(w)) => {
            v.len() == w.len() && v.iter().zip(w).all(|(a, b)| b.as_integer() == Some(*a))
        }
        _ => false,
    }
}

fn show(v: &AttrValue) -> String {
    match v {
        AttrValue::Int(i) => i.to_string(),
        AttrValue::Float(f) => f.to_string(),
        AttrValue::String(s) => format!("\"{}\"", String::from_utf8_lossy(s)),
        AttrValue::Ints(v) => format!("{v:?}"),
        other => other.kind().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use cleave_ir::{Dim, ElemType, TensorType};

    #[test]
    fn long_symbolic_dims_read_as_the_symbols_they_depend_on() {
        let ty = TensorType::new(
            ElemType::F32,
            vec![
                Dim::Param("batch".into()),
                Dim::Fixed(128),
                Dim::Param("floor(floor(height/2 - 1/2)/2) + 1".into()),
                Dim::Param("(floor(width/2 - 1/2) + 1)*(floor(height/2 - 1/2) + 1)".into()),
            ],
        );
        assert_eq!(
            super::readable(&ty),
            "float32[batch,128,f(height),f(height,width)]"
        );
    }
}
