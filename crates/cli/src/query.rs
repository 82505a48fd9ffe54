use std::path::Path;

use cleave::assign::{Placement, Reason};
use serde::Serialize;

use crate::coverage::print;
use crate::setup::{load_and_assign, DeviceArgs};
use crate::Fail;
use cleave::coverage::{coverage, Coverage};

#[derive(Serialize)]
struct NodeRow {
    name: String,
    op: String,
    /// null for nodes computing constants: they are copied into the parts that read them.
    device: Option<String>,
    reason: &'static str,
}

#[derive(Serialize)]
struct Query {
    devices: Vec<String>,
    nodes: Vec<NodeRow>,
    /// Nodes per device.
    counts: std::collections::BTreeMap<String, usize>,
    constant_nodes: usize,
    /// Per accelerator (a device whose profile does not run every op): its parts, coverage,
    /// unsupported op types, unchecked caveats and ONNX Runtime's usability verdict.
    coverage: Vec<Coverage>,
}

fn reason(p: Placement) -> &'static str {
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
        },
    }
}

pub fn run(
    model: &Path,
    args: &DeviceArgs,
    allow_disconnected: bool,
    json: bool,
) -> Result<(), Fail> {
    let l = load_and_assign(model, args)?;
    let g = l.loaded.graph();
    let a = &l.assignment;
    let mut counts: std::collections::BTreeMap<String, usize> =
        a.devices.iter().map(|d| (d.clone(), 0)).collect();
    let mut rows = Vec::with_capacity(g.nodes.len());
    for &n in g.topo_order() {
        let device = a.device_name(n).map(String::from);
        if let Some(d) = &device {
            *counts.entry(d.clone()).or_default() += 1;
        }
        rows.push(NodeRow {
            name: g.node_label(n).to_string(),
            op: g.node(n).op_type.clone(),
            device,
            reason: reason(a.placement[n.index()]),
        });
    }
    let constant_nodes = rows.iter().filter(|r| r.device.is_none()).count();
    let coverage =
        coverage(&l.loaded, a, &l.devices.profiles, allow_disconnected).map_err(|e| {
            Fail::input(
                model,
                format!("internal error, the partition is invalid: {e}"),
            )
        })?;
    let q = Query {
        devices: a.devices.clone(),
        nodes: rows,
        counts,
        constant_nodes,
        coverage,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&q).map_err(Fail::usage)?);
        return Ok(());
    }
    let w = q
        .nodes
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(4)
        .clamp(4, 48);
    let wo = q.nodes.iter().map(|r| r.op.len()).max().unwrap_or(2).max(2);
    println!("{:<w$}  {:<wo$}  {:<10}  reason", "node", "op", "device");
    for r in &q.nodes {
        println!(
            "{:<w$}  {:<wo$}  {:<10}  {}",
            r.name,
            r.op,
            r.device.as_deref().unwrap_or("(copied)"),
            r.reason
        );
    }
    let per: Vec<String> = q.counts.iter().map(|(d, c)| format!("{d} {c}")).collect();
    println!(
        "\n{} nodes: {}; {} constant nodes copied into the parts that read them",
        q.nodes.len(),
        per.join(", "),
        q.constant_nodes
    );
    for c in &q.coverage {
        print(c);
    }
    if let Some(c) = &l.latency {
        for line in crate::latency::choice_lines(c) {
            println!("{line}");
        }
    }
    Ok(())
}
