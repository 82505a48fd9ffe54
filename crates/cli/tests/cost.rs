//! Placement by cost: `cleave measure` measures, `--objective latency` follows the figures
//! (rules and pins still hold), and bad cost files are refused in one line.

mod common;

use std::path::{Path, PathBuf};

use common::{assert_bad_input, cleave, os, stderr};
use serde_json::Value;

fn example() -> (PathBuf, PathBuf) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    (root.join("tiny_cnn.onnx"), root.join("tiny_cnn.part"))
}

fn ok(o: &std::process::Output) -> String {
    assert!(o.status.success(), "failed: {}", stderr(o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Profiles the example on `npu,cpu` (both on tract) into `dir/costs.json`.
fn profile(dir: &Path) -> (PathBuf, Value) {
    let (model, _) = example();
    let costs = dir.join("costs.json");
    ok(&cleave(&[
        os("measure"),
        model.as_os_str(),
        os("--dim"),
        os("batch=1"),
        os("--devices"),
        os("npu,cpu"),
        os("--repeats"),
        os("3"),
        os("-o"),
        costs.as_os_str(),
    ]));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&costs).unwrap()).unwrap();
    (costs, v)
}

/// `query --json` with the latency objective: node label → (device, reason).
fn placed(costs: &Path) -> Vec<(String, String, String, String)> {
    let (model, part) = example();
    let out = ok(&cleave(&[
        os("query"),
        model.as_os_str(),
        os("--dim"),
        os("batch=1"),
        os("--rules"),
        part.as_os_str(),
        os("--objective"),
        os("latency"),
        os("--costs"),
        costs.as_os_str(),
        os("--json"),
    ]));
    let v: Value = serde_json::from_str(&out).unwrap();
    v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let s = |k: &str| n[k].as_str().unwrap_or("").to_string();
            (s("name"), s("op"), s("device"), s("reason"))
        })
        .collect()
}

/// Sets every unit's figure on `slow` to a second, on the other device to a microsecond.
fn make_slow(v: &Value, slow: &str, path: &Path) {
    let mut v = v.clone();
    for u in v["units"].as_array_mut().unwrap() {
        for (dev, t) in u["latency_s"].as_object_mut().unwrap() {
            *t = Value::from(if dev == slow { 1.0 } else { 1e-6 });
        }
    }
    std::fs::write(path, serde_json::to_string(&v).unwrap()).unwrap();
}

#[test]
fn profile_measures_every_unit_and_latency_placement_follows_the_figures() {
    let tmp = tempfile::tempdir().unwrap();
    let (costs, v) = profile(tmp.path());
    assert_eq!(v["format"], "cleave-costs/1");
    for dev in ["npu", "cpu"] {
        let d = &v["devices"][dev];
        assert_eq!(d["engine"], "tract");
        assert!(d["launch_s"].as_f64().unwrap() > 0.0);
        assert!(d["io_bytes_per_s"].as_f64().unwrap() > 0.0);
        assert!(d["scale"].as_f64().unwrap() > 0.0);
    }
    let units = v["units"].as_array().unwrap();
    assert!(units.len() >= 6, "{units:?}");
    for u in units {
        for dev in ["npu", "cpu"] {
            let t = u["latency_s"][dev].as_f64();
            assert!(t.is_some_and(|t| t >= 0.0), "{u}");
        }
    }

    // The figures decide: with npu slow, every unit the rules leave free goes to cpu, and
    // the other way round; the [OPCODE] rules (Add and Softmax on cpu) hold either way.
    for (slow, fast) in [("npu", "cpu"), ("cpu", "npu")] {
        let file = tmp.path().join(format!("{slow}-slow.json"));
        make_slow(&v, slow, &file);
        let nodes = placed(&file);
        for (name, op, device, reason) in &nodes {
            if op == "Add" || op == "Softmax" {
                assert_eq!(device, "cpu", "{name}: the rule moved");
            } else {
                assert_eq!(device, fast, "{name} ({op}) stayed on the slow {slow}");
            }
            if device != "npu" && op != "Add" && op != "Softmax" {
                assert_eq!(reason, "latency", "{name}");
            }
        }
    }

    // The split is written, proven and predicted part by part.
    let (model, part) = example();
    let work = tmp.path().join("out");
    let out = ok(&cleave(&[
        os("partition"),
        model.as_os_str(),
        os("--dim"),
        os("batch=1"),
        os("--rules"),
        part.as_os_str(),
        os("--objective"),
        os("latency"),
        os("--costs"),
        costs.as_os_str(),
        os("-o"),
        work.as_os_str(),
    ]));
    assert!(
        out.contains("objective latency (exact, every one of"),
        "{out}"
    );
    assert!(
        out.contains("predicted, for comparison: capability"),
        "{out}"
    );
    assert!(out.contains("predicted latency:"), "{out}");
    ok(&cleave(&[
        os("check"),
        work.join("tiny_cnn.conn.json").as_os_str(),
    ]));
}

