//! `cleave report CONN.json` and `cleave partition --report`: the views of a partition, written
//! next to its connection files.

use std::path::Path;

use cleave::fuse::Group;
use cleave::ir::Graph;
use cleave::partition::Plan;
use cleave::read_partition;
use cleave::view::{write_views, FusedGroup, Report};
use cleave::workdir::ConnFile;

use crate::Fail;

pub fn run(conn: &Path, model: Option<&Path>) -> Result<(), Fail> {
    let read = read_partition(conn, model).map_err(|e| Fail::input(e.path(), &e))?;
    let source = model.map_or_else(
        || read.conn.source.file.clone(),
        |m| m.display().to_string(),
    );
    let groups = read.fused_groups();
    write(
        &read.model().graph,
        &read.plan,
        &read.conn,
        conn,
        &source,
        Some(&groups),
        None,
        &read.source.explorer_ids(),
    )
}

/// Writes `stem.partition.md`, `stem.dot`, `stem.report.html` and (with Model Explorer's node
/// ids of the source, `explorer_ids`) `stem.model-explorer.json` beside `conn_json`. `groups`:
/// the fused groups of the assignment, when the partition was made in this run.
#[allow(clippy::too_many_arguments)]
pub fn write(
    g: &Graph,
    plan: &Plan,
    conn: &ConnFile,
    conn_json: &Path,
    source: &str,
    groups: Option<&[(u16, Group)]>,
    latency: Option<cleave::view::LatencyView>,
    explorer_ids: &[Vec<(String, String)>],
) -> Result<(), Fail> {
    let name = Path::new(source)
        .file_name()
        .map_or_else(|| source.to_string(), |n| n.to_string_lossy().into_owned());
    let mut report = Report::build(g, plan, conn, &name);
    report.latency = latency;
    if let Some(groups) = groups {
        let index: std::collections::HashMap<&str, usize> = report
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.label.as_str(), i))
            .collect();
        // Source order, however the groups were found.
        let mut sorted: Vec<&Group> = groups.iter().map(|(_, grp)| grp).collect();
        sorted.sort_by_key(|grp| grp.anchor());
        let fused = sorted
            .into_iter()
            .map(|grp| FusedGroup {
                name: format!("{} ({})", g.node_label(grp.anchor()), grp.rule.name()),
                nodes: grp
                    .nodes
                    .iter()
                    .filter_map(|&n| index.get(g.node_label(n)).copied())
                    .collect(),
            })
            .collect();
        report.fused = Some(fused);
    }
    let file = conn_json
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = file
        .strip_suffix(".conn.json")
        .or_else(|| file.strip_suffix(".json"))
        .unwrap_or(&file);
    let dir = conn_json
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let w = write_views(&report, dir, stem, explorer_ids).map_err(|e| Fail::input(e.path(), &e))?;
    let per_device: Vec<String> = report
        .parts_per_device()
        .iter()
        .map(|(d, n)| format!("{n} on {d}"))
        .collect();
    let explorer = w.explorer.as_ref().map_or_else(String::new, |p| {
        format!(" (and {}, for Model Explorer)", p.display())
    });
    println!(
        "report: {} parts ({}), {} nodes; wrote {}, {} and {}{explorer}",
        report.parts.len(),
        per_device.join(", "),
        report.placed_nodes(),
        w.markdown.display(),
        w.dot.display(),
        w.html.display()
    );
    Ok(())
}

// `cleave report`'s flags, declared here alone; `lib.rs` dispatches them.
#[derive(clap::Args)]
pub struct Args {
    /// The partition's stem.conn.json. It is checked against its source model first.
    pub conn: std::path::PathBuf,
    /// The source model, when it is no longer where the connection file's source.file says.
    #[arg(long, value_name = "MODEL")]
    pub model: Option<std::path::PathBuf>,
}

pub fn main(a: Args) -> Result<(), Fail> {
    run(&a.conn, a.model.as_deref())
}
