//! The synthesized TFLite and circle models (`cleave_testdata::synth`) through the binary:
//! seeded 2- and 3-backend splits by opcode and by opname, each checked without cleave by
//! `scripts/oracles/check_tflite_parts.py`; IF and WHILE cut apart and kept together, each part
//! carrying its bodies; ONE's circle-partitioner example (`Net_InstanceNorm_003` with
//! `DIV=acl_cl`) giving ONE's three parts, run in onert.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use cleave::tflite::pack::Layout;
use cleave::tflite::schema::tflite;
use cleave_testdata::synth;
use common::{check_tflite_parts, os, partition_by_part, query_nodes, repo, write_part_file, Rng};
use serde_json::Value;

const BACKENDS: [&str; 3] = ["cpu", "acl_cl", "acl_neon"];

/// `cleave partition MODEL --rules PART -o WORK`; the connection file's JSON.
fn partition(model: &Path, part: &Path, work: &Path) -> Value {
    let conn = partition_by_part(model, part, work);
    serde_json::from_str(&std::fs::read_to_string(conn).unwrap()).unwrap()
}

/// A one-element bool array as a .npy file (format 1.0).
fn npy_bool(path: &Path, value: bool) {
    let mut header = "{'descr': '|b1', 'fortran_order': False, 'shape': (1,), }".to_string();
    // Magic, version and length take 10 bytes; the header ends in a newline at a multiple
    // of 64.
    let pad = (64 - (10 + header.len() + 1) % 64) % 64;
    header.push_str(&" ".repeat(pad));
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.push(u8::from(value));
    std::fs::write(path, bytes).unwrap();
}

/// The data of every buffer, wherever the file keeps it.
fn buffer_data(bytes: &[u8]) -> Vec<Vec<u8>> {
    let root = tflite::root_as_model(bytes).unwrap();
    root.buffers()
        .unwrap()
        .iter()
        .map(|b| {
            if b.offset() > 1 {
                bytes[b.offset() as usize..][..b.size() as usize].to_vec()
            } else {
                b.data().map(|d| d.bytes().to_vec()).unwrap_or_default()
            }
        })
        .collect()
}

/// The source with the main subgraph's tensors named as cleave names them in parts: an
/// empty name becomes `tensor#INDEX`, a repeated one `NAME#INDEX` (what the loader's note
/// says). check_tflite_parts.py finds boundary tensors in the source by name, and the
/// original has none named so; the copy computes the same (only names differ), and
/// LiteRT's outputs on both are compared here.
fn renamed_copy(source: &Path, dir: &Path) -> PathBuf {
    let bytes = std::fs::read(source).unwrap();
    let mut model = tflite::root_as_model(&bytes).unwrap().unpack();
    let tensors = model.subgraphs.as_mut().unwrap()[0]
        .tensors
        .as_mut()
        .unwrap();
    let names: Vec<String> = tensors
        .iter()
        .map(|t| t.name.clone().unwrap_or_default())
        .collect();
    let mut renamed = 0;
    for (i, t) in tensors.iter_mut().enumerate() {
        let name = &names[i];
        if name.is_empty() {
            t.name = Some(format!("tensor#{i}"));
        } else if names.iter().filter(|n| *n == name).count() > 1 {
            t.name = Some(format!("{name}#{i}"));
        } else {
            continue;
        }
        renamed += 1;
    }
    assert!(renamed > 0, "{}: nothing to rename", source.display());
    let data = buffer_data(&bytes);
    let slices: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let copy = dir.join(format!(
        "{}.renamed.tflite",
        source.file_stem().unwrap().to_str().unwrap()
    ));
    std::fs::write(
        &copy,
        cleave::tflite::pack::tflite::pack(&model, &slices, Layout::Inline, "TFL3"),
    )
    .unwrap();
    let run = |m: &Path, out: &str| -> Vec<u8> {
        let out = dir.join(out);
        let status = Command::new("python3")
            .arg(repo().join("scripts/oracles/tflite_oracle.py"))
            .arg("run")
            .arg(m)
            .args(["--seed", "3", "--out"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(status.status.success());
        let index: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("index.json")).unwrap())
                .unwrap();
        std::fs::read(out.join(index["outputs"][0]["file"].as_str().unwrap())).unwrap()
    };
    assert_eq!(
        run(source, "renamed-a"),
        run(&copy, "renamed-b"),
        "the renamed copy computes differently"
    );
    copy
}

