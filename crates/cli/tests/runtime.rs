//! `cleave run`, `verify`, `bench` and `conformance` on real engines (tract in process, ONNX
//! Runtime through its shared library), with onnxruntime in Python as an outside oracle.

mod common;

use std::path::Path;
use std::process::Command;

use cleave_testdata::{light_random, LIGHT_MODELS};
use common::*;

fn run(args: &[&str]) -> std::process::Output {
    let a: Vec<&std::ffi::OsStr> = args.iter().map(os).collect();
    cleave(&a)
}

fn part_file(dir: &Path, text: &str) -> String {
    let p = dir.join("rules.part");
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

fn verify_json(args: &[&str]) -> serde_json::Value {
    let o = run(args);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", String::from_utf8_lossy(&o.stdout), stderr(&o)));
    assert_eq!(
        o.status.code(),
        Some(if j["passed"] == true { 0 } else { 1 })
    );
    j
}

fn max_abs(j: &serde_json::Value, kind: &str) -> f64 {
    j["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["kind"] == kind)
        .map(|t| t["max_abs"].as_f64().unwrap())
        .fold(0.0, f64::max)
}

#[test]
fn verify_with_boundaries_passes_on_every_randomised_light_model() {
    let tmp = tempfile::tempdir().unwrap();
    let rules = part_file(
        tmp.path(),
        "[partition]\nbackends=npu,cpu\ndefault=cpu\n[OPCODE]\nCONV=npu\n",
    );
    for name in LIGHT_MODELS {
        let m = light_random(name);
        let m = m.to_str().unwrap();
        // ONNX Runtime with graph rewrites off computes each op the same way in whole and
        // parts: every boundary tensor must be bit-identical.
        let j = verify_json(&[
            "verify",
            m,
            "--rules",
            &rules,
            "--boundaries",
            "--engine",
            "npu=ort,cpu=ort",
            "--reference",
            "ort",
            "--json",
        ]);
        assert_eq!(j["passed"], true, "{name}: {j}");
        let boundaries = j["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["kind"] == "boundary")
            .count();
        assert!(
            boundaries >= 2,
            "{name}: a Conv/rest split must have boundary tensors"
        );
        assert_eq!(max_abs(&j, "boundary"), 0.0, "{name}: {j}");
        assert_eq!(max_abs(&j, "output"), 0.0, "{name}: {j}");
        // tract, the default engine, with default tolerances: it folds BatchNorm into the
        // Conv in the whole model and cannot across the cut, a rounding difference the
        // relative-L2 check accepts where an element-wise one raised a false alarm.
        let j = verify_json(&["verify", m, "--rules", &rules, "--boundaries", "--json"]);
        assert_eq!(j["passed"], true, "{name} on tract: {j}");
        eprintln!(
            "{name}: tract max abs diff {:.3e} on boundaries, {:.3e} on outputs",
            max_abs(&j, "boundary"),
            max_abs(&j, "output")
        );
    }
}

#[test]
fn verify_sees_a_miswired_part() {
    // Swap the two boundary tensors a part receives: the parts still run, the values differ.
    let tmp = tempfile::tempdir().unwrap();
    let rules = part_file(
        tmp.path(),
        "[partition]\nbackends=cpu,acl_cl\ndefault=cpu\n[OPCODE]\nDIV=acl_cl\n",
    );
    let work = tmp.path().join("w");
    ok(&run(&[
        "partition",
        example("instance_norm.onnx").to_str().unwrap(),
        "--rules",
        &rules,
        "-o",
        work.to_str().unwrap(),
    ]));
    let div = work.join("instance_norm.00002_acl_cl.onnx");
    let mut m = cleave::onnx::OnnxModel::load(&div).unwrap();
    let node = &mut m.proto_mut().unwrap().graph.as_mut().unwrap().node[0];
    node.input.swap(0, 1);
    m.save(&div).unwrap();
    let conn = work.join("instance_norm.conn.json");
    let (model, conn) = (
        example("instance_norm.onnx"),
        conn.to_str().unwrap().to_string(),
    );
    let model = model.to_str().unwrap();
    // With default tolerances, on tract and on ONNX Runtime.
    for engine in [
        &[][..],
        &["--engine", "cpu=ort,acl_cl=ort", "--reference", "ort"],
    ] {
        let mut args = vec!["verify", model, &conn, "--boundaries"];
        args.extend(engine);
        let o = run(&args);
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(1), "{engine:?}: {out}");
        assert!(out.contains("beyond tolerance"), "{out}");
    }
    // Differences found still exit 1 with --timings, after the phases are printed.
    let o = run(&["--timings", "verify", model, &conn, "--boundaries"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("whole command") && err.contains("decode"),
        "{err}"
    );
}

#[test]
fn verify_refuses_a_partition_that_does_not_give_the_models_outputs() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("w");
    let model = example("tiny_cnn.onnx");
    let model = model.to_str().unwrap();
    let rules = example("tiny_cnn.part");
    ok(&run(&[
        "partition",
        model,
        "--rules",
        rules.to_str().unwrap(),
        "-o",
        work.to_str().unwrap(),
    ]));
    let conn = work.join("tiny_cnn.conn.json");
    let mut j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&conn).unwrap()).unwrap();
    assert_eq!(j["source"]["outputs"], serde_json::json!(["probs"]));
    // With no output, nothing was compared, and "0 tensors match" proved nothing.
    for (outputs, cause) in [
        (
            serde_json::json!([]),
            "the partition's outputs are not the model's: it lacks the model's outputs 'probs'",
        ),
        (
            serde_json::json!(["probs", "logits"]),
            "it gives outputs the model does not: 'logits'",
        ),
    ] {
        j["source"]["outputs"] = outputs;
        let bad = work.join("bad.conn.json");
        std::fs::write(&bad, j.to_string()).unwrap();
        let o = run(&["verify", model, bad.to_str().unwrap()]);
        assert_bad_input(&o, &bad, cause);
        assert!(
            o.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
}

#[test]
fn verify_that_compares_nothing_fails() {
    use cleave::onnx::proto::{type_proto, TypeProto, ValueInfoProto};
    use prost::Message;
    // The one output is a sequence: ONNX Runtime runs it, and verify has no tensor to compare.
    let tmp = tempfile::tempdir().unwrap();
    let mut m = model(
        vec![
            node("relu", "Relu", &["x"], &["r"]),
            node("seq", "SequenceConstruct", &["r"], &["s"]),
        ],
        vec![],
        "s",
    );
    let tensor = float_input("s", &[1, 4]).r#type.unwrap();
    m.graph.as_mut().unwrap().output = vec![ValueInfoProto {
        name: Some("s".into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::SequenceType(Box::new(
                type_proto::Sequence {
                    elem_type: Some(Box::new(tensor)),
                },
            ))),
            ..Default::default()
        }),
        ..Default::default()
    }];
    let path = write(tmp.path(), "seq.onnx", &m.encode_to_vec());
    let work = tmp.path().join("w");
    ok(&run(&[
        "partition",
        path.to_str().unwrap(),
        "--devices",
        "cpu",
        "-o",
        work.to_str().unwrap(),
    ]));
    let conn = work.join("seq.conn.json");
    let o = run(&[
        "verify",
        path.to_str().unwrap(),
        conn.to_str().unwrap(),
        "--reference",
        "ort",
        "--engine",
        "cpu=ort",
    ]);
    assert_bad_input(&o, &conn, "nothing was compared: 's' is not a tensor");
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

#[test]
fn verify_defaults_pass_correct_random_splits_and_fail_miswired_ones() {
    // scripts/reports/verify_matrix.py: random 3-device splits verified on tract and ONNX Runtime with
    // default tolerances, then one part input rewired to another tensor of its type and shape.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("matrix.md");
    let o = Command::new("python3")
        .arg(repo().join("scripts/reports/verify_matrix.py"))
        .args([
            "--cleave",
            env!("CARGO_BIN_EXE_cleave"),
            "--seeds",
            "1",
            "--out",
        ])
        .arg(&out)
        .args(["light_squeezenet", "light_resnet50"])
        .output()
        .unwrap();
    let table = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(
        o.status.success(),
        "{}{}\n{table}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    // Each model was miswired and both engines caught it.
    assert_eq!(table.matches("| FAIL (").count(), 4, "{table}");
}

#[test]
fn verify_mixes_onnx_runtime_and_tract() {
    let tmp = tempfile::tempdir().unwrap();
    let rules = part_file(
        tmp.path(),
        "[partition]\nbackends=npu,cpu\ndefault=cpu\n[OPCODE]\nCONV=npu\n",
    );
    for name in ["light_squeezenet", "light_resnet50"] {
        let m = light_random(name);
        // Two engines never round alike: tolerances for engine-to-engine comparison.
        let loose = ["--rtol", "1e-3", "--atol", "1e-3"];
        let mut args = vec![
            "verify",
            m.to_str().unwrap(),
            "--rules",
            &rules,
            "--boundaries",
            "--engine",
            "npu=tract,cpu=ort",
        ];
        args.extend(loose);
        let out = ok(&run(&args));
        assert!(out.contains("tensors match"), "{name}: {out}");
        let mut args = vec![
            "verify",
            m.to_str().unwrap(),
            "--rules",
            &rules,
            "--engine",
            "npu=ort,cpu=tract",
            "--reference",
            "ort",
        ];
        args.extend(loose);
        let out = ok(&run(&args));
        assert!(out.contains("tensors match"), "{name}: {out}");
    }
}

#[test]
fn run_reproduces_onnxruntime_in_python_on_instance_norm() {
    let tmp = tempfile::tempdir().unwrap();
    let rules = part_file(
        tmp.path(),
        "[partition]\nbackends=cpu,acl_cl\ndefault=cpu\n[OPCODE]\nDIV=acl_cl\n",
    );
    let work = tmp.path().join("w");
    ok(&run(&[
        "partition",
        example("instance_norm.onnx").to_str().unwrap(),
        "--rules",
        &rules,
        "-o",
        work.to_str().unwrap(),
    ]));
    let input = tmp.path().join("input.npy");
    let want = tmp.path().join("want.npy");
    let script = "import sys, numpy as np, onnxruntime as ort\n\
        x = np.random.default_rng(3).standard_normal((1, 4, 8, 8)).astype(np.float32)\n\
        np.save(sys.argv[2], x)\n\
        s = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])\n\
        np.save(sys.argv[3], s.run(None, {'input': x})[0])\n";
    let st = Command::new("python3")
        .args(["-c", script])
        .arg(example("instance_norm.onnx"))
        .arg(&input)
        .arg(&want)
        .status()
        .unwrap();
    assert!(st.success());
    let out_dir = tmp.path().join("out");
    let conn = work.join("instance_norm.conn.json");
    ok(&run(&[
        "run",
        conn.to_str().unwrap(),
        "--input",
        &format!("input={}", input.display()),
        "-o",
        out_dir.to_str().unwrap(),
    ]));
    let cmp = "import sys, numpy as np\n\
        a, b = np.load(sys.argv[1]), np.load(sys.argv[2])\n\
        assert a.shape == b.shape, (a.shape, b.shape)\n\
        d = float(np.abs(a - b).max())\n\
        print(d)\n\
        sys.exit(0 if d <= 1e-5 else 1)\n";
    let o = Command::new("python3")
        .args(["-c", cmp])
        .arg(out_dir.join("output.npy"))
        .arg(&want)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "max abs diff {}",
        String::from_utf8_lossy(&o.stdout)
    );
}

#[test]
fn pipelined_stages_match_a_sequential_run() {
    let tmp = tempfile::tempdir().unwrap();
    let m = light_random("light_squeezenet");
    let work = tmp.path().join("w");
    let out = ok(&run(&[
        "partition",
        m.to_str().unwrap(),
        "--stages",
        "2",
        "-o",
        work.to_str().unwrap(),
    ]));
    assert!(out.contains("2 pipeline stages"), "{out}");
    let conn = work.join("light_squeezenet.conn.json");
    ok(&run(&[
        "verify",
        m.to_str().unwrap(),
        conn.to_str().unwrap(),
        "--boundaries",
    ]));
    let x = tmp.path().join("x.npy");
    let t = cleave::runtime::HostTensor::random(cleave::ir::ElemType::F32, &[1, 3, 224, 224], 5)
        .unwrap();
    cleave::runtime::write_npy(&x, &t).unwrap();
    let out = ok(&run(&[
        "run",
        conn.to_str().unwrap(),
        "--input",
        &format!("data_0={}", x.display()),
        "--requests",
        "4",
        "-o",
        tmp.path().to_str().unwrap(),
        "--json",
    ]));
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    let parts = j["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 2);
    for p in parts {
        assert_eq!(p["calls"], 4, "{p}");
        assert!(p["exec_ms"].as_f64().unwrap() > 0.0);
        assert!(p["wait_ms"].as_f64().is_some());
    }
}

#[test]
fn bad_runtime_inputs_get_one_line_and_exit_code_2() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let rules = part_file(
        d,
        "[partition]\nbackends=cpu,acl_cl\ndefault=cpu\n[OPCODE]\nDIV=acl_cl\n",
    );
    let work = d.join("w");
    ok(&run(&[
        "partition",
        example("instance_norm.onnx").to_str().unwrap(),
        "--rules",
        &rules,
        "-o",
        work.to_str().unwrap(),
    ]));
    let conn = work.join("instance_norm.conn.json");
    let c = conn.to_str().unwrap();

    // No --input at all: a smoke run on seeded random inputs, said in one line on stderr.
    let out_dir = d.join("smoke");
    let o = run(&["run", c, "-o", out_dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stderr(&o).trim(),
        "note: no --input given: running on seeded random inputs (seed 0)"
    );

    // Wrong dtype, wrong shape.
    let wrong = d.join("wrong.npy");
    cleave::runtime::write_npy(
        &wrong,
        &cleave::runtime::HostTensor::random(cleave::ir::ElemType::F64, &[1, 4, 8, 8], 1).unwrap(),
    )
    .unwrap();
    assert_bad_input(
        &run(&["run", c, "--input", &format!("input={}", wrong.display())]),
        &wrong,
        "element type is float64, the model wants float32",
    );
    cleave::runtime::write_npy(
        &wrong,
        &cleave::runtime::HostTensor::random(cleave::ir::ElemType::F32, &[1, 4, 8], 1).unwrap(),
    )
    .unwrap();
    assert_bad_input(
        &run(&["run", c, "--input", &format!("input={}", wrong.display())]),
        &wrong,
        "shape is [1, 4, 8]",
    );

    // A corrupt .npy.
    let corrupt = write(d, "corrupt.npy", b"\x93NUMPY\x01\x00garbage");
    assert_bad_input(
        &run(&["run", c, "--input", &format!("input={}", corrupt.display())]),
        &corrupt,
        "not a valid .npy file",
    );

    let good = d.join("good.npy");
    cleave::runtime::write_npy(
        &good,
        &cleave::runtime::HostTensor::random(cleave::ir::ElemType::F32, &[1, 4, 8, 8], 1).unwrap(),
    )
    .unwrap();
    let input = format!("input={}", good.display());

    // A conn.json that names an unknown tensor: no part can run.
    let text = std::fs::read_to_string(&conn).unwrap();
    let bad_conn = work.join("unknown.conn.json");
    std::fs::write(
        &bad_conn,
        text.replace(
            "\"inputs\" : [ \"normed\" ]",
            "\"inputs\" : [ \"no_such_tensor\" ]",
        ),
    )
    .unwrap();
    assert_bad_input(
        &run(&["run", bad_conn.to_str().unwrap(), "--input", &input]),
        &bad_conn,
        "model partition or configuration has problems",
    );

    // A missing part file.
    std::fs::remove_file(work.join("instance_norm.00003_cpu.onnx")).unwrap();
    assert_bad_input(
        &run(&["run", c, "--input", &input]),
        &conn,
        "instance_norm.00003_cpu.onnx is missing",
    );
}

#[test]
fn bench_reports_three_modes_and_their_ratios() {
    let tmp = tempfile::tempdir().unwrap();
    let m = light_random("light_squeezenet");
    let rules = part_file(
        tmp.path(),
        "[partition]\nbackends=npu,cpu\ndefault=cpu\n[OPCODE]\nCONV=npu\n",
    );
    let bench = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec!["bench", m.to_str().unwrap(), "--rules", &rules, "--json"];
        args.extend_from_slice(extra);
        serde_json::from_str(&ok(&run(&args))).unwrap()
    };
    let j = bench(&["--runs", "3", "--requests", "2"]);
    let modes: Vec<&str> = j["modes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["monolithic", "partitioned", "pipelined"]);
    assert!(j["sequential_over_monolithic"].as_f64().unwrap() > 0.0);
    assert!(j["pipelined_speedup"].as_f64().unwrap() > 0.0);
    let levels: Vec<u64> = j["pipelined_levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["in_flight"].as_u64().unwrap())
        .collect();
    assert_eq!(levels, [1, 2]);
    // The last level is the pipelined mode itself.
    assert_eq!(
        j["pipelined_levels"][1]["median_ms"],
        j["modes"][2]["median_ms"]
    );
    // Conv on the npu, the rest on the cpu: tensors cross, each costing something measured.
    let boundaries = j["boundaries"].as_u64().unwrap();
    assert!(boundaries >= 2, "{j}");
    let per = j["overhead_per_boundary_ms"].as_f64().unwrap();
    let (mono, seq) = (
        j["modes"][0]["median_ms"].as_f64().unwrap(),
        j["modes"][1]["median_ms"].as_f64().unwrap(),
    );
    assert!((per * boundaries as f64 - (seq - mono)).abs() < 1e-9, "{j}");
    // Every part on tract: the whole model too.
    assert_eq!(j["monolithic_engine"], "tract");
    // Every part on ONNX Runtime: the whole model on it as well, not on tract.
    let engine_of =
        |engines: &str| bench(&["--runs", "1", "--engine", engines])["monolithic_engine"].clone();
    assert_eq!(engine_of("npu=ort,cpu=ort"), "ort");
    // Parts on two engines: the model's default engine.
    assert_eq!(engine_of("npu=ort"), "tract");
}

#[test]
fn onnx_runtime_missing_is_reported_with_the_fix() {
    let o = Command::new(env!("CARGO_BIN_EXE_cleave"))
        .args(["verify"])
        .arg(example("instance_norm.onnx"))
        .args(["--devices", "cpu", "--reference", "ort"])
        .env("ORT_DYLIB_PATH", "/nonexistent/libonnxruntime.so")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("ONNX Runtime is unavailable") && e.contains("pip install onnxruntime"),
        "{e}"
    );
}

/// The node-test pass counts may only go up: `tests/conformance-baseline.json` holds them.
#[test]
fn node_test_conformance_does_not_drop_below_the_baseline() {
    let baseline: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance-baseline.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let node = cleave_testdata::dir().join("node");
    for engine in ["tract", "ort"] {
        let out = ok(&run(&[
            "conformance",
            node.to_str().unwrap(),
            "--engine",
            engine,
            "--json",
        ]));
        let j: serde_json::Value = serde_json::from_str(&out).unwrap();
        let passed = j["passed"].as_u64().unwrap();
        eprintln!(
            "{engine}: {passed} passed, {} failed, {} unsupported of {}",
            j["failed"], j["unsupported"], j["total"]
        );
        let floor = baseline[engine]["passed"].as_u64().unwrap();
        assert!(
            passed >= floor,
            "{engine}: {passed} node tests pass, the baseline is {floor}"
        );
    }
}

#[test]
fn run_takes_shape_and_dim_and_checks_the_inputs_against_them() {
    // tiny_cnn's batch is symbolic: --shape/--dim fix it, and an input of another batch is
    // refused in one line before anything runs.
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("w");
    let model = example("tiny_cnn.onnx");
    ok(&run(&[
        "partition",
        model.to_str().unwrap(),
        "--rules",
        example("tiny_cnn.part").to_str().unwrap(),
        "-o",
        work.to_str().unwrap(),
    ]));
    let conn = work.join("tiny_cnn.conn.json");
    let x = tmp.path().join("x.npy");
    let t =
        cleave::runtime::HostTensor::random(cleave::ir::ElemType::F32, &[2, 3, 16, 16], 1).unwrap();
    cleave::runtime::write_npy(&x, &t).unwrap();
    let input = format!("input={}", x.display());
    let base = ["run", conn.to_str().unwrap(), "--input", &input, "-o"];
    let out = tmp.path().to_str().unwrap();
    for fix in [["--shape", "input=2,3,16,16"], ["--dim", "batch=2"]] {
        let mut args = base.to_vec();
        args.extend([out, fix[0], fix[1]]);
        ok(&run(&args));
    }
    let mut args = base.to_vec();
    args.extend([out, "--dim", "batch=1"]);
    let o = run(&args);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("input"), "{}", stderr(&o));
}

/// `bench --ray` takes several partitions and checks each one's files before any Python runs:
/// a missing part of the second is one line naming it; more partitions without --ray are a
/// usage error that says what they need.
#[test]
fn bench_ray_checks_every_partition_it_is_given() {
    let tmp = tempfile::tempdir().unwrap();
    let model = repo().join("examples/tiny_cnn.onnx");
    let part = repo().join("examples/tiny_cnn.part");
    let first = partition_by_part(&model, &part, &tmp.path().join("a"));
    let second = partition_by_part(&model, &part, &tmp.path().join("b"));
    let conn: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&second).unwrap()).unwrap();
    let file = conn["parts"][1]["file"].as_str().unwrap().to_string();
    std::fs::remove_file(tmp.path().join("b").join(&file)).unwrap();
    let o = cleave(&[
        os("bench"),
        first.as_os_str(),
        second.as_os_str(),
        os("--ray"),
        os("127.0.0.1:1"),
    ]);
    assert_bad_input(&o, &second, &file);

    let o = cleave(&[os("bench"), first.as_os_str(), second.as_os_str()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--ray"), "{err}");
}

/// `partition --shape` records the shapes the parts were cut for in conn.json, and `run`,
/// `verify` and `bench` take them with no shape flag (tiny_cnn with its batch renamed
/// `count`, a dim no command would guess); a flag still wins; without the record, the same
/// commands refuse the dynamic input.
#[test]
fn commands_run_parts_at_the_shapes_the_partition_recorded() {
    use cleave::onnx::proto;
    use prost::Message;
    let tmp = tempfile::tempdir().unwrap();
    let mut m =
        proto::ModelProto::decode(&*std::fs::read(example("tiny_cnn.onnx")).unwrap()).unwrap();
    let g = m.graph.as_mut().unwrap();
    for vi in g.input.iter_mut().chain(g.output.iter_mut()) {
        let Some(proto::type_proto::Value::TensorType(t)) =
            vi.r#type.as_mut().and_then(|t| t.value.as_mut())
        else {
            continue;
        };
        for d in t.shape.iter_mut().flat_map(|s| s.dim.iter_mut()) {
            if let Some(proto::tensor_shape_proto::dimension::Value::DimParam(p)) = &mut d.value {
                *p = "count".into();
            }
        }
    }
    let model = write(tmp.path(), "counted.onnx", &m.encode_to_vec());
    let work = tmp.path().join("w");
    ok(&run(&[
        "partition",
        model.to_str().unwrap(),
        "--rules",
        example("tiny_cnn.part").to_str().unwrap(),
        "--shape",
        "input=2,3,16,16",
        "-o",
        work.to_str().unwrap(),
    ]));
    let conn = work.join("counted.conn.json");
    let text = std::fs::read_to_string(&conn).unwrap();
    assert!(
        text.contains("\"shapes\" : { \"input\" : [ 2, 3, 16, 16 ] }"),
        "{text}"
    );
    let c = conn.to_str().unwrap();
    let out = tmp.path().join("out");
    let o = run(&["run", c, "-o", out.to_str().unwrap()]);
    let said = ok(&o);
    assert!(said.contains("probs [2, 10]"), "{said}");
    assert!(
        stderr(&o).contains("the parts were cut for --shape input=2,3,16,16"),
        "{}",
        stderr(&o)
    );
    let said = ok(&run(&[
        "verify",
        model.to_str().unwrap(),
        c,
        "--boundaries",
    ]));
    assert!(said.contains("match the whole model"), "{said}");
    ok(&run(&["bench", c, "--runs", "1", "--requests", "2"]));
    // A flag chooses otherwise.
    let said = ok(&run(&[
        "run",
        c,
        "--shape",
        "input=3,3,16,16",
        "-o",
        out.to_str().unwrap(),
    ]));
    assert!(said.contains("probs [3, 10]"), "{said}");
    // Without the record, `count` is a dim the commands cannot guess.
    std::fs::write(
        &conn,
        text.replace(
            "\"shapes\" : { \"input\" : [ 2, 3, 16, 16 ] }",
            "\"format\" : \"onnx\"",
        ),
    )
    .unwrap();
    for args in [
        vec!["run", c, "-o", out.to_str().unwrap()],
        vec!["bench", c, "--runs", "1"],
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("has a dynamic shape"), "{}", stderr(&o));
    }
}

