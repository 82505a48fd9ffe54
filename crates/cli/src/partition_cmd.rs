use std::path::Path;
use std::time::Duration;

use cleave::partition::{References, ValidatedPlan};
use cleave::{
    AlgorithmChoice, Assigned, ExternalData, PartitionRequest, Partitioned, Progress, Written,
};

use crate::setup::DeviceArgs;
use crate::Fail;

pub struct PartitionArgs<'a> {
    pub model: &'a Path,
    pub devices: &'a DeviceArgs,
    pub algorithm: AlgorithmChoice,
    pub allow_disconnected: bool,
    pub trace: bool,
    pub budget_s: f64,
    pub workdir: &'a Path,
    pub external_data: ExternalData,
    /// Pipeline stages instead of device rules: N consecutive slices, slowest stage least.
    pub stages: Option<usize>,
    /// Memory budgets of the stages' devices in bytes, by device.
    pub memory: &'a [(String, u64)],
    /// A decoder's context to count the stages at.
    pub context: Option<cleave::DecodeContext>,
    /// Plan, validate and print; write nothing.
    pub dry_run: bool,
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
        algorithm: AlgorithmChoice::Default,
        allow_disconnected,
        trace: false,
        budget_s: 10.0,
        workdir,
        external_data: ExternalData::Inline,
        stages: None,
        memory: &[],
        context: None,
        dry_run: false,
        report: false,
    };
    build(&args)?
        .written
        .map(|w| w.conn_json.clone())
        .ok_or_else(|| Fail::usage("nothing was written"))
}

struct Built {
    partitioned: Partitioned,
    /// `None` on a dry run.
    written: Option<Written>,
}

pub fn run(a: PartitionArgs) -> Result<(), Fail> {
    let built = crate::process::Released::new(build(&a)?);
    let Built {
        partitioned,
        written,
    } = &*built;
    let Partitioned {
        assigned,
        plan,
        references,
        elapsed,
        ..
    } = partitioned;
    report(&a, assigned, plan, written.as_ref(), *references, *elapsed);
    let stage_lines = partitioned.stage_table(cleave::Face::Cli);
    for l in &stage_lines {
        println!("{l}");
    }
    let Some(written) = written else {
        println!("dry run: nothing written");
        return Ok(());
    };
    if !stage_lines.is_empty() {
        // The weights estimate beside what each stage's file holds, so a budget can be
        // checked against the bytes an engine will load.
        let files: Vec<String> = written
            .parts
            .iter()
            .enumerate()
            .map(|(k, p)| {
                let bytes = std::fs::metadata(a.workdir.join(&p.file)).map_or(0, |m| m.len());
                format!(
                    "stage {} {} ({})",
                    k + 1,
                    cleave::human_bytes(bytes),
                    p.file
                )
            })
            .collect();
        println!("part files: {}", files.join(", "));
    }
    let mut lines = Vec::new();
    if let Some(c) = &assigned.latency {
        lines.extend(crate::latency::choice_lines(c));
    }
    let prediction = partitioned.prediction()?;
    if let Some(p) = &prediction {
        let files: Vec<String> = written.parts.iter().map(|p| p.file.clone()).collect();
        lines.extend(crate::latency::prediction_lines(p, &files));
    }
    for l in &lines {
        println!("{l}");
    }
    let latency = prediction.map(|p| cleave::view::LatencyView {
        part_ms: p.estimate.parts.iter().map(|q| q.total_s() * 1e3).collect(),
        lines,
    });
    if a.report {
        let views = cleave::write_views(partitioned, written, latency)?;
        crate::report_cmd::say(&views);
    }
    Ok(())
}

fn build(a: &PartitionArgs) -> Result<Built, Fail> {
    let request = PartitionRequest {
        assign: a.devices.assign_request()?,
        stages: a.stages,
        memory: a.memory.to_vec(),
        context: a.context,
        algorithm: a.algorithm.with(a.allow_disconnected, a.budget_s)?,
    };
    let bar = crate::progress::spinner("loading");
    let say = |what: &str| bar.set_message(what.to_string());
    let told = |assigned: &Assigned| crate::setup::say_assigned(a.model, assigned);
    let mut trace = Vec::new();
    let partitioned = cleave::partition(
        a.model,
        &request,
        Progress {
            phase: Some(&say),
            trace: Some(&mut trace),
            assigned: Some(&told),
        },
    );
    bar.finish_and_clear();
    if a.trace {
        for line in &trace {
            println!("{line}");
        }
    }
    let mut partitioned = partitioned?;
    let written = if a.dry_run {
        None
    } else {
        let bar = crate::progress::spinner("writing the parts");
        let w = partitioned.write(a.workdir, a.external_data)?;
        bar.finish_and_clear();
        Some(w)
    };
    Ok(Built {
        partitioned,
        written,
    })
}

