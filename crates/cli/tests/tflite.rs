//! TFLite through the binary: seeded random splits of every test model by opcode and by
//! opname over 2 and 3 backends, each partition checked without cleave by
//! `scripts/oracles/check_tflite_parts.py` (LiteRT runs the source with every tensor kept and the
//! parts chained; every boundary tensor compared), and bad files refused in one line.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{
    assert_bad_input, check_tflite_parts, cleave, ok, os, query_nodes, repo, stderr,
    write_part_file, Rng,
};
use serde_json::Value;

/// Backends with no profile: `.part` rules place nodes on them unchecked, as ONE's
/// partitioner does, so every random rule is obeyed. (The built-in `cpu`/`acl_*` profiles
/// refuse ops ONE's runtime lacks, e.g. PRELU on cpu; `query` tests them below.)
const BACKENDS: [&str; 3] = ["host", "dsp", "gpu"];

fn part_file(dir: &Path, backends: &[&str], section: &str, rules: &[(String, &str)]) -> PathBuf {
    let path = dir.join(format!("{section}-{}.part", backends.len()));
    write_part_file(&path, backends, section, rules);
    path
}

/// The model's placed operators (name, op, device) with every one on the first backend.
fn placed_nodes(dir: &Path, model: &Path) -> Vec<(String, String, String)> {
    let all_host = part_file(dir, &BACKENDS[..1], "OPCODE", &[]);
    query_nodes(model, &[os("--rules"), all_host.as_os_str()])
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, _, device)| !device.is_empty())
        .collect()
}

/// `cleave partition MODEL ARGS... -o WORK`, which must succeed: what it printed (stdout and
/// stderr), the conn.json and what it holds.
fn partition(model: &Path, args: &[&std::ffi::OsStr], work: &Path) -> (String, PathBuf, Value) {
    let mut all = vec![os("partition"), model.as_os_str()];
    all.extend_from_slice(args);
    all.extend([os("-o"), work.as_os_str()]);
    let o = cleave(&all);
    let said = ok(&o) + &stderr(&o);
    let stem = model.file_stem().unwrap().to_string_lossy();
    let conn = work.join(format!("{stem}.conn.json"));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&conn).unwrap()).unwrap();
    (said, conn, v)
}

/// One field of every part in a conn.json.
fn of_parts<'a>(v: &'a Value, field: &str) -> Vec<&'a str> {
    v["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[field].as_str().unwrap())
        .collect()
}

/// Partitions `model` by `[OPNAME]` rules into `work`: the conn.json, the part count and what
/// the command printed.
fn split_by_name(
    dir: &Path,
    model: &Path,
    work: &Path,
    backends: &[&str],
    rules: &[(String, &str)],
) -> (PathBuf, usize, String) {
    let part = part_file(dir, backends, "OPNAME", rules);
    let (said, conn, v) = partition(model, &[os("--rules"), part.as_os_str()], work);
    let parts = v["parts"].as_array().unwrap().len();
    (conn, parts, said)
}

#[test]
fn random_splits_of_every_model_reproduce_it_in_litert() {
    let tmp = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let mut total_parts = 0;
    for model in cleave_testdata::tflite_files() {
        let stem = model.file_stem().unwrap().to_string_lossy().into_owned();
        let all_cpu = part_file(tmp.path(), &BACKENDS[..1], "OPCODE", &[]);
        let nodes = query_nodes(&model, &[os("--rules"), all_cpu.as_os_str()]).unwrap_or_default();
        assert!(!nodes.is_empty(), "{stem}: query found no node");
        let ops: BTreeSet<&str> = nodes.iter().map(|(_, op, _)| op.as_str()).collect();
        for count in [2, 3] {
            let backends = &BACKENDS[..count];
            let by_code: Vec<(String, &str)> = ops
                .iter()
                .map(|op| (op.to_string(), backends[rng.below(count)]))
                .collect();
            let mut by_name: Vec<(String, &str)> = Vec::new();
            for (name, _, device) in &nodes {
                // A pin on a constant node (DEQUANTIZE/DENSIFY of weights) places it, and
                // LiteRT, which folds those at load and renames the result, could not run a
                // part that hands one on; partitioned, constants are copied where read.
                if rng.below(3) != 0 || device.is_empty() {
                    continue;
                }
                by_name.push((name.clone(), backends[1 + rng.below(count - 1)]));
            }
            for (section, rules) in [("OPCODE", by_code), ("OPNAME", by_name)] {
                let part = part_file(tmp.path(), backends, section, &rules);
                let work = tmp.path().join(format!("{stem}-{section}-{count}"));
                let (_, conn, v) = partition(&model, &[os("--rules"), part.as_os_str()], &work);
                let parts = v["parts"].as_array().unwrap().len();
                total_parts += parts;
                let summary = check_tflite_parts(&conn, &model, &[]);
                eprintln!("{stem} {section} over {count}: {summary}");
            }
        }
    }
    assert!(
        total_parts > 36,
        "{total_parts} parts in all: the splits did not split"
    );
}

