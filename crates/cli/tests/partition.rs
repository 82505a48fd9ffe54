//! `cleave query`, `partition` and `check` end to end, with the onnx checker and onnxruntime
//! (through scripts/oracles/check_parts.py) as independent oracles.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use cleave::workdir::ConnFile;
use cleave_testdata::{light_random, LIGHT_MODELS};
use common::*;
use prost::Message;

fn partition(model: &Path, work: &Path, extra: &[&str]) -> String {
    let mut args = vec![
        os("partition"),
        model.as_os_str(),
        os("-o"),
        work.as_os_str(),
    ];
    args.extend(extra.iter().map(os));
    ok(&cleave(&args))
}

fn conn(work: &Path, stem: &str) -> ConnFile {
    ConnFile::from_json(&std::fs::read_to_string(work.join(format!("{stem}.conn.json"))).unwrap())
        .unwrap()
}

/// The onnx checker on every part, and onnxruntime on parts vs whole, every boundary tensor.
fn oracle(conn_json: &Path) -> String {
    let o = Command::new("python3")
        .arg(repo().join("scripts/oracles/check_parts.py"))
        .arg(conn_json)
        .output()
        .expect("python3 (scripts/install/requirements-test.txt)");
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn write_part(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn instance_norm_div_on_acl_cl_gives_ones_three_parts() {
    let tmp = tempfile::tempdir().unwrap();
    let part = write_part(
        tmp.path(),
        "div.part",
        "[partition]\nbackends=cpu,acl_cl\ndefault=cpu\ncomply=opcode\n\n[OPCODE]\nDIV=acl_cl\n",
    );
    let work = tmp.path().join("work");
    partition(
        &example("instance_norm.onnx"),
        &work,
        &["--part", part.to_str().unwrap()],
    );
    let c = conn(&work, "instance_norm");
    let files: Vec<&str> = c.parts.iter().map(|p| p.file.as_str()).collect();
    assert_eq!(
        files,
        [
            "instance_norm.00001_cpu.onnx",
            "instance_norm.00002_acl_cl.onnx",
            "instance_norm.00003_cpu.onnx"
        ]
    );
    // ONE's structure: part 1 hands Sub and Pow to the Div part, which hands Div on.
    assert_eq!(strs(&c.parts[0].inputs), ["input"]);
    assert_eq!(strs(&c.parts[0].outputs), ["centered", "std"]);
    assert_eq!(strs(&c.parts[1].inputs), ["centered", "std"]);
    assert_eq!(strs(&c.parts[1].outputs), ["normed"]);
    assert_eq!(strs(&c.parts[2].inputs), ["normed"]);
    assert_eq!(strs(&c.parts[2].outputs), ["output"]);
    assert_eq!(
        c.source.file,
        format!("{}/examples/instance_norm.onnx", relative_repo(&work))
    );
    let ini = std::fs::read_to_string(work.join("instance_norm.conn.ini")).unwrap();
    assert!(ini.contains("[models]\nm1=instance_norm.00001_cpu.onnx\nm2=instance_norm.00002_acl_cl.onnx\nm3=instance_norm.00003_cpu.onnx\n\n"), "{ini}");
    ok(&cleave(&[
        os("check"),
        work.join("instance_norm.conn.json").as_os_str(),
    ]));
    oracle(&work.join("instance_norm.conn.json"));
}

/// The repository root as seen from `work`, to compare `source.file`.
fn relative_repo(work: &Path) -> String {
    let w = work.canonicalize().unwrap();
    let r = repo().canonicalize().unwrap();
    let common = w
        .components()
        .zip(r.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut out = PathBuf::new();
    for _ in common..w.components().count() {
        out.push("..");
    }
    for c in r.components().skip(common) {
        out.push(c.as_os_str());
    }
    out.to_string_lossy().into_owned()
}

#[test]
fn instance_norm_add_on_acl_cl_gives_four_parts_where_one_gives_five() {
    let tmp = tempfile::tempdir().unwrap();
    let part = write_part(
        tmp.path(),
        "add.part",
        "[partition]\nbackends=cpu,acl_cl\ndefault=cpu\ncomply=opcode\n\n[OPCODE]\nADD=acl_cl\n",
    );
    let work = tmp.path().join("work");
    let out = partition(
        &example("instance_norm.onnx"),
        &work,
        &["--part", part.to_str().unwrap()],
    );
    assert!(
        out.contains(": 4 parts on cpu,acl_cl") && out.contains("ONE's rule would give 5"),
        "{out}"
    );
    assert_eq!(conn(&work, "instance_norm").parts.len(), 4);
    oracle(&work.join("instance_norm.conn.json"));
}

/// The seed's 7-node example: 1→2, 2→3, 2→4, 3→5, 4→5, 5→6, 6→7, node 4 on the second device.
fn seed_model(dir: &Path) -> PathBuf {
    let nodes = vec![
        node("1", "Relu", &["x"], &["t1"]),
        node("2", "Relu", &["t1"], &["t2"]),
        node("3", "Relu", &["t2"], &["t3"]),
        node("4", "Neg", &["t2"], &["t4"]),
        node("5", "Add", &["t3", "t4"], &["t5"]),
        node("6", "Relu", &["t5"], &["t6"]),
        node("7", "Relu", &["t6"], &["t7"]),
    ];
    write(
        dir,
        "seed.onnx",
        &model(nodes, vec![], "t7").encode_to_vec(),
    )
}

#[test]
fn seed_example_with_both_algorithms() {
    let tmp = tempfile::tempdir().unwrap();
    let m = seed_model(tmp.path());
    let part = write_part(
        tmp.path(),
        "seed.part",
        "[partition]\nbackends=A,B\ndefault=A\ncomply=opname\n[OPNAME]\n4=B\n",
    );
    let p = part.to_str().unwrap();

    let work = tmp.path().join("ov");
    let out = partition(
        &m,
        &work,
        &["--part", p, "--algorithm", "openvino", "--trace"],
    );
    for line in [
        "1. Select root [1]",
        "7. Failed to merge [4]",
        "8. Rollback [7]",
        "10. Rollback [5]",
        "Select best subgraph: [3,5,6,7] on A",
    ] {
        assert!(out.contains(line), "missing {line} in\n{out}");
    }
    let c = conn(&work, "seed");
    let files: Vec<&str> = c.parts.iter().map(|p| p.file.as_str()).collect();
    assert_eq!(
        files,
        [
            "seed.00001_A.onnx",
            "seed.00002_B.onnx",
            "seed.00003_A.onnx"
        ]
    );
    let names = |f: &str| -> Vec<String> {
        let m = cleave::onnx::OnnxModel::load(work.join(f)).unwrap();
        m.proto()
            .unwrap()
            .into_owned()
            .graph
            .unwrap()
            .node
            .iter()
            .map(|n| n.name().to_string())
            .collect()
    };
    assert_eq!(names("seed.00001_A.onnx"), ["1", "2"]);
    assert_eq!(names("seed.00002_B.onnx"), ["4"]);
    assert_eq!(names("seed.00003_A.onnx"), ["3", "5", "6", "7"]);
    oracle(&work.join("seed.conn.json"));

    let work = tmp.path().join("default");
    partition(&m, &work, &["--part", p]);
    assert_eq!(conn(&work, "seed").parts.len(), 3);
    ok(&cleave(&[
        os("check"),
        work.join("seed.conn.json").as_os_str(),
    ]));
    oracle(&work.join("seed.conn.json"));
}

#[test]
fn light_models_with_random_three_backend_assignments_reproduce_every_tensor() {
    let tmp = tempfile::tempdir().unwrap();
    // Seeded, so every run draws the same assignment.
    let mut rng = cleave::ir::XorShift64::raw(20261122);
    let mut table = vec![format!(
        "{:<20} {:>6} {:>6} {:>10} {:>12}",
        "model", "nodes", "parts", "ONE rule", "epoch greedy"
    )];
    for name in LIGHT_MODELS {
        let m = light_random(name);
        let q: serde_json::Value = serde_json::from_str(&ok(&cleave(&[
            os("query"),
            m.as_os_str(),
            os("--devices"),
            os("cpu"),
            os("--json"),
        ])))
        .unwrap();
        let mut text = String::from(
            "[partition]\nbackends=cpu,npu,gpu\ndefault=cpu\ncomply=opname\n\n[OPNAME]\n",
        );
        let mut placed = 0;
        for n in q["nodes"].as_array().unwrap() {
            if n["device"].is_null() {
                continue; // computes a constant: copied, not placed
            }
            placed += 1;
            text.push_str(&format!(
                "{}={}\n",
                n["name"].as_str().unwrap(),
                ["cpu", "npu", "gpu"][rng.below(3) as usize]
            ));
        }
        let part = write_part(tmp.path(), &format!("{name}.part"), &text);
        let work = tmp.path().join(name);
        let out = partition(&m, &work, &["--part", part.to_str().unwrap()]);
        let first = out.lines().next().unwrap();
        let parts = first
            .split(": ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .unwrap()
            .to_string();
        let one = first
            .split("ONE's rule would give ")
            .nth(1)
            .and_then(|s| s.split(',').next())
            .unwrap()
            .to_string();
        let epoch = first.split("the epoch greedy ").nth(1).unwrap().to_string();
        assert!(
            parts.parse::<usize>().unwrap() <= one.parse().unwrap()
                && parts.parse::<usize>().unwrap() <= epoch.parse().unwrap(),
            "{first}"
        );
        table.push(format!(
            "{name:<20} {placed:>6} {parts:>6} {one:>10} {epoch:>12}"
        ));
        let conn_json = work.join(format!("{name}.conn.json"));
        ok(&cleave(&[os("check"), conn_json.as_os_str()]));
        oracle(&conn_json);
        // The parts are big (random weights): free the disk before the next model.
        std::fs::remove_dir_all(&work).unwrap();
    }
    eprintln!("{}", table.join("\n"));
}

#[test]
fn unsupported_layer_stops_with_the_vpu_message() {
    let tmp = tempfile::tempdir().unwrap();
    let m = write(
        tmp.path(),
        "neg.onnx",
        &model(vec![node("negate", "Neg", &["x"], &["y"])], vec![], "y").encode_to_vec(),
    );
    let o = cleave(&[os("query"), m.as_os_str(), os("--devices"), os("myriad")]);
    assert_bad_input(&o, &m, "[MYRIAD] Cannot convert layer negate due to unsupported layer type Neg; add a fallback device that supports it, e.g. --devices myriad,cpu");
    let o = cleave(&[
        os("query"),
        m.as_os_str(),
        os("--devices"),
        os("myriad,cpu"),
        os("--json"),
    ]);
    let j: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
    assert_eq!(j["nodes"][0]["device"], "cpu");
}

#[test]
fn bad_rules_and_places_get_one_line_and_exit_code_2() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let m = example("instance_norm.onnx");
    let work = d.join("work");
    let cases = [
        (
            "unknown.part",
            "[partition]\nbackends=cpu,acl_cl\ndefault=cpu\n[OPCODE]\nDIV=npu\n",
            "unknown backend 'npu'",
        ),
        (
            "default.part",
            "[partition]\nbackends=cpu,acl_cl\ndefault=gpu\n",
            "default 'gpu' is not one of the backends",
        ),
        (
            "malformed.part",
            "[partition\nbackends=cpu\n",
            "line 1: section header",
        ),
        (
            "noequals.part",
            "[partition]\nbackends cpu\n",
            "line 2: 'backends cpu' is neither",
        ),
    ];
    for (name, text, cause) in cases {
        let p = write_part(d, name, text);
        let o = cleave(&[
            os("partition"),
            m.as_os_str(),
            os("--part"),
            p.as_os_str(),
            os("-o"),
            work.as_os_str(),
        ]);
        assert_bad_input(&o, &p, cause);
    }
    let missing = d.join("missing.onnx");
    let o = cleave(&[
        os("partition"),
        missing.as_os_str(),
        os("--devices"),
        os("cpu"),
        os("-o"),
        work.as_os_str(),
    ]);
    assert_bad_input(&o, &missing, "No such file");
    // A WORKDIR that cannot be created: its parent is a file.
    let blocker = write(d, "blocker", b"not a folder");
    let unwritable = blocker.join("work");
    let o = cleave(&[
        os("partition"),
        m.as_os_str(),
        os("--devices"),
        os("cpu"),
        os("-o"),
        unwritable.as_os_str(),
    ]);
    assert_bad_input(&o, &unwritable, "cannot write");
    let o = cleave(&[os("partition"), m.as_os_str(), os("-o"), work.as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no devices given"), "{}", stderr(&o));
}

#[test]
fn workdir_keeps_foreign_files_and_the_source_is_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("instance_norm.onnx");
    std::fs::copy(example("instance_norm.onnx"), &src).unwrap();
    let before = std::fs::read(&src).unwrap();
    // Partition into the model's own folder, holding a user's file and a stale part.
    std::fs::write(tmp.path().join("notes.txt"), "mine").unwrap();
    std::fs::write(tmp.path().join("instance_norm.00007_cpu.onnx"), "stale").unwrap();
    let part = write_part(
        tmp.path(),
        "div.part",
        "[partition]\nbackends=cpu,acl_cl\ndefault=cpu\n[OPCODE]\nDIV=acl_cl\n",
    );
    partition(&src, tmp.path(), &["--part", part.to_str().unwrap()]);
    assert_eq!(std::fs::read(&src).unwrap(), before);
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("notes.txt")).unwrap(),
        "mine"
    );
    assert!(
        !tmp.path().join("instance_norm.00007_cpu.onnx").exists(),
        "stale part left behind"
    );
    assert_eq!(
        conn(tmp.path(), "instance_norm").source.file,
        "instance_norm.onnx"
    );
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty());
}

/// Every file of `dir` (not folders) with its bytes.
fn files_in(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| {
            let bytes = std::fs::read(e.path()).unwrap();
            (e.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect()
}

#[test]
fn a_write_that_fails_half_way_leaves_the_previous_partition_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let rules = |op: &str| {
        write_part(
            tmp.path(),
            &format!("{op}.part"),
            &format!("[partition]\nbackends=cpu,acl_cl\ndefault=cpu\ncomply=opcode\n\n[OPCODE]\n{op}=acl_cl\n"),
        )
    };
    let (div, add) = (rules("DIV"), rules("ADD"));
    let m = example("instance_norm.onnx");
    let work = tmp.path().join("work");
    partition(&m, &work, &["--part", div.to_str().unwrap()]);
    // The ADD rule gives four parts: a folder stands where the fourth must go.
    for b in ["cpu", "acl_cl"] {
        std::fs::create_dir(work.join(format!("instance_norm.00004_{b}.onnx"))).unwrap();
    }
    let before = files_in(&work);
    assert_eq!(before.len(), 5, "{:?}", before.keys());
    let o = cleave(&[
        os("partition"),
        m.as_os_str(),
        os("--part"),
        add.as_os_str(),
        os("-o"),
        work.as_os_str(),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("instance_norm.00004_") && err.contains("a folder is in the way"),
        "{err}"
    );
    assert_eq!(files_in(&work), before, "the earlier partition was changed");
    let names: Vec<String> = std::fs::read_dir(&work)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names.len(),
        7,
        "a staging folder was left behind: {names:?}"
    );
    ok(&cleave(&[
        os("check"),
        work.join("instance_norm.conn.json").as_os_str(),
    ]));
    // Once the folders are gone the same command replaces three parts by four.
    for b in ["cpu", "acl_cl"] {
        std::fs::remove_dir(work.join(format!("instance_norm.00004_{b}.onnx"))).unwrap();
    }
    partition(&m, &work, &["--part", add.to_str().unwrap()]);
    let after = files_in(&work);
    let c = conn(&work, "instance_norm");
    assert_eq!(c.parts.len(), 4);
    assert_eq!(after.len(), 6, "{:?}", after.keys());
    for p in &c.parts {
        assert!(after.contains_key(&p.file), "{}", p.file);
    }
}

#[test]
fn symbolic_batch_survives_in_part_boundaries() {
    let tmp = tempfile::tempdir().unwrap();
    let part = write_part(
        tmp.path(),
        "p.part",
        "[partition]\nbackends=cpu,npu\ndefault=cpu\n[OPCODE]\nConv=npu\n",
    );
    let work = tmp.path().join("w");
    partition(
        &example("tiny_cnn.onnx"),
        &work,
        &["--part", part.to_str().unwrap()],
    );
    let c = conn(&work, "tiny_cnn");
    assert!(c.parts.len() >= 3, "{c:?}");
    for p in &c.parts {
        let m = cleave::onnx::OnnxModel::load(work.join(&p.file)).unwrap();
        let ir = cleave::onnx::to_ir(&m).unwrap();
        for &v in ir.graph.inputs.iter().chain(&ir.graph.outputs) {
            let ty = &ir.graph.value(v).ty;
            assert_eq!(
                ty.shape.as_ref().unwrap()[0],
                cleave::ir::Dim::Param("batch".into()),
                "{}: {} is {ty}",
                p.file,
                ir.graph.value(v).name
            );
        }
    }
    let o = Command::new("python3")
        .arg(repo().join("scripts/oracles/check_parts.py"))
        .arg(work.join("tiny_cnn.conn.json"))
        .args(["--shape", "input=2,3,16,16"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
}

fn bool_input(name: &str) -> cleave::onnx::proto::ValueInfoProto {
    let mut v = float_input(name, &[]);
    if let Some(cleave::onnx::proto::type_proto::Value::TensorType(t)) =
        v.r#type.as_mut().and_then(|t| t.value.as_mut())
    {
        t.elem_type = Some(cleave::onnx::proto::tensor_proto::DataType::Bool as i32);
    }
    v
}

fn branch(name: &str, op: &str) -> cleave::onnx::proto::GraphProto {
    cleave::onnx::proto::GraphProto {
        name: Some(name.into()),
        node: vec![node(
            &format!("{name}_op"),
            op,
            &["t"],
            &[&format!("{name}_out")],
        )],
        output: vec![float_input(&format!("{name}_out"), &[1, 4])],
        ..Default::default()
    }
}

#[test]
fn a_subgraph_node_is_atomic_and_its_outer_reads_are_part_inputs() {
    use cleave::onnx::proto::{attribute_proto::AttributeType, AttributeProto};
    let tmp = tempfile::tempdir().unwrap();
    let graph_attr = |name: &str, g| AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(g),
        ..Default::default()
    };
    let mut if_node = node("choose", "If", &["cond"], &["y"]);
    if_node.attribute = vec![
        graph_attr("then_branch", branch("then", "Relu")),
        graph_attr("else_branch", branch("else", "Neg")),
    ];
    let mut m = model(
        vec![node("pre", "Neg", &["x"], &["t"]), if_node],
        vec![],
        "y",
    );
    m.graph.as_mut().unwrap().input.push(bool_input("cond"));
    let path = write(tmp.path(), "if.onnx", &m.encode_to_vec());
    let part = write_part(
        tmp.path(),
        "if.part",
        "[partition]\nbackends=A,B\ndefault=B\ncomply=opname\n[OPNAME]\npre=A\n",
    );
    let work = tmp.path().join("w");
    partition(&path, &work, &["--part", part.to_str().unwrap()]);
    let c = conn(&work, "if");
    assert_eq!(c.parts.len(), 2);
    assert_eq!(
        strs(&c.parts[0].outputs),
        ["t"],
        "the If body's read of t must leave part 1"
    );
    let mut ins = strs(&c.parts[1].inputs);
    ins.sort();
    assert_eq!(ins, ["cond", "t"]);
    oracle(&work.join("if.conn.json"));
}

#[test]
fn a_quantize_dequantize_pair_is_never_cut() {
    use cleave::onnx::proto::{tensor_proto::DataType, TensorProto};
    let tmp = tempfile::tempdir().unwrap();
    let scalar = |name: &str, dt: DataType, raw: Vec<u8>| TensorProto {
        name: Some(name.into()),
        data_type: Some(dt as i32),
        raw_data: Some(raw.into()),
        ..Default::default()
    };
    let inits = vec![
        scalar("scale", DataType::Float, 0.05f32.to_le_bytes().to_vec()),
        scalar("zp", DataType::Uint8, vec![128]),
    ];
    let nodes = vec![
        node("quant", "QuantizeLinear", &["x", "scale", "zp"], &["q"]),
        node(
            "dequant",
            "DequantizeLinear",
            &["q", "scale", "zp"],
            &["dq"],
        ),
        node("act", "Relu", &["dq"], &["y"]),
    ];
    let path = write(
        tmp.path(),
        "qdq.onnx",
        &model(nodes, inits, "y").encode_to_vec(),
    );
    // The rule pins the QuantizeLinear to A; its DequantizeLinear would fall to the default B.
    let part = write_part(
        tmp.path(),
        "q.part",
        "[partition]\nbackends=A,B\ndefault=B\ncomply=opname\n[OPNAME]\nquant=A\n",
    );
    let q: serde_json::Value = serde_json::from_str(&ok(&cleave(&[
        os("query"),
        path.as_os_str(),
        os("--part"),
        part.as_os_str(),
        os("--json"),
    ])))
    .unwrap();
    assert_eq!(q["nodes"][1]["device"], "A");
    assert_eq!(q["nodes"][1]["reason"], "Q/DQ pair");
    let work = tmp.path().join("w");
    partition(&path, &work, &["--part", part.to_str().unwrap()]);
    let c = conn(&work, "qdq");
    assert_eq!(c.parts.len(), 2);
    assert_eq!(strs(&c.parts[0].outputs), ["dq"]);
    oracle(&work.join("qdq.conn.json"));
}

/// Every initializer's bytes by name, read as an engine would (external data resolved).
fn weight_bytes(model: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let m = cleave::onnx::OnnxModel::load(model).unwrap();
    let p = m.proto().unwrap();
    let g = p.graph.as_ref().unwrap();
    g.initializer
        .iter()
        .map(|t| {
            (
                t.name().to_string(),
                cleave::onnx::read_weight(&cleave::onnx::to_ir_weight(t, &m).unwrap())
                    .unwrap()
                    .to_vec(),
            )
        })
        .collect()
}

/// Initializers of a part that read external data, with their locations.
fn external_locations(part: &Path) -> Vec<(String, String)> {
    let m = cleave::onnx::OnnxModel::load(part).unwrap();
    let p = m.proto().unwrap();
    let g = p.graph.as_ref().unwrap();
    g.initializer
        .iter()
        .filter(|t| !t.external_data.is_empty())
        .map(|t| {
            (
                t.name().to_string(),
                t.external_data
                    .iter()
                    .find(|kv| kv.key() == "location")
                    .unwrap()
                    .value()
                    .to_string(),
            )
        })
        .collect()
}

/// The bundled example with every weight in one external data file, `dir/tiny_cnn.data`.
fn tiny_cnn_external(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let m = cleave::onnx::OnnxModel::load(example("tiny_cnn.onnx")).unwrap();
    let (ext, _) = m.externalized(&dir.join("tiny_cnn.data"), 0).unwrap();
    let p = dir.join("tiny_cnn.onnx");
    cleave::onnx::write_atomic(&p, &cleave::onnx::encode_model(&ext.proto().unwrap())).unwrap();
    p
}

#[test]
fn shared_weights_copy_the_sources_data_file_and_pass_the_checker_onnxruntime_and_verify() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let src = tiny_cnn_external(&tmp.path().join("src"));
    let want = weight_bytes(&example("tiny_cnn.onnx"));
    assert_eq!(weight_bytes(&src), want);
    let work = tmp.path().join("work");
    let rules = example("tiny_cnn.part");
    let text = partition(
        &src,
        &work,
        &[
            "--part",
            rules.to_str().unwrap(),
            "--external-data",
            "shared",
        ],
    );
    assert!(text.contains("tiny_cnn.weights (8 tensors, 3880 bytes), a copy of the source's data file, offsets kept"), "{text}");
    // Not a hard link: onnx's loader refuses data files with more than one link, the source's too.
    assert_eq!(
        std::fs::metadata(tmp.path().join("src/tiny_cnn.data"))
            .unwrap()
            .nlink(),
        1
    );
    assert_eq!(
        std::fs::read(work.join("tiny_cnn.weights")).unwrap(),
        std::fs::read(tmp.path().join("src/tiny_cnn.data")).unwrap()
    );

    let c = conn(&work, "tiny_cnn");
    assert!(c.parts.len() >= 2, "{c:?}");
    let mut seen = 0;
    for p in &c.parts {
        let part = work.join(&p.file);
        let got = weight_bytes(&part);
        let locations = external_locations(&part);
        assert_eq!(
            locations.len(),
            got.len(),
            "{}: every weight external",
            p.file
        );
        assert!(
            locations.iter().all(|(_, l)| l == "tiny_cnn.weights"),
            "{locations:?}"
        );
        for (name, bytes) in &got {
            assert_eq!(Some(bytes), want.get(name), "{}: {name}", p.file);
        }
        seen += got.len();
    }
    assert_eq!(seen, want.len());

    // Independent oracles: the onnx checker finds the shared file, onnxruntime runs the parts.
    let out = oracle(&work.join("tiny_cnn.conn.json"));
    assert!(out.contains("pass the onnx checker"), "{out}");
    // cleave's own engines, and the boundary probe of a source whose data is external.
    let conn_json = work.join("tiny_cnn.conn.json");
    for engines in ["npu=tract,cpu=tract", "npu=ort,cpu=ort"] {
        let o = cleave(&[
            os("verify"),
            src.as_os_str(),
            conn_json.as_os_str(),
            os("--boundaries"),
            os("--engine"),
            os(engines),
            os("--shape"),
            os("input=2,3,16,16"),
            os("--rtol"),
            os("1e-3"),
            os("--atol"),
            os("1e-4"),
        ]);
        let out = ok(&o);
        assert!(out.contains("tensors match"), "{engines}: {out}");
    }
}

#[test]
fn external_data_through_a_symbolic_link_is_refused_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tiny_cnn_external(&tmp.path().join("src"));
    // The data file moves elsewhere and a link takes its place, as onnx (>= 1.16) refuses.
    let elsewhere = tmp.path().join("elsewhere.bin");
    let data = tmp.path().join("src/tiny_cnn.data");
    std::fs::rename(&data, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &data).unwrap();
    let work = tmp.path().join("work");
    let rules = example("tiny_cnn.part");
    for cmd in ["partition", "inspect"] {
        let mut args = vec![os(cmd), src.as_os_str()];
        if cmd == "partition" {
            args.extend([os("--part"), rules.as_os_str(), os("-o"), work.as_os_str()]);
        }
        let o = cleave(&args);
        assert_bad_input(&o, &src, "goes through a symbolic link");
        assert!(stderr(&o).contains("tiny_cnn.data"), "{}", stderr(&o));
    }
    assert!(!work.exists(), "a refused partition left its output folder");
    // The control: the same file itself in place of the link partitions.
    std::fs::remove_file(&data).unwrap();
    std::fs::rename(&elsewhere, &data).unwrap();
    partition(&src, &work, &["--part", rules.to_str().unwrap()]);
    assert!(work.join("tiny_cnn.conn.json").is_file());
}

#[test]
fn inline_parts_of_an_external_source_hold_their_bytes_and_drop_a_stale_shared_file() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tiny_cnn_external(&tmp.path().join("src"));
    let rules = example("tiny_cnn.part");
    let work = tmp.path().join("work");
    partition(
        &src,
        &work,
        &[
            "--part",
            rules.to_str().unwrap(),
            "--external-data",
            "shared",
        ],
    );
    assert!(work.join("tiny_cnn.weights").is_file());
    partition(&src, &work, &["--part", rules.to_str().unwrap()]);
    assert!(
        !work.join("tiny_cnn.weights").exists(),
        "the shared file of the earlier run is left behind"
    );
    assert!(
        tmp.path().join("src/tiny_cnn.data").is_file(),
        "the source's data file must stay"
    );
    let want = weight_bytes(&src);
    for p in &conn(&work, "tiny_cnn").parts {
        let part = work.join(&p.file);
        assert!(external_locations(&part).is_empty(), "{}", p.file);
        for (name, bytes) in weight_bytes(&part) {
            assert_eq!(Some(&bytes), want.get(&name), "{}: {name}", p.file);
        }
    }
    oracle(&work.join("tiny_cnn.conn.json"));
}