fn report(
    a: &PartitionArgs,
    l: &Assigned,
    plan: &ValidatedPlan,
    written: Option<&Written>,
    references: Option<References>,
    elapsed: Duration,
) {
    let placed = plan.parts.iter().map(|p| p.nodes.len()).sum::<usize>();
    // Constants, and a decoder's stages' mask and positions: copied into each part reading them.
    let constants = l
        .assignment
        .placement
        .iter()
        .filter(|p| matches!(p, cleave::assign::Placement::Constant))
        .count();
    let took = crate::latency::duration(elapsed);
    let devices = l.assignment.devices.join(",");
    match references {
        None => println!("{}: {} pipeline stages on {devices} ({placed} nodes placed, {constants} nodes copied where read: constants, and a decoder's mask and positions), cut in {took}", a.model.display(), plan.parts.len()),
        Some(c) => println!(
            "{}: {} part{} on {devices} ({placed} nodes placed, {constants} constant nodes copied where read), cut in {took}; ONE's rule would give {}, the epoch greedy {}",
            a.model.display(),
            plan.parts.len(),
            if plan.parts.len() == 1 { "" } else { "s" },
            c.one_rule,
            c.epoch_greedy
        ),
    }
    if let Some(r) = &l.loaded.rewritten {
        let applied: Vec<String> = r.applied.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let applied = if applied.is_empty() {
            "none".to_string()
        } else {
            applied.join(", ")
        };
        println!(
            "rewritten before assignment: {} nodes → {} ({applied}); rewritten model: {}",
            r.nodes_before,
            l.loaded.graph().nodes.len(),
            l.loaded.path().display()
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
    let Some(written) = written else {
        return;
    };
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
        println!(
            "weights: {} ({} tensors, {} bytes), {}; every part references it",
            w.path.display(),
            w.tensors,
            w.bytes,
            w.how
        );
    }
    println!(
        "wrote {} and {}",
        written.conn_json.display(),
        written.conn_ini.display()
    );
}

// `cleave partition`'s flags, declared here alone; `lib.rs` dispatches them.
#[derive(clap::Args)]
pub struct Args {
    /// The model file (.onnx). It is read, never modified or copied.
    pub model: std::path::PathBuf,
    #[command(flatten)]
    pub devices: crate::setup::DeviceArgs,
    /// Partitioning algorithm.
    #[arg(long, default_value = "default", value_parser = crate::choice_arg::words::<AlgorithmChoice>())]
    pub algorithm: AlgorithmChoice,
    /// Let a part hold same-device regions that no tensor joins (fewer parts).
    #[arg(long)]
    pub allow_disconnected: bool,
    /// Print the openvino algorithm's steps (Select root / Merge / Failed to merge / Rollback).
    #[arg(long)]
    pub trace: bool,
    /// Time budget of the openvino algorithm, in seconds.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    pub budget: f64,
    /// Output folder (created if missing).
    #[arg(
        short = 'o',
        long = "output",
        value_name = "WORKDIR",
        required_unless_present = "dry_run"
    )]
    pub workdir: Option<std::path::PathBuf>,
    /// How parts hold weights. `inline`: each part holds the bytes of the weights it uses.
    /// `shared`: every part references one file, WORKDIR/stem.weights, by offset and length
    /// (a copy of the source's one data file, offsets kept, else one streamed copy), so
    /// weights are neither duplicated across parts nor held in memory. A part over protobuf's 2 GB limit
    /// makes `inline` switch to `shared`, with a note.
    #[arg(long, default_value = "inline", value_name = "MODE", value_parser = crate::choice_arg::words::<ExternalData>())]
    pub external_data: ExternalData,
    /// Pipeline-parallel split instead of device rules: N consecutive stages along a
    /// topological order, one part each, on the --devices in turn (or on stage1..N),
    /// chosen to make the slowest stage (the pipeline's throughput) as fast as possible.
    /// Stage times come from --costs (or profiles' declared [cost]), else estimated FLOPs.
    #[arg(long, value_name = "N", conflicts_with_all = ["rules", "algorithm", "allow_disconnected"])]
    pub stages: Option<usize>,
    /// Memory budget of a stage's device, e.g. gpu0=16GiB,gpu1=16GiB (B, KB, MB, GB, KiB,
    /// MiB, GiB): each stage's weights plus its peak of live activations must fit. Needs
    /// --stages and static dims (--shape/--dim). A device not named is unbounded.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "DEVICE=SIZE",
        value_parser = cleave::parse_memory,
        requires = "stages"
    )]
    pub memory: Vec<(String, u64)>,
    /// A decoder (a model with state pairs): count its stages at T tokens of context, one
    /// new token a step: each stage's memory is its weights plus its layers' KV cache at T,
    /// and its time the per-token work there. The parts keep their dynamic dims.
    #[arg(long, value_name = "T", requires = "stages")]
    pub context: Option<u64>,
    /// With --context: sequences decoded at once (the batch dims).
    #[arg(long, value_name = "B", default_value_t = 1, requires = "context")]
    pub batch: u64,
    /// Plan, validate and print the summary; write nothing.
    #[arg(long, conflicts_with = "report")]
    pub dry_run: bool,
    /// Also write the views of the partition beside the connection files: stem.partition.md
    /// (table and mermaid chart), stem.dot (Graphviz) and stem.report.html (self-contained).
    #[arg(long)]
    pub report: bool,
}

pub fn main(a: Args) -> Result<(), Fail> {
    run(PartitionArgs {
        model: &a.model,
        devices: &a.devices,
        algorithm: a.algorithm,
        allow_disconnected: a.allow_disconnected,
        trace: a.trace,
        budget_s: a.budget,
        workdir: a.workdir.as_deref().unwrap_or(std::path::Path::new(".")),
        external_data: a.external_data,
        stages: a.stages,
        memory: &a.memory,
        context: a.context.map(|tokens| cleave::DecodeContext {
            tokens,
            batch: a.batch,
        }),
        dry_run: a.dry_run,
        report: a.report,
    })
}