/// Stateful streaming models (microWakeWord, int8: resource variables set up by CALL_ONCE),
/// every op pinned at random over 2 and 3 backends: each variable's handle, reads, writes and
/// the ops between them are moved into one part (said in a warning), each part holding a
/// variable runs the initialiser, and 5 invokes in a row, state carried, reproduce every part
/// output of the whole model in LiteRT. Split as the rules say, the parts fail inside LiteRT.
#[test]
fn stateful_models_keep_each_variable_in_one_part_across_invokes() {
    let tmp = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(0x5eed_57a7_e000_0001);
    let (mut parts_seen, mut moved) = (0, 0);
    for model in cleave_testdata::stateful_tflite_files() {
        let stem = model.file_stem().unwrap().to_string_lossy().into_owned();
        let nodes = placed_nodes(tmp.path(), &model);
        assert!(
            nodes.iter().any(|(_, op, _)| op == "READ_VARIABLE"),
            "{stem}: no variable"
        );
        for count in [2, 3] {
            let backends = &BACKENDS[..count];
            let rules: Vec<(String, &str)> = nodes
                .iter()
                .map(|(name, _, _)| (name.clone(), backends[rng.below(count)]))
                .collect();
            let work = tmp.path().join(format!("{stem}-{count}"));
            let (conn, parts, said) = split_by_name(tmp.path(), &model, &work, backends, &rules);
            moved += said
                .matches("to share one part with the rest of the state of")
                .count();
            parts_seen += parts;
            let summary = check_tflite_parts(&conn, &model, &[os("--invokes"), os("5")]);
            assert!(summary.contains("5 invokes in a row"), "{summary}");
            eprintln!("{stem} over {count}: {summary}");
            // cleave's own verify, on LiteRT, the same sessions 5 times in a row.
            let v = ok(&cleave(&[
                os("verify"),
                model.as_os_str(),
                conn.as_os_str(),
                os("--boundaries"),
                os("--invokes"),
                os("5"),
            ]));
            assert!(v.contains(" @5 ") && v.contains("verify: "), "{v}");
            assert!(!v.contains("beyond"), "{v}");
        }
    }
    assert!(
        moved > 0,
        "no variable's ops were split by the rules, so none was moved"
    );
    assert!(
        parts_seen > 16,
        "{parts_seen} parts in all: the splits did not split"
    );
}

