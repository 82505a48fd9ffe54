use std::path::Path;

use crate::coverage::print;
use crate::setup::{load_and_assign, DeviceArgs};
use crate::Fail;
use cleave::coverage::query;

pub fn run(
    model: &Path,
    args: &DeviceArgs,
    allow_disconnected: bool,
    json: bool,
) -> Result<(), Fail> {
    let l = crate::process::Released::new(load_and_assign(model, args)?);
    let q = query(&l, allow_disconnected)?;
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

// `cleave query`'s flags, declared here alone; `lib.rs` dispatches them.
#[derive(clap::Args)]
pub struct Args {
    /// The model file (.onnx).
    pub model: std::path::PathBuf,
    #[command(flatten)]
    pub devices: crate::setup::DeviceArgs,
    /// Count the accelerators' parts letting a part hold regions that no tensor joins.
    #[arg(long)]
    pub allow_disconnected: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn main(a: Args) -> Result<(), Fail> {
    run(&a.model, &a.devices, a.allow_disconnected, a.json)
}
