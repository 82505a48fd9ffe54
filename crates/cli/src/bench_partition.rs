//! `cleave bench --partition`: how far the default partitioner is from the floor, one pass
//! over the edges. In one process, on one in-memory unit graph (whose construction both
//! share and neither is charged for), interleaved rounds time the default algorithm and a
//! bare Kahn topological sort; up to 1000 units also the openvino algorithm within its budget.

use std::path::Path;
use std::time::Instant;

use cleave::partition::{
    kahn_order, openvino, partition_default, validate, OpenVinoOptions, Options, Plan,
};
use serde::Serialize;

use crate::setup::{load_and_assign, DeviceArgs};
use crate::Fail;

/// The openvino algorithm's closure is quadratic: time it only on graphs this small.
const OPENVINO_MAX_UNITS: usize = 1000;

#[derive(Serialize)]
struct Report {
    model: String,
    nodes: usize,
    units: usize,
    edges: usize,
    parts: usize,
    runs: usize,
    load_s: f64,
    unit_graph_s: f64,
    /// Medians over the runs.
    partition_s: f64,
    toposort_s: f64,
    /// partition_s / toposort_s.
    ratio: f64,
    plan_s: f64,
    validate_s: f64,
    openvino_s: Option<f64>,
    openvino_parts: Option<usize>,
    /// Why the openvino algorithm has no figure (too large, out of budget).
    openvino_note: Option<String>,
    /// Peak resident memory of the whole process (model, IR, unit graph, partitions) per node.
    peak_bytes_per_node: Option<f64>,
    /// Peak resident memory added while partitioning, per node.
    partition_bytes_per_node: Option<f64>,
    /// Every phase of loading, assigning and cutting, as `--timings` prints them.
    phases: Vec<crate::timings::PhaseJson>,
}

pub fn run(target: &Path, devices: &DeviceArgs, runs: usize, json: bool) -> Result<(), Fail> {
    let mut devices = devices.clone();
    if devices.rules.is_none() && devices.devices.is_empty() {
        // `cleave gen` writes the placement beside the model.
        let beside = target.with_extension("part");
        if beside.is_file() {
            devices.rules = Some(beside);
        }
    }
    let bar = crate::progress::spinner("loading and assigning");
    let t = Instant::now();
    let l = load_and_assign(target, &devices)?;
    let load_s = t.elapsed().as_secs_f64();
    let g = l.loaded.graph();
    bar.set_message("building the unit graph");
    let t = Instant::now();
    // The very graph `partition` cuts (fused groups and inseparable pairs contracted).
    let ug = l.loaded.unit_graph(&l.assignment);
    let unit_graph_s = t.elapsed().as_secs_f64();
    bar.finish_and_clear();

    let runs = runs.max(1);
    let rss_before = cleave::ir::phases::memory().0;
    // Restart the peak count so that it measures the partitioner alone (Linux 4.0+).
    let cleared = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let bar = crate::progress::bar("partition vs toposort", runs as u64 + 1);
    // One warm-up round, then interleaved timed rounds: drift hits both alike.
    let mut partition = partition_default(&ug, Options::default());
    let mut order = kahn_order(&ug);
    bar.inc(1);
    let (mut tp, mut tt) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let t = Instant::now();
        partition = std::hint::black_box(partition_default(&ug, Options::default()));
        tp.push(t.elapsed());
        let t = Instant::now();
        order = std::hint::black_box(kahn_order(&ug));
        tt.push(t.elapsed());
        bar.inc(1);
    }
    bar.finish_and_clear();
    if order.len() != ug.len() {
        return Err(Fail::input(target, "the unit graph has a cycle"));
    }
    let peak_after = cleave::ir::phases::memory().1;
    let nodes = g.nodes.len().max(1) as f64;
    let partition_bytes_per_node = match (cleared, rss_before, peak_after) {
        (true, Some(before), Some(peak)) => Some(peak.saturating_sub(before) as f64 / nodes),
        _ => None,
    };

    let bar = crate::progress::spinner("building and validating the plan");
    let t = Instant::now();
    let plan =
        Plan::build(g, &l.assignment, &ug, &partition).map_err(|e| Fail::input(target, e))?;
    let plan_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    validate(g, &l.assignment, plan).map_err(|e| {
        Fail::input(
            target,
            format!("internal error, the partition is invalid: {e}"),
        )
    })?;
    let validate_s = t.elapsed().as_secs_f64();
    bar.finish_and_clear();

    let (mut openvino_s, mut openvino_parts, mut openvino_note) = (None, None, None);
    if ug.len() <= OPENVINO_MAX_UNITS {
        let bar = crate::progress::spinner("openvino algorithm");
        let labels: Vec<String> = (0..ug.len()).map(|u| u.to_string()).collect();
        let opts = OpenVinoOptions::default();
        let t = Instant::now();
        match openvino(&ug, &labels, &l.assignment.devices, &opts, &mut Vec::new()) {
            Ok(p) => {
                openvino_s = Some(t.elapsed().as_secs_f64());
                openvino_parts = Some(p.count);
            }
            Err(e) => openvino_note = Some(e.to_string()),
        }
        bar.finish_and_clear();
    } else {
        openvino_note = Some(format!(
            "not run: {} units, more than {OPENVINO_MAX_UNITS}",
            ug.len()
        ));
    }

    let (partition_s, toposort_s) = (cleave::median_seconds(tp), cleave::median_seconds(tt));
    let report = Report {
        model: target.display().to_string(),
        nodes: g.nodes.len(),
        units: ug.len(),
        edges: ug.edge_count(),
        parts: partition.count,
        runs,
        load_s,
        unit_graph_s,
        partition_s,
        toposort_s,
        ratio: partition_s / toposort_s.max(1e-12),
        plan_s,
        validate_s,
        openvino_s,
        openvino_parts,
        openvino_note,
        peak_bytes_per_node: cleave::ir::phases::memory().1.map(|b| b as f64 / nodes),
        partition_bytes_per_node,
        phases: cleave::ir::phases::recorded()
            .iter()
            .map(Into::into)
            .collect(),
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(Fail::usage)?
        );
        return Ok(());
    }
    let ms = |s: f64| s * 1e3;
    println!(
        "{}: {} nodes, {} units, {} edges, {} parts; medians of {runs} runs",
        report.model, report.nodes, report.units, report.edges, report.parts
    );
    println!("  default partitioner  {:>10.3} ms", ms(partition_s));
    println!("  Kahn toposort        {:>10.3} ms", ms(toposort_s));
    println!("  ratio                {:>10.2}", report.ratio);
    match (openvino_s, openvino_parts, &report.openvino_note) {
        (Some(s), Some(p), _) => println!("  openvino algorithm   {:>10.3} ms ({p} parts)", ms(s)),
        (_, _, Some(note)) => println!("  openvino algorithm   {note}"),
        _ => {}
    }
    println!(
        "  load {:.3} s, unit graph {:.3} ms, plan {:.3} ms, validate {:.3} ms",
        load_s,
        ms(unit_graph_s),
        ms(plan_s),
        ms(validate_s)
    );
    if let Some(b) = report.peak_bytes_per_node {
        println!("  peak memory {b:.0} bytes per node (whole process)");
    }
    if let Some(b) = partition_bytes_per_node {
        println!("  partitioning added {b:.0} bytes per node at its peak");
    }
    Ok(())
}
