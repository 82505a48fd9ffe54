use std::path::Path;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use cleave_assign::{qdq_pairs, Assignment, Placement, Reason};
use cleave_emit::{emit_with, ExternalData};
use cleave_onnx::{node_flops, WeightsSource};
use cleave_partition::{
    openvino, partition_default, reference_counts, stage_partition, validate, OpenVinoOptions,
    Options, Plan, References, UnitGraph,
};

use crate::setup::{load_and_assign, load_model, DeviceArgs, Loaded};
use crate::Fail;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Algorithm {
    /// Fewest connected parts found by linear constructions plus acyclic merging (never more
    /// parts than ONE's rule or the epoch greedy).
    Default,
    /// OpenVINO's hetero subgraph selection exactly as its design page states it.
    Openvino,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ExternalDataArg {
    /// Weights inside each model file.
    Inline,
    /// Weights in one file that the models reference by offset.
    Shared,
}

impl From<ExternalDataArg> for ExternalData {
    fn from(a: ExternalDataArg) -> ExternalData {
        match a {
            ExternalDataArg::Inline => ExternalData::Inline,
            ExternalDataArg::Shared => ExternalData::Shared,
        }
    }
}

pub struct PartitionArgs<'a> {
    pub model: &'a Path,
    pub devices: &'a DeviceArgs,
    pub algorithm: Algorithm,
    pub allow_disconnected: bool,
    pub trace: bool,
    pub budget_s: f64,
    pub workdir: &'a Path,
    pub external_data: ExternalData,
    /// Pipeline stages instead of device rules: N consecutive slices of equal FLOPs.
    pub stages: Option<usize>,
    /// Also write the views (markdown, DOT, HTML) beside the connection files.
    pub report: bool,
}

/// Partitions with the default algorithm into `workdir`; returns the `.conn.json` path.
pub fn partition_into(
    model: &Path,
    devices: &DeviceArgs,
    workdir: &Path,
    allow_disconnected: bool,
) -> Result<std::path::PathBuf, Fail> {
    let args = PartitionArgs {
        model,
        devices,
        algorithm: Algorithm::Default,
        allow_disconnected,
        trace: false,
        budget_s: 10.0,
        workdir,
        external_data: ExternalData::Inline,
        stages: None,
        report: false,
    };
    Ok(build(&args)?.written.conn_json)
}

struct Built {
    loaded: crate::setup::Loaded,
    plan: Plan,
    written: cleave_emit::Emitted,
    /// Part counts of the references, when rules (not stages) made the partition.
    references: Option<References>,
    elapsed: Duration,
}

pub fn run(a: PartitionArgs) -> Result<(), Fail> {
    let Built {
        loaded,
        plan,
        written,
        references,
        elapsed,
    } = build(&a)?;
    report(&a, &loaded, &plan, &written, references, elapsed);
    if a.report {
        crate::report_cmd::write(
            &loaded.model.graph,
            &plan,
            &written.conn,
            &written.conn_json,
            &loaded.onnx.path.display().to_string(),
            Some(&loaded.assignment.groups),
        )?;
    }
    Ok(())
}

