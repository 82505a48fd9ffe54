//! `query`'s closing summary for each accelerator: how the real partitioner splits the model
//! onto it, what it cannot run, and ONNX Runtime's usability verdict on that split.

use std::collections::{BTreeMap, BTreeSet};

use cleave_assign::Assignment;
use cleave_device::{Profiles, Verdict};
use cleave_partition::{partition_default, Options, Plan};

use crate::LoadedModel;

#[derive(Clone, Debug, serde::Serialize)]
pub struct Coverage {
    pub device: String,
    /// Nodes in each of the device's parts, in dependency order.
    pub parts: Vec<usize>,
    pub nodes_on_device: usize,
    /// Every node of the (rewritten) model, as ONNX Runtime's checker counts them.
    pub nodes_total: usize,
    /// `domain:op` of the op types the device's profile does not list (constants excluded).
    pub unsupported_ops: BTreeSet<String>,
    pub nodes_unsupported_op: usize,
    /// Nodes whose op is listed but which break a checked condition, by reason.
    pub constraint_failures: BTreeMap<String, usize>,
    /// `domain:op: note` for the listed op types the model uses: conditions not checked.
    pub caveats: Vec<String>,
    pub verdict: String,
}

/// A device is an accelerator when it has a profile that does not run every op of the
/// model's `format` (the key its semantics answer).
pub fn accelerators<'a>(
    a: &'a Assignment,
    profiles: &Profiles,
    format: &str,
) -> Vec<(u16, &'a str)> {
    a.devices
        .iter()
        .enumerate()
        .filter(|(_, d)| profiles.get(d).is_some_and(|p| !p.runs_every_op(format)))
        .map(|(i, d)| (i as u16, d.as_str()))
        .collect()
}

/// Partitions as `partition` would (default algorithm) and summarises each accelerator.
pub fn coverage(
    loaded: &LoadedModel,
    a: &Assignment,
    profiles: &Profiles,
    allow_disconnected: bool,
) -> Result<Vec<Coverage>, String> {
    let (g, constant, sem) = (loaded.graph(), &loaded.constant, loaded.semantics());
    let ug = loaded.unit_graph(a);
    let partition = partition_default(&ug, Options { allow_disconnected });
    let plan = Plan::build(g, a, &ug, &partition).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for (index, device) in accelerators(a, profiles, sem.format()) {
        let Some(profile) = profiles.get(device) else {
            continue;
        };
        let parts: Vec<usize> = plan
            .parts
            .iter()
            .filter(|p| p.device == index)
            .map(|p| p.nodes.len())
            .collect();
        let mut c = Coverage {
            device: device.to_string(),
            nodes_on_device: parts.iter().sum(),
            parts,
            nodes_total: g.nodes.len(),
            unsupported_ops: BTreeSet::new(),
            nodes_unsupported_op: 0,
            constraint_failures: BTreeMap::new(),
            caveats: Vec::new(),
            verdict: String::new(),
        };
        let mut caveats = BTreeMap::new();
        for (i, node) in g.nodes.iter().enumerate() {
            // ONNX ops spelled as ONNX Runtime's checker spells them, `domain:op`; other
            // formats' builtins by their own name, anything else `domain:op`.
            let op = match (node.domain.is_empty(), sem.format()) {
                (true, "" | "onnx") => format!("ai.onnx:{}", node.op_type),
                (true, _) => node.op_type.to_string(),
                (false, _) => format!("{}:{}", node.domain, node.op_type),
            };
            let verdict = profile.check(g, node, sem);
            if verdict != Verdict::UnsupportedOp {
                if let Some(note) = profile.note(node, sem) {
                    caveats.insert(op.clone(), note.to_string());
                }
            }
            if constant[i] {
                continue;
            }
            match verdict {
                Verdict::Supported => {}
                Verdict::UnsupportedOp => {
                    c.nodes_unsupported_op += 1;
                    c.unsupported_ops.insert(op);
                }
                Verdict::Constraint(reason) => {
                    *c.constraint_failures
                        .entry(format!("{op}: {}", generic(&reason)))
                        .or_default() += 1
                }
            }
        }
        c.caveats = caveats
            .into_iter()
            .map(|(op, note)| format!("{op}: {note}"))
            .collect();
        // A profile for other formats only refuses every node: say so rather than list
        // every op type of the model as if the device lacked each one by chance.
        c.verdict = match profile.format_note(sem.format()) {
            Some(note) => format!("no: {note}"),
            None => verdict(device, c.parts.len(), c.nodes_on_device, c.nodes_total),
        };
        out.push(c);
    }
    Ok(out)
}

/// The reason without the tensor it names, so that equal causes are counted together.
fn generic(reason: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    for ch in reason.chars() {
        match ch {
            '\'' if !quoted => {
                quoted = true;
                out.push_str("'…");
            }
            '\'' => {
                quoted = false;
                out.push('\'');
            }
            _ if quoted => {}
            _ => out.push(ch),
        }
    }
    out
}