#[test]
fn shared_weights_of_an_embedded_source_are_streamed_out() {
    let tmp = tempfile::tempdir().unwrap();
    let rules = example("tiny_cnn.part");
    let work = tmp.path().join("work");
    let text = partition(
        &example("tiny_cnn.onnx"),
        &work,
        &[
            "--part",
            rules.to_str().unwrap(),
            "--external-data",
            "shared",
        ],
    );
    // Only conv2.w reaches 1 KiB; smaller tensors stay inside their parts.
    assert!(
        text.contains("tiny_cnn.weights (1 tensors, 2304 bytes), streamed from the source"),
        "{text}"
    );
    let want = weight_bytes(&example("tiny_cnn.onnx"));
    let mut external = Vec::new();
    for p in &conn(&work, "tiny_cnn").parts {
        let part = work.join(&p.file);
        external.extend(external_locations(&part));
        for (name, bytes) in weight_bytes(&part) {
            assert_eq!(Some(&bytes), want.get(&name), "{}: {name}", p.file);
        }
    }
    assert_eq!(
        external,
        [("conv2.w".to_string(), "tiny_cnn.weights".to_string())]
    );
    oracle(&work.join("tiny_cnn.conn.json"));
}

#[test]
fn a_part_copying_a_constant_that_reads_a_placed_one_comes_after_it() {
    // softmax computes a constant graph output and is pinned to npu; relu_c, a copied
    // constant, reads it inside the cpu part, whose first node comes earlier in the file.
    // Found by the pipeline_onnx fuzz target: the cpu part was numbered first and read
    // 'probs' before any part made it.
    let dir = tempfile::tempdir().unwrap();
    let w = cleave::onnx::proto::TensorProto {
        name: Some("w".into()),
        dims: vec![1, 4],
        data_type: Some(cleave::onnx::proto::tensor_proto::DataType::Float as i32),
        raw_data: Some(
            [0.5f32, -1.0, 2.0, 0.25]
                .iter()
                .flat_map(|f| f.to_le_bytes())
                .collect::<Vec<u8>>()
                .into(),
        ),
        ..Default::default()
    };
    let mut m = model(
        vec![
            node("relu0", "Relu", &["x"], &["r0"]),
            node("softmax", "Softmax", &["w"], &["probs"]),
            node("relu_c", "Relu", &["probs"], &["rc"]),
            node("add", "Add", &["r0", "rc"], &["y"]),
        ],
        vec![w],
        "y",
    );
    m.graph
        .as_mut()
        .unwrap()
        .output
        .push(float_input("probs", &[1, 4]));
    let src = write(dir.path(), "m.onnx", &m.encode_to_vec());
    let rules = write(
        dir.path(),
        "m.part",
        b"[partition]\nbackends=npu,cpu\ndefault=cpu\ncomply=opname\n\n[OPNAME]\nsoftmax=npu\n",
    );
    let work = dir.path().join("w");
    ok(&cleave(&[
        os("partition"),
        src.as_os_str(),
        os("--part"),
        rules.as_os_str(),
        os("-o"),
        work.as_os_str(),
    ]));
    let conn = work.join("m.conn.json");
    let c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&conn).unwrap()).unwrap();
    let parts = c["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 2, "{c}");
    assert_eq!(parts[0]["outputs"], serde_json::json!(["probs"]), "{c}");
    let out = ok(&cleave(&[
        os("verify"),
        src.as_os_str(),
        conn.as_os_str(),
        os("--boundaries"),
        os("--engine"),
        os("npu=ort,cpu=ort"),
        os("--reference"),
        os("ort"),
    ]));
    assert!(out.contains("tensors match"), "{out}");
}