/// Operator names of every subgraph of a part file, and the subgraphs IF and WHILE name.
struct PartFile {
    subgraph_ops: Vec<Vec<String>>,
    refs: Vec<(String, Vec<i32>)>,
}

fn read_part(path: &Path) -> PartFile {
    let bytes = std::fs::read(path).unwrap();
    let root = tflite::root_as_model(&bytes).unwrap();
    let codes: Vec<String> = root
        .operator_codes()
        .unwrap()
        .iter()
        .map(|c| {
            let code = c
                .builtin_code()
                .0
                .max(i32::from(c.deprecated_builtin_code()));
            tflite::BuiltinOperator(code)
                .variant_name()
                .unwrap()
                .to_string()
        })
        .collect();
    let mut refs = Vec::new();
    let subgraph_ops = root
        .subgraphs()
        .unwrap()
        .iter()
        .map(|sg| {
            sg.operators()
                .unwrap()
                .iter()
                .map(|op| {
                    let name = codes[op.opcode_index() as usize].clone();
                    if let Some(o) = op.builtin_options_as_if_options() {
                        refs.push((
                            name.clone(),
                            vec![o.then_subgraph_index(), o.else_subgraph_index()],
                        ));
                    }
                    if let Some(o) = op.builtin_options_as_while_options() {
                        refs.push((
                            name.clone(),
                            vec![o.cond_subgraph_index(), o.body_subgraph_index()],
                        ));
                    }
                    name
                })
                .collect()
        })
        .collect();
    PartFile { subgraph_ops, refs }
}

/// Subgraph `k` with operator codes as builtin numbers and each tensor's buffer as its data,
/// so a body copied into a part (codes and buffers renumbered) compares with the source's.
fn normalized_subgraph(bytes: &[u8], k: usize) -> (tflite::SubGraphT, Vec<Vec<u8>>) {
    let root = tflite::root_as_model(bytes).unwrap();
    let codes: Vec<i32> = root
        .operator_codes()
        .unwrap()
        .iter()
        .map(|c| {
            c.builtin_code()
                .0
                .max(i32::from(c.deprecated_builtin_code()))
        })
        .collect();
    let data = buffer_data(bytes);
    let mut sg = root.subgraphs().unwrap().get(k).unpack();
    for op in sg.operators.iter_mut().flatten() {
        op.opcode_index = codes[op.opcode_index as usize] as u32;
    }
    let mut tensor_data = Vec::new();
    for t in sg.tensors.iter_mut().flatten() {
        tensor_data.push(data[t.buffer as usize].clone());
        t.buffer = 0;
    }
    (sg, tensor_data)
}

struct Model {
    path: PathBuf,
    /// What check_tflite_parts.py compares with (a renamed copy where names repeat).
    reference: PathBuf,
    /// Extra runs of the check (beyond the default seeded one).
    extra_checks: Vec<Vec<std::ffi::OsString>>,
}

fn models(dir: &Path) -> Vec<Model> {
    npy_bool(&dir.join("flag-true.npy"), true);
    npy_bool(&dir.join("flag-false.npy"), false);
    synth::all()
        .into_iter()
        .map(|(name, bytes)| {
            let path = dir.join(name);
            std::fs::write(&path, bytes).unwrap();
            // check_tflite_parts.py reads cleave's NAME#INDEX names as tensor indices.
            let reference = path.clone();
            let mut extra_checks: Vec<Vec<std::ffi::OsString>> = Vec::new();
            if name.contains("control") {
                for v in ["true", "false"] {
                    let npy = dir.join(format!("flag-{v}.npy"));
                    extra_checks.push(vec![
                        "--input".into(),
                        format!("flag={}", npy.display()).into(),
                    ]);
                }
            }
            if name.contains("dynamic") {
                extra_checks.push(vec!["--shape".into(), "x=3,8".into()]);
            }
            if name.ends_with(".circle") {
                extra_checks.push(vec!["--circle-onert".into()]);
            }
            Model {
                path,
                reference,
                extra_checks,
            }
        })
        .collect()
}

