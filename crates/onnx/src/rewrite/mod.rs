//! Graph rewrites: a new model whose outputs equal the source's.
//!
//! Each pass matches on the IR of the current model and records edits against its protobuf
//! (each IR node finds its NodeProto through its source handle); the edits are applied, the
//! IR is rebuilt, and the pass runs again until it finds nothing. Nodes no pass touches keep
//! every protobuf field as loaded.

mod basic;
mod cse;
mod device;
mod edit;
mod evaluate;
mod onnx_view;
mod tensor;
mod tiling;

use std::collections::{BTreeMap, HashMap};

use cleave_fuse::{Rule, UnknownRule, View};
use cleave_ir::{Graph, Model, NodeId, OpSemantics};

use crate::proto::{GraphProto, ModelProto, NodeProto};
use crate::{infer_types, to_ir, OnnxError, OnnxModel, OnnxSemantics};
pub(crate) use edit::Edits;

pub use cleave_frontend::{
    Evaluator, RewriteLevel as Level, RewriteOptions as OptimizeOptions, DEFAULT_FOLD_LIMIT,
};

#[derive(Debug, thiserror::Error)]
pub enum OptimizeError {
    #[error(transparent)]
    Onnx(#[from] OnnxError),
    #[error("profile '{profile}': {source}")]
    Rule {
        profile: String,
        source: UnknownRule,
    },
    #[error("rewrite '{rule}' produced an invalid graph (a bug in cleave): {cause}")]
    Broken { rule: &'static str, cause: String },
}

/// The rewritten model and what was done to it.
pub struct Optimized {
    pub model: OnnxModel,
    /// The rewritten model as IR, typed.
    pub ir: Model,
    /// How many times each rewrite applied, by name.
    pub applied: BTreeMap<&'static str, usize>,
    /// For each node label of the new model that differs from the source, the source node
    /// labels it stands for (OpenVINO's `originalLayersNames`).
    pub origins: HashMap<String, Vec<String>>,
    /// Matches a rewrite declined, and why.
    pub notes: Vec<String>,
}

impl Optimized {
    /// The source labels behind a node of the new model.
    pub fn original_names(&self, label: &str) -> Vec<String> {
        self.origins
            .get(label)
            .cloned()
            .unwrap_or_else(|| vec![label.to_string()])
    }
}

/// What a pass sees.
pub(crate) struct PassCx<'a> {
    pub model: &'a Model,
    /// The protobuf graph the IR was built from.
    pub proto: &'a GraphProto,
    /// Each IR node's position in `proto.node`.
    pub records: &'a [usize],
    pub constant: &'a [bool],
    /// The device rules that apply to each node (empty at the basic level).
    pub rules: &'a [Vec<Rule>],
    /// The tile budget of the device that runs each node.
    pub tile_bytes: &'a [Option<u64>],
    pub opset: i64,
    /// The model the graph belongs to (opsets, functions).
    pub source: &'a ModelProto,
    pub evaluator: Option<&'a dyn Evaluator>,
    pub fold_limit: u64,
}

impl<'a> PassCx<'a> {
    pub fn view(&self) -> View<'_> {
        View::new(&self.model.graph, self.constant, &OnnxSemantics)
    }

    /// The NodeProto an IR node was built from.
    pub fn record(&self, n: NodeId) -> &'a NodeProto {
        &self.proto.node[self.records[n.index()]]
    }

    pub fn enabled(&self, n: NodeId, r: Rule) -> bool {
        self.rules.get(n.index()).is_some_and(|rs| rs.contains(&r))
    }
}

type Pass = fn(&PassCx, &mut Edits);