/// ONNX Runtime's rule (tools/mobile_helpers/usability_checker.py, PartitioningInfo): one part
/// over 75% of the nodes is good, over 50% maybe; two parts over 75% may be worth measuring;
/// more parts and device copies will most likely cost more than the accelerator saves.
pub fn verdict(device: &str, parts: usize, on: usize, total: usize) -> String {
    let pct = if total == 0 {
        0.0
    } else {
        on as f64 * 100.0 / total as f64
    };
    match parts {
        0 => format!("no: {device} runs no node of this model"),
        1 if pct > 75.0 => format!("yes: one part on {device} covers {pct:.1}% of the nodes"),
        1 if pct > 50.0 => format!("maybe: one part on {device}, but only {pct:.1}% of the nodes; measure it"),
        1 => format!("no: one part on {device} covers only {pct:.1}% of the nodes"),
        2 if pct > 75.0 => format!("maybe: two parts on {device} cover {pct:.1}% of the nodes; measure it"),
        n => format!("no: {n} parts on {device} cover {pct:.1}% of the nodes; the copies between devices will likely cost more than {device} saves"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_follows_onnxruntime_thresholds() {
        assert!(verdict("d", 1, 76, 100).starts_with("yes"));
        assert!(
            verdict("d", 1, 75, 100).starts_with("maybe"),
            "75% is not above 75%"
        );
        assert!(verdict("d", 1, 50, 100).starts_with("no"));
        assert!(verdict("d", 2, 90, 100).starts_with("maybe"));
        assert!(verdict("d", 2, 70, 100).starts_with("no"));
        assert!(verdict("d", 3, 100, 100).starts_with("no: 3 parts"));
        assert!(verdict("d", 0, 0, 0).starts_with("no: d runs no node"));
    }

    #[test]
    fn reasons_drop_tensor_names() {
        assert_eq!(
            generic("input 1 ('w') is not constant"),
            "input 1 ('…') is not constant"
        );
    }
}

/// One node's device, as `query` answers it (OpenVINO's `query_model`, with the reason).
#[derive(Clone, Debug, serde::Serialize)]
pub struct NodeRow {
    pub name: String,
    pub op: String,
    /// None for nodes computing constants: they are copied into the parts that read them.
    pub device: Option<String>,
    pub reason: &'static str,
}

/// What `query` answers: every node's device, the counts, and each accelerator's coverage.
#[derive(Clone, Debug, serde::Serialize)]
pub struct QueryReport {
    pub devices: Vec<String>,
    /// In topological order.
    pub nodes: Vec<NodeRow>,
    /// Nodes per device.
    pub counts: BTreeMap<String, usize>,
    pub constant_nodes: usize,
    /// Per accelerator (a device whose profile does not run every op): its parts, coverage,
    /// unsupported op types, unchecked caveats and ONNX Runtime's usability verdict.
    pub coverage: Vec<Coverage>,
}

/// Why a node went where it did, in words.
pub fn reason(p: cleave_assign::Placement) -> &'static str {
    use cleave_assign::{Placement, Reason};
    match p {
        Placement::Constant => "constant",
        Placement::Device(_, r) => match r {
            Reason::OpName => "[OPNAME] rule",
            Reason::OpCode => "[OPCODE] rule",
            Reason::Default => "default",
            Reason::Priority => "priority",
            Reason::QdqPair => "Q/DQ pair",
            Reason::ConstantOutput => "constant output",
            Reason::Fused => "fused group",
            Reason::Cost => "latency",
            Reason::SharedState => "shared state",
        },
    }
}

/// The query report of an assigned model.
pub fn query(l: &crate::Assigned, allow_disconnected: bool) -> Result<QueryReport, crate::Error> {
    let g = l.loaded.graph();
    let a = &l.assignment;
    // Coverage first: its partition is dropped before the rows (a million of them, each with
    // its strings) are made, so the two never occupy memory together.
    let coverage =
        coverage(&l.loaded, a, &l.devices.profiles, allow_disconnected).map_err(|e| {
            crate::Error::internal(l.loaded.path(), format!("the partition is invalid: {e}"))
        })?;
    let mut counts: BTreeMap<String, usize> = a.devices.iter().map(|d| (d.clone(), 0)).collect();
    let mut rows = Vec::with_capacity(g.nodes.len());
    for &n in g.topo_order() {
        let device = a.device_name(n).map(String::from);
        if let Some(d) = &device {
            *counts.entry(d.clone()).or_default() += 1;
        }
        rows.push(NodeRow {
            name: g.node_label(n).to_string(),
            op: g.node(n).op_type.to_string(),
            device,
            reason: reason(a.placement[n.index()]),
        });
    }
    let constant_nodes = rows.iter().filter(|r| r.device.is_none()).count();
    Ok(QueryReport {
        devices: a.devices.clone(),
        nodes: rows,
        counts,
        constant_nodes,
        coverage,
    })
}