#[test]
fn random_splits_of_every_synth_model_reproduce_it_in_litert() {
    let tmp = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(0x2545_f491_4f6c_dd1d);
    let mut checks = 0;
    for m in models(tmp.path()) {
        let stem = m.path.file_stem().unwrap().to_string_lossy().into_owned();
        let nodes = query_nodes(&m.path, &[os("--devices"), os("cpu")])
            .expect("cpu runs every synth model");
        assert!(
            nodes.iter().all(|(_, _, d)| d == "cpu"),
            "{stem}: {nodes:?}"
        );
        // Which accelerator runs which node, so that every rule is one the device obeys.
        let runs: Vec<(String, String)> = BACKENDS[1..]
            .iter()
            .flat_map(|b| {
                query_nodes(&m.path, &[os("--devices"), os(&format!("{b},cpu"))])
                    .unwrap_or_else(|| panic!("query --devices {b},cpu refused"))
            })
            .filter(|(_, _, d)| d != "cpu")
            .map(|(n, _, d)| (n, d))
            .collect();
        let runs_on = |node: &str, b: &str| b == "cpu" || runs.contains(&(node.into(), b.into()));
        let ops: BTreeSet<&str> = nodes.iter().map(|(_, op, _)| op.as_str()).collect();
        let mut most_parts = 0;
        for round in 0..2 {
            for count in [2, 3] {
                let backends = &BACKENDS[..count];
                let mut by_code: Vec<(String, &str)> = Vec::new();
                for op in &ops {
                    let able: Vec<&str> = backends
                        .iter()
                        .copied()
                        .filter(|b| {
                            nodes
                                .iter()
                                .filter(|(_, o, _)| o == op)
                                .all(|(n, _, _)| runs_on(n, b))
                        })
                        .collect();
                    by_code.push((op.to_string(), able[rng.below(able.len())]));
                }
                let mut by_name: Vec<(String, &str)> = Vec::new();
                for (name, _, _) in &nodes {
                    let b = backends[rng.below(count)];
                    if runs_on(name, b) {
                        by_name.push((name.clone(), b));
                    }
                }
                for (section, rules) in [("OPCODE", by_code), ("OPNAME", by_name)] {
                    let tag = format!("{stem}-{section}-{count}-{round}");
                    let part = tmp.path().join(format!("{tag}.part"));
                    write_part_file(&part, backends, section, &rules);
                    let work = tmp.path().join(&tag);
                    let v = partition(&m.path, &part, &work);
                    let parts = v["parts"].as_array().unwrap().len();
                    most_parts = most_parts.max(parts);
                    let conn = work.join(format!("{stem}.conn.json"));
                    let summary = check_tflite_parts(&conn, &m.reference, &[]);
                    eprintln!("{tag}: {parts} parts; {summary}");
                    for extra in &m.extra_checks {
                        let args: Vec<&std::ffi::OsStr> =
                            extra.iter().map(|s| s.as_os_str()).collect();
                        let summary = check_tflite_parts(&conn, &m.reference, &args);
                        eprintln!("  {extra:?}: {summary}");
                    }
                    checks += 1 + m.extra_checks.len();
                }
            }
        }
        // A model of two nodes (synth_computed_if) splits in two at most.
        let want = nodes.len().min(3);
        assert!(
            most_parts >= want,
            "{stem}: no split gave {want} parts or more"
        );
    }
    eprintln!("{checks} checks");
}

/// The part file of the part whose backend is `backend` and which runs `op`.
fn part_running(work: &Path, conn: &Value, op: &str) -> (String, PartFile) {
    let mut found = conn["parts"].as_array().unwrap().iter().filter_map(|p| {
        let file = p["file"].as_str().unwrap().to_string();
        let part = read_part(&work.join(&file));
        part.subgraph_ops[0]
            .iter()
            .any(|o| o == op)
            .then_some((file, part))
    });
    let hit = found.next().unwrap_or_else(|| panic!("no part runs {op}"));
    assert!(found.next().is_none(), "two parts run {op}");
    hit
}

