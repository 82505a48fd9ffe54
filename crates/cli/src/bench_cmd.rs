//! `cleave bench`: monolithic, partitioned sequential and partitioned pipelined runs back to
//! back in one process, with medians and the ratios between them.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use cleave::runtime::pipeline::run_pipelined;
use cleave::runtime::runner::PartStats;
use serde::Serialize;

use crate::run_cmd::{engines, load_parts, runtime_fail};
use crate::{inputs, Fail};

#[derive(Serialize)]
struct Mode {
    mode: &'static str,
    /// Median time of one request (pipelined: of `requests` requests in flight, divided by them).
    median_ms: f64,
    throughput_per_s: f64,
}

#[derive(Serialize)]
struct BenchReport {
    model: String,
    parts: usize,
    runs: usize,
    requests: usize,
    /// The engine of the monolithic run: the parts' own when they all run on one, so the
    /// ratios compare the partition and not two engines.
    monolithic_engine: String,
    modes: Vec<Mode>,
    /// Partitioned sequential latency over monolithic latency (the hetero overhead).
    sequential_over_monolithic: f64,
    /// Pipelined throughput over partitioned sequential throughput.
    pipelined_speedup: f64,
    /// Pipelined runs with 1, 2, 4, ... and `requests` requests in flight.
    pipelined_levels: Vec<Level>,
    /// Tensors that cross between parts.
    boundaries: usize,
    /// (partitioned − monolithic latency) / boundaries: what each cut costs; absent when
    /// nothing crosses.
    overhead_per_boundary_ms: Option<f64>,
    parts_counters: Vec<serde_json::Value>,
}

#[derive(Serialize)]
struct Level {
    in_flight: usize,
    /// Median wall time of the level's requests divided by them.
    median_ms: f64,
    throughput_per_s: f64,
}

/// 1, 2, 4, ... below `n`, then `n`.
fn levels(n: usize) -> Vec<usize> {
    let mut out: Vec<usize> = std::iter::successors(Some(1usize), |k| k.checked_mul(2))
        .take_while(|&k| k < n)
        .collect();
    out.push(n);
    out
}

fn median(v: Vec<Duration>) -> Duration {
    Duration::from_secs_f64(cleave::median_seconds(v))
}

