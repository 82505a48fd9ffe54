//! `cleave check CONN.json`: reads a written partition back and proves it against its source.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use cleave_assign::{Assignment, Placement, Reason};
use cleave_device::Profiles;
use cleave_frontend::{FixedDims, FormatModel};
use cleave_fuse::{find_groups, Group, Rule};
use cleave_ir::{NodeId, ValueId};
use cleave_partition::{validate, Part, Plan, ValidatedPlan};
use cleave_workdir::{backend_of, ConnFile};

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("not a connection file: {message}")]
    Json { path: PathBuf, message: String },
    #[error(transparent)]
    Load(#[from] crate::Error),
    #[error("{message}")]
    Mismatch { path: PathBuf, message: String },
    #[error("invalid partition: {message}")]
    Invalid { path: PathBuf, message: String },
}

impl CheckError {
    pub fn path(&self) -> &Path {
        match self {
            CheckError::Read { path, .. }
            | CheckError::Json { path, .. }
            | CheckError::Mismatch { path, .. }
            | CheckError::Invalid { path, .. } => path,
            CheckError::Load(e) => e.path().unwrap_or(Path::new("")),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckReport {
    pub parts: usize,
    pub placed_nodes: usize,
    pub copied_constants: usize,
}

pub fn check_conn(conn_path: &Path) -> Result<CheckReport, CheckError> {
    let plan = read_partition(conn_path, None)?.plan;
    Ok(CheckReport {
        parts: plan.parts.len(),
        placed_nodes: plan.parts.iter().map(|p| p.nodes.len()).sum(),
        copied_constants: plan.parts.iter().map(|p| p.constant_nodes.len()).sum(),
    })
}

/// A written partition read back and proven against its source.
pub struct ReadPartition {
    pub conn: ConnFile,
    /// The source model, as loaded and typed.
    pub source: Box<dyn FormatModel>,
    pub plan: ValidatedPlan,
}

impl ReadPartition {
    pub fn model(&self) -> &cleave_ir::Model {
        self.source.model()
    }

    /// The fused groups of a partition read back from files: each backend's built-in fusion rules,
    /// keeping the groups that lie whole in one part of that backend. This is what assignment
    /// formed (a group is placed whole, or dissolved when a member went elsewhere), for backends
    /// with built-in profiles; a custom `--profile` given to `partition` is not known here.
    pub fn fused_groups(&self) -> Vec<(u16, Group)> {
        let (g, plan) = (&self.model().graph, &self.plan);
        let sem = self.source.semantics();
        let profiles = Profiles::builtin();
        let constant = sem.constant_nodes(g);
        let mut part_of = vec![usize::MAX; g.nodes.len()];
        for (k, part) in plan.parts.iter().enumerate() {
            for n in &part.nodes {
                part_of[n.index()] = k;
            }
        }
        let mut out = Vec::new();
        for (d, device) in plan.devices.iter().enumerate() {
            let Some(rules) = profiles
                .get(device)
                .and_then(|p| Rule::parse_all(&p.fuse.rules).ok())
            else {
                continue;
            };
            for grp in find_groups(g, &constant, &rules, sem) {
                let k = part_of[grp.anchor().index()];
                let whole = k != usize::MAX
                    && plan.parts[k].device as usize == d
                    && grp.nodes.iter().all(|m| part_of[m.index()] == k);
                if whole {
                    out.push((d as u16, grp));
                }
            }
        }
        out
    }
}

/// The source with its inputs' dims as the parts that read them fix them: a partition made
/// with `--shape` or `--dim` has its parts' dims fixed, and the source read back must agree,
/// or every tensor the fixed dims determine reads as dynamic.
fn with_parts_input_dims(
    source: Box<dyn FormatModel>,
    conn: &ConnFile,
    dir: &Path,
) -> Result<Box<dyn FormatModel>, CheckError> {
    let g = &source.model().graph;
    let mut fixed = FixedDims::default();
    for &v in &g.inputs {
        let value = g.value(v);
        if value.ty.static_dims().is_some() {
            continue;
        }
        let name = value.name.as_str();
        let Some(cp) = conn
            .parts
            .iter()
            .find(|p| p.inputs.iter().any(|i| i == name))
        else {
            continue;
        };
        let part = crate::load(&dir.join(&cp.file))?;
        let pg = &part.model().graph;
        let dims = pg.find(name).and_then(|pv| pg.value(pv).ty.static_dims());
        if let Some(dims) = dims {
            fixed.shapes.push((name.to_string(), dims));
        }
    }
    if fixed.is_empty() {
        return Ok(source);
    }
    // Only what is shown gains from it: a format that cannot fix dims keeps its own.
    Ok(source.fix_dims(&fixed).unwrap_or(source))
}

/// Reads a partition back from its connection file and proves it (as `cleave check` does).
/// The source model is `model` when given, else the connection file's `source.file`.
pub fn read_partition(conn_path: &Path, model: Option<&Path>) -> Result<ReadPartition, CheckError> {
    let text = std::fs::read_to_string(conn_path).map_err(|source| CheckError::Read {
        path: conn_path.to_path_buf(),
        source,
    })?;
    let conn = ConnFile::from_json(&text).map_err(|e| CheckError::Json {
        path: conn_path.to_path_buf(),
        message: e.to_string(),
    })?;
    let dir = conn_path
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let mismatch = |message: String| CheckError::Mismatch {
        path: conn_path.to_path_buf(),
        message,
    };

    let source =
        crate::load(&model.map_or_else(|| dir.join(&conn.source.file), Path::to_path_buf))?;
    let source = with_parts_input_dims(source, &conn, &dir)?;
    let g = &source.model().graph;
    let by_output: HashMap<&str, NodeId> = g
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| {
            n.outputs
                .iter()
                .flatten()
                .next()
                .map(|&v| (g.value(v).name.as_str(), NodeId(i as u32)))
        })
        .collect();
    let tensor = |name: &str, what: &str, file: &str| -> Result<ValueId, CheckError> {
        g.find(name).ok_or_else(|| {
            mismatch(format!(
                "{file}: {what} '{name}' is not a tensor of the source model"
            ))
        })
    };
    let names = |ids: &[ValueId]| -> Vec<String> {
        ids.iter().map(|&v| g.value(v).name.to_string()).collect()
    };
    let real_inputs = names(&g.inputs);
    let real_outputs = names(&g.outputs);
    if sorted(&conn.source.inputs) != sorted(&real_inputs)
        || sorted(&conn.source.outputs) != sorted(&real_outputs)
    {
        return Err(mismatch(format!(
            "source inputs/outputs {:?} → {:?} differ from the model's {:?} → {:?}",
            conn.source.inputs, conn.source.outputs, real_inputs, real_outputs
        )));
    }

    // A decoder's stages copy what depends on no cache (the mask, positions), as constants.
    let mut state = source.model().state.clone();
    for (input, output) in conn.source.state.iter().flatten() {
        if !state.iter().any(|p| &p.input == input) {
            state.push(cleave_ir::StatePair {
                input: input.clone(),
                output: output.clone(),
            });
        }
    }
    let constant = source.semantics().stage_copies(g, &state);
    let graph_outputs: std::collections::HashSet<ValueId> = g.outputs.iter().copied().collect();
    let mut devices: Vec<String> = Vec::new();
    let mut placement = vec![Placement::Constant; g.nodes.len()];
    let mut placed_in: Vec<Option<usize>> = vec![None; g.nodes.len()];
    let mut parts = Vec::new();
    for (k, cp) in conn.parts.iter().enumerate() {
        let backend = backend_of(&cp.file, cp.backend.as_deref());
        let d = devices
            .iter()
            .position(|x| *x == backend)
            .unwrap_or_else(|| {
                devices.push(backend.clone());
                devices.len() - 1
            }) as u16;
        let pm = crate::load(&dir.join(&cp.file))?;
        let pg = &pm.model().graph;
        if sorted(&names_of(pg, &pg.inputs)) != sorted(&cp.inputs)
            || sorted(&names_of(pg, &pg.outputs)) != sorted(&cp.outputs)
        {
            return Err(mismatch(format!(
                "{}: the model's inputs/outputs differ from those the connection file lists",
                cp.file
            )));
        }
        let mut part = Part {
            device: d,
            nodes: Vec::new(),
            constant_nodes: Vec::new(),
            weights: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            reads_instead: Vec::new(),
        };
        for pn in &pg.nodes {
            let Some(first) = pn.outputs.iter().flatten().next() else {
                continue;
            };
            let out_name = pg.value(*first).name.as_str();
            let &src = by_output.get(out_name).ok_or_else(|| {
                mismatch(format!(
                    "{}: node '{out_name}' is not in the source model",
                    cp.file
                ))
            })?;
            if g.node(src).op_type != pn.op_type {
                return Err(mismatch(format!(
                    "{}: node '{out_name}' is {} here but {} in the source",
                    cp.file,
                    pn.op_type,
                    g.node(src).op_type
                )));
            }
            let makes_output = g
                .node(src)
                .outputs
                .iter()
                .flatten()
                .any(|v| graph_outputs.contains(v));
            if constant[src.index()] && !makes_output {
                part.constant_nodes.push(src);
                // A stage reads the shape of a tensor it takes anyway (its own cache for layer
                // 0's, the hidden state for the embedding), declared alike.
                let reads = pn
                    .inputs
                    .iter()
                    .map(|v| v.map(|v| pg.value(v).name.as_str()));
                for (from, here) in g.node(src).inputs.iter().zip(reads) {
                    let (Some(from), Some(here)) = (*from, here) else {
                        continue;
                    };
                    if g.value(from).name == here {
                        continue;
                    }
                    let to = tensor(here, "input", &cp.file)?;
                    let own = source.semantics().reads_shape_only(g.node(src))
                        && cp.inputs.iter().any(|i| i == here)
                        && g.same_shape_input(&[to], from) == Some(to);
                    if !own {
                        return Err(mismatch(format!(
                            "{}: node '{out_name}' reads '{here}' where the source reads '{}'",
                            cp.file,
                            g.value(from).name
                        )));
                    }
                    part.reads_instead.push((from, to));
                }
                continue;
            }
            if let Some(other) = placed_in[src.index()] {
                return Err(CheckError::Invalid {
                    path: conn_path.to_path_buf(),
                    message: format!(
                        "node '{}' is in parts {} and {}",
                        g.node_label(src),
                        other + 1,
                        k + 1
                    ),
                });
            }
            placed_in[src.index()] = Some(k);
            placement[src.index()] = Placement::Device(d, Reason::Default);
            part.nodes.push(src);
        }
        for i in &cp.inputs {
            part.inputs.push(tensor(i, "input", &cp.file)?);
        }
        for o in &cp.outputs {
            part.outputs.push(tensor(o, "output", &cp.file)?);
        }
        parts.push(part);
    }
    // Nodes that should run somewhere but are in no part.
    for (i, c) in constant.iter().enumerate() {
        let makes_output = g.nodes[i]
            .outputs
            .iter()
            .flatten()
            .any(|v| graph_outputs.contains(v));
        if (!c || makes_output) && placed_in[i].is_none() {
            placement[i] = Placement::Device(0, Reason::Default);
        }
    }
    let plan = Plan {
        devices: devices.clone(),
        parts,
    };
    let assignment = Assignment {
        devices,
        placement,
        groups: Vec::new(),
        warnings: Vec::new(),
    };
    let plan = validate(g, &assignment, plan).map_err(|e| CheckError::Invalid {
        path: conn_path.to_path_buf(),
        message: e.to_string(),
    })?;
    Ok(ReadPartition { conn, source, plan })
}

fn names_of(g: &cleave_ir::Graph, ids: &[ValueId]) -> Vec<String> {
    ids.iter().map(|&v| g.value(v).name.to_string()).collect()
}

fn sorted(v: &[String]) -> Vec<String> {
    let mut v = v.to_vec();
    v.sort();
    v
}
