//! `cleave report CONN.json` and `cleave partition --report`: the views of a partition, written
//! next to its connection files.

use std::path::Path;

use cleave_device::Profiles;
use cleave_emit::{read_partition, ConnFile};
use cleave_fuse::{find_groups, Group, Rule};
use cleave_ir::Graph;
use cleave_onnx::is_deterministic;
use cleave_partition::Plan;
use cleave_view::{write_views, FusedGroup, Report};

use crate::Fail;

pub fn run(conn: &Path, model: Option<&Path>) -> Result<(), Fail> {
    let mut read = read_partition(conn, model).map_err(|e| Fail::input(e.path(), &e))?;
    cleave_onnx::infer_types(&mut read.model);
    let source = model.map_or_else(
        || read.conn.source.file.clone(),
        |m| m.display().to_string(),
    );
    let groups = groups_in_parts(&read.model.graph, &read.plan);
    write(
        &read.model.graph,
        &read.plan,
        &read.conn,
        conn,
        &source,
        Some(&groups),
    )
}

/// The fused groups of a partition read back from files: each backend's built-in fusion rules,
/// keeping the groups that lie whole in one part of that backend. This is what assignment
/// formed (a group is placed whole, or dissolved when a member went elsewhere), for backends
/// with built-in profiles; a custom `--profile` given to `partition` is not known here.
fn groups_in_parts(g: &Graph, plan: &Plan) -> Vec<(u16, Group)> {
    let profiles = Profiles::builtin();
    let constant = g.constant_nodes(is_deterministic);
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
        for grp in find_groups(g, &constant, &rules) {
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

/// Writes `stem.partition.md`, `stem.dot` and `stem.report.html` beside `conn_json`. `groups`:
/// the fused groups of the assignment, when the partition was made in this run.
pub fn write(
    g: &Graph,
    plan: &Plan,
    conn: &ConnFile,
    conn_json: &Path,
    source: &str,
    groups: Option<&[(u16, Group)]>,
) -> Result<(), Fail> {
    let name = Path::new(source)
        .file_name()
        .map_or_else(|| source.to_string(), |n| n.to_string_lossy().into_owned());
    let mut report = Report::build(g, plan, conn, &name);
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
    let w = write_views(&report, dir, stem).map_err(|e| Fail::input(e.path(), &e))?;
    let per_device: Vec<String> = report
        .parts_per_device()
        .iter()
        .map(|(d, n)| format!("{n} on {d}"))
        .collect();
    println!(
        "report: {} parts ({}), {} nodes; wrote {}, {} and {}",
        report.parts.len(),
        per_device.join(", "),
        report.placed_nodes(),
        w.markdown.display(),
        w.dot.display(),
        w.html.display()
    );
    Ok(())
}
