//! `cleave measure`: each unit of a model run alone on the engine of every device that may
//! run it, with the engines' per-call and copy costs measured on a probe, into a cost file.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use cleave_assign::inseparable_pairs;
use cleave_cost::{fingerprint, CostFile, DeviceEntry, ModelStamp, Profiling, UnitEntry, FORMAT};
use cleave_device::Verdict;
use cleave_frontend::ExternalData;
use cleave_ir::ElemType;
use cleave_partition::{validate, Partition, Plan, UnitGraph};
use cleave_runtime::{part_format, Engine, EngineKind, EngineMap, HostTensor, Session};

use crate::partitioned::record_engine;
use crate::{Devices, Error, LoadedModel};

/// How to measure.
#[derive(Clone, Debug)]
pub struct MeasureOptions {
    pub engines: EngineMap,
    /// Untimed runs before the timed ones (engines build plans and caches on the first).
    pub warmup: u32,
    /// Timed runs per unit and device; the median is kept.
    pub repeats: u32,
    /// Past this, every remaining unit gets one warm-up and one timed run.
    pub budget: Option<Duration>,
    /// The flags the model was loaded with (`--shape`, `--optimize`…), recorded in the file.
    pub flags: Vec<String>,
    /// Each engine on one core: a device is then a core of its own, and its figures do not
    /// swing with what the other cores do (ONNX Runtime on two threads of a shared 2-core
    /// machine measured 65 ms or 110–186 ms on resnet50 from one minute to the next; on
    /// one thread, 109–114 ms).
    pub single_thread: bool,
}

impl Default for MeasureOptions {
    fn default() -> Self {
        MeasureOptions {
            engines: crate::engine_registry().map(),
            warmup: 2,
            repeats: 10,
            budget: None,
            flags: Vec::new(),
            single_thread: true,
        }
    }
}

/// Elements of the large probe tensor (4 MiB of f32): big enough that copying it dwarfs a call.
const PROBE_ELEMENTS: i64 = 1 << 20;

/// The median of timed runs, in seconds (0 for none): what every figure cleave measures
/// reports, as it is robust to the odd slow run.
pub fn median_seconds(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v.get(v.len() / 2).map_or(0.0, Duration::as_secs_f64)
}

fn bytes_of(feed: &[(String, HostTensor)]) -> u64 {
    feed.iter().map(|(_, t)| t.data.len() as u64).sum()
}

/// Times `runs` calls of `s` on `feed`, the copy of the feed included (the runner copies a
/// part's inputs for every call).
fn time_runs(
    s: &mut dyn Session,
    feed: &[(String, HostTensor)],
    runs: u32,
) -> Result<(Vec<Duration>, u64), String> {
    let mut times = Vec::with_capacity(runs as usize);
    let mut out_bytes = 0;
    for _ in 0..runs {
        let t = Instant::now();
        let copy = feed.to_vec();
        let out = s.run(&copy).map_err(|e| e.to_string())?;
        times.push(t.elapsed());
        out_bytes = bytes_of(&out);
    }
    Ok((times, out_bytes))
}

/// An engine's call and copy figures, from the probe at two sizes.
fn probe(
    loaded: &LoadedModel,
    engine: &dyn Engine,
    dir: &Path,
    single_thread: bool,
) -> Result<DeviceEntry, Error> {
    let at = |n: i64, runs: u32| -> Result<f64, Error> {
        let path = dir.join(format!(
            "probe_{}_{n}.{}",
            engine.name(),
            loaded.source.extension()
        ));
        loaded.source.write_probe(ElemType::F32, &[n], &path)?;
        let mut s = engine.load(&path, single_thread)?;
        let x = HostTensor::random(ElemType::F32, &[n as usize], 1).map_err(Error::usage)?;
        let feed = vec![("x".to_string(), x)];
        time_runs(s.as_mut(), &feed, 3).map_err(|e| Error::engine(&path, e))?;
        let (t, _) = time_runs(s.as_mut(), &feed, runs).map_err(|e| Error::engine(&path, e))?;
        Ok(median_seconds(t))
    };
    let small = at(1, 50)?;
    let big = at(PROBE_ELEMENTS, 15)?;
    // In and out: each byte crosses twice.
    let bytes = 2.0 * 4.0 * PROBE_ELEMENTS as f64;
    Ok(DeviceEntry {
        engine: engine.name().to_string(),
        launch_s: small,
        io_bytes_per_s: bytes / (big - small).max(1e-9),
        scale: 1.0,
    })
}

