use std::path::{Path, PathBuf};

use cleave::load_model;
use cleave::runtime::runner::PartStats;
use cleave::runtime::verify::{check_outputs, Report, Row, Tolerance};

use crate::run_cmd::{engines, load_parts, runtime_fail};
use crate::setup::DeviceArgs;
use crate::{inputs, Fail};

pub struct VerifyArgs<'a> {
    pub model: &'a Path,
    pub conn: Option<&'a Path>,
    pub devices: &'a DeviceArgs,
    pub boundaries: bool,
    pub tolerance: Tolerance,
    pub seed: u64,
    pub inputs: &'a [String],
    pub engines: &'a [(String, String)],
    /// The whole model's engine; by default LiteRT for TFLite, tract otherwise.
    pub reference: Option<&'a str>,
    /// Inferences in a row on the same sessions, each compared (state carries over).
    pub invokes: u32,
    pub json: bool,
}

/// Returns whether every compared tensor is within tolerance.
pub fn run(a: VerifyArgs) -> Result<bool, Fail> {
    let tmp = cleave::workdir::private_tempdir("cleave-")
        .map_err(|e| Fail::usage(format!("cannot make a temporary folder: {e}")))?;
    let conn_path: PathBuf = match a.conn {
        Some(c) => c.to_path_buf(),
        None => crate::partition_cmd::partition_into(a.model, a.devices, tmp.path(), false)?,
    };
    let bar = crate::progress::spinner("loading the model and its parts");
    // With --optimize the parts are cut from the rewritten model; the reference stays the
    // untouched source, so the check spans the rewrites as well as the cut.
    let rewritten = a.conn.is_none() && a.devices.optimize.is_some();
    // Random inputs take the shapes --shape and --dim fix, else those the partition records.
    let source = if rewritten {
        a.devices.fix(load_model(a.model)?.source)?
    } else {
        crate::setup::conn_source(&conn_path, &a.devices.fixed_dims()?)?
    };
    let same = |p: &Path| p.canonicalize().ok();
    if same(source.path()) != same(a.model) {
        return Err(Fail::input(
            &conn_path,
            format!(
                "partitions {}, not {}",
                source.path().display(),
                a.model.display()
            ),
        ));
    }
    let model = source.model();
    let g = &model.graph;
    let map = engines(a.engines)?;
    let mut parts = load_parts(&conn_path, &map, false)?;
    // A partition verifies the model only when it gives the model's outputs, all of them.
    let model_outputs: Vec<&str> = g
        .outputs
        .iter()
        .map(|&v| g.value(v).name.as_str())
        .collect();
    check_outputs(&model_outputs, &parts.conn.source.outputs)
        .map_err(|e| Fail::input(&conn_path, e))?;

    // The tensors to compare: the model's outputs, and with --boundaries every tensor that
    // crosses between parts.
    let mut names: Vec<(String, bool)> = parts
        .conn
        .source
        .outputs
        .iter()
        .map(|o| (o.clone(), true))
        .collect();
    if a.boundaries {
        for p in &parts.conn.parts {
            for t in p.inputs.iter().chain(&p.outputs) {
                if !parts.conn.source.inputs.contains(t) && !names.iter().any(|(n, _)| n == t) {
                    if model.graph.find(t).is_some() {
                        names.push((t.clone(), false));
                    } else if !rewritten {
                        return Err(Fail::input(
                            &conn_path,
                            format!("boundary tensor '{t}' is not in the source model"),
                        ));
                    }
                }
            }
        }
    }
    let reference = match a.reference {
        Some(r) => cleave::parse_engine("--reference", r)?,
        None => cleave::default_engine(source.path())?,
    };
    let engine = cleave::engine(reference.clone())?;
    let mut whole = if a.boundaries {
        let extra: Vec<_> = names.iter().filter_map(|(n, _)| g.find(n)).collect();
        let path = tmp
            .path()
            .join(format!("whole-with-boundaries.{}", source.extension()));
        source.write_with_outputs(&extra, &path).map_err(|e| {
            // A failure about the model itself names the model as the user spelled it.
            let file = if e.path == source.path() {
                a.model
            } else {
                &e.path
            };
            Fail::input(file, &e)
        })?;
        engine.load(&path, false).map_err(runtime_fail)?
    } else {
        engine.load(source.path(), false).map_err(runtime_fail)?
    };
    let mut report = Report::default();
    let mut stats = vec![PartStats::default(); parts.sessions.len()];
    for k in 0..a.invokes {
        // The same sessions each time: what a stateful model keeps between inferences is
        // carried on both sides.
        let feeds = inputs::gather(g, a.inputs, a.seed.wrapping_add(u64::from(k)), true)?;
        bar.set_message("running the whole model");
        let expected = whole.run(&feeds).map_err(runtime_fail)?;
        bar.set_message("running the parts");
        let got = parts.run(feeds, &mut stats).map_err(runtime_fail)?;
        let label = |name: &str| {
            if a.invokes == 1 {
                name.to_string()
            } else {
                format!("{name} @{}", k + 1)
            }
        };
        compare(&names, &expected, &got, &a, &conn_path, &mut report, label)?;
    }
    bar.finish_and_clear();
    let passed = report.verdict().map_err(|e| Fail::input(&conn_path, e))?;
    for name in &report.skipped {
        eprintln!("cleave: note: '{name}' is not a tensor; not compared");
    }
    // A difference two engines are known to make without either being wrong is said so.
    for row in report.rows.iter().filter(|r| !r.ok) {
        let tensor = row.tensor.split(" @").next().unwrap_or(&row.tensor);
        let Some(v) = g.find(tensor) else { continue };
        let Some(node) = g.value(v).producer() else {
            continue;
        };
        let part = parts
            .conn
            .parts
            .iter()
            .position(|p| p.outputs.iter().any(|o| o == tensor));
        let (Some(part), Some(elem)) = (part, g.value(v).ty.elem) else {
            continue;
        };
        let engines = [parts.engines[part].name(), reference.name()];
        let node = g.node(node);
        let input = node.inputs.first().copied().flatten();
        let input = input.and_then(|v| g.value(v).ty.elem);
        let (op, d) = (node.op_type.as_str(), row.diff.max_abs);
        if let Some(why) = cleave::known_disagreement(op, input, elem, d, engines) {
            eprintln!("cleave: note: '{}': {why}", row.tensor);
        }
    }
    print(&report, &a.tolerance, a.json, &reference.label());
    Ok(passed)
}