pub fn run(a: Args) -> Result<(), Fail> {
    let tmp = cleave::workdir::private_tempdir("cleave-")
        .map_err(|e| Fail::usage(format!("cannot make a temporary folder: {e}")))?;
    let conn: PathBuf = if a.target.extension().is_some_and(|e| e == "json") {
        a.target.to_path_buf()
    } else {
        crate::partition_cmd::partition_into(&a.target, &a.devices, tmp.path(), false)?
    };
    let bar = crate::progress::spinner("loading");
    // Random inputs take the shapes --shape and --dim fix.
    let source = crate::setup::conn_source(&conn, &a.devices.fixed_dims()?)?;
    let feeds = inputs::gather(&source.model().graph, &[], 0, true)?;
    let map = engines(&a.engine.engines)?;
    let runs = a.runs.max(1);

    // All three set up at once and timed in interleaved rounds, so that the machine's drift
    // (other load, frequency) hits every mode alike and the ratios stay meaningful.
    let mut parts = load_parts(&conn, &map, false)?;
    let mono_kind = match parts.engines.split_first() {
        Some((first, rest)) if rest.iter().all(|k| k == first) => first.clone(),
        _ => cleave::default_engine(source.path())?,
    };
    let mono_engine = cleave::engine(mono_kind.clone())?;
    let mut mono = mono_engine
        .load(source.path(), false)
        .map_err(runtime_fail)?;
    let n = a.requests.max(1);
    inputs::check_requests(&feeds, n)?;
    let mut piped = load_parts(&conn, &map, true)?;
    let mut stats = vec![PartStats::default(); parts.sessions.len()];
    bar.finish_and_clear();
    let bar = crate::progress::bar("bench rounds", runs as u64 + 1);
    // Warm-up: tract builds its plans on the first run; LiteRT's first run is slower too.
    mono.run(&feeds).map_err(runtime_fail)?;
    parts.run(feeds.clone(), &mut stats).map_err(runtime_fail)?;
    run_pipelined(&mut piped, vec![feeds.clone(); n]).map_err(runtime_fail)?;
    bar.inc(1);
    let (mut t_mono, mut t_seq) = (Vec::new(), Vec::new());
    let in_flight = levels(n);
    let mut t_levels = vec![Vec::new(); in_flight.len()];
    let mut pipe_stats = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        mono.run(&feeds).map_err(runtime_fail)?;
        t_mono.push(t.elapsed());
        let t = Instant::now();
        parts.run(feeds.clone(), &mut stats).map_err(runtime_fail)?;
        t_seq.push(t.elapsed());
        for (k, &level) in in_flight.iter().enumerate() {
            let r = run_pipelined(&mut piped, vec![feeds.clone(); level]).map_err(runtime_fail)?;
            t_levels[k].push(r.wall / level as u32);
            pipe_stats = r.stats;
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let (m, s) = (median(t_mono), median(t_seq));
    let level_medians: Vec<Duration> = t_levels.into_iter().map(median).collect();
    let p = level_medians.last().copied().unwrap_or_default();
    let per_s = |d: Duration| {
        if d.is_zero() {
            0.0
        } else {
            1.0 / d.as_secs_f64()
        }
    };
    let counters = piped
        .conn
        .parts
        .iter()
        .zip(&pipe_stats)
        .enumerate()
        .map(|(k, (part, st))| {
            serde_json::json!({
                "part": part.file, "backend": piped.backends[k], "engine": piped.engines[k].name(),
                "calls": st.calls, "exec_ms": st.exec.as_secs_f64() * 1e3, "wait_ms": st.wait.as_secs_f64() * 1e3,
            })
        })
        .collect();
    let produced: std::collections::HashSet<&str> = piped
        .conn
        .parts
        .iter()
        .flat_map(|part| part.outputs.iter().map(String::as_str))
        .collect();
    let boundaries = piped
        .conn
        .parts
        .iter()
        .flat_map(|part| part.inputs.iter())
        .filter(|t| produced.contains(t.as_str()))
        .collect::<std::collections::HashSet<_>>()
        .len();
    let report = BenchReport {
        model: source.path().display().to_string(),
        parts: piped.conn.parts.len(),
        runs,
        requests: n,
        monolithic_engine: mono_kind.label(),
        modes: vec![
            Mode {
                mode: "monolithic",
                median_ms: m.as_secs_f64() * 1e3,
                throughput_per_s: per_s(m),
            },
            Mode {
                mode: "partitioned",
                median_ms: s.as_secs_f64() * 1e3,
                throughput_per_s: per_s(s),
            },
            Mode {
                mode: "pipelined",
                median_ms: p.as_secs_f64() * 1e3,
                throughput_per_s: per_s(p),
            },
        ],
        sequential_over_monolithic: s.as_secs_f64() / m.as_secs_f64().max(1e-12),
        pipelined_speedup: s.as_secs_f64() / p.as_secs_f64().max(1e-12),
        pipelined_levels: in_flight
            .iter()
            .zip(&level_medians)
            .map(|(&k, &d)| Level {
                in_flight: k,
                median_ms: d.as_secs_f64() * 1e3,
                throughput_per_s: per_s(d),
            })
            .collect(),
        boundaries,
        overhead_per_boundary_ms: (boundaries > 0)
            .then(|| (s.as_secs_f64() - m.as_secs_f64()) * 1e3 / boundaries as f64),
        parts_counters: counters,
    };
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(Fail::usage)?
        );
        return Ok(());
    }
    println!("{}: {} parts, {} runs, {} requests in flight when pipelined (engine of the monolithic run: {})", report.model, report.parts, runs, n, report.monolithic_engine);
    println!("  {:<12} {:>12} {:>14}", "mode", "median ms", "requests/s");
    for md in &report.modes {
        println!(
            "  {:<12} {:>12.3} {:>14.1}",
            md.mode, md.median_ms, md.throughput_per_s
        );
    }
    println!(
        "partitioned / monolithic latency: {:.3}",
        report.sequential_over_monolithic
    );
    println!(
        "pipelined / partitioned throughput: {:.3}",
        report.pipelined_speedup
    );
    let shown: Vec<String> = report
        .pipelined_levels
        .iter()
        .map(|l| format!("{} in flight {:.1}/s", l.in_flight, l.throughput_per_s))
        .collect();
    println!("pipelined throughput: {}", shown.join(", "));
    if let Some(o) = report.overhead_per_boundary_ms {
        println!(
            "overhead per boundary tensor: {o:.3} ms ((partitioned - monolithic) / {} boundaries)",
            report.boundaries
        );
    }
    crate::counters::print(&piped, &pipe_stats, false);
    Ok(())
}

