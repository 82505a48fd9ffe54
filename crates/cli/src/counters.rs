//! Per-part counters: calls, execution time, time waiting for inputs.

use cleave::runtime::runner::{LoadedParts, PartStats};
use serde::Serialize;

#[derive(Serialize)]
struct Row<'a> {
    part: &'a str,
    backend: &'a str,
    engine: &'a str,
    calls: u64,
    exec_ms: f64,
    wait_ms: f64,
}

pub fn print(parts: &LoadedParts, stats: &[PartStats], json: bool) {
    let rows: Vec<Row> = parts
        .conn
        .parts
        .iter()
        .zip(stats)
        .enumerate()
        .map(|(k, (p, s))| Row {
            part: &p.file,
            backend: &parts.backends[k],
            engine: parts.engines[k].name(),
            calls: s.calls,
            exec_ms: s.exec.as_secs_f64() * 1e3,
            wait_ms: s.wait.as_secs_f64() * 1e3,
        })
        .collect();
    if json {
        if let Ok(text) = serde_json::to_string_pretty(&serde_json::json!({ "parts": rows })) {
            println!("{text}");
        }
        return;
    }
    let w = rows.iter().map(|r| r.part.len()).max().unwrap_or(4).max(4);
    println!(
        "{:<w$}  {:<8}  {:<6}  {:>5}  {:>10}  {:>10}",
        "part", "backend", "engine", "calls", "exec ms", "wait ms"
    );
    for r in &rows {
        println!(
            "{:<w$}  {:<8}  {:<6}  {:>5}  {:>10.3}  {:>10.3}",
            r.part, r.backend, r.engine, r.calls, r.exec_ms, r.wait_ms
        );
    }
}