/// A part tract has no kernel for (com.microsoft's Inverse) runs on the next engine that loads
/// it, ONNX Runtime, and the command says so; an engine the user names is not replaced.
#[test]
fn a_part_the_default_engine_cannot_run_falls_back_to_one_that_can() {
    use cleave::onnx::proto::{GraphProto, ModelProto, OperatorSetIdProto};
    use prost::Message;
    let tmp = tempfile::tempdir().unwrap();
    let mut inverse = node("inverse", "Inverse", &["x"], &["g"]);
    inverse.domain = Some("com.microsoft".into());
    let opset = |domain: &str, version| OperatorSetIdProto {
        domain: Some(domain.into()),
        version: Some(version),
    };
    let m = ModelProto {
        ir_version: Some(8),
        opset_import: vec![opset("", 17), opset("com.microsoft", 1)],
        graph: Some(GraphProto {
            name: Some("g".into()),
            node: vec![inverse, node("sig", "Sigmoid", &["g"], &["y"])],
            input: vec![float_input("x", &[2, 4, 4])],
            output: vec![float_input("y", &[2, 4, 4])],
            value_info: vec![float_input("g", &[2, 4, 4])],
            ..Default::default()
        }),
        ..Default::default()
    };
    let model = write(tmp.path(), "inverse.onnx", &m.encode_to_vec());
    let rules = tmp.path().join("r.part");
    std::fs::write(
        &rules,
        "[partition]\nbackends=cpu,npu\ndefault=cpu\ncomply=opcode\n\n[OPCODE]\nInverse=npu\n",
    )
    .unwrap();
    let work = tmp.path().join("w");
    ok(&run(&[
        "partition",
        model.to_str().unwrap(),
        "--rules",
        rules.to_str().unwrap(),
        "-o",
        work.to_str().unwrap(),
    ]));
    let conn = work.join("inverse.conn.json");
    let o = run(&[
        "verify",
        model.to_str().unwrap(),
        conn.to_str().unwrap(),
        "--boundaries",
        "--reference",
        "ort",
    ]);
    let said = ok(&o);
    assert!(said.contains("match the whole model"), "{said}");
    assert!(
        stderr(&o).contains(
            "inverse.00001_npu.onnx: tract could not take it as declared, so it runs on ort"
        ),
        "{}",
        stderr(&o)
    );
    // Named, tract stays, and its refusal is the error.
    let o = run(&[
        "run",
        conn.to_str().unwrap(),
        "--engine",
        "npu=tract",
        "-o",
        tmp.path().join("o").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("tract does not support it"),
        "{}",
        stderr(&o)
    );
}