#[test]
fn declared_figures_place_a_2000_node_graph_and_say_they_are_declared() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("g.onnx");
    ok(&cleave(&[
        os("gen"),
        os("--nodes"),
        os("2000"),
        os("-o"),
        model.as_os_str(),
    ]));
    let npu = tmp.path().join("npu.toml");
    std::fs::write(
        &npu,
        "name = \"npu\"\nall_ops = true\n[cost]\ngflops = 100.0\nop_us = 2.0\nlaunch_us = 400.0\nio_gbps = 1.0\nlink_latency_us = 50.0\nlink_gbps = 1.0\n",
    )
    .unwrap();
    let cpu = tmp.path().join("cpu.toml");
    std::fs::write(
        &cpu,
        "name = \"cpu\"\nall_ops = true\n[cost]\ngflops = 10.0\nop_us = 5.0\nlaunch_us = 5.0\nio_gbps = 10.0\nlink_gbps = 10.0\n",
    )
    .unwrap();
    let work = tmp.path().join("out");
    let out = ok(&cleave(&[
        os("partition"),
        model.as_os_str(),
        os("--devices"),
        os("npu,cpu"),
        os("--profile"),
        npu.as_os_str(),
        os("--profile"),
        cpu.as_os_str(),
        os("--objective"),
        os("latency"),
        os("-o"),
        work.as_os_str(),
    ]));
    assert!(out.contains("declared figures for npu, cpu"), "{out}");
    // The planning time goes into the closing note; a benchmark, not this test, judges it.
    let planned = out
        .lines()
        .find(|l| l.starts_with("objective latency"))
        .unwrap();
    eprintln!("{planned}");
    // 2000 nodes at 2 µs on npu (one 400 µs launch) beat 5 µs each on cpu: all on npu.
    assert!(out.contains(" 1 part"), "{out}");
    ok(&cleave(&[
        os("check"),
        work.join("g.conn.json").as_os_str(),
    ]));
}

#[test]
fn bad_cost_files_are_refused_in_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let (costs, v) = profile(tmp.path());
    let (model, _) = example();
    let run = |costs: &Path, devices: &str, model: &Path| {
        let dim: &[&std::ffi::OsStr] = if model.ends_with("tiny_cnn.onnx") {
            &[os("--dim"), os("batch=1")]
        } else {
            &[]
        };
        cleave(
            &[
                &[os("partition"), model.as_os_str()],
                dim,
                &[
                    os("--devices"),
                    os(devices),
                    os("--objective"),
                    os("latency"),
                    os("--costs"),
                    costs.as_os_str(),
                    os("-o"),
                    tmp.path().join("never").as_os_str(),
                ],
            ]
            .concat(),
        )
    };
    // Measured on another model.
    let other = tmp.path().join("other.onnx");
    ok(&cleave(&[
        os("gen"),
        os("--nodes"),
        os("30"),
        os("-o"),
        other.as_os_str(),
    ]));
    assert_bad_input(
        &run(&costs, "npu,cpu", &other),
        &costs,
        "measured on another graph",
    );
    // A device the file does not have.
    assert_bad_input(
        &run(&costs, "npu,gpu", &model),
        &costs,
        "device 'gpu' has no figures",
    );
    // Negative and NaN figures, a zero rate, garbage, a truncated file.
    let mut negative = v.clone();
    negative["units"][0]["latency_s"]["npu"] = Value::from(-1.0);
    let mut zero_rate = v.clone();
    zero_rate["devices"]["cpu"]["io_bytes_per_s"] = Value::from(0.0);
    let text = serde_json::to_string(&v).unwrap();
    let nan = text.replacen("\"scale\":", "\"scale\":NaN,\"x\":", 1);
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "negative.json",
            serde_json::to_string(&negative).unwrap(),
            "is -1: figures must be finite and not negative",
        ),
        (
            "zero.json",
            serde_json::to_string(&zero_rate).unwrap(),
            "io_bytes_per_s is 0: a rate must be above zero",
        ),
        ("nan.json", nan, "not a cost file"),
        (
            "garbage.json",
            "\u{1}\u{2}garbage".into(),
            "not a cost file",
        ),
        (
            "truncated.json",
            text[..text.len() / 2].to_string(),
            "not a cost file",
        ),
    ];
    for (name, body, cause) in cases {
        let f = tmp.path().join(name);
        std::fs::write(&f, body).unwrap();
        assert_bad_input(&run(&f, "npu,cpu", &model), &f, cause);
    }
    assert!(
        !tmp.path().join("never").exists(),
        "a refused run wrote its workdir"
    );
    // No figures at all for a device without a cost file or declared [cost].
    let o = cleave(&[
        os("query"),
        model.as_os_str(),
        os("--devices"),
        os("npu,cpu"),
        os("--objective"),
        os("latency"),
    ]);
    assert_bad_input(&o, &model, "has no latency figures");
}

