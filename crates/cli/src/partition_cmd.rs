use std::path::Path;
use std::time::{Duration, Instant};

use cleave_assign::qdq_pairs;
use cleave_emit::emit;
use cleave_partition::{counts, openvino, partition_default, validate, OpenVinoOptions, Options, Plan, UnitGraph};
use clap::ValueEnum;

use crate::setup::{load_and_assign, DeviceArgs};
use crate::Fail;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Algorithm {
    /// Fewest connected parts found by linear constructions plus acyclic merging (never more
    /// parts than ONE's rule or the epoch greedy).
    Default,
    /// OpenVINO's hetero subgraph selection exactly as its design page states it.
    Openvino,
}

pub struct PartitionArgs<'a> {
    pub model: &'a Path,
    pub devices: &'a DeviceArgs,
    pub algorithm: Algorithm,
    pub allow_disconnected: bool,
    pub trace: bool,
    pub budget_s: f64,
    pub workdir: &'a Path,
}

pub fn run(a: PartitionArgs) -> Result<(), Fail> {
    let l = load_and_assign(a.model, a.devices)?;
    let g = &l.model.graph;
    let ug = UnitGraph::from_assignment(g, &l.assignment, &qdq_pairs(g));
    let start = Instant::now();
    let opts = Options { allow_disconnected: a.allow_disconnected };
    let partition = match a.algorithm {
        Algorithm::Default => partition_default(&ug, opts),
        Algorithm::Openvino => {
            let labels: Vec<String> = ug.nodes.iter().map(|ns| ns.iter().map(|&n| g.node_label(n)).collect::<Vec<_>>().join("+")).collect();
            let ov = OpenVinoOptions { time_budget: Duration::from_secs_f64(a.budget_s), ..Default::default() };
            let mut trace = Vec::new();
            let result = openvino(&ug, &labels, &l.assignment.devices, &ov, &mut trace);
            if a.trace {
                for line in &trace {
                    println!("{line}");
                }
            }
            result.map_err(|e| Fail::input(a.model, e))?
        }
    };
    let elapsed = start.elapsed();
    let plan = Plan::build(g, &l.assignment, &ug, &partition).map_err(|e| Fail::input(a.model, e))?;
    validate(g, &l.assignment, &plan).map_err(|e| Fail::input(a.model, format!("internal error, the partition is invalid: {e}")))?;
    let written = emit(&l.onnx, &l.model, &plan, a.workdir).map_err(|e| match e.path() {
        Some(p) => Fail::input(p, &e),
        None => Fail::input(a.model, &e),
    })?;

    let c = counts(&ug, opts);
    println!(
        "{}: {} parts on {} ({} nodes placed, {} constant nodes copied where read) in {:.1} ms; ONE's rule would give {}, the epoch greedy {}",
        a.model.display(),
        plan.parts.len(),
        l.assignment.devices.join(","),
        plan.parts.iter().map(|p| p.nodes.len()).sum::<usize>(),
        l.constant.iter().filter(|&&c| c).count(),
        elapsed.as_secs_f64() * 1e3,
        c.one_rule,
        c.epoch_greedy
    );
    let wf = written.parts.iter().map(|p| p.file.len()).max().unwrap_or(4).max(4);
    println!("  {:<wf$}  {:<8}  {:>6}  {:>6}  {:>7}  {:>12}", "part", "backend", "nodes", "inputs", "outputs", "output bytes");
    for p in &written.parts {
        let out_bytes: Option<u64> = p.outputs.iter().map(|(_, b)| *b).sum();
        let out_bytes = out_bytes.map_or_else(|| "dynamic".to_string(), |b| b.to_string());
        println!("  {:<wf$}  {:<8}  {:>6}  {:>6}  {:>7}  {:>12}", p.file, p.backend, p.nodes, p.inputs.len(), p.outputs.len(), out_bytes);
    }
    let source_inputs: std::collections::HashSet<&str> = written.conn.source.inputs.iter().map(String::as_str).collect();
    let mut boundary: Vec<(&str, Option<u64>)> = Vec::new();
    for p in &written.parts {
        for (name, bytes) in &p.inputs {
            if !source_inputs.contains(name.as_str()) && !boundary.iter().any(|(n, _)| n == name) {
                boundary.push((name, *bytes));
            }
        }
    }
    let total: u64 = boundary.iter().filter_map(|(_, b)| *b).sum();
    let dynamic = boundary.iter().filter(|(_, b)| b.is_none()).count();
    let dynamic = if dynamic > 0 { format!(" (+ {dynamic} of dynamic size)") } else { String::new() };
    println!("{} boundary tensors between parts, {total} bytes per inference{dynamic}", boundary.len());
    for (name, bytes) in boundary.iter().take(20) {
        println!("  {name}  {}", bytes.map_or_else(|| "dynamic size".to_string(), |b| format!("{b} bytes")));
    }
    if boundary.len() > 20 {
        println!("  ... and {} more (see {})", boundary.len() - 20, written.conn_json.display());
    }
    println!("wrote {} and {}", written.conn_json.display(), written.conn_ini.display());
    Ok(())
}
