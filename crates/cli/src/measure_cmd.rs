//! `cleave measure`: measure every unit on every device's engine into a cost file.

use std::path::Path;
use std::time::Duration;

use cleave::cost::CostFile;
use cleave::runtime::EngineMap;
use cleave::{Devices, MeasureOptions};

use crate::setup::DeviceArgs;
use crate::{inputs, Fail};
use cleave::Objective;

/// The flags that change the graph, so the file can say how to load the model again.
fn graph_flags(d: &DeviceArgs) -> Vec<String> {
    let mut f: Vec<String> = d.shape.iter().map(|s| format!("--shape {s}")).collect();
    f.extend(d.dim.iter().map(|s| format!("--dim {s}")));
    if let Some(level) = d.optimize {
        f.push(format!(
            "--optimize {}",
            format!("{level:?}").to_lowercase()
        ));
    }
    f
}

pub fn run(a: Args) -> Result<(), Fail> {
    if a.devices.objective == Objective::Latency || a.devices.costs.is_some() {
        return Err(Fail::usage(
            "measure times each unit; --objective and --costs belong to partition, query and bench",
        ));
    }
    if let Some(b) = a.budget.filter(|b| !b.is_finite() || *b < 0.0) {
        return Err(Fail::usage(format!(
            "--budget {b}: give seconds, at least 0"
        )));
    }
    let engines = cleave::engine_map(&a.engine.engines)?;
    let devices = Devices::resolve(&a.devices.request())?;
    let bar = crate::progress::spinner("loading");
    let mut loaded = a.devices.load(&a.model)?;
    if let Some(level) = a.devices.optimize {
        loaded = loaded.rewrite(level, &devices, a.devices.fold_limit_bytes())?;
    }
    bar.finish_and_clear();
    let feeds = inputs::gather(loaded.graph(), &a.input.inputs, a.seed, true)?;
    let opts = MeasureOptions {
        engines: engines.clone(),
        warmup: a.warmup,
        repeats: a.repeats,
        budget: a.budget.map(Duration::from_secs_f64),
        flags: graph_flags(&a.devices),
        single_thread: !a.all_cores,
    };
    let bar = crate::progress::bar("profiling", 1);
    let costs = cleave::measure(&loaded, &devices, &feeds, &opts, &|done, total, what| {
        bar.set_length(total.max(1));
        bar.set_position(done);
        bar.set_message(what.to_string());
    })?;
    bar.finish_and_clear();
    cleave::workdir::write_atomic(&a.output, costs.to_json().as_bytes())
        .map_err(|e| Fail::input(&e.path, format!("cannot write: {}", e.source)))?;
    if a.json {
        println!("{}", costs.to_json());
        return Ok(());
    }
    summary(&a.model, &costs, &engines, &a.output);
    Ok(())
}

fn summary(model: &Path, c: &CostFile, engines: &EngineMap, out: &Path) {
    let format = cleave::runtime::part_format(model, None);
    println!(
        "{}: {} units measured in {:.1} s ({} warm-up and {} timed runs each, medians; engines on {}{})",
        model.display(),
        c.units.len(),
        c.profiling.seconds,
        c.profiling.warmup,
        c.profiling.repeats,
        if c.profiling.single_thread { "one thread each" } else { "all cores" },
        if c.profiling.budget_hit {
            "; the budget ran out, so later units got one run each"
        } else {
            ""
        }
    );
    println!(
        "  {:<12} {:<6} {:>10} {:>12} {:>8} {:>8} {:>12}",
        "device", "engine", "launch", "copy GB/s", "units", "refused", "sum of units"
    );
    for (name, d) in &c.devices {
        let ran = c.units.iter().filter_map(|u| u.latency_s.get(name));
        let (count, sum) = ran.fold((0usize, 0.0f64), |(n, s), t| (n + 1, s + t));
        let refused = c
            .units
            .iter()
            .filter(|u| u.refused.contains_key(name))
            .count();
        println!(
            "  {:<12} {:<6} {:>10} {:>12.2} {:>8} {:>8} {:>12}",
            name,
            engines.for_part(name, &format).map_or("-", |k| k.name()),
            crate::latency::ms(d.launch_s),
            d.io_bytes_per_s / 1e9,
            count,
            refused,
            crate::latency::ms(sum)
        );
        if let Some(u) = c.units.iter().find(|u| u.refused.contains_key(name)) {
            println!(
                "    e.g. {} ({}): {}",
                u.nodes[0],
                u.op,
                u.refused.get(name).map_or("", String::as_str)
            );
        }
    }
    println!("wrote {}", out.display());
}

// `cleave measure`'s flags, declared here alone; `lib.rs` dispatches them.
#[derive(clap::Args)]
pub struct Args {
    /// The model file (.onnx). Its dims must be static, or fixed with --shape/--dim.
    pub model: std::path::PathBuf,
    #[command(flatten)]
    pub devices: crate::setup::DeviceArgs,
    #[command(flatten)]
    pub engine: crate::setup::EngineArgs,
    /// Untimed runs per unit and device before the timed ones.
    #[arg(long, default_value_t = 2)]
    pub warmup: u32,
    /// Timed runs per unit and device (the median is kept).
    #[arg(long, default_value_t = 10)]
    pub repeats: u32,
    /// Seconds after which every remaining unit gets one warm-up and one timed run.
    #[arg(long, value_name = "SECONDS")]
    pub budget: Option<f64>,
    /// Seed of the random inputs (inputs not given with --input).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[command(flatten)]
    pub input: crate::setup::InputArgs,
    /// The cost file to write (atomically).
    #[arg(short = 'o', long = "output", value_name = "COSTS.json")]
    pub output: std::path::PathBuf,
    /// Print the cost file instead of the summary.
    #[arg(long)]
    pub json: bool,
    /// Let each engine use every core. By default each runs on one thread, so that a
    /// device is a core of its own and its figures do not swing with the other cores'
    /// load; `bench --objective latency` then runs the engines as they were measured.
    #[arg(long)]
    pub all_cores: bool,
}
