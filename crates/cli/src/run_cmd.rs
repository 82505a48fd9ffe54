use cleave::runtime::pipeline::run_pipelined;
use cleave::runtime::runner::PartStats;
use cleave::runtime::{write_npy, EngineMap, RuntimeError};

use crate::{inputs, Fail};

pub fn runtime_fail(e: RuntimeError) -> Fail {
    match e.path() {
        Some(p) => Fail::input(p, &e),
        None => Fail::usage(e),
    }
}

/// The parts of `conn` on their engines; says on stderr which part runs on another engine
/// than its default, because the default could not load it.
pub fn load_parts(
    conn: &std::path::Path,
    map: &EngineMap,
    single_thread: bool,
) -> Result<cleave::runtime::runner::LoadedParts, Fail> {
    let parts = cleave::load_parts(conn, map, single_thread)?;
    for n in &parts.notes {
        inputs::note_once(format!("note: {n}"));
    }
    Ok(parts)
}

/// A decoder's parts, loaded for generation ([`cleave::load_decoder_parts`]), with the same
/// notes as [`load_parts`].
pub fn load_decoder_parts(
    conn: &std::path::Path,
    map: &EngineMap,
) -> Result<cleave::runtime::runner::LoadedParts, Fail> {
    let parts = cleave::load_decoder_parts(conn, map)?;
    for n in &parts.notes {
        inputs::note_once(format!("note: {n}"));
    }
    Ok(parts)
}

pub fn engines(pairs: &[(String, String)]) -> Result<EngineMap, Fail> {
    Ok(cleave::engine_map(pairs)?)
}

fn file_name(tensor: &str) -> String {
    tensor
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

pub fn run(a: Args) -> Result<(), Fail> {
    let fixed = crate::setup::parse_fixed(&a.shape, &a.dim)?;
    let source = crate::setup::conn_source(&a.conn, &fixed)?;
    // With no --input at all, a run is a smoke test: seeded random data, said on stderr.
    let random = a.input.inputs.is_empty();
    if random {
        eprintln!("note: no --input given: running on seeded random inputs (seed 0)");
    }
    let feeds = inputs::gather(&source.model().graph, &a.input.inputs, 0, random)?;
    let map = engines(&a.engine.engines)?;
    let pipelined = a.requests > 1;
    inputs::check_requests(&feeds, a.requests)?;
    if pipelined && a.invokes > 1 {
        return Err(Fail::usage(
            "--invokes runs one request after another on the same state; it cannot be pipelined with --requests",
        ));
    }
    let mut parts = load_parts(&a.conn, &map, pipelined)?;
    let mut stats = vec![PartStats::default(); parts.sessions.len()];
    let mut runs = Vec::new();
    let values = if pipelined {
        let r = run_pipelined(&mut parts, vec![feeds.clone(); a.requests]).map_err(runtime_fail)?;
        stats = r.stats;
        // Pipelining must not change a single bit: compare with a plain run.
        let plain = parts
            .run(feeds, &mut vec![PartStats::default(); parts.sessions.len()])
            .map_err(runtime_fail)?;
        for (i, v) in r.values.iter().enumerate() {
            for o in &parts.conn.source.outputs {
                if v.get(o) != plain.get(o) {
                    return Err(Fail::input(&a.conn, format!("request {i}: output '{o}' of the pipelined run differs from a sequential run")));
                }
            }
        }
        if !a.json {
            println!(
                "{} requests pipelined in {:.3} ms; every output identical to a sequential run",
                a.requests,
                r.wall.as_secs_f64() * 1e3
            );
        }
        plain
    } else {
        for _ in 1..a.invokes {
            runs.push(parts.run(feeds.clone(), &mut stats).map_err(runtime_fail)?);
        }
        parts.run(feeds, &mut stats).map_err(runtime_fail)?
    };
    runs.push(values);
    std::fs::create_dir_all(&a.out_dir)
        .map_err(|e| Fail::input(&a.out_dir, format!("cannot write: {e}")))?;
    let mut written = Vec::new();
    for (k, values) in runs.iter().enumerate() {
        for o in &parts.conn.source.outputs {
            let t = values.get(o).ok_or_else(|| {
                Fail::input(&a.conn, format!("no part produced the model output '{o}'"))
            })?;
            let name = match a.invokes {
                1 => format!("{}.npy", file_name(o)),
                _ => format!("{}.{}.npy", file_name(o), k + 1),
            };
            let path = a.out_dir.join(name);
            write_npy(&path, t).map_err(runtime_fail)?;
            written.push((o.clone(), path, t.shape.clone()));
        }
    }
    crate::counters::print(&parts, &stats, a.json);
    if !a.json {
        for (name, path, shape) in &written {
            println!("{name} {shape:?} -> {}", path.display());
        }
    }
    Ok(())
}

// `cleave run`'s flags, declared here alone; `lib.rs` dispatches them.
#[derive(clap::Args)]
pub struct Args {
    /// The partition's stem.conn.json.
    pub conn: std::path::PathBuf,
    #[command(flatten)]
    pub input: crate::setup::InputArgs,
    /// Folder for the outputs (NAME.npy).
    #[arg(short = 'o', long = "output", default_value = ".", value_name = "DIR")]
    pub out_dir: std::path::PathBuf,
    #[command(flatten)]
    pub engine: crate::setup::EngineArgs,
    /// Keep N requests in flight, one worker per device (the VPU page's pipelining):
    /// part k of request i overlaps part k+1 of request i-1. Each engine then runs on one
    /// thread; the outputs are checked identical to a sequential run.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub requests: usize,
    /// Run the parts N times in a row on the same sessions and inputs, so a stateful
    /// model's variables carry over; each invoke's outputs are written as NAME.K.npy.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub invokes: u32,
    /// Fix an input's shape (NAME=1,3,640,640), as on partition: the inputs given are
    /// checked against the fixed shapes. Repeat per input.
    #[arg(long = "shape", value_name = "NAME=D,D,...")]
    pub shape: Vec<String>,
    /// Fix every dim named PARAM (e.g. batch=1) wherever the model declares it.
    #[arg(long = "dim", value_name = "PARAM=N")]
    pub dim: Vec<String>,
    /// Print the counters as JSON.
    #[arg(long)]
    pub json: bool,
}