/// An op cleave has no inference rule for (com.microsoft's ExpandDims) leaves a boundary
/// without a type: the split is refused, naming it. With --learn-dims one run on ONNX Runtime
/// types it, the command says the type came from a run, and onnxruntime alone reproduces
/// every boundary of the parts.
#[test]
fn learn_dims_types_what_inference_cannot_from_one_run() {
    use cleave::onnx::proto::{tensor_proto, OperatorSetIdProto, TensorProto};
    let tmp = tempfile::tempdir().unwrap();
    let mut expand = node("expand", "ExpandDims", &["a", "ax"], &["e"]);
    expand.domain = Some("com.microsoft".into());
    let ax = TensorProto {
        name: Some("ax".into()),
        data_type: Some(tensor_proto::DataType::Int32 as i32),
        int32_data: vec![0],
        ..Default::default()
    };
    let mut m = model(
        vec![
            node("relu", "Relu", &["x"], &["a"]),
            expand,
            node("sig", "Sigmoid", &["e"], &["y"]),
        ],
        vec![ax],
        "y",
    );
    m.opset_import.push(OperatorSetIdProto {
        domain: Some("com.microsoft".into()),
        version: Some(1),
    });
    m.graph.as_mut().unwrap().output = vec![float_input("y", &[1, 1, 4])];
    let path = write(tmp.path(), "ms.onnx", &m.encode_to_vec());
    let rules = tmp.path().join("ms.part");
    std::fs::write(
        &rules,
        "[partition]\nbackends=npu,cpu\ndefault=cpu\ncomply=opname\n\n[OPNAME]\nexpand=npu\n",
    )
    .unwrap();
    let run = |extra: &[&str], work: &Path| {
        let mut args = vec![
            os("partition"),
            path.as_os_str(),
            os("--part"),
            rules.as_os_str(),
            os("-o"),
            work.as_os_str(),
        ];
        args.extend(extra.iter().map(os));
        cleave(&args)
    };
    let refused = run(&[], &tmp.path().join("plain"));
    assert_bad_input(
        &refused,
        &path,
        "boundary tensor 'e' has no element type or rank",
    );
    let work = tmp.path().join("learned");
    let o = run(&["--learn-dims"], &work);
    ok(&o);
    let said = stderr(&o);
    assert!(
        said.contains("--learn-dims: 1 tensor type learned by running the model once on")
            && said.contains("e float32[1,1,4]"),
        "{said}"
    );
    let summary = oracle(&work.join("ms.conn.json"));
    assert!(summary.contains("3 parts"), "{summary}");
}
