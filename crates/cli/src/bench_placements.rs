//! `cleave bench MODEL --objective latency`: the placement the cost model chose, the
//! capability placement and every single device that runs the whole model, each cut, written
//! and loaded, then timed in interleaved rounds in one process, next to their predictions.

use std::path::Path;
use std::time::{Duration, Instant};

use cleave::assign::Assignment;
use cleave::runtime::runner::{LoadedParts, PartStats};
use cleave::{load_parts, Algorithm, ExternalData};
use serde::Serialize;

use crate::run_cmd::{engines, runtime_fail};
use crate::setup::{load_and_assign, DeviceArgs};
use crate::{inputs, Fail};
use cleave::Objective;

#[derive(Serialize)]
struct Row {
    placement: String,
    parts: usize,
    predicted_ms: f64,
    measured_ms: f64,
    /// (measured − predicted) / measured.
    error: f64,
    /// Per part: file, device, predicted and mean measured milliseconds (the engine call
    /// alone; the rest of a run is the runner's copies).
    per_part: Vec<PartRow>,
}

#[derive(Serialize)]
struct Refused {
    placement: String,
    predicted_ms: f64,
    reason: String,
}

#[derive(Serialize)]
struct PartRow {
    file: String,
    device: String,
    predicted_ms: f64,
    measured_ms: f64,
}

#[derive(Serialize)]
struct Report {
    model: String,
    runs: usize,
    figures: String,
    rows: Vec<Row>,
    /// Chosen over the fastest single device that runs the whole model (measured).
    chosen_over_best_single: Option<f64>,
    /// Chosen over the capability placement (measured).
    chosen_over_capability: f64,
    /// Placements an engine refused to run, with their prediction and the engine's reason.
    refused: Vec<Refused>,
    planning_ms: f64,
}

struct Candidate {
    name: String,
    parts: LoadedParts,
    predicted_s: f64,
    /// Predicted seconds of each part.
    predicted_parts: Vec<f64>,
    times: Vec<Duration>,
    stats: Vec<PartStats>,
}