/// Placement by cost on a stateful model: a fast accelerator that runs the convolutions but no
/// variable op, and a slow host that runs everything. The latency search moves units, never
/// one op of a variable's group on its own (the groups are glued into one unit before it
/// looks), so the parts keep every variable whole and 5 invokes match LiteRT's whole model.
#[test]
fn latency_placement_keeps_each_variable_in_one_part() {
    let tmp = tempfile::tempdir().unwrap();
    let model = cleave_testdata::stateful_tflite_files()
        .into_iter()
        .find(|p| p.ends_with("okay_nabu.tflite"))
        .unwrap();
    let npu = tmp.path().join("npu.toml");
    std::fs::write(
        &npu,
        "name = \"npu\"\n[formats.tflite]\n[formats.tflite.ops]\nCONV_2D = {}\nDEPTHWISE_CONV_2D = {}\nFULLY_CONNECTED = {}\nSTRIDED_SLICE = {}\nCONCATENATION = {}\n[cost]\ngflops = 100.0\nop_us = 1.0\nlaunch_us = 1.0\nio_gbps = 100.0\nlink_gbps = 100.0\n",
    )
    .unwrap();
    let host = tmp.path().join("host.toml");
    std::fs::write(
        &host,
        "name = \"host\"\nall_ops = true\n[cost]\ngflops = 0.01\nop_us = 200.0\nlaunch_us = 1.0\nio_gbps = 100.0\nlink_gbps = 100.0\n",
    )
    .unwrap();
    let work = tmp.path().join("parts");
    let (said, conn, v) = partition(
        &model,
        &[
            os("--devices"),
            os("npu,host"),
            os("--profile"),
            npu.as_os_str(),
            os("--profile"),
            host.as_os_str(),
            os("--objective"),
            os("latency"),
        ],
        &work,
    );
    let backends: BTreeSet<&str> = of_parts(&v, "backend").into_iter().collect();
    assert_eq!(backends, BTreeSet::from(["host", "npu"]), "{said}\n{v}");
    assert!(said.contains("predicted latency"), "{said}");
    // The temptation was there: host parts keep ops the npu runs ten thousand times faster
    // (the CONCATENATION and STRIDED_SLICE between a variable's read and its write).
    let mut tempting = 0;
    for p in v["parts"].as_array().unwrap() {
        if p["backend"] != "host" {
            continue;
        }
        let o = cleave(&[
            os("inspect"),
            work.join(p["file"].as_str().unwrap()).as_os_str(),
            os("--json"),
        ]);
        let ops: Value = serde_json::from_str(&ok(&o)).unwrap();
        let has = |op: &str| ops["ops"][op].as_u64().unwrap_or(0);
        if has("READ_VARIABLE") > 0 {
            tempting += has("CONCATENATION") + has("STRIDED_SLICE");
        }
    }
    assert!(tempting > 0, "{v}");
    check_tflite_parts(&conn, &model, &[os("--invokes"), os("5")]);
}