#[test]
fn if_and_while_parts_carry_their_bodies() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let source = dir.join("synth_control.tflite");
    let source_bytes = synth::control_flow();
    std::fs::write(&source, &source_bytes).unwrap();
    npy_bool(&dir.join("flag-true.npy"), true);
    npy_bool(&dir.join("flag-false.npy"), false);
    // The source: 0 main, 1 then, 2 else, 3 cond, 4 body.
    let body = |k: usize| normalized_subgraph(&source_bytes, k);

    // Apart: the accelerator takes ADD, MUL and LOGISTIC (IF and WHILE run only on the cpu),
    // so IF and WHILE land in different cpu parts.
    // Together: the accelerator takes ADD and LOGISTIC; IF, MUL, WHILE share one cpu part.
    let cases: [(&str, &[&str], usize); 2] = [
        ("apart", &["ADD", "MUL", "LOGISTIC"], 5),
        ("together", &["ADD", "LOGISTIC"], 3),
    ];
    for (case, on_acl, want_parts) in cases {
        let rules: Vec<(String, &str)> =
            on_acl.iter().map(|op| (op.to_string(), "acl_cl")).collect();
        let part = dir.join(format!("{case}.part"));
        write_part_file(&part, &BACKENDS[..2], "OPCODE", &rules);
        let work = dir.join(case);
        let conn = partition(&source, &part, &work);
        let parts = conn["parts"].as_array().unwrap();
        assert_eq!(parts.len(), want_parts, "{case}: {conn}");
        let (if_file, if_part) = part_running(&work, &conn, "IF");
        let (while_file, while_part) = part_running(&work, &conn, "WHILE");
        assert_eq!(
            if_file != while_file,
            case == "apart",
            "{case}: IF in {if_file}, WHILE in {while_file}"
        );
        // Every part holds exactly the bodies its operators name, and they are the source's.
        for p in parts {
            let file = p["file"].as_str().unwrap();
            let path = work.join(file);
            let part = read_part(&path);
            let bytes = std::fs::read(&path).unwrap();
            let named: usize = part.refs.iter().map(|(_, r)| r.len()).sum();
            assert_eq!(
                part.subgraph_ops.len(),
                1 + named,
                "{case}: {file}: {:?}",
                part.subgraph_ops
            );
            for (op, refs) in &part.refs {
                let want: &[usize] = if op == "IF" { &[1, 2] } else { &[3, 4] };
                for (&r, &w) in refs.iter().zip(want) {
                    assert_eq!(
                        normalized_subgraph(&bytes, r as usize),
                        body(w),
                        "{case}: {file}: {op}'s subgraph {r} is not the source's subgraph {w}"
                    );
                }
            }
        }
        let refs_of = |p: &PartFile, op: &str| -> Vec<usize> {
            let r = &p.refs.iter().find(|(o, _)| o == op).unwrap().1;
            r.iter().map(|&i| i as usize).collect()
        };
        let i = refs_of(&if_part, "IF");
        assert_eq!(if_part.subgraph_ops[i[0]], ["MUL", "ADD"]);
        assert_eq!(if_part.subgraph_ops[i[1]], ["SUB", "TANH"]);
        let w = refs_of(&while_part, "WHILE");
        assert_eq!(while_part.subgraph_ops[w[0]], ["LESS"]);
        assert_eq!(while_part.subgraph_ops[w[1]], ["ADD", "MUL"]);
        // Both branches of the IF, through the parts.
        let conn_path = work.join("synth_control.conn.json");
        for v in ["true", "false"] {
            let given = format!("flag={}", dir.join(format!("flag-{v}.npy")).display());
            let summary = check_tflite_parts(&conn_path, &source, &[os("--input"), os(&given)]);
            eprintln!("{case}, flag {v}: {summary}");
        }
    }
}