/// Every tensor of `names` the parts gave against the whole model's, into `report`.
fn compare(
    names: &[(String, bool)],
    expected: &[(String, cleave::runtime::HostTensor)],
    got: &std::collections::HashMap<String, cleave::runtime::HostTensor>,
    a: &VerifyArgs,
    conn_path: &Path,
    report: &mut Report,
    label: impl Fn(&str) -> String,
) -> Result<(), Fail> {
    for (name, is_output) in names {
        let (name, is_output) = (name.clone(), *is_output);
        let want = expected.iter().find(|(n, _)| *n == name).map(|(_, t)| t);
        if want.is_none() && !got.contains_key(&name) {
            // Neither side gives it as a tensor (a sequence or map output): nothing to compare.
            if !report.skipped.contains(&name) {
                report.skipped.push(name);
            }
            continue;
        }
        let want = want.ok_or_else(|| {
            Fail::input(a.model, format!("the whole model did not produce '{name}'"))
        })?;
        let have = got
            .get(&name)
            .ok_or_else(|| Fail::input(conn_path, format!("no part produced '{name}'")))?;
        let (diff, ok) = a.tolerance.compare(have, want);
        report.rows.push(Row {
            tensor: label(&name),
            is_output,
            diff,
            ok,
        });
    }
    Ok(())
}

fn print(r: &Report, tol: &Tolerance, json: bool, reference: &str) {
    if json {
        let rows: Vec<_> = r
            .rows
            .iter()
            .map(|x| serde_json::json!({ "tensor": x.tensor, "kind": if x.is_output { "output" } else { "boundary" }, "max_abs": x.diff.max_abs, "max_rel": x.diff.max_rel, "rel_l2": x.diff.rel_l2, "beyond": x.diff.beyond, "ok": x.ok }))
            .collect();
        let mut v = serde_json::json!({ "tolerance": tol.describe(), "reference": reference, "passed": r.passed(), "tensors": rows });
        match *tol {
            Tolerance::Norm(t) => v["tol"] = t.into(),
            Tolerance::Elementwise { rtol, atol } => {
                v["rtol"] = rtol.into();
                v["atol"] = atol.into();
            }
        }
        if let Ok(t) = serde_json::to_string_pretty(&v) {
            println!("{t}");
        }
        return;
    }
    let w = r
        .rows
        .iter()
        .map(|x| x.tensor.len())
        .max()
        .unwrap_or(6)
        .max(6);
    println!(
        "{:<w$}  {:<8}  {:>10}  {:>10}  status",
        "tensor", "kind", "max abs", "rel L2"
    );
    for x in &r.rows {
        let status = match (x.ok, tol) {
            (true, _) => "ok".to_string(),
            (false, Tolerance::Elementwise { .. }) => {
                format!("{} elements beyond tolerance", x.diff.beyond)
            }
            (false, Tolerance::Norm(_)) => format!(
                "beyond tolerance ({} of its elements differ)",
                x.diff.beyond
            ),
        };
        println!(
            "{:<w$}  {:<8}  {:>10.3e}  {:>10.3e}  {status}",
            x.tensor,
            if x.is_output { "output" } else { "boundary" },
            x.diff.max_abs,
            x.diff.rel_l2
        );
    }
    let bad = r.rows.iter().filter(|x| !x.ok).count();
    let tol = tol.describe();
    if bad == 0 {
        println!(
            "verify: {} tensors match the whole model ({reference}) within {tol}",
            r.rows.len()
        );
    } else {
        println!(
            "verify: {bad} of {} tensors differ from the whole model ({reference}) beyond {tol}",
            r.rows.len()
        );
    }
}

