//! The views of a partition (markdown, DOT, the HTML report, Model Explorer's overlay),
//! written beside its connection files: from a partition made in this run, or from one read
//! back from its files (`cleave report`).

use std::path::Path;

use cleave_frontend::Emitted;
use cleave_fuse::Group;
use cleave_ir::Graph;
use cleave_partition::Plan;
use cleave_view::{LatencyView, Report, Written};
use cleave_workdir::ConnFile;

use crate::{Error, Partitioned, ReadPartition};

/// The files written and what they show, for a one-line summary.
pub struct Views {
    pub files: Written,
    pub parts: usize,
    pub nodes: usize,
    /// Parts per device, in the order the partition names its devices.
    pub per_device: Vec<(String, usize)>,
}

/// The views of a partition made in this run, beside its written connection files: the
/// assignment's fused groups as assignment formed them, and `latency` when predicted.
pub fn write_views(
    p: &Partitioned,
    written: &Emitted,
    latency: Option<LatencyView>,
) -> Result<Views, Error> {
    let loaded = &p.assigned.loaded;
    // After a rewrite the nodes are no longer the file's: no overlay for the file.
    let explorer_ids = if loaded.rewritten.is_some() {
        Vec::new()
    } else {
        loaded.source.explorer_ids()
    };
    write(
        Source {
            g: loaded.graph(),
            plan: p.plan.plan(),
            conn: &written.conn,
            conn_json: &written.conn_json,
            model: &loaded.path().display().to_string(),
            groups: &p.assigned.assignment.groups,
        },
        latency,
        &explorer_ids,
    )
}

/// The views of a partition read back from its files (`model`: what to call its source).
pub fn write_read_views(
    read: &ReadPartition,
    conn_json: &Path,
    model: &str,
) -> Result<Views, Error> {
    let groups = read.fused_groups();
    write(
        Source {
            g: &read.model().graph,
            plan: read.plan.plan(),
            conn: &read.conn,
            conn_json,
            model,
            groups: &groups,
        },
        None,
        &read.source.explorer_ids(),
    )
}

struct Source<'a> {
    g: &'a Graph,
    plan: &'a Plan,
    conn: &'a ConnFile,
    conn_json: &'a Path,
    model: &'a str,
    groups: &'a [(u16, Group)],
}

fn write(
    s: Source<'_>,
    latency: Option<LatencyView>,
    explorer_ids: &[Vec<(String, String)>],
) -> Result<Views, Error> {
    let name = Path::new(s.model)
        .file_name()
        .map_or_else(|| s.model.to_string(), |n| n.to_string_lossy().into_owned());
    let mut report = Report::build(s.g, s.plan, s.conn, &name);
    report.latency = latency;
    report.set_fused_groups(s.g, s.groups);
    let file = s
        .conn_json
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = file
        .strip_suffix(".conn.json")
        .or_else(|| file.strip_suffix(".json"))
        .unwrap_or(&file);
    let dir = s
        .conn_json
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let files = cleave_view::write_views(&report, dir, stem, explorer_ids)
        .map_err(|e| Error::argument(e.path(), &e))?;
    Ok(Views {
        files,
        parts: report.parts.len(),
        nodes: report.placed_nodes(),
        per_device: report
            .parts_per_device()
            .into_iter()
            .map(|(d, n)| (d.to_string(), n))
            .collect(),
    })
}
