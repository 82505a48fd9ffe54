use std::collections::BTreeMap;
use std::path::Path;

use cleave::ir::phases::phase;
use cleave::ir::{Dim, Graph, Model, OpSemantics, TensorType, ValueId};
use serde::Serialize;

use crate::Fail;

#[derive(Serialize)]
struct Summary {
    file: String,
    format: &'static str,
    ir_version: i64,
    producer: String,
    opsets: Vec<OpsetJson>,
    nodes: usize,
    depth: usize,
    ops: BTreeMap<String, usize>,
    inputs: Vec<TensorJson>,
    outputs: Vec<TensorJson>,
    parameters: Params,
    /// Tensors computed from constants alone (weights made by `ConstantOfShape`, say).
    computed_constants: Computed,
    functions: Vec<String>,
    /// Decoder state pairs the names show (input -> output: one layer's KV cache).
    state: BTreeMap<String, String>,
    /// Tensors whose element type or rank could not be determined.
    untyped: Vec<String>,
    /// Op types without an inference rule that left tensors untyped.
    ops_without_inference: Vec<String>,
    /// Every tensor of the top-level graph, with `--types`.
    #[serde(skip_serializing_if = "Option::is_none")]
    types: Option<Vec<TensorJson>>,
}

#[derive(Serialize)]
struct OpsetJson {
    domain: String,
    version: i64,
}

#[derive(Serialize)]
struct TensorJson {
    name: String,
    dtype: Option<String>,
    /// Numbers for known dims, strings for symbolic ones, null for unknown; null when the
    /// rank itself is unknown.
    shape: Option<Vec<serde_json::Value>>,
}

#[derive(Serialize)]
struct Computed {
    nodes: usize,
    /// Bytes of their outputs, where the shapes are static.
    bytes: u64,
}

#[derive(Serialize)]
struct Params {
    tensors: usize,
    bytes: u64,
}

pub fn run(path: &Path, json: bool, types: bool, fixed: &cleave::FixedDims) -> Result<(), Fail> {
    // Freed by the process's exit, not piece by piece.
    let loaded = crate::process::Released::new(cleave::load_model(path)?.fix_dims(fixed)?);
    let s = phase("summary", || {
        let report = loaded.source.type_report();
        summarise(path, loaded.model(), report, loaded.semantics())
    });
    show(path, s, loaded.model(), json, types)
}

fn show(path: &Path, mut s: Summary, model: &Model, json: bool, types: bool) -> Result<(), Fail> {
    if types {
        let g = &model.graph;
        s.types = Some(
            (0..g.values.len())
                .map(|i| tensor(g, ValueId(i as u32)))
                .collect(),
        );
    }
    if json {
        let text = serde_json::to_string_pretty(&s).map_err(|e| Fail::input(path, e))?;
        println!("{text}");
    } else {
        print!("{}", render(&s));
    }
    Ok(())
}

fn summarise(
    path: &Path,
    m: &Model,
    report: cleave::frontend::TypeReport,
    sem: &dyn OpSemantics,
) -> Summary {
    let g = &m.graph;
    let mut ops = BTreeMap::new();
    for n in &g.nodes {
        let key = if n.domain.is_empty() || n.domain == "ai.onnx" {
            n.op_type.to_string()
        } else {
            format!("{}::{}", n.domain, n.op_type)
        };
        *ops.entry(key).or_insert(0) += 1;
    }
    let weights: Vec<_> = g.weights().collect();
    let constant = sem.constant_nodes(g);
    let computed: Vec<_> = g
        .nodes
        .iter()
        .zip(&constant)
        .filter(|(_, &c)| c)
        .map(|(n, _)| n)
        .collect();
    let computed_bytes = computed
        .iter()
        .flat_map(|n| n.outputs.iter().flatten())
        .filter_map(|&v| g.value(v).ty.byte_size())
        .sum();
    Summary {
        file: path.display().to_string(),
        format: m.format,
        ir_version: m.format_version,
        producer: m.producer.clone(),
        opsets: m
            .opsets
            .iter()
            .map(|o| OpsetJson {
                domain: if o.domain.is_empty() && m.format == "onnx" {
                    "ai.onnx".into()
                } else {
                    o.domain.clone()
                },
                version: o.version,
            })
            .collect(),
        nodes: g.nodes.len(),
        depth: g.depth(),
        ops,
        inputs: g.inputs.iter().map(|&v| tensor(g, v)).collect(),
        outputs: g.outputs.iter().map(|&v| tensor(g, v)).collect(),
        parameters: Params {
            tensors: weights.len(),
            bytes: weights.iter().map(|(_, w)| w.byte_len()).sum(),
        },
        computed_constants: Computed {
            nodes: computed.len(),
            bytes: computed_bytes,
        },
        functions: m
            .functions
            .iter()
            .map(|f| format!("{}::{}", f.domain, f.name))
            .collect(),
        state: m
            .state
            .iter()
            .map(|p| (p.input.clone(), p.output.clone()))
            .collect(),
        untyped: report.untyped,
        ops_without_inference: report.unknown_ops,
        types: None,
    }
}