/// Measures every unit of `loaded` on every device of `devices` that may run it, with the
/// model inputs `feeds`. `progress(done, total, what)` is called as it goes.
pub fn measure(
    loaded: &LoadedModel,
    devices: &Devices,
    feeds: &[(String, HostTensor)],
    opts: &MeasureOptions,
    progress: &dyn Fn(u64, u64, &str),
) -> Result<CostFile, Error> {
    let started = Instant::now();
    let g = loaded.graph();
    let sem = loaded.semantics();
    let names = devices.order();
    let dir = cleave_workdir::private_tempdir("cleave-")
        .map_err(|e| Error::usage(format!("cannot make a temporary folder: {e}")))?;

    // Units: every placed node, a quantize and its dequantize together; each written alone.
    let one = loaded.on_one_device("profile");
    let units = UnitGraph::from_assignment(g, &one, &inseparable_pairs(g, sem));
    let plan = Plan::build(g, &one, &units, &Partition::singletons(&units))
        .map_err(|e| Error::internal(loaded.path(), e))?;
    let plan = validate(g, &one, plan)
        .map_err(|e| Error::internal(loaded.path(), format!("the unit split is invalid: {e}")))?;
    let written =
        loaded
            .source
            .write_parts(&plan, dir.path(), ExternalData::Inline, &record_engine)?;
    let parts = &plan.plan().parts;

    // Every tensor a unit reads, computed once by the whole model.
    let given: HashMap<&str, &HostTensor> = feeds.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let wanted: Vec<cleave_ir::ValueId> = parts
        .iter()
        .flat_map(|p| p.inputs.iter().copied())
        .filter(|&v| !given.contains_key(g.value(v).name.as_str()))
        .collect();
    let whole = dir
        .path()
        .join(format!("whole.{}", loaded.source.extension()));
    loaded.source.write_with_outputs(&wanted, &whole)?;
    let values = reference_values(&whole, feeds)?;
    let whole_plain = dir
        .path()
        .join(format!("plain.{}", loaded.source.extension()));
    loaded.source.write_with_outputs(&[], &whole_plain)?;

    // Each engine measures every unit once (devices on one engine share the figures), and
    // the whole model as one part, which calibrates the sum of its units.
    let format = loaded.source.extension();
    let engine_of = |d: &str| opts.engines.for_part(d, format).map_err(Error::usage);
    let mut kinds: Vec<EngineKind> = names
        .iter()
        .map(|d| engine_of(d))
        .collect::<Result<_, _>>()?;
    kinds.sort();
    kinds.dedup();
    let total = (kinds.len() * parts.len()) as u64;
    let mut done = 0u64;
    let mut budget_hit = false;
    let mut per_engine: BTreeMap<EngineKind, EngineFigures> = BTreeMap::new();
    for kind in &kinds {
        let engine = crate::engine(kind.clone())?;
        progress(done, total, &format!("{}: probing", engine.name()));
        let entry = probe(loaded, engine.as_ref(), dir.path(), opts.single_thread)?;
        let (launch, rate) = (entry.launch_s, entry.io_bytes_per_s);
        // Units are loaded a chunk at a time and timed in rounds, each round running every
        // unit of the chunk and the whole model once, so a burst of other load on the
        // machine costs a round, not one unit's figure.
        let mut whole = engine.load(&whole_plain, opts.single_thread).ok();
        let mut whole_times = Vec::new();
        let mut whole_out = 0u64;
        let mut unit_s: Vec<Result<f64, String>> = vec![Err(String::new()); parts.len()];
        let mut first = 0;
        while first < parts.len() {
            let chunk = first..(first + CHUNK).min(parts.len());
            first = chunk.end;
            let mut live: Vec<Timed> = Vec::new();
            for k in chunk.clone() {
                progress(
                    done,
                    total,
                    &format!(
                        "{}: loading {}",
                        engine.name(),
                        g.node_label(parts[k].nodes[0])
                    ),
                );
                let feed = feed_of(loaded, &parts[k].inputs, &given, &values)?;
                let file = dir.path().join(&written.parts[k].file);
                let warm = engine
                    .load(&file, opts.single_thread)
                    .map_err(|e| one_line(&e.to_string()))
                    .and_then(|mut s| {
                        time_runs(s.as_mut(), &feed, opts.warmup.max(1))?;
                        Ok(s)
                    });
                match warm {
                    Ok(session) => live.push(Timed {
                        unit: k,
                        session,
                        feed,
                        times: Vec::new(),
                        out_bytes: 0,
                    }),
                    Err(why) => unit_s[k] = Err(why),
                }
            }
            if let Some(w) = whole.as_mut() {
                if whole_times.is_empty()
                    && time_runs(w.as_mut(), feeds, opts.warmup.max(1)).is_err()
                {
                    whole = None;
                }
            }
            for round in 0..opts.repeats.max(1) {
                if round > 0 && opts.budget.is_some_and(|b| started.elapsed() > b) {
                    budget_hit = true;
                    break;
                }
                for t in &mut live {
                    match time_runs(t.session.as_mut(), &t.feed, 1) {
                        Ok((d, out)) => {
                            t.times.extend(d);
                            t.out_bytes = out;
                        }
                        Err(why) => unit_s[t.unit] = Err(one_line(&why)),
                    }
                }
                if let Some(w) = whole.as_mut() {
                    match time_runs(w.as_mut(), feeds, 1) {
                        Ok((d, out)) => {
                            whole_times.extend(d);
                            whole_out = out;
                        }
                        Err(_) => whole = None,
                    }
                }
                progress(
                    done,
                    total,
                    &format!(
                        "{}: round {} of {}",
                        engine.name(),
                        round + 1,
                        opts.repeats.max(1)
                    ),
                );
            }
            for t in live {
                if t.times.is_empty() || unit_s[t.unit].as_ref().is_err_and(|w| !w.is_empty()) {
                    continue;
                }
                let io = (bytes_of(&t.feed) + t.out_bytes) as f64 / rate;
                unit_s[t.unit] = Ok((median_seconds(t.times) - launch - io).max(0.0));
            }
            done += chunk.len() as u64;
        }
        let scale = (unit_s.iter().all(Result::is_ok) && !whole_times.is_empty()).then(|| {
            let sum: f64 = unit_s.iter().flatten().sum();
            let io = (bytes_of(feeds) + whole_out) as f64 / rate;
            ((median_seconds(whole_times) - launch - io).max(0.0) / sum.max(1e-12)).clamp(0.1, 10.0)
        });
        per_engine.insert(
            kind.clone(),
            EngineFigures {
                entry: DeviceEntry {
                    scale: scale.unwrap_or(1.0),
                    ..entry
                },
                unit_s,
            },
        );
    }
    let mut entries: BTreeMap<String, DeviceEntry> = BTreeMap::new();
    let mut unit_entries: Vec<UnitEntry> = parts
        .iter()
        .map(|p| UnitEntry {
            nodes: p
                .nodes
                .iter()
                .map(|&n| g.node_label(n).to_string())
                .collect(),
            op: p
                .nodes
                .iter()
                .map(|&n| g.node(n).op_type.as_str())
                .collect::<Vec<_>>()
                .join("+"),
            latency_s: BTreeMap::new(),
            refused: BTreeMap::new(),
        })
        .collect();
    for device in &names {
        let Some(fig) = per_engine.get(&engine_of(device)?) else {
            continue;
        };
        entries.insert(device.clone(), fig.entry.clone());
        for (k, part) in parts.iter().enumerate() {
            let runs_on = part
                .nodes
                .iter()
                .all(|&n| devices.profiles.check(device, g, g.node(n), sem) == Verdict::Supported);
            if !runs_on {
                continue;
            }
            match &fig.unit_s[k] {
                Ok(s) => {
                    unit_entries[k].latency_s.insert(device.clone(), *s);
                }
                Err(why) => {
                    unit_entries[k].refused.insert(device.clone(), why.clone());
                }
            }
        }
    }
    progress(done, total, "done");
    Ok(CostFile {
        format: FORMAT.into(),
        model: ModelStamp {
            file: loaded
                .path()
                .file_name()
                .map_or_else(String::new, |f| f.to_string_lossy().into_owned()),
            nodes: g.nodes.len(),
            fingerprint: fingerprint(g),
            flags: opts.flags.clone(),
        },
        devices: entries,
        links: Vec::new(),
        units: unit_entries,
        profiling: Profiling {
            warmup: opts.warmup,
            repeats: opts.repeats,
            seconds: started.elapsed().as_secs_f64(),
            budget_hit,
            single_thread: opts.single_thread,
        },
    })
}