#[test]
fn shared_buffer_stays_shared_in_a_part_and_renamed_tensors_cross_boundaries() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for (name, bytes) in [
        ("synth_names.tflite", synth::names_and_shared()),
        ("synth_offsets.tflite", synth::names_offsets()),
    ] {
        let source = dir.join(name);
        std::fs::write(&source, bytes).unwrap();
        let reference = renamed_copy(&source, dir);
        let part = dir.join("logistic.part");
        write_part_file(
            &part,
            &BACKENDS[..2],
            "OPCODE",
            &[("LOGISTIC".into(), "acl_cl")],
        );
        let stem = source.file_stem().unwrap().to_str().unwrap().to_string();
        let work = dir.join(&stem);
        let conn = partition(&source, &part, &work);
        let parts = conn["parts"].as_array().unwrap();
        assert_eq!(parts.len(), 3, "{conn}");
        let set = |p: &Value, k: &str| -> BTreeSet<String> {
            p[k].as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_string())
                .collect()
        };
        let names = |v: &[&str]| -> BTreeSet<String> { v.iter().map(|s| s.to_string()).collect() };
        // FULLY_CONNECTED ×2 and ADD | LOGISTIC | MUL and CONCATENATION.
        assert_eq!(set(&parts[0], "outputs"), names(&["fc_a", "tensor#6"]));
        assert_eq!(set(&parts[1], "inputs"), names(&["tensor#6"]));
        assert_eq!(set(&parts[1], "outputs"), names(&["dup#7"]));
        assert_eq!(
            set(&parts[2], "inputs"),
            names(&["tensor#6", "dup#7", "fc_a"])
        );
        // The first part's two weight tensors read one buffer, inline.
        let first = std::fs::read(work.join(parts[0]["file"].as_str().unwrap())).unwrap();
        let m = tflite::root_as_model(&first).unwrap();
        let tensors = m.subgraphs().unwrap().get(0).tensors().unwrap();
        let buffer_of = |n: &str| {
            tensors
                .iter()
                .find(|t| t.name() == Some(n))
                .unwrap_or_else(|| panic!("no tensor {n}"))
                .buffer()
        };
        let (a, b) = (buffer_of("fc_a/weights"), buffer_of("fc_b/weights"));
        assert!(a != 0 && a == b, "{name}: weights in buffers {a} and {b}");
        let data = m.buffers().unwrap().get(a as usize).data().unwrap();
        assert_eq!(data.len(), 8 * 8 * 4);
        assert_eq!(
            m.buffers().unwrap().len(),
            3,
            "{name}: buffer 0, the weights, the bias"
        );
        let summary = check_tflite_parts(&work.join(format!("{stem}.conn.json")), &reference, &[]);
        eprintln!("{name}: {summary}");
    }
}