pub fn run(
    model: &Path,
    devices: &DeviceArgs,
    runs: usize,
    engine_pairs: &[(String, String)],
    json: bool,
) -> Result<(), Fail> {
    let map = engines(engine_pairs)?;
    let bar = crate::progress::spinner("loading, placing and writing the placements");
    let capability_args = DeviceArgs {
        objective: Objective::Fewest,
        ..devices.clone()
    };
    let l = load_and_assign(model, &capability_args)?;
    let costs = match &devices.costs {
        Some(p) => cleave::Costs::read(p)?,
        None => cleave::Costs::default(),
    };
    let choice = l
        .loaded
        .place_for_latency(&l.assignment, &l.devices, &costs, devices.margin)?;
    if let Some(note) = crate::latency::estimates_note(model, &choice.estimated) {
        bar.suspend(|| eprintln!("{note}"));
    }
    // Run the engines as they were profiled.
    let single_thread = costs
        .file
        .as_ref()
        .is_none_or(|(_, f)| f.profiling.single_thread);
    let mut placements: Vec<(String, Assignment)> = vec![
        ("chosen (latency)".into(), choice.assignment.clone()),
        ("capability".into(), l.assignment.clone()),
    ];
    for k in 0..l.assignment.devices.len() {
        if let Some(a) = l.loaded.single_device(&l.assignment, k as u16, &l.devices) {
            placements.push((format!("all on {}", l.assignment.devices[k]), a));
        }
    }
    // A placement that is another's (capability = all on cpu, say) is run once, under both names.
    let mut distinct: Vec<(String, Assignment)> = Vec::new();
    for (name, a) in placements {
        let same = |b: &Assignment| {
            a.placement
                .iter()
                .zip(&b.placement)
                .all(|(x, y)| x.device() == y.device())
        };
        match distinct.iter_mut().find(|(_, b)| same(b)) {
            Some((names, _)) => *names = format!("{names} = {name}"),
            None => distinct.push((name, a)),
        }
    }
    let placements = distinct;
    let feeds = inputs::gather(l.loaded.graph(), &[], 0, true)?;
    let tmp = cleave::workdir::private_tempdir("cleave-")
        .map_err(|e| Fail::usage(format!("cannot make a temporary folder: {e}")))?;
    let mut cands = Vec::new();
    let mut refused: Vec<(String, f64, String)> = Vec::new();
    // One model for every candidate: each takes the assignment in turn and hands it back.
    let mut assigned = l;
    for (k, (name, a)) in placements.iter().enumerate() {
        assigned.assignment = a.clone();
        let mut partitioned = assigned.into_partitioned(
            Algorithm::Default {
                allow_disconnected: false,
            },
            &mut Vec::new(),
        )?;
        let p = &partitioned.assigned;
        let predicted = p
            .loaded
            .predict(a, partitioned.plan.plan(), &p.devices, &costs)?;
        let dir = tmp.path().join(format!("p{k}"));
        let written = partitioned.write(&dir, ExternalData::Inline);
        assigned = partitioned.assigned;
        let written = written?;
        let mut parts = match load_parts(&written.conn_json, &map, single_thread) {
            Ok(p) => p,
            Err(e) => {
                refused.push((name.clone(), predicted.estimate.total_s, e.to_string()));
                continue;
            }
        };
        // Warm-up (engines build plans and caches on the first run); an engine that
        // refuses a part takes its placement out of the race, with the reason.
        if let Err(e) = parts.run(feeds.clone(), &mut []) {
            refused.push((name.clone(), predicted.estimate.total_s, e.to_string()));
            continue;
        }
        cands.push(Candidate {
            name: name.clone(),
            stats: vec![PartStats::default(); parts.sessions.len()],
            parts,
            predicted_s: predicted.estimate.total_s,
            predicted_parts: predicted
                .estimate
                .parts
                .iter()
                .map(|p| p.total_s())
                .collect(),
            times: Vec::new(),
        });
    }
    bar.finish_and_clear();
    let runs = runs.max(1);
    let bar = crate::progress::bar("bench rounds", runs as u64 + 1);
    if cands.is_empty() {
        let why: Vec<String> = refused
            .iter()
            .map(|(n, _, e)| format!("{n}: {e}"))
            .collect();
        return Err(Fail::input(
            model,
            format!("no placement runs: {}", why.join("; ")),
        ));
    }
    bar.inc(1);
    let n = cands.len();
    for round in 0..runs {
        // Each round starts one candidate later, so none always follows the same one (a
        // long run on one engine leaves caches and clocks in a state the next one inherits).
        for i in 0..n {
            let c = &mut cands[(round + i) % n];
            let t = Instant::now();
            c.parts
                .run(feeds.clone(), &mut c.stats)
                .map_err(runtime_fail)?;
            c.times.push(t.elapsed());
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let rows: Vec<Row> = cands
        .iter()
        .map(|c| {
            let m = cleave::median_seconds(c.times.clone());
            Row {
                placement: c.name.clone(),
                parts: c.parts.sessions.len(),
                predicted_ms: c.predicted_s * 1e3,
                measured_ms: m * 1e3,
                error: (m - c.predicted_s) / m.max(1e-12),
                per_part: c
                    .parts
                    .conn
                    .parts
                    .iter()
                    .zip(&c.stats)
                    .enumerate()
                    .map(|(k, (p, st))| PartRow {
                        file: p.file.clone(),
                        device: c.parts.backends[k].clone(),
                        predicted_ms: c.predicted_parts.get(k).copied().unwrap_or(0.0) * 1e3,
                        measured_ms: st.exec.as_secs_f64() * 1e3 / st.calls.max(1) as f64,
                    })
                    .collect(),
            }
        })
        .collect();
    let Some(chosen) = rows
        .iter()
        .find(|r| r.placement.contains("chosen"))
        .map(|r| r.measured_ms)
    else {
        let why = refused.first().map_or(String::new(), |r| r.2.clone());
        return Err(Fail::input(
            model,
            format!("the chosen placement does not run: {why}"),
        ));
    };
    let best_single = rows
        .iter()
        .filter(|r| r.placement.contains("all on "))
        .map(|r| r.measured_ms)
        .min_by(f64::total_cmp);
    let capability = rows
        .iter()
        .find(|r| r.placement.contains("capability"))
        .map_or(chosen, |r| r.measured_ms);
    let report = Report {
        model: model.display().to_string(),
        runs,
        figures: crate::latency::provenance(&choice.declared, &choice.estimated),
        chosen_over_best_single: best_single.map(|b| chosen / b),
        chosen_over_capability: chosen / capability.max(1e-12),
        planning_ms: choice.planning.as_secs_f64() * 1e3,
        rows,
        refused: refused
            .into_iter()
            .map(|(placement, p, reason)| Refused {
                placement,
                predicted_ms: p * 1e3,
                reason,
            })
            .collect(),
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(Fail::usage)?
        );
        return Ok(());
    }
    println!(
        "{}: {} interleaved rounds, medians; predictions from {}",
        report.model, runs, report.figures
    );
    println!(
        "  {:<40} {:>6} {:>14} {:>13} {:>8}",
        "placement", "parts", "predicted ms", "measured ms", "error"
    );
    for r in &report.rows {
        println!(
            "  {:<40} {:>6} {:>14.3} {:>13.3} {:>7.1}%",
            r.placement,
            r.parts,
            r.predicted_ms,
            r.measured_ms,
            r.error * 100.0
        );
    }
    for r in report
        .rows
        .iter()
        .filter(|r| r.parts > 1 && !r.placement.contains("all on "))
    {
        println!(
            "  where the time goes, {} (per part, engine call alone):",
            r.placement
        );
        for p in r.per_part.iter().take(12) {
            println!(
                "    {:<40} {:<8} predicted {:>9.3} ms  measured {:>9.3} ms",
                p.file, p.device, p.predicted_ms, p.measured_ms
            );
        }
        if r.per_part.len() > 12 {
            println!(
                "    ... {} more parts (--json lists all)",
                r.per_part.len() - 12
            );
        }
    }
    if let Some(b) = report.chosen_over_best_single {
        println!("chosen / best single device (measured): {b:.3}");
    }
    println!(
        "chosen / capability (measured): {:.3}",
        report.chosen_over_capability
    );
    Ok(())
}