/// `partition --stages` with --costs: stage times in seconds from the file, and a device made
/// slower in the file gets a smaller stage.
#[test]
fn pipeline_stages_take_their_times_from_the_cost_file() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, mut v) = profile(tmp.path());
    // Measured figures on a busy machine can already put one node on the first stage, which
    // would leave nothing to shrink; equal figures make the baseline split balanced.
    for u in v["units"].as_array_mut().unwrap() {
        for dev in ["npu", "cpu"] {
            if u["latency_s"][dev].is_number() {
                u["latency_s"][dev] = Value::from(1e-4);
            }
        }
    }
    let costs = tmp.path().join("even.json");
    std::fs::write(&costs, serde_json::to_string(&v).unwrap()).unwrap();
    let (model, _) = example();
    let stages = |costs: &Path| {
        let out = ok(&cleave(&[
            os("partition"),
            model.as_os_str(),
            os("--dim"),
            os("batch=1"),
            os("--stages"),
            os("2"),
            os("--devices"),
            os("npu,cpu"),
            os("--costs"),
            costs.as_os_str(),
            os("--dry-run"),
        ]));
        assert!(out.contains("stage times from the cost figures"), "{out}");
        let first: usize = out
            .lines()
            .find(|l| l.trim_start().starts_with("1 "))
            .and_then(|l| l.split_whitespace().nth(2))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no stage row: {out}"));
        (first, out)
    };
    let (before, out) = stages(&costs);
    assert!(out.contains(" ms "), "{out}");
    for u in v["units"].as_array_mut().unwrap() {
        if let Some(s) = u["latency_s"]["npu"].as_f64() {
            u["latency_s"]["npu"] = Value::from(s * 50.0);
        }
    }
    let slow = tmp.path().join("slow.json");
    std::fs::write(&slow, serde_json::to_string(&v).unwrap()).unwrap();
    let (after, out) = stages(&slow);
    assert!(
        after < before,
        "npu 50x slower kept {after} of {before} nodes: {out}"
    );
}

/// Stages on identical workers, profiled once: a cost file that measured one device times the
/// stage devices it has no figures for with that device's, and says so; a file that measured
/// two still refuses a device it lacks.
#[test]
fn stages_on_identical_workers_take_the_one_measured_devices_figures() {
    let tmp = tempfile::tempdir().unwrap();
    let (two, mut v) = profile(tmp.path());
    let (model, _) = example();
    let stages = |costs: &Path| {
        cleave(&[
            os("partition"),
            model.as_os_str(),
            os("--dim"),
            os("batch=1"),
            os("--stages"),
            os("3"),
            os("--devices"),
            os("cpu,w2,w3"),
            os("--costs"),
            costs.as_os_str(),
            os("--dry-run"),
        ])
    };
    let o = stages(&two);
    assert_bad_input(&o, &two, "device 'w2' has no figures here");
    v["devices"].as_object_mut().unwrap().remove("npu");
    for u in v["units"].as_array_mut().unwrap() {
        u["latency_s"].as_object_mut().unwrap().remove("npu");
    }
    let one = tmp.path().join("cpu_only.json");
    std::fs::write(&one, serde_json::to_string(&v).unwrap()).unwrap();
    let out = ok(&stages(&one));
    assert!(
        out.contains("w2, w3 timed with cpu's, the one device the cost file measured")
            && out.contains(" ms "),
        "{out}"
    );
}

/// Without --costs, the built-in devices' default cost models place the split: capability's
/// scattered islands (87 parts of a random 300-node net on myriad,cpu, every tensor 16 bytes)
/// go to the CPU, where a part's launch and USB copies cost more than they save; the stderr
/// says the figures are estimates, and the printed totals compare both placements.
#[test]
fn default_costs_place_without_a_cost_file_and_say_they_are_estimates() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("g.onnx");
    ok(&cleave(&[
        os("gen"),
        os("--nodes"),
        os("300"),
        os("-o"),
        model.as_os_str(),
    ]));
    let run = |objective: &str, out: &str| {
        cleave(&[
            os("partition"),
            model.as_os_str(),
            os("--devices"),
            os("myriad,cpu"),
            os("--objective"),
            os(objective),
            os("-o"),
            tmp.path().join(out).as_os_str(),
        ])
    };
    let parts = |dir: &str| {
        std::fs::read_dir(tmp.path().join(dir))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".onnx")
            })
            .count()
    };
    ok(&run("fewest", "capability"));
    let o = run("latency", "latency");
    let out = ok(&o);
    let (cap, chosen) = (parts("capability"), parts("latency"));
    assert!(cap > 20, "capability gave {cap} parts");
    assert!(
        chosen < cap / 4,
        "{chosen} parts against capability's {cap}"
    );
    let err = stderr(&o);
    assert!(
        err.contains("built-in estimates") && err.contains("myriad, cpu"),
        "{err}"
    );
    assert!(out.contains("built-in estimates for myriad, cpu"), "{out}");
    // "predicted X ms" for the choice, "capability Y ms (N parts)" for comparison.
    let number_after = |key: &str| -> f64 {
        let at = out
            .find(key)
            .unwrap_or_else(|| panic!("no '{key}' in {out}"))
            + key.len();
        out[at..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (total, capability) = (number_after("; predicted "), number_after("capability "));
    assert!(
        total < capability,
        "{total} ms chosen, {capability} capability"
    );
    assert!(out.contains(&format!("({cap} parts)")), "{out}");
}