#[test]
fn ones_instance_norm_example_gives_ones_three_parts() {
    let tmp = tempfile::tempdir().unwrap();
    // As ONE's README runs it: model and .part file in the work folder.
    let work = tmp.path().join("Net_InstanceNorm_003");
    std::fs::create_dir(&work).unwrap();
    let source = work.join("Net_InstanceNorm_003.circle");
    std::fs::write(&source, synth::instance_norm_circle()).unwrap();
    let part = work.join("Net_InstanceNorm_003.part");
    write_part_file(&part, &BACKENDS[..2], "OPCODE", &[("DIV".into(), "acl_cl")]);
    let conn = partition(&source, &part, &work);

    let mut files: Vec<String> = std::fs::read_dir(&work)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "Net_InstanceNorm_003.00001_cpu.circle",
            "Net_InstanceNorm_003.00002_acl_cl.circle",
            "Net_InstanceNorm_003.00003_cpu.circle",
            "Net_InstanceNorm_003.circle",
            "Net_InstanceNorm_003.conn.ini",
            "Net_InstanceNorm_003.conn.json",
            "Net_InstanceNorm_003.part",
        ]
    );
    // ONE's connection file, lists compared as sets (cleave's order within a list may
    // differ from ONE's: its second part's inputs are [Pow, Sub], ONE's [Sub, Pow]).
    let set = |v: &Value| -> BTreeSet<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    let names = |v: &[&str]| -> BTreeSet<String> { v.iter().map(|s| s.to_string()).collect() };
    assert_eq!(conn["source"]["file"], "Net_InstanceNorm_003.circle");
    assert_eq!(set(&conn["source"]["inputs"]), names(&["Input"]));
    assert_eq!(set(&conn["source"]["outputs"]), names(&["Add_as_terminal"]));
    let want: [(&str, &[&str], &[&str]); 3] = [
        (
            "Net_InstanceNorm_003.00001_cpu.circle",
            &["Input"],
            &["Pow", "Sub"],
        ),
        (
            "Net_InstanceNorm_003.00002_acl_cl.circle",
            &["Sub", "Pow"],
            &["Div"],
        ),
        (
            "Net_InstanceNorm_003.00003_cpu.circle",
            &["Div"],
            &["Add_as_terminal"],
        ),
    ];
    let parts = conn["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 3);
    for (p, (file, ins, outs)) in parts.iter().zip(want) {
        assert_eq!(p["file"], file);
        assert_eq!(set(&p["inputs"]), names(ins), "{file}");
        assert_eq!(set(&p["outputs"]), names(outs), "{file}");
    }
    // The parts are circle files: ONE's identifier, and the ops ONE's parts hold.
    let ops: Vec<Vec<String>> = parts
        .iter()
        .map(|p| {
            let bytes = std::fs::read(work.join(p["file"].as_str().unwrap())).unwrap();
            assert_eq!(&bytes[4..8], b"CIR0");
            let m = cleave::tflite::schema::circle::root_as_model(&bytes).unwrap();
            let codes = m.operator_codes().unwrap();
            m.subgraphs()
                .unwrap()
                .get(0)
                .operators()
                .unwrap()
                .iter()
                .map(|o| {
                    let c = codes.get(o.opcode_index() as usize);
                    cleave::tflite::schema::circle::BuiltinOperator(i32::from(
                        c.deprecated_builtin_code(),
                    ))
                    .variant_name()
                    .unwrap()
                    .to_string()
                })
                .collect()
        })
        .collect();
    assert_eq!(
        ops,
        [
            vec!["MEAN", "SQUARED_DIFFERENCE", "MEAN", "ADD", "POW", "SUB"],
            vec!["DIV"],
            vec!["MUL", "ADD"]
        ]
    );
    let conn_path = work.join("Net_InstanceNorm_003.conn.json");
    let onert = check_tflite_parts(&conn_path, &source, &[os("--circle-onert")]);
    assert!(onert.contains("load in onert"), "{onert}");
    eprintln!("onert: {onert}");
    eprintln!("LiteRT: {}", check_tflite_parts(&conn_path, &source, &[]));
}

#[test]
fn int8_boundaries_keep_their_quantization() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("synth_int8.tflite");
    let bytes = synth::int8_per_channel();
    std::fs::write(&source, &bytes).unwrap();
    // The int8 ADD on the accelerator: conv and dw (int8) go to it, sum (int8) comes back.
    let part = tmp.path().join("add.part");
    write_part_file(&part, &BACKENDS[..2], "OPCODE", &[("ADD".into(), "acl_cl")]);
    let work = tmp.path().join("w");
    let conn = partition(&source, &part, &work);
    let parts = conn["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 3, "{conn}");
    assert_eq!(parts[1]["backend"], "acl_cl");
    let quant_of = |data: &[u8], name: &str| {
        let m = tflite::root_as_model(data).unwrap();
        let t = m
            .subgraphs()
            .unwrap()
            .get(0)
            .tensors()
            .unwrap()
            .iter()
            .find(|t| t.name() == Some(name))
            .unwrap_or_else(|| panic!("no tensor {name}"));
        let q = t.quantization().unwrap();
        (
            t.type_(),
            q.scale().unwrap().iter().collect::<Vec<f32>>(),
            q.zero_point().unwrap().iter().collect::<Vec<i64>>(),
        )
    };
    let mut boundary = BTreeSet::new();
    for p in parts {
        let data = std::fs::read(work.join(p["file"].as_str().unwrap())).unwrap();
        for k in ["inputs", "outputs"] {
            for t in p[k].as_array().unwrap() {
                let t = t.as_str().unwrap();
                if t == "input" || t == "output" {
                    continue;
                }
                let (ty, scale, zp) = quant_of(&data, t);
                assert_eq!(ty, tflite::TensorType::INT8, "{t}");
                assert_eq!((scale.len(), zp.len()), (1, 1), "{t}");
                assert_eq!(quant_of(&data, t), quant_of(&bytes, t), "{t}");
                boundary.insert(t.to_string());
            }
        }
    }
    let want: BTreeSet<String> = ["conv", "dw", "sum"].map(String::from).into();
    assert_eq!(boundary, want);
    // Exact: LiteRT's int8 kernels on the same integers (no --int-tol).
    eprintln!(
        "{}",
        check_tflite_parts(&work.join("synth_int8.conn.json"), &source, &[])
    );
}