fn tensor(g: &Graph, v: ValueId) -> TensorJson {
    let value = g.value(v);
    let TensorType { elem, shape } = &value.ty;
    TensorJson {
        name: value.name.to_string(),
        dtype: elem.map(|e| e.name()),
        shape: shape.as_ref().map(|dims| {
            dims.iter()
                .map(|d| match d {
                    Dim::Fixed(n) => serde_json::Value::from(*n),
                    Dim::Param(p) => serde_json::Value::from(p.as_str()),
                    Dim::Unknown => serde_json::Value::Null,
                })
                .collect()
        }),
    }
}

fn render(s: &Summary) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(o, "model      {}", s.file);
    let producer = if s.producer.is_empty() {
        String::new()
    } else {
        format!(", producer {}", s.producer)
    };
    if s.format == "onnx" {
        let _ = writeln!(
            o,
            "format     {} (IR version {}{producer})",
            s.format, s.ir_version
        );
        let opsets: Vec<String> = s
            .opsets
            .iter()
            .map(|o| format!("{} {}", o.domain, o.version))
            .collect();
        let _ = writeln!(o, "opsets     {}", opsets.join(", "));
    } else {
        let _ = writeln!(
            o,
            "format     {} (schema version {}{producer})",
            s.format, s.ir_version
        );
    }
    let _ = writeln!(o, "nodes      {} (graph depth {})", s.nodes, s.depth);
    let mut ops: Vec<_> = s.ops.iter().collect();
    ops.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let ops: Vec<String> = ops.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let _ = writeln!(o, "ops        {}", ops.join(", "));
    let _ = writeln!(
        o,
        "parameters {} in {} constant tensors",
        human_bytes(s.parameters.bytes),
        s.parameters.tensors
    );
    if s.computed_constants.nodes > 0 {
        let _ = writeln!(
            o,
            "           + {} computed from constants by {} nodes",
            human_bytes(s.computed_constants.bytes),
            s.computed_constants.nodes
        );
    }
    for (title, list) in [("inputs", &s.inputs), ("outputs", &s.outputs)] {
        let _ = writeln!(o, "{title}");
        for t in list {
            let _ = writeln!(o, "  {}  {}", t.name, describe(t));
        }
    }
    if !s.functions.is_empty() {
        let _ = writeln!(o, "functions  {}", s.functions.join(", "));
    }
    if !s.state.is_empty() {
        let shown: Vec<String> = s
            .state
            .iter()
            .take(2)
            .map(|(i, o)| format!("{i} -> {o}"))
            .collect();
        let more = s.state.len().saturating_sub(shown.len());
        let _ = writeln!(
            o,
            "state      {} pairs, a decoder's KV cache ({}{}): cleave generate feeds them back",
            s.state.len(),
            shown.join(", "),
            if more > 0 {
                format!(", and {more} more")
            } else {
                String::new()
            }
        );
    }
    if let Some(types) = &s.types {
        let _ = writeln!(o, "tensors");
        for t in types {
            let _ = writeln!(o, "  {}  {}", t.name, describe(t));
        }
    }
    if s.untyped.is_empty() {
        let _ = writeln!(o, "types      every tensor has an element type and a rank");
    } else {
        let _ = writeln!(
            o,
            "untyped    {} tensors: {}",
            s.untyped.len(),
            s.untyped.join(", ")
        );
        if !s.ops_without_inference.is_empty() {
            let _ = writeln!(
                o,
                "           (no inference rule for: {})",
                s.ops_without_inference.join(", ")
            );
        }
    }
    o
}

fn describe(t: &TensorJson) -> String {
    let dtype = t.dtype.clone().unwrap_or_else(|| "?".into());
    let shape = match &t.shape {
        None => "[?]".to_string(),
        Some(d) => {
            let dims: Vec<String> = d
                .iter()
                .map(|v| match v {
                    serde_json::Value::Null => "?".to_string(),
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect();
            format!("[{}]", dims.join(","))
        }
    };
    format!("{dtype}{shape}")
}

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut unit = "";
    for u in UNITS {
        v /= 1024.0;
        unit = u;
        if v < 1024.0 {
            break;
        }
    }
    format!("{v:.1} {unit} ({n} bytes)")
}

// `cleave inspect`'s flags, declared here alone; `lib.rs` dispatches them.
#[derive(clap::Args)]
pub struct Args {
    /// The model file (.onnx).
    pub model: std::path::PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also list every tensor of the top-level graph with its inferred type (in JSON, a
    /// `types` array; in text, one line each).
    #[arg(long)]
    pub types: bool,
    /// Fix an input's shape first: NAME=1,3,640,640 (see `query --help`).
    #[arg(long = "shape", value_name = "NAME=D,D,...")]
    pub shape: Vec<String>,
    /// Fix every dim named PARAM first: PARAM=N.
    #[arg(long = "dim", value_name = "PARAM=N")]
    pub dim: Vec<String>,
}

pub fn main(a: Args) -> Result<(), Fail> {
    let fixed = crate::setup::parse_fixed(&a.shape, &a.dim)?;
    run(&a.model, a.json, a.types, &fixed)
}