fn build(a: &PartitionArgs) -> Result<Built, Fail> {
    if let Some(n) = a.stages {
        return build_stages(a, n);
    }
    let bar = crate::progress::spinner("loading and assigning");
    let l = load_and_assign(a.model, a.devices)?;
    bar.set_message("partitioning");
    let g = &l.model.graph;
    let ug = UnitGraph::from_assignment(g, &l.assignment, &l.assignment.glue(g));
    let start = Instant::now();
    let opts = Options {
        allow_disconnected: a.allow_disconnected,
    };
    let partition = match a.algorithm {
        Algorithm::Default => partition_default(&ug, opts),
        Algorithm::Openvino => {
            let labels: Vec<String> = ug
                .nodes
                .iter()
                .map(|ns| {
                    ns.iter()
                        .map(|&n| g.node_label(n))
                        .collect::<Vec<_>>()
                        .join("+")
                })
                .collect();
            let ov = OpenVinoOptions {
                time_budget: Duration::from_secs_f64(a.budget_s),
                ..Default::default()
            };
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
    let references = reference_counts(&ug);
    bar.finish_and_clear();
    finish(a, l, &ug, &partition, Some(references), elapsed)
}

fn finish(
    a: &PartitionArgs,
    mut l: Loaded,
    ug: &UnitGraph,
    partition: &cleave_partition::Partition,
    references: Option<References>,
    elapsed: Duration,
) -> Result<Built, Fail> {
    let g = &l.model.graph;
    let bar = crate::progress::spinner("building and validating the parts");
    let plan = Plan::build(g, &l.assignment, ug, partition).map_err(|e| Fail::input(a.model, e))?;
    validate(g, &l.assignment, &plan).map_err(|e| {
        Fail::input(
            a.model,
            format!("internal error, the partition is invalid: {e}"),
        )
    })?;
    if l.rewritten.is_some() {
        // The parts are cut from the rewritten model: it is what conn.json names as the source,
        // so `check`, `verify` and check_parts.py compare the parts against it.
        let stem = a
            .model
            .file_stem()
            .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
        let dir = a.workdir.join(format!("{stem}.optimized"));
        std::fs::create_dir_all(&dir)
            .map_err(|e| Fail::input(&dir, format!("cannot create: {e}")))?;
        let out = dir.join(format!("{stem}.onnx"));
        l.onnx.save(&out).map_err(|e| Fail::input(&out, e))?;
        l.onnx.path = out;
    }
    bar.set_message("writing the parts");
    let written = emit_with(&l.onnx, &l.model, &plan, a.workdir, a.external_data).map_err(|e| {
        match e.path() {
            Some(p) => Fail::input(p, &e),
            None => Fail::input(a.model, &e),
        }
    })?;
    bar.finish_and_clear();
    Ok(Built {
        loaded: l,
        plan,
        written,
        references,
        elapsed,
    })
}

/// `--stages N`: consecutive slices of a topological order with about equal FLOPs, one part
/// each, on the listed devices in turn (or on `stage1..N`).
fn build_stages(a: &PartitionArgs, n: usize) -> Result<Built, Fail> {
    if n == 0 {
        return Err(Fail::usage("--stages must be at least 1"));
    }
    let (onnx, model, constant) = load_model(a.model)?;
    let g = &model.graph;
    let names: Vec<String> = if a.devices.devices.is_empty() {
        (1..=n).map(|i| format!("stage{i}")).collect()
    } else {
        a.devices.devices.clone()
    };
    let stage_device: Vec<&String> = (0..n).map(|i| &names[i % names.len()]).collect();
    let mut devices: Vec<String> = Vec::new();
    for d in &stage_device {
        if !devices.contains(d) {
            devices.push((*d).clone());
        }
    }
    let outputs: std::collections::HashSet<_> = g.outputs.iter().copied().collect();
    let single: Vec<Placement> = g
        .nodes
        .iter()
        .zip(&constant)
        .map(|(node, &c)| {
            if c && !node.outputs.iter().flatten().any(|v| outputs.contains(v)) {
                Placement::Constant
            } else {
                Placement::Device(0, Reason::Default)
            }
        })
        .collect();
    let one = Assignment {
        devices: vec![devices[0].clone()],
        placement: single.clone(),
        groups: Vec::new(),
        warnings: Vec::new(),
    };
    let glue = qdq_pairs(g);
    let ug = UnitGraph::from_assignment(g, &one, &glue);
    let start = Instant::now();
    let cost: Vec<u64> = ug
        .nodes
        .iter()
        .map(|ns| ns.iter().map(|&x| node_flops(g, g.node(x))).sum())
        .collect();
    let partition = stage_partition(&ug, &cost, n);
    let mut placement = single;
    for (u, ns) in ug.nodes.iter().enumerate() {
        let d = devices
            .iter()
            .position(|x| x == stage_device[partition.part_of[u] as usize])
            .unwrap_or(0) as u16;
        for &x in ns {
            placement[x.index()] = Placement::Device(d, Reason::Default);
        }
    }
    let assignment = Assignment {
        devices,
        placement,
        groups: Vec::new(),
        warnings: Vec::new(),
    };
    let staged = UnitGraph::from_assignment(g, &assignment, &glue);
    let elapsed = start.elapsed();
    finish(
        a,
        Loaded {
            onnx,
            model,
            assignment,
            constant,
            rewritten: None,
        },
        &staged,
        &partition,
        None,
        elapsed,
    )
}

fn report(
    a: &PartitionArgs,
    l: &crate::setup::Loaded,
    plan: &Plan,
    written: &cleave_emit::Emitted,
    references: Option<References>,
    elapsed: Duration,
) {
    let placed = plan.parts.iter().map(|p| p.nodes.len()).sum::<usize>();
    let constants = l.constant.iter().filter(|&&c| c).count();
    let ms = elapsed.as_secs_f64() * 1e3;
    let devices = l.assignment.devices.join(",");
    match references {
        None => println!("{}: {} pipeline stages of about equal FLOPs on {devices} ({placed} nodes placed, {constants} constant nodes copied where read) in {ms:.1} ms", a.model.display(), plan.parts.len()),
        Some(c) => println!(
            "{}: {} parts on {devices} ({placed} nodes placed, {constants} constant nodes copied where read) in {ms:.1} ms; ONE's rule would give {}, the epoch greedy {}",
            a.model.display(),
            plan.parts.len(),
            c.one_rule,
            c.epoch_greedy
        ),
    }
    if let Some(r) = &l.rewritten {
        let applied: Vec<String> = r.applied.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let applied = if applied.is_empty() {
            "none".to_string()
        } else {
            applied.join(", ")
        };
        println!(
            "rewritten before assignment: {} nodes → {} ({applied}); rewritten model: {}",
            r.nodes_before,
            l.model.graph.nodes.len(),
            l.onnx.path.display()
        );
    }
    if !l.assignment.groups.is_empty() {
        let mut by_rule = std::collections::BTreeMap::new();
        for (_, grp) in &l.assignment.groups {
            *by_rule.entry(grp.rule.name()).or_insert(0) += 1;
        }
        let list: Vec<String> = by_rule.iter().map(|(k, v)| format!("{k} {v}")).collect();
        println!(
            "fused groups, each kept whole in one part: {}",
            list.join(", ")
        );
    }
    let wf = written
        .parts
        .iter()
        .map(|p| p.file.len())
        .max()
        .unwrap_or(4)
        .max(4);
    println!(
        "  {:<wf$}  {:<8}  {:>6}  {:>6}  {:>7}  {:>12}",
        "part", "backend", "nodes", "inputs", "outputs", "output bytes"
    );
    for p in &written.parts {
        let out_bytes: Option<u64> = p.outputs.iter().map(|(_, b)| *b).sum();
        let out_bytes = out_bytes.map_or_else(|| "dynamic".to_string(), |b| b.to_string());
        println!(
            "  {:<wf$}  {:<8}  {:>6}  {:>6}  {:>7}  {:>12}",
            p.file,
            p.backend,
            p.nodes,
            p.inputs.len(),
            p.outputs.len(),
            out_bytes
        );
    }
    let source_inputs: std::collections::HashSet<&str> = written
        .conn
        .source
        .inputs
        .iter()
        .map(String::as_str)
        .collect();
    let mut boundary: Vec<(&str, Option<u64>)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for p in &written.parts {
        for (name, bytes) in &p.inputs {
            if !source_inputs.contains(name.as_str()) && seen.insert(name.as_str()) {
                boundary.push((name, *bytes));
            }
        }
    }
    let total: u64 = boundary.iter().filter_map(|(_, b)| *b).sum();
    let dynamic = boundary.iter().filter(|(_, b)| b.is_none()).count();
    let dynamic = if dynamic > 0 {
        format!(" (+ {dynamic} of dynamic size)")
    } else {
        String::new()
    };
    println!(
        "{} boundary tensors between parts, {total} bytes per inference{dynamic}",
        boundary.len()
    );
    for (name, bytes) in boundary.iter().take(20) {
        println!(
            "  {name}  {}",
            bytes.map_or_else(|| "dynamic size".to_string(), |b| format!("{b} bytes"))
        );
    }
    if boundary.len() > 20 {
        println!(
            "  ... and {} more (see {})",
            boundary.len() - 20,
            written.conn_json.display()
        );
    }
    for note in &written.notes {
        println!("note: {note}");
    }
    if let Some(w) = &written.weights {
        let how = match w.source {
            WeightsSource::WholeFile => "a copy of the source's data file, offsets kept",
            WeightsSource::Existing => "the source's own data file",
            WeightsSource::Copied => "streamed from the source",
        };
        println!(
            "weights: {} ({} tensors, {} bytes), {how}; every part references it",
            w.path.display(),
            w.tensors(),
            w.tensor_bytes
        );
    }
    println!(
        "wrote {} and {}",
        written.conn_json.display(),
        written.conn_ini.display()
    );
}