/// Each part file of `conn`, as LiteRT prepares it before any run (no input resized): per
/// part, `ok` or the error, and each input's `shape` and `shape_signature`.
fn prepare_parts(conn: &Path) -> Vec<Value> {
    let script = r#"
import json, pathlib, sys
sys.path.insert(0, sys.argv[2])
import tflite_common as tc
conn = json.loads(pathlib.Path(sys.argv[1]).read_text())
out = []
for p in conn["parts"]:
    it = tc.interpreter(pathlib.Path(sys.argv[1]).parent / p["file"])
    try:
        it.allocate_tensors()
        prepared = "ok"
    except RuntimeError as e:
        prepared = str(e).strip().splitlines()[0]
    inputs = {d["name"]: [d["shape"].tolist(), d["shape_signature"].tolist()]
              for d in it.get_input_details()}
    out.append({"prepared": prepared, "inputs": inputs})
print(json.dumps(out))
"#;
    let o = Command::new("python3")
        .args([
            os("-c"),
            os(script),
            conn.as_os_str(),
            repo().join("scripts/oracles").as_os_str(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// A dim computed at run time (`synth::computed_dims`: -1 in `shape_signature`, a placeholder
/// 1 in `shape`) reaching a part as its input. By default one run at the file's shapes gives
/// the part its dims; without an engine to run it, written as the file has it, LiteRT cannot
/// prepare the part (a 3-high VALID convolution over a height of 1), and the partition says
/// so; with the input fixed by `--shape` and `--learn-dims`, the part carries the dims the run
/// showed (the signature's -1 kept), prepares before any run, and reproduces the source.
#[test]
fn computed_dims_reach_parts_as_a_run_shows_them() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("synth_computed_dims.tflite");
    std::fs::write(&model, synth::computed_dims()).unwrap();
    let part = tmp.path().join("split.part");
    let rules: Vec<(String, &str)> = ["CONV_2D", "CONCATENATION", "LOGISTIC"]
        .iter()
        .map(|op| (op.to_string(), "acl_cl"))
        .collect();
    write_part_file(&part, &["cpu", "acl_cl"], "OPCODE", &rules);
    let run = |work: &Path, extra: &[&str]| {
        let mut args = vec![
            os("partition"),
            model.as_os_str(),
            os("--rules"),
            part.as_os_str(),
            os("-o"),
            work.as_os_str(),
        ];
        args.extend(extra.iter().map(os));
        common::cleave(&args)
    };

    // By default one run of the source at the file's shapes (x as [1, 16, 6, 1]) gives y its
    // height, and both parts prepare before any run; the signature's -1 stays.
    let plain = tmp.path().join("plain");
    let o = run(&plain, &[]);
    let said = common::ok(&o);
    assert!(!said.contains("leaves dynamic"), "{said}");
    assert!(
        said.contains("note: 5 tensors whose dims only a run computes took the dims one run of the model on litert showed, at x=1,16,6,1"),
        "{said}"
    );
    let conn = plain.join("synth_computed_dims.conn.json");
    let parts = prepare_parts(&conn);
    assert_eq!(parts.len(), 2, "{parts:?}");
    for p in &parts {
        assert_eq!(p["prepared"], "ok", "{parts:?}");
    }
    assert_eq!(
        parts[1]["inputs"]["y"],
        serde_json::json!([[1, 16, 3, 2], [1, -1, 3, 2]])
    );

    // Without an engine to run it, the file's placeholder stays: the part cannot be prepared,
    // and the command says why and what to do.
    let no_engine = tmp.path().join("no-engine");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_cleave"))
        .args([
            os("partition"),
            model.as_os_str(),
            os("--rules"),
            part.as_os_str(),
            os("-o"),
        ])
        .arg(&no_engine)
        .env("CLEAVE_LITERT_LIB", tmp.path().join("absent/libLiteRt.so"))
        .env("CLEAVE_ISOLATE", "0")
        .output()
        .unwrap();
    let said = common::ok(&o);
    assert!(
        said.contains("1 part input(s) have dims the file leaves dynamic")
            && said.contains("'y' as [1, 1, 3, 2] into part 00002 (acl_cl)")
            && said.contains("--learn-dims"),
        "{said}"
    );
    assert!(
        said.contains("could not be computed by a run on litert"),
        "{said}"
    );
    let parts = prepare_parts(&no_engine.join("synth_computed_dims.conn.json"));
    assert_eq!(parts[0]["prepared"], "ok", "{parts:?}");
    assert_ne!(parts[1]["prepared"], "ok", "{parts:?}");
    assert_eq!(parts[1]["inputs"]["y"][0], serde_json::json!([1, 1, 3, 2]));

    // A run needs fixed input dims.
    let o = run(&tmp.path().join("no-shape"), &["--learn-dims"]);
    assert_eq!(o.status.code(), Some(2), "{}", common::stderr(&o));
    assert!(
        common::stderr(&o).contains("--shape x=D,D,"),
        "{}",
        common::stderr(&o)
    );

    for height in [16, 20] {
        let work = tmp.path().join(format!("learned-{height}"));
        let shape = format!("x=1,{height},6,1");
        let o = run(&work, &["--shape", &shape, "--learn-dims"]);
        let said = common::ok(&o);
        assert!(!said.contains("leaves dynamic"), "{said}");
        assert!(common::stderr(&o).contains("learned by running the model once"));
        let conn = work.join("synth_computed_dims.conn.json");
        let parts = prepare_parts(&conn);
        for p in &parts {
            assert_eq!(p["prepared"], "ok", "{parts:?}");
        }
        // The commands that run the parts take the shape the partition recorded, no flag.
        let said = common::ok(&common::cleave(&[
            os("verify"),
            model.as_os_str(),
            conn.as_os_str(),
            os("--boundaries"),
        ]));
        assert!(said.contains("match the whole model"), "{said}");
        let said = common::ok(&common::cleave(&[
            os("run"),
            conn.as_os_str(),
            os("-o"),
            work.join("run").as_os_str(),
        ]));
        assert!(
            said.contains(&format!("out [1, {}, 1, 8]", height - 2)),
            "{said}"
        );
        // --shape fixes the input, signature included; the run gives y's height.
        assert_eq!(
            parts[0]["inputs"]["x"],
            serde_json::json!([[1, height, 6, 1], [1, height, 6, 1]])
        );
        assert_eq!(
            parts[1]["inputs"]["y"],
            serde_json::json!([[1, height, 3, 2], [1, -1, 3, 2]])
        );
        eprintln!(
            "{}",
            check_tflite_parts(&conn, &model, &[os("--shape"), os(&shape)])
        );
    }

    // Wrong flags: one line each, exit 2, nothing written.
    for (flags, cause) in [
        (
            vec!["--shape", "x=1,16,6"],
            "--shape x=1,16,6: input 'x' has rank 4, not 3",
        ),
        (
            vec!["--shape", "x=1,16,7,1"],
            "--shape x=1,16,7,1: dim 2 of input 'x' is fixed at 6 in the model",
        ),
        (
            vec!["--shape", "images=1,16,6,1"],
            "the model has no input 'images' (its inputs: x)",
        ),
        (vec!["--dim", "batch=1"], "tflite models name no dims"),
    ] {
        let work = tmp.path().join("refused");
        let o = run(&work, &flags);
        common::assert_bad_input(&o, &model, cause);
        assert!(!work.exists(), "{flags:?}: something was written");
    }
}