/// Units loaded at once while profiling (each holds an engine session).
const CHUNK: usize = 256;

/// A unit being timed.
struct Timed {
    unit: usize,
    session: Box<dyn Session>,
    feed: Vec<(String, HostTensor)>,
    times: Vec<Duration>,
    out_bytes: u64,
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

struct EngineFigures {
    entry: DeviceEntry,
    /// Per unit: its seconds, or why the engine refused it.
    unit_s: Vec<Result<f64, String>>,
}

/// A unit's inputs: model inputs as given, the rest as the whole model computed them.
fn feed_of(
    loaded: &LoadedModel,
    inputs: &[cleave_ir::ValueId],
    given: &HashMap<&str, &HostTensor>,
    values: &HashMap<String, HostTensor>,
) -> Result<Vec<(String, HostTensor)>, Error> {
    let g = loaded.graph();
    inputs
        .iter()
        .map(|&v| {
            let name = &g.value(v).name;
            let t = given
                .get(name.as_str())
                .copied()
                .or_else(|| values.get(name.as_str()));
            t.map(|t| (name.to_string(), t.clone())).ok_or_else(|| {
                Error::engine(
                    loaded.path(),
                    format!("no value for '{name}' from the whole model"),
                )
            })
        })
        .collect()
}

/// Runs the whole model once, on the first of its engines that runs it (ONNX Runtime where it
/// is found, else tract; LiteRT for TFLite), else on its format's default engine (onert for
/// circle).
fn reference_values(
    whole: &Path,
    feeds: &[(String, HostTensor)],
) -> Result<HashMap<String, HostTensor>, Error> {
    let registry = crate::engine_registry();
    let format = part_format(whole, None);
    let mut kinds = registry.candidates(&format);
    if kinds.is_empty() {
        kinds.extend(registry.default_for(&format));
    }
    let mut why = Vec::new();
    if kinds.is_empty() {
        why.push(format!("no engine runs {format} models"));
    }
    for kind in kinds {
        let run = crate::engine(kind.clone())
            .and_then(|e| Ok(e.load(whole, false)?))
            .and_then(|mut s| Ok(s.run(feeds)?));
        match run {
            Ok(out) => return Ok(out.into_iter().collect()),
            Err(e) => why.push(format!("{}: {e}", kind.name())),
        }
    }
    Err(Error::engine(
        whole,
        format!(
            "the whole model does not run, so its units cannot be fed: {}",
            why.join("; ")
        ),
    ))
}