// `cleave bench`'s flags, declared here alone; `lib.rs` dispatches them.
#[derive(clap::Args)]
pub struct Args {
    /// A partition (stem.conn.json), or a model to partition with the device flags.
    pub target: std::path::PathBuf,
    #[command(flatten)]
    pub devices: crate::setup::DeviceArgs,
    /// Timed runs per mode (after one warm-up run).
    #[arg(long, default_value_t = 20)]
    pub runs: usize,
    /// Requests in flight in the pipelined mode (with --ray: --in-flight).
    #[arg(long, default_value_t = 4, value_name = "N", conflicts_with = "ray")]
    pub requests: usize,
    #[command(flatten)]
    pub engine: crate::setup::EngineArgs,
    #[arg(long)]
    pub json: bool,
    /// Time the partitioner instead of the model: the default algorithm, a bare
    /// topological sort of the same graph, and (up to 1000 units) the openvino algorithm;
    /// TARGET is a model, placed by --rules/--devices or else by the .part file beside it.
    #[arg(long)]
    pub partition: bool,
    /// Time the partition (TARGET a stem.conn.json, and any MORE) served on the Ray cluster
    /// at ADDRESS, as `serve` deploys it, one partition after the other: --runs requests at
    /// each --in-flight level; latency at 1 in flight, the parts' compute, throughput, and
    /// each against the whole source model's best throughput on this machine's cores,
    /// measured in the same run. Give the 1-stage cut of the model with its other cuts for
    /// the cost per hop between parts.
    #[arg(long, value_name = "ADDRESS", conflicts_with = "partition")]
    pub ray: Option<String>,
    /// With --ray: more partitions to bench in the same run (their stem.conn.json).
    #[arg(value_name = "MORE", requires = "ray")]
    pub more: Vec<std::path::PathBuf>,
    /// With --ray: how the requests are sent.
    #[command(flatten)]
    pub bench: crate::serve_flags::Flags<crate::serve_flags::Bench>,
    /// With --ray: how the parts are deployed.
    #[command(flatten)]
    pub deploy: crate::setup::RayArgs,
}

/// `--partition` times the partitioner, `--ray` a served partition, `--objective latency` the
/// placements a cost model compared, else the model whole, partitioned and pipelined.
pub fn main(a: Args) -> Result<(), Fail> {
    if a.partition {
        return crate::bench_partition::run(&a.target, &a.devices, a.runs, a.json);
    }
    if let Some(address) = &a.ray {
        let mut conns = vec![a.target.as_path()];
        conns.extend(a.more.iter().map(|p| p.as_path()));
        return crate::serve_cmd::bench(crate::serve_cmd::RayBenchArgs {
            conns,
            address,
            runs: a.runs,
            bench: &a.bench,
            deploy: &a.deploy,
            json: a.json,
        });
    }
    if a.deploy.any() {
        return Err(Fail::usage(format!(
            "{} say how to deploy on Ray: give them with --ray ADDRESS",
            crate::setup::RayArgs::names()
        )));
    }
    if a.devices.objective == cleave::Objective::Latency {
        return crate::bench_placements::run(
            &a.target,
            &a.devices,
            a.runs,
            &a.engine.engines,
            a.json,
        );
    }
    run(a)
}
