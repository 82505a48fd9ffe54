//! `cleave optimize`: rewrite a model for its devices and show the runtime graph.

use std::collections::BTreeMap;
use std::path::Path;

use cleave::fuse::{runtime_layers, Group};
use cleave::Devices;
use serde::Serialize;

use crate::setup::DeviceArgs;
use crate::Fail;
use cleave::RewriteLevel;

#[derive(Serialize)]
struct Layer {
    name: String,
    #[serde(rename = "type")]
    op_type: String,
    device: Option<String>,
    rule: Option<&'static str>,
    /// OpenVINO's originalLayersNames: the source nodes this runtime layer stands for.
    original: Vec<String>,
}

#[derive(Serialize)]
struct Report {
    level: &'static str,
    devices: Vec<String>,
    nodes_before: usize,
    nodes_after: usize,
    /// Rewrites applied, by name.
    applied: BTreeMap<&'static str, usize>,
    /// Fused groups, by rule.
    groups: BTreeMap<&'static str, usize>,
    layers: Vec<Layer>,
    notes: Vec<String>,
    warnings: Vec<String>,
}

pub fn run(
    model_path: &Path,
    args: &DeviceArgs,
    level: RewriteLevel,
    out: &Path,
    json: bool,
) -> Result<(), Fail> {
    if args.optimize.is_some() {
        return Err(Fail::usage(
            "optimize takes --level basic|device, not --optimize",
        ));
    }
    if args.rules.is_some() {
        return Err(Fail::usage("optimize takes its devices from --devices (a .part file places nodes; it does not choose rewrites)"));
    }
    if args.devices.is_empty() {
        return Err(Fail::usage(
            "no devices given: use --devices (e.g. --devices cpu or --devices myriad,cpu)",
        ));
    }
    let devices = Devices {
        default: None,
        ..Devices::resolve(&args.request())?
    };
    if out
        .canonicalize()
        .ok()
        .is_some_and(|o| model_path.canonicalize().ok() == Some(o))
    {
        return Err(Fail::input(
            out,
            "refusing to overwrite the source model: choose another -o",
        ));
    }
    let loaded = args.load(model_path)?;
    let nodes_before = loaded.graph().nodes.len();
    let mut o = loaded
        .rewrite(level, &devices, args.fold_limit_bytes())
        .map_err(|e| Fail::input(model_path, e))?;
    o.source.save_as(out).map_err(|e| Fail::input(out, e))?;
    let a = o.assign(&devices).map_err(|e| Fail::input(model_path, e))?;
    let (g, constant) = (o.graph(), &o.constant);
    let Some(r) = o.rewritten.as_ref() else {
        return Err(Fail::usage("internal error: the rewrite left no summary"));
    };
    let groups: Vec<Group> = a.groups.iter().map(|(_, grp)| grp.clone()).collect();
    let mut by_rule = BTreeMap::new();
    for grp in &groups {
        *by_rule.entry(grp.rule.name()).or_insert(0) += 1;
    }
    let layers = runtime_layers(g, constant, &groups, &r.origins)
        .into_iter()
        .map(|l| {
            let device = g
                .topo_order()
                .iter()
                .find(|&&n| g.node_label(n) == l.name)
                .and_then(|&n| a.device_name(n))
                .map(String::from);
            Layer {
                name: l.name,
                op_type: l.op_type,
                device,
                rule: l.rule,
                original: l.original,
            }
        })
        .collect();
    let report = Report {
        level: match level {
            RewriteLevel::Basic => "basic",
            RewriteLevel::Device => "device",
        },
        devices: devices.list.clone(),
        nodes_before,
        nodes_after: g.nodes.len(),
        applied: r.applied.clone(),
        groups: by_rule,
        layers,
        notes: r.notes.clone(),
        warnings: a.warnings,
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(Fail::usage)?
        );
        return Ok(());
    }
    print_view(&report, out);
    Ok(())
}

fn print_view(r: &Report, out: &Path) {
    let wn = r
        .layers
        .iter()
        .map(|l| l.name.len())
        .max()
        .unwrap_or(5)
        .clamp(5, 40);
    let wt = r
        .layers
        .iter()
        .map(|l| l.op_type.len())
        .max()
        .unwrap_or(4)
        .max(4);
    println!(
        "{:<wn$}  {:<wt$}  {:<8}  original layers",
        "layer", "type", "device"
    );
    for l in &r.layers {
        let fused = l.rule.map(|x| format!("  [{x}]")).unwrap_or_default();
        println!(
            "{:<wn$}  {:<wt$}  {:<8}  {}{fused}",
            l.name,
            l.op_type,
            l.device.as_deref().unwrap_or("-"),
            l.original.join(", ")
        );
    }
    let list = |m: &BTreeMap<&str, usize>| {
        if m.is_empty() {
            "none".to_string()
        } else {
            m.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    println!(
        "\n{} nodes → {} ({} runtime layers); rewrites: {}; fused groups: {}",
        r.nodes_before,
        r.nodes_after,
        r.layers.len(),
        list(&r.applied),
        list(&r.groups)
    );
    for n in &r.notes {
        println!("note: {n}");
    }
    for w in &r.warnings {
        println!("warning: {w}");
    }
    println!("wrote {}", out.display());
}

// `cleave optimize`'s flags, declared here alone; `lib.rs` dispatches them.
#[derive(clap::Args)]
pub struct Args {
    /// The model file (.onnx). It is read, never modified.
    pub model: std::path::PathBuf,
    #[command(flatten)]
    pub devices: crate::setup::DeviceArgs,
    /// `basic` works for any device; `device` adds the devices' own rewrites.
    #[arg(long, default_value = "device", value_parser = crate::choice_arg::words::<cleave::RewriteLevel>())]
    pub level: cleave::RewriteLevel,
    /// Where to write the rewritten model (atomically; never the source).
    #[arg(short, long, value_name = "OUT.onnx")]
    pub output: std::path::PathBuf,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

pub fn main(a: Args) -> Result<(), Fail> {
    run(&a.model, &a.devices, a.level, &a.output, a.json)
}