/// `cleave run --invokes 4` on a stateful model split over two backends writes each invoke's
/// outputs, and they are LiteRT's own four successive invokes of the whole model on the same
/// input, byte for byte; the answers change from invoke to invoke, so lost state would show.
#[test]
fn run_invokes_carry_the_state_from_one_invoke_to_the_next_as_litert_does() {
    let tmp = tempfile::tempdir().unwrap();
    let model = cleave_testdata::stateful_tflite_files()
        .into_iter()
        .find(|p| p.ends_with("okay_nabu.tflite"))
        .unwrap();
    let part = part_file(
        tmp.path(),
        &BACKENDS[..2],
        "OPCODE",
        &[
            ("DEPTHWISE_CONV_2D".into(), "dsp"),
            ("FULLY_CONNECTED".into(), "dsp"),
        ],
    );
    let work = tmp.path().join("parts");
    let (_, conn, v) = partition(&model, &[os("--rules"), part.as_os_str()], &work);
    assert!(v["parts"].as_array().unwrap().len() >= 3, "{v}");
    let input = v["source"]["inputs"][0].as_str().unwrap().to_string();
    // Output files are named after the tensor, with what a file name cannot hold as '_'.
    let output: String = v["source"]["outputs"][0]
        .as_str()
        .unwrap()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let x = cleave::runtime::HostTensor::random(cleave::ir::ElemType::I8, &[1, 3, 40], 3).unwrap();
    let x_path = tmp.path().join("x.npy");
    cleave::runtime::write_npy(&x_path, &x).unwrap();
    let out = tmp.path().join("out");
    ok(&cleave(&[
        os("run"),
        conn.as_os_str(),
        os("--input"),
        os(&format!("{input}={}", x_path.display())),
        os("--invokes"),
        os("4"),
        os("-o"),
        out.as_os_str(),
    ]));
    let oracle = tmp.path().join("oracle");
    std::fs::create_dir(&oracle).unwrap();
    let script = r#"
import sys, numpy as np
from ai_edge_litert.interpreter import Interpreter
it = Interpreter(model_path=sys.argv[1]); it.allocate_tensors()
i, o = it.get_input_details()[0], it.get_output_details()[0]
x = np.load(sys.argv[2])
for k in range(1, 5):
    it.set_tensor(i["index"], x); it.invoke()
    np.save(f"{sys.argv[3]}/{k}.npy", it.get_tensor(o["index"]))
"#;
    let o = Command::new("python3")
        .args([
            os("-c"),
            os(script),
            model.as_os_str(),
            x_path.as_os_str(),
            oracle.as_os_str(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let read = |p: PathBuf| cleave::runtime::read_npy(&p).unwrap();
    let mut answers = Vec::new();
    for k in 1..=4 {
        let got = read(out.join(format!("{output}.{k}.npy")));
        let want = read(oracle.join(format!("{k}.npy")));
        assert_eq!(got.data, want.data, "invoke {k}");
        answers.push(got.data);
    }
    assert!(answers.windows(2).any(|w| w[0] != w[1]), "{answers:?}");
    // Pipelined requests would interleave the state: refused.
    let o = cleave(&[
        os("run"),
        conn.as_os_str(),
        os("--invokes"),
        os("2"),
        os("--requests"),
        os("2"),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot be pipelined"), "{}", stderr(&o));
}

/// One node in `one_in`, each pinned by name to one of `backends`, at random.
fn pin_at_random<'b>(
    rng: &mut Rng,
    nodes: &[(String, String, String)],
    backends: &[&'b str],
    one_in: usize,
) -> Vec<(String, &'b str)> {
    let mut rules = Vec::new();
    for (name, _, _) in nodes {
        if rng.below(one_in) == 0 {
            rules.push((name.clone(), backends[rng.below(backends.len())]));
        }
    }
    rules
}

/// Keras exports as users get them (BirdNET 2.4: zero-element constants, RFFT2D, shapes
/// computed by SHAPE/PACK/REDUCE_PROD, dynamic dims inside), a third of the ops pinned at
/// random over 2 and 3 backends: every part loads and every boundary tensor matches LiteRT.
/// Split again with the input fixed and `--learn-dims`, every part allocates before any run
/// (without, a converter's placeholder dim at a part input stops some).
#[test]
fn keras_exports_split_at_random_reproduce_them_in_litert() {
    let tmp = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(0xb12d_2e74_0000_0001);
    let mut parts_seen = 0;
    for model in cleave_testdata::keras_tflite_files() {
        let stem = model.file_stem().unwrap().to_string_lossy().into_owned();
        let shape = if stem.contains("MData") {
            "serving_default_MNET_INPUT:0=1,3"
        } else {
            "INPUT=1,144000"
        };
        let nodes = placed_nodes(tmp.path(), &model);
        assert!(nodes.len() > 30, "{stem}: {} placed nodes", nodes.len());
        for count in [2, 3] {
            let backends = &BACKENDS[..count];
            let rules = pin_at_random(&mut rng, &nodes, backends, 3);
            let work = tmp.path().join(format!("{stem}-{count}"));
            let (conn, parts, _) = split_by_name(tmp.path(), &model, &work, backends, &rules);
            parts_seen += parts;
            eprintln!(
                "{stem} over {count}: {}",
                check_tflite_parts(&conn, &model, &[])
            );
            std::fs::remove_dir_all(&work).unwrap();
            let part = part_file(tmp.path(), backends, "OPNAME", &rules);
            let flags = [os("--rules"), part.as_os_str(), os("--shape"), os(shape)];
            let (said, conn, _) =
                partition(&model, &[&flags[..], &[os("--learn-dims")]].concat(), &work);
            assert!(said.contains("learned by running the model once"), "{said}");
            assert!(!said.contains("leaves dynamic"), "{said}");
            eprintln!(
                "{stem} over {count}, dims learned: {}",
                check_tflite_parts(&conn, &model, &[os("--prepared"), os("--shape"), os(shape)])
            );
            std::fs::remove_dir_all(&work).unwrap();
        }
    }
    assert!(
        parts_seen > 40,
        "{parts_seen} parts in all: the splits did not split"
    );
}

#[test]
fn bad_tflite_files_are_refused_in_one_line_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let model = cleave_testdata::tflite_files()
        .into_iter()
        .find(|p| p.ends_with("iris_landmark.tflite"))
        .unwrap();
    let bytes = std::fs::read(&model).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "truncated.tflite",
            bytes[..bytes.len() / 3].to_vec(),
            "not a valid tflite flatbuffer, or truncated",
        ),
        (
            "short.tflite",
            bytes[..6].to_vec(),
            "too short for a flatbuffer",
        ),
        (
            "garbage.tflite",
            b"this is not a flatbuffer at all, just text".to_vec(),
            "file identifier is",
        ),
        (
            "wrong-id.tflite",
            [&bytes[..4], b"XYZ0", &bytes[8..]].concat(),
            "file identifier is 'XYZ0', expected 'TFL3'",
        ),
        ("empty.tflite", Vec::new(), "too short"),
    ];
    for (name, data, cause) in cases {
        let path = tmp.path().join(name);
        std::fs::write(&path, &data).unwrap();
        let out_dir = tmp.path().join(format!("out-{name}"));
        let o = cleave(&[
            os("partition"),
            path.as_os_str(),
            os("--devices"),
            os("cpu"),
            os("-o"),
            out_dir.as_os_str(),
        ]);
        assert_bad_input(&o, &path, cause);
        assert!(!out_dir.exists(), "{name}: something was written");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            data,
            "{name}: the source changed"
        );
    }
}

#[test]
fn converted_to_circle_a_model_partitions_into_circle_parts_that_reproduce_it() {
    let tmp = tempfile::tempdir().unwrap();
    let model = cleave_testdata::tflite_files()
        .into_iter()
        .find(|p| p.ends_with("face_detection_short_range.tflite"))
        .unwrap();
    let circle = tmp.path().join("short.circle");
    ok(&cleave(&[
        os("convert"),
        model.as_os_str(),
        circle.as_os_str(),
    ]));
    let part = part_file(
        tmp.path(),
        &BACKENDS[..2],
        "OPCODE",
        &[("DEPTHWISE_CONV_2D".to_string(), "dsp")],
    );
    let work = tmp.path().join("w");
    let (_, conn, v) = partition(&circle, &[os("--rules"), part.as_os_str()], &work);
    let files = of_parts(&v, "file");
    assert!(
        files.len() > 2 && files.iter().all(|f| f.ends_with(".circle")),
        "{files:?}"
    );
    for f in &files {
        let head = std::fs::read(work.join(f)).unwrap();
        assert_eq!(&head[4..8], b"CIR0", "{f}");
    }
    // The circle source against the original TFLite: the check runs the circle files in
    // LiteRT under TFLite's identifier.
    eprintln!("{}", check_tflite_parts(&conn, &circle, &[]));
    // Served on Ray, the circle parts go to LiteRT converted to TFLite: the exported
    // application holds TFLite parts, which reproduce the original TFLite model in LiteRT.
    let app = tmp.path().join("app");
    let o = cleave(&[
        os("serve"),
        conn.as_os_str(),
        os("--export"),
        app.as_os_str(),
    ]);
    ok(&o);
    assert!(
        stderr(&o).contains("circle parts converted to TFLite"),
        "{}",
        stderr(&o)
    );
    let exported = app.join(conn.file_name().unwrap());
    let served: Value = serde_json::from_str(&std::fs::read_to_string(&exported).unwrap()).unwrap();
    let parts = served["parts"].as_array().unwrap();
    assert_eq!(parts.len(), files.len());
    for p in parts {
        assert_eq!(p["format"], "tflite", "{p}");
        let bytes = std::fs::read(app.join(p["file"].as_str().unwrap())).unwrap();
        assert_eq!(&bytes[4..8], b"TFL3", "{p}");
    }
    eprintln!("{}", check_tflite_parts(&exported, &model, &[]));
    // And back: the same tree as the original, so LiteRT computes the same.
    let back = tmp.path().join("back.tflite");
    ok(&cleave(&[
        os("convert"),
        circle.as_os_str(),
        back.as_os_str(),
    ]));
    let o = cleave(&[
        os("convert"),
        model.as_os_str(),
        tmp.path().join("x.onnx").as_os_str(),
    ]);
    assert_bad_input(
        &o,
        &tmp.path().join("x.onnx"),
        "converts to a .tflite or .circle file only",
    );
}

fn test_model(name: &str) -> PathBuf {
    cleave_testdata::tflite_files()
        .into_iter()
        .find(|p| p.file_name().is_some_and(|f| f == name))
        .unwrap_or_else(|| panic!("{name} not fetched"))
}

#[test]
fn query_reports_one_runtime_coverage_in_tflite_names() {
    // face_landmark: acl_cl runs every node, ONE's cpu backend has no PRELU.
    let model = test_model("face_landmark.tflite");
    let out = ok(&cleave(&[
        os("query"),
        model.as_os_str(),
        os("--devices"),
        os("acl_cl,cpu"),
    ]));
    assert!(out.contains("97 nodes: acl_cl 97, cpu 0"), "{out}");
    assert!(out.contains("acl_cl: 1 parts [97], 97/97 nodes"), "{out}");
    assert!(
        out.contains("unsupported op types (23 nodes): PRELU"),
        "{out}"
    );
    assert!(
        !out.contains("ai.onnx:"),
        "ONNX spelling on a TFLite model: {out}"
    );
    // On ONE's cpu alone the PRELUs cannot go anywhere: OpenVINO's message, naming one.
    let o = cleave(&[os("query"), model.as_os_str(), os("--devices"), os("cpu")]);
    assert_bad_input(&o, &model, "unsupported layer type PRELU");
    // The hint names a device that runs PRELU, never the list just typed.
    let e = stderr(&o);
    assert!(
        e.contains("e.g. --devices cpu,acl_cl") && !e.ends_with("--devices cpu\n"),
        "{e}"
    );
}

#[test]
fn verify_runs_tflite_parts_on_litert_against_the_whole_model() {
    let tmp = tempfile::tempdir().unwrap();
    let model = test_model("iris_landmark_uint8.tflite");
    let work = tmp.path().join("w");
    let (_, conn, v) = partition(&model, &[os("--devices"), os("xnnpack,acl_cl,cpu")], &work);
    let parts = v["parts"].as_array().unwrap().len();
    assert!(parts > 1, "{parts} part(s)");
    let out = ok(&cleave(&[
        os("verify"),
        model.as_os_str(),
        conn.as_os_str(),
        os("--boundaries"),
    ]));
    let last = out.lines().last().unwrap_or_default();
    assert!(last.contains("match the whole model (litert)"), "{out}");
    // A part file swapped for another part's: verify must see it.
    let files: Vec<&str> = v["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["file"].as_str().unwrap())
        .collect();
    let (a, b) = (work.join(files[0]), work.join(files[files.len() - 1]));
    std::fs::copy(&b, &a).unwrap();
    let o = cleave(&[
        os("verify"),
        model.as_os_str(),
        conn.as_os_str(),
        os("--boundaries"),
    ]);
    assert_ne!(o.status.code(), Some(0), "a swapped part passed verify");
}

#[test]
fn inspect_counts_the_operators_litert_counts() {
    for name in [
        "iris_landmark_uint8.tflite",
        "face_detection_full_range_sparse.tflite",
    ] {
        let model = test_model(name);
        let ours: Value = serde_json::from_str(&ok(&cleave(&[
            os("inspect"),
            model.as_os_str(),
            os("--json"),
        ])))
        .unwrap();
        let out = Command::new("python3")
            .arg(repo().join("scripts/oracles/tflite_oracle.py"))
            .arg("tensors")
            .arg(&model)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let litert: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(ours["format"], "tflite");
        let want = litert["ops"].as_object().unwrap();
        assert_eq!(ours["ops"].as_object().unwrap(), want, "{name}");
        let names = |v: &Value| -> Vec<String> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(names(&ours["inputs"]), names(&litert["inputs"]), "{name}");
        assert_eq!(names(&ours["outputs"]), names(&litert["outputs"]), "{name}");
    }
}

/// A one-operator model (x → ADD(x, w) → y) with `edit` applied to its tables.
fn broken_model(edit: impl FnOnce(&mut cleave::tflite::schema::tflite::ModelT)) -> Vec<u8> {
    use cleave::tflite::pack::{self, Layout};
    use cleave::tflite::schema::tflite as s;
    let tensor = |name: &str, buffer: u32| {
        let mut t = s::TensorT::default();
        t.shape = Some(vec![1, 4]);
        t.name = Some(name.into());
        t.buffer = buffer;
        t
    };
    let mut add = s::OperatorT::default();
    add.inputs = Some(vec![0, 1]);
    add.outputs = Some(vec![2]);
    let mut sg = s::SubGraphT::default();
    sg.tensors = Some(vec![tensor("x", 0), tensor("w", 1), tensor("y", 0)]);
    sg.inputs = Some(vec![0]);
    sg.outputs = Some(vec![2]);
    sg.operators = Some(vec![add]);
    let mut code = s::OperatorCodeT::default();
    code.deprecated_builtin_code = 0; // ADD
    let mut m = s::ModelT::default();
    m.version = 3;
    m.operator_codes = Some(vec![code]);
    m.subgraphs = Some(vec![sg]);
    edit(&mut m);
    let w = [0u8; 16];
    pack::tflite::pack(&m, &[&[], &w], Layout::Inline, "TFL3")
}

#[test]
fn tflite_files_with_bad_indices_are_refused_in_one_line() {
    use cleave::tflite::schema::tflite as s;
    fn sg(m: &mut s::ModelT) -> &mut s::SubGraphT {
        &mut m.subgraphs.as_mut().unwrap()[0]
    }
    let tmp = tempfile::tempdir().unwrap();
    type Edit = Box<dyn FnOnce(&mut s::ModelT)>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        ("sound", Box::new(|_| {}), ""),
        (
            "tensor-index",
            Box::new(move |m| sg(m).operators.as_mut().unwrap()[0].inputs = Some(vec![0, 7])),
            "operator 0 (ADD) reads tensor 7, out of range (3 tensors)",
        ),
        (
            "opcode-index",
            Box::new(move |m| sg(m).operators.as_mut().unwrap()[0].opcode_index = 5),
            "operator 0: operator code 5 out of range (1 codes)",
        ),
        (
            "buffer-index",
            Box::new(move |m| sg(m).tensors.as_mut().unwrap()[1].buffer = 9),
            "tensor 'w': buffer 9 out of range (2 buffers)",
        ),
        (
            "unwritten",
            Box::new(move |m| sg(m).tensors.as_mut().unwrap()[1].buffer = 0),
            "reads tensor 'w', which is not a graph input, a constant or any node's output",
        ),
        (
            "graph-input-written",
            Box::new(move |m| sg(m).operators.as_mut().unwrap()[0].outputs = Some(vec![0])),
            "writes tensor 'x', a graph input",
        ),
        (
            "no-subgraph",
            Box::new(|m| m.subgraphs = Some(Vec::new())),
            "the model has no subgraph",
        ),
        (
            "short-buffer",
            Box::new(move |m| sg(m).tensors.as_mut().unwrap()[1].shape = Some(vec![1, 8])),
            "tensor 'w': buffer 1 holds 16 bytes, but float32 [1, 8] needs 32",
        ),
        (
            "huge-dims",
            Box::new(move |m| {
                sg(m).tensors.as_mut().unwrap()[1].shape = Some(vec![1 << 30, 1 << 30, 1 << 30])
            }),
            "tensor 'w': float32 [1073741824, 1073741824, 1073741824] has more elements than any buffer can hold",
        ),
        (
            "zero-element-constant",
            Box::new(move |m| {
                // y = CONCATENATION(x [1,4], z [1,0]; axis 1): z has no elements and no data.
                let mut z = s::TensorT::default();
                z.shape = Some(vec![1, 0]);
                z.name = Some("z".into());
                z.type_ = s::TensorType::FLOAT32;
                let code = &mut m.operator_codes.as_mut().unwrap()[0];
                code.builtin_code = s::BuiltinOperator::CONCATENATION;
                code.deprecated_builtin_code = 2;
                let g = sg(m);
                g.tensors.as_mut().unwrap().push(z);
                let op = &mut g.operators.as_mut().unwrap()[0];
                op.inputs = Some(vec![0, 3]);
                let mut axis = s::ConcatenationOptionsT::default();
                axis.axis = 1;
                op.builtin_options = s::BuiltinOptionsT::ConcatenationOptions(Box::new(axis));
            }),
            "",
        ),
        (
            "subgraph-cycle",
            Box::new(move |m| {
                let mut code = s::OperatorCodeT::default();
                code.deprecated_builtin_code = 127;
                code.builtin_code = s::BuiltinOperator::CALL_ONCE;
                m.operator_codes.as_mut().unwrap().push(code);
                let call = || {
                    let mut op = s::OperatorT::default();
                    op.opcode_index = 1;
                    op.inputs = Some(Vec::new());
                    op.outputs = Some(Vec::new());
                    op.builtin_options = s::BuiltinOptionsT::CallOnceOptions(Box::new(
                        {
                            let mut o = s::CallOnceOptionsT::default();
                            o.init_subgraph_index = 1;
                            o
                        }));
                    op
                };
                sg(m).operators.as_mut().unwrap().push(call());
                let mut body = s::SubGraphT::default();
                body.operators = Some(vec![call()]);
                m.subgraphs.as_mut().unwrap().push(body);
            }),
            "subgraphs call each other in a cycle (1 → 1), which no interpreter can run",
        ),
    ];
    for (name, edit, cause) in cases {
        let path = tmp.path().join(format!("{name}.tflite"));
        std::fs::write(&path, broken_model(edit)).unwrap();
        let out_dir = tmp.path().join(format!("out-{name}"));
        let o = cleave(&[
            os("partition"),
            path.as_os_str(),
            os("--devices"),
            os("cpu"),
            os("-o"),
            out_dir.as_os_str(),
        ]);
        if cause.is_empty() {
            ok(&o);
            continue;
        }
        assert_bad_input(&o, &path, cause);
        assert!(!out_dir.exists(), "{name}: something was written");
    }
}

/// The tensors every WHILE of the main graph reads or writes, as LiteRT lists them.
fn while_operands(model: &Path) -> BTreeSet<String> {
    let script = r#"
import sys
sys.path.insert(0, sys.argv[2])
import tflite_common as tc
it = tc.interpreter(sys.argv[1])
names = {d["index"]: d["name"] for d in it.get_tensor_details()}
for op in it._get_ops_details():
    if op["op_name"] == "WHILE":
        for i in list(op["inputs"]) + list(op["outputs"]):
            if i >= 0:
                print(names[i])
"#;
    let o = Command::new("python3")
        .args([
            os("-c"),
            os(script),
            model.as_os_str(),
            repo().join("scripts/oracles").as_os_str(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// WHILE as TensorFlow writes it (a Keras GRU stack, an LSTM cell in a loop, a
/// `tf.while_loop` whose trip count depends on the data), half the ops pinned at random over 2
/// and 3 backends, three times each: every part carries the bodies its loops run, and every
/// boundary tensor matches LiteRT on the whole model over five invokes.
#[test]
fn tensorflow_while_loops_split_at_random_reproduce_them_in_litert() {
    let tmp = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(0x3c6e_f372_fe94_f82b);
    let mut cut_at_while = 0;
    for model in cleave_testdata::while_tflite_files() {
        let stem = model.file_stem().unwrap().to_string_lossy().into_owned();
        let nodes = placed_nodes(tmp.path(), &model);
        assert!(
            nodes.iter().any(|(_, op, _)| op == "WHILE"),
            "{stem}: no WHILE in {nodes:?}"
        );
        let while_io = while_operands(&model);
        assert!(!while_io.is_empty(), "{stem}");
        for count in [2, 3] {
            for round in 0..3 {
                let backends = &BACKENDS[..count];
                let rules = pin_at_random(&mut rng, &nodes, backends, 2);
                let work = tmp.path().join(format!("{stem}-{count}-{round}"));
                let (conn, parts, _) = split_by_name(tmp.path(), &model, &work, backends, &rules);
                let v: Value =
                    serde_json::from_str(&std::fs::read_to_string(&conn).unwrap()).unwrap();
                // A part boundary at one of a WHILE's own operands or results.
                let sources: BTreeSet<&str> = ["inputs", "outputs"]
                    .iter()
                    .flat_map(|k| v["source"][k].as_array().unwrap())
                    .map(|t| t.as_str().unwrap())
                    .collect();
                let cut = v["parts"].as_array().unwrap().iter().any(|p| {
                    p["inputs"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .chain(p["outputs"].as_array().unwrap())
                        .map(|t| t.as_str().unwrap())
                        .any(|t| !sources.contains(t) && while_io.contains(t))
                });
                cut_at_while += usize::from(cut);
                eprintln!(
                    "{stem} over {count} ({parts} parts): {}",
                    check_tflite_parts(&conn, &model, &[os("--invokes"), os("5")])
                );
            }
        }
    }
    assert!(
        cut_at_while >= 6,
        "{cut_at_while} splits cut at a WHILE: the splits did not split"
    );
}