// `cleave verify`'s flags, declared here alone; `lib.rs` dispatches them.
#[derive(clap::Args)]
pub struct Args {
    /// The source model.
    pub model: std::path::PathBuf,
    /// A partition of it (stem.conn.json); without one, MODEL is partitioned with the
    /// device flags into a temporary folder.
    pub conn: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub devices: crate::setup::DeviceArgs,
    /// Also compare every boundary tensor with the same tensor inside the whole model.
    #[arg(long)]
    pub boundaries: bool,
    /// Largest relative L2 error of a float tensor (at least 16 epsilons of its type, so
    /// float16 gets 1.6e-2).
    #[arg(long, default_value_t = cleave::runtime::verify::DEFAULT_NORM_TOL, conflicts_with_all = ["rtol", "atol"])]
    pub tol: f64,
    /// Compare element by element instead: |parts − whole| <= atol + rtol·|whole|
    /// (default 1e-4 when only --atol is given).
    #[arg(long)]
    pub rtol: Option<f64>,
    /// Absolute part of the element-wise check (default 1e-5 when only --rtol is given).
    #[arg(long)]
    pub atol: Option<f64>,
    /// Seed of the random inputs (inputs not given with --input).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[command(flatten)]
    pub input: crate::setup::InputArgs,
    #[command(flatten)]
    pub engine: crate::setup::EngineArgs,
    /// Engine that runs the whole model (tract, ort, litert, openvino[:DEVICE],
    /// onert[:BACKENDS]). Default: litert for a .tflite model, onert for a .circle one,
    /// else tract.
    #[arg(long)]
    pub reference: Option<String>,
    /// Run N inferences in a row on the same sessions (random inputs seeded SEED, SEED+1,
    /// ...), comparing each: a stateful model's variables carry over between them.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub invokes: u32,
    /// Compare generation instead (a decoder): N tokens, greedy, from the parts and from
    /// the whole model on --reference, from the same --prompt-ids; passes when the tokens are
    /// equal and every step's logits are within --tol. State pairs as `cleave generate`.
    #[arg(long, value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000))]
    pub generate: Option<usize>,
    #[command(flatten)]
    pub prompt: crate::generate_cmd::PromptArgs,
    #[arg(long)]
    pub json: bool,
}

/// Whether every tensor compared matched.
pub fn main(a: Args) -> Result<bool, Fail> {
    let tolerance = if a.rtol.is_some() || a.atol.is_some() {
        Tolerance::Elementwise {
            rtol: a.rtol.unwrap_or(1e-4),
            atol: a.atol.unwrap_or(1e-5),
        }
    } else {
        Tolerance::Norm(a.tol)
    };
    if let Some(tokens) = a.generate {
        return crate::verify_generate::run(crate::verify_generate::GenerateCheck {
            model: &a.model,
            conn: a.conn.as_deref(),
            devices: &a.devices,
            tokens,
            prompt: &a.prompt,
            engines: &a.engine.engines,
            reference: a.reference.as_deref(),
            tolerance,
            json: a.json,
        });
    }
    run(VerifyArgs {
        model: &a.model,
        conn: a.conn.as_deref(),
        devices: &a.devices,
        boundaries: a.boundaries,
        tolerance,
        seed: a.seed,
        inputs: &a.input.inputs,
        engines: &a.engine.engines,
        reference: a.reference.as_deref(),
        invokes: a.invokes,
        json: a.json,
    })
}
