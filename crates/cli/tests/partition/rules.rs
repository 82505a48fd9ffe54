//! `.part` rules and device profiles: ONE's examples, both algorithms, and the one-line refusals of bad rules.

use super::*;

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
        &["--rules", part.to_str().unwrap()],
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
        &["--rules", part.to_str().unwrap()],
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
        &["--rules", p, "--algorithm", "openvino", "--trace"],
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
    partition(&m, &work, &["--rules", p]);
    assert_eq!(conn(&work, "seed").parts.len(), 3);
    ok(&cleave(&[
        os("check"),
        work.join("seed.conn.json").as_os_str(),
    ]));
    oracle(&work.join("seed.conn.json"));
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
            os("--rules"),
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
        let out = partition(&m, &work, &["--rules", part.to_str().unwrap()]);
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
