//! `--timings`: the phases the command went through, each with its wall time and the
//! process's memory, printed on stderr after the command's own output.

use std::path::Path;
use std::time::{Duration, Instant};

use cleave::ir::phases::{self, PhaseRecord};
use serde::Serialize;

use crate::Fail;

/// One phase as `bench --partition --json` reports it.
#[derive(Serialize)]
pub struct PhaseJson {
    pub name: &'static str,
    pub depth: usize,
    pub wall_s: f64,
    pub items: Option<usize>,
    pub rss_bytes: Option<u64>,
    pub peak_bytes: Option<u64>,
}

impl From<&PhaseRecord> for PhaseJson {
    fn from(p: &PhaseRecord) -> PhaseJson {
        PhaseJson {
            name: p.name,
            depth: p.depth,
            wall_s: p.wall.as_secs_f64(),
            items: p.items,
            rss_bytes: p.rss_bytes,
            peak_bytes: p.peak_bytes,
        }
    }
}

fn mb(b: Option<u64>) -> String {
    b.map_or_else(|| "-".to_string(), |b| format!("{:.0} MB", b as f64 / 1e6))
}

/// The table: one line per phase, indented by nesting, then the whole command.
pub fn lines(records: &[PhaseRecord], total: Duration) -> Vec<String> {
    let mut out = vec![format!(
        "{:<44} {:>10} {:>10} {:>10}",
        "phase", "wall", "rss after", "peak"
    )];
    for p in records {
        let name = format!("{}{}", "  ".repeat(p.depth), p.name);
        let per_item = match p.items {
            Some(n) if n > 0 => {
                format!("  ({n} × {:.1} µs)", p.wall.as_secs_f64() * 1e6 / n as f64)
            }
            _ => String::new(),
        };
        out.push(format!(
            "{name:<44} {:>8.3} s {:>10} {:>10}{per_item}",
            p.wall.as_secs_f64(),
            mb(p.rss_bytes),
            mb(p.peak_bytes)
        ));
    }
    let (rss, peak) = phases::memory();
    out.push(format!(
        "{:<44} {:>8.3} s {:>10} {:>10}",
        "whole command",
        total.as_secs_f64(),
        mb(rss),
        mb(peak)
    ));
    out
}

/// The whole command in `--timings-json`.
#[derive(Serialize)]
struct Whole {
    wall_s: f64,
    rss_bytes: Option<u64>,
    peak_bytes: Option<u64>,
}

#[derive(Serialize)]
struct Report {
    phases: Vec<PhaseJson>,
    whole_command: Whole,
}

/// Prints the phases recorded since `started` on stderr (`print`) and writes them as JSON
/// to `json`, as asked.
pub fn report(print: bool, json: Option<&Path>, started: Instant) -> Result<(), Fail> {
    if !print && json.is_none() {
        return Ok(());
    }
    let total = started.elapsed();
    let records = phases::take();
    if print {
        for l in lines(&records, total) {
            eprintln!("{l}");
        }
    }
    if let Some(path) = json {
        let (rss_bytes, peak_bytes) = phases::memory();
        let report = Report {
            phases: records.iter().map(Into::into).collect(),
            whole_command: Whole {
                wall_s: total.as_secs_f64(),
                rss_bytes,
                peak_bytes,
            },
        };
        let text = serde_json::to_string_pretty(&report).map_err(Fail::usage)?;
        cleave::workdir::write_atomic(path, text.as_bytes())
            .map_err(|e| Fail::input(&e.path, e.source))?;
    }
    Ok(())
}