/// Rewrites `src` to the given level. The source model is not modified.
pub fn optimize(src: &OnnxModel, opts: &OptimizeOptions) -> Result<Optimized, OptimizeError> {
    let mut passes: Vec<(&'static str, Pass)> = vec![
        ("fold_constants", basic::fold_constants),
        ("fold_constants", evaluate::fold_by_engine),
        (
            "common_subexpressions",
            cse::eliminate_common_subexpressions,
        ),
        ("remove_identity", basic::remove_identity),
        ("fold_batchnorm", basic::fold_batchnorm),
        ("fold_conv_mul_add", basic::fold_conv_mul_add),
    ];
    if opts.level == Level::Device {
        passes.extend([
            (Rule::IdentityPower.name(), device::identity_power as Pass),
            (Rule::GroupConv.name(), device::group_conv as Pass),
            (Rule::Join.name(), device::join as Pass),
            (Rule::Tile.name(), tiling::tile as Pass),
        ]);
    }
    // A derived model holds its nodes decoded, so `without_nodes` below is the whole model.
    let mut current = src.derived(src.proto()?.into_owned());
    let mut applied = BTreeMap::new();
    let mut origins: HashMap<String, Vec<String>> = HashMap::new();
    let mut notes = Vec::new();
    let mut ir = typed(&current)?;
    for (name, pass) in passes {
        // Each application removes nodes or turns big ops into ones the pass no longer
        // matches, so this ends; the bound is a guard against a rule that undoes itself.
        for _round in 0..64 {
            let constant = OnnxSemantics.constant_nodes(&ir.graph);
            let (rules, tile_bytes) = device_rules(&ir, opts)?;
            let opset = ir.opset("").unwrap_or(21);
            let proto =
                current
                    .without_nodes()
                    .graph
                    .as_ref()
                    .ok_or_else(|| OnnxError::NoGraph {
                        path: current.path.clone(),
                    })?;
            let records = node_records(&ir.graph, proto, &current)?;
            let cx = PassCx {
                model: &ir,
                proto,
                records: &records,
                constant: &constant,
                rules: &rules,
                tile_bytes: &tile_bytes,
                opset,
                source: current.without_nodes(),
                evaluator: opts.evaluator,
                fold_limit: opts.fold_limit,
            };
            let mut edits = Edits::new(&ir.graph, &records);
            pass(&cx, &mut edits);
            notes.append(&mut edits.notes);
            if edits.count == 0 {
                break;
            }
            *applied.entry(name).or_insert(0) += edits.count;
            edits.record_origins(&mut origins);
            let path = current.path.clone();
            let full = current.proto_mut()?;
            let old_ir = full.ir_version.unwrap_or(0) < 4;
            let graph = full.graph.as_mut().ok_or(OnnxError::NoGraph { path })?;
            edits.apply(graph, old_ir);
            ir = typed(&current).map_err(|e| OptimizeError::Broken {
                rule: name,
                cause: e.to_string(),
            })?;
        }
    }
    notes.sort();
    notes.dedup();
    Ok(Optimized {
        model: current,
        ir,
        applied,
        origins,
        notes,
    })
}

/// Each IR node's position in the protobuf node list, from its source handle; an IR node
/// without a record in range is an error, not a guess.
fn node_records(g: &Graph, proto: &GraphProto, m: &OnnxModel) -> Result<Vec<usize>, OnnxError> {
    g.nodes
        .iter()
        .map(|n| {
            n.source
                .map(|r| r.index())
                .filter(|&i| i < proto.node.len())
                .ok_or_else(|| OnnxError::NoRecord {
                    path: m.path.clone(),
                    node: n.name.to_string(),
                })
        })
        .collect()
}

fn typed(m: &OnnxModel) -> Result<Model, OnnxError> {
    let mut ir = to_ir(m)?;
    infer_types(&mut ir);
    Ok(ir)
}

/// Per node: the rules that apply, and the tile budget.
type NodeRules = (Vec<Vec<Rule>>, Vec<Option<u64>>);

/// For each node, the rules and tile budget of the first device that runs it.
fn device_rules(ir: &Model, opts: &OptimizeOptions) -> Result<NodeRules, OptimizeError> {
    let g = &ir.graph;
    if opts.level == Level::Basic {
        return Ok((vec![Vec::new(); g.nodes.len()], vec![None; g.nodes.len()]));
    }
    let mut per_device = Vec::new();
    for d in &opts.devices {
        let (rules, tile) = match opts.profiles.get(d) {
            Some(p) => (
                Rule::parse_all(&p.fuse.rules).map_err(|source| OptimizeError::Rule {
                    profile: d.clone(),
                    source,
                })?,
                p.fuse.tile_bytes,
            ),
            None => (Vec::new(), None),
        };
        per_device.push((d.as_str(), rules, tile));
    }
    let mut rules = Vec::with_capacity(g.nodes.len());
    let mut tiles = Vec::with_capacity(g.nodes.len());
    for node in &g.nodes {
        let first = per_device.iter().find(|(d, _, _)| {
            opts.profiles.check(d, g, node, &OnnxSemantics) == cleave_device::Verdict::Supported
        });
        rules.push(first.map(|(_, r, _)| r.clone()).unwrap_or_default());
        tiles.push(first.and_then(|(_, _, t)| *t));
    }
    Ok((rules, tiles))
}
