//! The `cleave` binary as a user runs it: outputs, exit codes and one-line errors.

mod common;

use std::path::{Path, PathBuf};

use cleave::onnx::proto::{
    self, tensor_proto, ModelProto, OperatorSetIdProto, TensorProto, ValueInfoProto,
};
use cleave_testdata::{light, onnx_files, SUITES};
use common::*;
use prost::Message;

#[test]
fn convert_gives_identical_bytes_for_every_suite_model() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.onnx");
    let files = onnx_files(&SUITES);
    assert!(files.len() > 1800);
    let mut bad = Vec::new();
    for f in &files {
        let o = cleave(&[os("convert"), f.as_os_str(), out.as_os_str()]);
        if !o.status.success() || std::fs::read(f).unwrap() != std::fs::read(&out).unwrap() {
            bad.push(format!("{}: {}", f.display(), stderr(&o)));
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {} differ: {:?}",
        bad.len(),
        files.len(),
        &bad[..bad.len().min(5)]
    );
}

#[test]
fn inspect_reports_resnet50() {
    let path = light("light_resnet50");
    let o = cleave(&[os("inspect"), path.as_os_str()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("nodes      415 "), "{text}");
    assert!(
        text.contains("gpu_0/data_0  float32[1,3,224,224]"),
        "{text}"
    );
    assert!(
        text.contains("every tensor has an element type and a rank"),
        "{text}"
    );

    let o = cleave(&[os("inspect"), path.as_os_str(), os("--json")]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["nodes"], 415);
    assert_eq!(
        j["inputs"].as_array().unwrap().len(),
        1,
        "initializers listed as inputs must not count"
    );
    assert_eq!(j["inputs"][0]["name"], "gpu_0/data_0");
    assert_eq!(j["inputs"][0]["dtype"], "float32");
    assert_eq!(j["inputs"][0]["shape"], serde_json::json!([1, 3, 224, 224]));
    assert_eq!(j["outputs"][0]["shape"], serde_json::json!([1, 1000]));
    assert_eq!(j["ops"]["Conv"], 53);
    assert_eq!(j["ops"]["ConstantOfShape"], 239);
    assert_eq!(j["untyped"], serde_json::json!([]));
}

#[test]
fn inspect_lists_tensors_it_cannot_type() {
    let tmp = tempfile::tempdir().unwrap();
    // An op of a domain cleave knows nothing of (one of the default domain that onnx does not
    // define is refused, as the onnx checker and onnxruntime refuse it).
    let mut mystery = node("mystery", "FrobnicateOp", &["x"], &["y"]);
    mystery.domain = Some("com.example".into());
    let mut m = model(
        vec![mystery, node("r", "Relu", &["y"], &["z"])],
        vec![],
        "z",
    );
    m.opset_import.push(OperatorSetIdProto {
        domain: Some("com.example".into()),
        version: Some(1),
    });
    m.graph.as_mut().unwrap().output.clear();
    m.graph.as_mut().unwrap().output.push(ValueInfoProto {
        name: Some("z".into()),
        ..Default::default()
    });
    let p = write(tmp.path(), "m.onnx", &m.encode_to_vec());
    let o = cleave(&[os("inspect"), p.as_os_str(), os("--json")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["untyped"], serde_json::json!(["y", "z"]));
    assert_eq!(
        j["ops_without_inference"],
        serde_json::json!(["com.example::FrobnicateOp"])
    );
}

#[test]
fn bad_inputs_get_one_line_and_exit_code_2() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let empty = write(d, "empty.onnx", b"");
    // Seeded pseudo-random bytes (xorshift), the same on every run.
    let mut x = cleave::ir::XorShift64::raw(0x9E37_79B9_7F4A_7C15);
    let noise: Vec<u8> = (0..1024).map(|_| x.next_u64() as u8).collect();
    let garbage = write(d, "garbage.onnx", &noise);
    let resnet = std::fs::read(light("light_resnet50")).unwrap();
    let half = write(d, "half.onnx", &resnet[..resnet.len() / 2]);
    let undefined = write(
        d,
        "undefined.onnx",
        &model(
            vec![node("adder", "Add", &["x", "ghost"], &["y"])],
            vec![],
            "y",
        )
        .encode_to_vec(),
    );
    let cyclic = write(
        d,
        "cyclic.onnx",
        &model(
            vec![
                node("first", "Add", &["x", "t2"], &["t1"]),
                node("second", "Relu", &["t1"], &["t2"]),
            ],
            vec![],
            "t2",
        )
        .encode_to_vec(),
    );
    let dup = write(
        d,
        "dup.onnx",
        &model(
            vec![
                node("a", "Relu", &["x"], &["y"]),
                node("b", "Neg", &["x"], &["y"]),
            ],
            vec![],
            "y",
        )
        .encode_to_vec(),
    );
    let missing = d.join("does-not-exist.onnx");

    let cases: [(&Path, &str); 7] = [
        (&empty, "empty file"),
        (&garbage, "not an ONNX model"),
        (&half, "not an ONNX model or truncated"),
        (&undefined, "node 'adder' (Add) reads tensor 'ghost'"),
        (&cyclic, "cycle: "),
        (&dup, "tensor 'y' has two producers"),
        (&missing, "No such file"),
    ];
    for (file, cause) in cases {
        for cmd in ["inspect", "convert"] {
            let out = d.join("out.onnx");
            let o = if cmd == "inspect" {
                cleave(&[os(cmd), file.as_os_str()])
            } else {
                cleave(&[os(cmd), file.as_os_str(), out.as_os_str()])
            };
            assert_bad_input(&o, file, cause);
            assert!(
                !out.exists(),
                "convert wrote output for a bad model {}",
                file.display()
            );
        }
    }
    let cyc = stderr(&cleave(&[os("inspect"), cyclic.as_os_str()]));
    assert!(
        cyc.contains("'first' -[t1]-> 'second' -[t2]-> 'first'")
            || cyc.contains("'second' -[t2]-> 'first' -[t1]-> 'second'"),
        "{cyc}"
    );
}

#[test]
fn convert_to_an_unwritable_place_fails_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let src = light("light_squeezenet");
    let out = tmp.path().join("no/such/dir/out.onnx");
    let o = cleave(&[os("convert"), src.as_os_str(), out.as_os_str()]);
    assert_bad_input(&o, &out, "cannot write");
}

fn external_model(dir: &Path) -> (PathBuf, Vec<u8>) {
    let weights: Vec<u8> = (0..16u32)
        .flat_map(|i| (i as f32 * 0.5 - 3.0).to_le_bytes())
        .collect();
    let mut blob = vec![0xAAu8; 100]; // data need not start at offset 0
    blob.extend_from_slice(&weights);
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::write(dir.join("data/w.bin"), &blob).unwrap();
    let kv = |k: &str, v: &str| proto::StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v.into()),
    };
    let w = TensorProto {
        name: Some("w".into()),
        dims: vec![4, 4],
        data_type: Some(tensor_proto::DataType::Float as i32),
        data_location: Some(tensor_proto::DataLocation::External as i32),
        external_data: vec![
            kv("location", "data/w.bin"),
            kv("offset", "100"),
            kv("length", "64"),
        ],
        ..Default::default()
    };
    let m = model(
        vec![node("mm", "MatMul", &["x", "w"], &["y"])],
        vec![w],
        "y",
    );
    let p = dir.join("ext.onnx");
    std::fs::write(&p, m.encode_to_vec()).unwrap();
    (p, weights)
}

#[test]
fn external_data_stays_external_and_is_read_lazily() {
    let tmp = tempfile::tempdir().unwrap();
    let src_dir = tmp.path().join("src");
    let (src, weights) = external_model(&src_dir);

    let m = cleave::onnx::OnnxModel::load(&src).unwrap();
    let ir = cleave::onnx::to_ir(&m).unwrap();
    let (_, w) = ir.graph.weights().next().unwrap();
    assert!(matches!(
        w.data,
        cleave::ir::WeightData::External {
            offset: 100,
            length: Some(64),
            ..
        }
    ));
    assert_eq!(&cleave::onnx::read_weight(w).unwrap()[..], &weights[..]);

    // Convert into another folder: same model bytes, the weights file carried along.
    let out = tmp.path().join("elsewhere/out.onnx");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let o = cleave(&[os("convert"), src.as_os_str(), out.as_os_str()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(&src).unwrap(), std::fs::read(&out).unwrap());
    let m2 = cleave::onnx::OnnxModel::load(&out).unwrap();
    let ir2 = cleave::onnx::to_ir(&m2).unwrap();
    let (_, w2) = ir2.graph.weights().next().unwrap();
    assert_eq!(&cleave::onnx::read_weight(w2).unwrap()[..], &weights[..]);
    assert!(tmp.path().join("elsewhere/data/w.bin").is_file());
    // The source folder is untouched.
    assert_eq!(std::fs::read_dir(&src_dir).unwrap().count(), 2);

    // Converting onto itself leaves everything as it was.
    let o = cleave(&[os("convert"), out.as_os_str(), out.as_os_str()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(&src).unwrap(), std::fs::read(&out).unwrap());
}

#[test]
fn convert_moves_weights_out_to_one_file_and_back_in() {
    let tmp = tempfile::tempdir().unwrap();
    let src = example("tiny_cnn.onnx");
    let shared = tmp.path().join("ext/t.onnx");
    std::fs::create_dir_all(shared.parent().unwrap()).unwrap();
    let o = cleave(&[
        os("convert"),
        src.as_os_str(),
        shared.as_os_str(),
        os("--external-data"),
        os("shared"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // conv2.w, the one tensor of 1 KiB or more, now lies in t.weights beside the model.
    assert_eq!(
        std::fs::metadata(tmp.path().join("ext/t.weights"))
            .unwrap()
            .len(),
        2304
    );
    let m = cleave::onnx::OnnxModel::load(&shared).unwrap();
    let p = m.proto().unwrap();
    let g = p.graph.as_ref().unwrap();
    let external: Vec<&str> = g
        .initializer
        .iter()
        .filter(|t| !t.external_data.is_empty())
        .map(|t| t.name())
        .collect();
    assert_eq!(external, ["conv2.w"]);
    let bytes = |m: &cleave::onnx::OnnxModel| -> Vec<Vec<u8>> {
        let p = m.proto().unwrap();
        let g = p.graph.as_ref().unwrap();
        g.initializer
            .iter()
            .map(|t| {
                cleave::onnx::read_weight(&cleave::onnx::to_ir_weight(t, m).unwrap())
                    .unwrap()
                    .to_vec()
            })
            .collect()
    };
    assert_eq!(
        bytes(&m),
        bytes(&cleave::onnx::OnnxModel::load(&src).unwrap())
    );

    let back = tmp.path().join("back.onnx");
    let o = cleave(&[
        os("convert"),
        shared.as_os_str(),
        back.as_os_str(),
        os("--external-data"),
        os("inline"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(&back).unwrap(),
        std::fs::read(&src).unwrap(),
        "weights back inside give the source's bytes"
    );
}

#[test]
fn external_data_outside_the_model_folder_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, _) = external_model(tmp.path());
    let mut m = ModelProto::decode(&std::fs::read(&src).unwrap()[..]).unwrap();
    let t = &mut m.graph.as_mut().unwrap().initializer[0];
    t.external_data[0].value = Some("../../etc/passwd".into());
    let evil = write(tmp.path(), "evil.onnx", &m.encode_to_vec());
    let o = cleave(&[os("inspect"), evil.as_os_str()]);
    assert_bad_input(
        &o,
        &evil,
        "must be a relative path inside the model's folder",
    );
}

/// `cleave ARGS`, killed (and the test failed) if it has not ended within a minute: what a
/// hang looks like from outside.
fn cleave_within_a_minute(args: &[&std::ffi::OsStr]) -> std::process::Output {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_cleave"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("cleave {args:?} hung: killed after a minute");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// `src` with its one initializer's external data entries changed by `edit`, as `name`.
fn with_external_data(src: &Path, name: &str, edit: impl Fn(&mut TensorProto)) -> PathBuf {
    let mut m = ModelProto::decode(&std::fs::read(src).unwrap()[..]).unwrap();
    edit(&mut m.graph.as_mut().unwrap().initializer[0]);
    write(src.parent().unwrap(), name, &m.encode_to_vec())
}

#[test]
fn external_data_whose_length_disagrees_with_its_dims_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, _) = external_model(tmp.path());
    // float32 [4, 4] is 64 bytes; the file has them, but the tensor claims 8.
    let short = with_external_data(&src, "short.onnx", |t| {
        t.external_data[2].value = Some("8".into())
    });
    // No length: the rest of the file past the offset, which must then be the tensor.
    let no_length = with_external_data(&src, "no_length.onnx", |t| {
        t.external_data[1].value = Some("90".into());
        t.external_data.truncate(2);
    });
    for (model, cause) in [
        (
            &short,
            "tensor 'w': external data length 8 does not match float32 [4, 4], which needs 64",
        ),
        (
            &no_length,
            "tensor 'w': external data has no length, and the 74 bytes",
        ),
    ] {
        let out = tmp.path().join("out");
        let converted = tmp.path().join("c.onnx");
        for args in [
            vec![
                os("partition"),
                model.as_os_str(),
                os("--devices"),
                os("cpu"),
                os("-o"),
                out.as_os_str(),
            ],
            vec![os("convert"), model.as_os_str(), converted.as_os_str()],
        ] {
            assert_bad_input(&cleave(&args), model, cause);
        }
        assert!(!out.exists() && !converted.exists(), "a model was written");
    }
}

#[test]
fn external_data_that_is_not_a_regular_file_is_refused_without_waiting() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, _) = external_model(tmp.path());
    let fifo = tmp.path().join("data/fifo.bin");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    // A FIFO with no writer blocks whoever opens it, until a writer comes: forever.
    let at_fifo = with_external_data(&src, "fifo.onnx", |t| {
        t.external_data[0].value = Some("data/fifo.bin".into())
    });
    let at_folder = with_external_data(&src, "folder.onnx", |t| {
        t.external_data[0].value = Some("data".into())
    });
    let folder = tmp.path().join("data");
    for (model, cause) in [
        (
            &at_fifo,
            format!("{}: a FIFO, not a regular file", fifo.display()),
        ),
        (
            &at_folder,
            format!("{}: a folder, not a regular file", folder.display()),
        ),
    ] {
        let out = tmp.path().join("out");
        let converted = tmp.path().join("c.onnx");
        for args in [
            vec![os("inspect"), model.as_os_str()],
            vec![
                os("partition"),
                model.as_os_str(),
                os("--devices"),
                os("cpu"),
                os("-o"),
                out.as_os_str(),
            ],
            vec![os("convert"), model.as_os_str(), converted.as_os_str()],
        ] {
            let o = cleave_within_a_minute(&args);
            assert_bad_input(&o, model, &format!("tensor 'w': external data {cause}"));
        }
        assert!(!out.exists() && !converted.exists());
    }
}

/// An `If` whose then-branch holds an `If` ... `depth` deep.
fn nested_ifs(depth: usize) -> ModelProto {
    use proto::{attribute_proto::AttributeType, AttributeProto, GraphProto};
    let graph_attr = |name: &str, g| AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(g),
        ..Default::default()
    };
    let leaf = |name: &str| GraphProto {
        name: Some(name.into()),
        node: vec![node(
            &format!("{name}_id"),
            "Identity",
            &["x"],
            &[&format!("{name}_out")],
        )],
        output: vec![float_input(&format!("{name}_out"), &[1, 4])],
        ..Default::default()
    };
    let mut body = leaf("b0");
    for d in 1..depth {
        let mut n = node(&format!("if{d}"), "If", &["c"], &[&format!("b{d}_out")]);
        n.attribute = vec![
            graph_attr("then_branch", body),
            graph_attr("else_branch", leaf(&format!("e{d}"))),
        ];
        body = GraphProto {
            name: Some(format!("b{d}")),
            node: vec![n],
            output: vec![float_input(&format!("b{d}_out"), &[1, 4])],
            ..Default::default()
        };
    }
    let mut top = node("top", "If", &["c"], &["y"]);
    top.attribute = vec![
        graph_attr("then_branch", body),
        graph_attr("else_branch", leaf("e_top")),
    ];
    let mut m = model(vec![top], vec![], "y");
    let c = ValueInfoProto {
        name: Some("c".into()),
        r#type: Some(proto::TypeProto {
            value: Some(proto::type_proto::Value::TensorType(
                proto::type_proto::Tensor {
                    elem_type: Some(tensor_proto::DataType::Bool as i32),
                    shape: Some(proto::TensorShapeProto::default()),
                },
            )),
            ..Default::default()
        }),
        ..Default::default()
    };
    m.graph.as_mut().unwrap().input.push(c);
    m
}

#[test]
fn a_model_nested_too_deep_is_refused_in_one_short_line() {
    let tmp = tempfile::tempdir().unwrap();
    let deep = write(tmp.path(), "deep.onnx", &nested_ifs(60).encode_to_vec());
    let o = cleave(&[os("inspect"), deep.as_os_str()]);
    assert_bad_input(&o, &deep, "recursion limit reached");
    let err = stderr(&o);
    // The path of fields prost was inside, 180 of them, is cut to its two ends.
    assert!(err.len() < 400, "{} bytes: {err}", err.len());
    assert!(err.contains(" levels) …: "), "{err}");
}

#[test]
fn help_explains_the_commands() {
    let o = cleave(&[os("--help")]);
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains("inspect") && text.contains("convert"),
        "{text}"
    );
}

#[test]
fn model_local_functions_are_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let body = proto::FunctionProto {
        name: Some("ScaledRelu".into()),
        domain: Some("local".into()),
        input: vec!["a".into()],
        output: vec!["b".into()],
        node: vec![
            node("inner_relu", "Relu", &["a"], &["r"]),
            node("inner_neg", "Neg", &["r"], &["b"]),
        ],
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        ..Default::default()
    };
    let mut call = node("call", "ScaledRelu", &["x"], &["y"]);
    call.domain = Some("local".into());
    let mut m = model(vec![call], vec![], "y");
    m.opset_import.push(OperatorSetIdProto {
        domain: Some("local".into()),
        version: Some(1),
    });
    m.functions.push(body);
    let p = write(tmp.path(), "fn.onnx", &m.encode_to_vec());

    let o = cleave(&[os("inspect"), p.as_os_str(), os("--json")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["functions"], serde_json::json!(["local::ScaledRelu"]));
    assert_eq!(j["ops"]["local::ScaledRelu"], 1);

    let out = tmp.path().join("out.onnx");
    let o = cleave(&[os("convert"), p.as_os_str(), out.as_os_str()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(&p).unwrap(), std::fs::read(&out).unwrap());
    let ir = cleave::onnx::to_ir(&cleave::onnx::OnnxModel::load(&out).unwrap()).unwrap();
    assert_eq!(ir.functions.len(), 1);
    assert_eq!(ir.functions[0].body.nodes.len(), 2);
}

/// Models the onnx checker refuses, each with the one line every command gives before any
/// work (DepthToSpace with block size 0 once divided by zero in inference and panicked).
#[test]
fn models_the_onnx_checker_rejects_are_refused_by_every_command() {
    // scripts/testdata/invalid_models.py: one defect each, in 15 classes (attribute values, lengths and
    // kinds, axes, operands, Reshape targets, shape arguments, windows past their input, sizes
    // past 2^63, Einsum equations, element types, opsets, subgraphs, initializers, wiring),
    // each proven invalid by the onnx checker or onnxruntime.
    let dir = tempfile::tempdir().unwrap();
    let made = std::process::Command::new("python3")
        .arg(repo().join("scripts/testdata/invalid_models.py"))
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", stderr(&made));
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("expected.json")).unwrap())
            .unwrap();
    let cases = expected.as_object().unwrap();
    assert!(cases.len() >= 70, "{}", cases.len());
    for (name, cause) in cases {
        let path = dir.path().join(format!("{name}.onnx"));
        let out = dir.path().join(format!("out-{name}"));
        let cause = cause.as_str().unwrap();
        for args in [
            vec![os("inspect"), path.as_os_str()],
            vec![
                os("query"),
                path.as_os_str(),
                os("--devices"),
                os("npu,cpu"),
            ],
            vec![
                os("partition"),
                path.as_os_str(),
                os("--devices"),
                os("npu,cpu"),
                os("-o"),
                out.as_os_str(),
            ],
        ] {
            assert_bad_input(&cleave(&args), &path, cause);
        }
        assert!(!out.exists(), "{name}: parts written for an invalid model");
    }
    // The valid models beside them (a Slice step of INT64_MIN, a window as wide as its
    // input, a crop leaving one row) are partitioned, not refused.
    let controls: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("controls.json")).unwrap())
            .unwrap();
    assert!(controls.len() >= 8, "{controls:?}");
    for name in controls {
        let path = dir.path().join(format!("control_{name}.onnx"));
        let out = dir.path().join(format!("out-control-{name}"));
        let o = cleave(&[
            os("partition"),
            path.as_os_str(),
            os("--devices"),
            os("npu,cpu"),
            os("-o"),
            out.as_os_str(),
        ]);
        assert!(o.status.success(), "control {name}: {}", stderr(&o));
    }
}

/// The operator table the checks above use is what onnx's own schemas give (regenerated when
/// the onnx the tests install changes).
#[test]
fn the_operator_table_is_what_onnx_gives() {
    let o = std::process::Command::new("python3")
        .arg(repo().join("scripts/gen/gen_onnx_schemas.py"))
        .arg("--check")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

/// A rule file or a device list must not choose where cleave writes: backend names follow
/// one rule, checked before anything is written.
#[test]
fn backend_names_that_are_paths_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("a/b/c");
    // The folder the issue's exploit needed, present.
    for k in 1..=4 {
        std::fs::create_dir_all(work.join(format!("tiny_cnn.0000{k}_.."))).unwrap();
    }
    let part = tmp.path().join("evil.part");
    std::fs::write(
        &part,
        "[partition]\nbackends=cpu,../../../evil\ndefault=cpu\n\n[OPCODE]\nSoftmax=../../../evil\n",
    )
    .unwrap();
    let model = example("tiny_cnn.onnx");
    let o = cleave(&[
        os("partition"),
        model.as_os_str(),
        os("--rules"),
        part.as_os_str(),
        os("-o"),
        work.as_os_str(),
    ]);
    assert_bad_input(&o, &part, "backend name '../../../evil' is not allowed");
    let mut written: Vec<_> = walk(tmp.path());
    written.sort();
    assert!(
        written
            .iter()
            .all(|p| !p.ends_with(".onnx") && !p.ends_with(".json")),
        "{written:?}"
    );
    for devices in ["npu,a/b", "..,cpu", "cpu,-x"] {
        let o = cleave(&[os("query"), model.as_os_str(), os("--devices"), os(devices)]);
        assert_eq!(o.status.code(), Some(2), "{devices}");
        let e = stderr(&o);
        assert!(
            e.contains("is not allowed") && e.lines().count() == 1,
            "{e}"
        );
    }
}

fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p.display().to_string());
        }
    }
    out
}

/// tract asserts on a negative dim (a ConstantOfShape of [-5, 4], computed by a Neg so that
/// loading, which refuses a negative shape it can read, lets it through); the engine guard
/// turns the panic into one line naming the model, exit 2, never 101.
#[test]
fn an_engine_panic_is_one_line_and_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let s = TensorProto {
        name: Some("s".into()),
        dims: vec![2],
        data_type: Some(tensor_proto::DataType::Int64 as i32),
        int64_data: vec![5, -4],
        ..Default::default()
    };
    let mut m = model(
        vec![
            node("neg", "Neg", &["s"], &["t"]),
            node("cos", "ConstantOfShape", &["t"], &["c"]),
            node("add", "Add", &["x", "c"], &["y"]),
        ],
        vec![s],
        "y",
    );
    if let Some(g) = m.graph.as_mut() {
        g.output[0].r#type = None;
    }
    let path = write(tmp.path(), "neg.onnx", &m.encode_to_vec());
    let runs: [&[&str]; 2] = [
        &["verify", "--devices", "cpu"],
        &[
            "verify",
            "--devices",
            "cpu",
            "--reference",
            "tract",
            "--optimize",
            "basic",
        ],
    ];
    for args in runs {
        let mut all = vec![os(args[0]), path.as_os_str()];
        all.extend(args[1..].iter().map(os));
        let o = cleave(&all);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(
            e.contains("tract cannot run it: the engine panicked"),
            "{e}"
        );
        // One error line; a part the panicking engine could not take runs on another, noted.
        assert!(
            !e.contains("thread 'main' panicked")
                && e.lines().filter(|l| !l.starts_with("note: ")).count() == 1,
            "{e}"
        );
    }
}

#[test]
fn a_bad_ingress_port_is_refused_before_anything_starts() {
    let serve = |port: &str| {
        let o = cleave(&[
            os("serve"),
            os("missing.conn.json"),
            os("--ray"),
            os("127.0.0.1:1"),
            os("--ingress-port"),
            os(port),
        ]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{port}: {e}");
        e
    };
    for bad in ["70000", "eighty", "80.5"] {
        let e = serve(bad);
        assert!(
            e.contains("--ingress-port") && e.contains("'off'"),
            "{bad}: {e}"
        );
    }
    for good in ["0", "8123", "off"] {
        // Past the flag: the missing partition is what stops it.
        let e = serve(good);
        assert!(
            !e.contains("--ingress-port") && e.contains("missing.conn.json"),
            "{good}: {e}"
        );
    }
}

#[test]
fn an_exported_application_takes_the_name_and_the_routes_port_and_host() {
    let tmp = tempfile::tempdir().unwrap();
    let ex = repo().join("examples");
    let out = tmp.path().join("p");
    ok(&cleave(&[
        os("partition"),
        ex.join("tiny_cnn.onnx").as_os_str(),
        os("--rules"),
        ex.join("tiny_cnn.part").as_os_str(),
        os("-o"),
        out.as_os_str(),
    ]));
    let app = tmp.path().join("app");
    ok(&cleave(&[
        os("serve"),
        out.join("tiny_cnn.conn.json").as_os_str(),
        os("--export"),
        app.as_os_str(),
        os("--http-port"),
        os("9123"),
        os("--http-host"),
        os("0.0.0.0"),
        os("--name"),
        os("cnn"),
    ]));
    let config = std::fs::read_to_string(app.join("serve_config.yaml")).unwrap();
    assert!(
        config.contains("host: 0.0.0.0")
            && config.contains("port: 9123")
            && config.contains("route_prefix: /cnn"),
        "{config}"
    );
    // The ingress's own listener binds on the same host.
    let app_py = std::fs::read_to_string(app.join("app.py")).unwrap();
    assert!(app_py.contains("0.0.0.0"), "{app_py}");
}

/// Old spellings of renamed flags and commands still work for a release, each with a note
/// naming the new one; the new spellings say nothing.
#[test]
fn old_spellings_are_taken_and_announced() {
    let (model, part) = (example("tiny_cnn.onnx"), example("tiny_cnn.part"));
    let dry = |flag: &str| {
        cleave(&[
            os("partition"),
            model.as_os_str(),
            os(flag),
            part.as_os_str(),
            os("--dry-run"),
        ])
    };
    // The summary without the time the cut took.
    let summary = |o: &std::process::Output| {
        ok(o)
            .split(", cut in")
            .next()
            .map(str::to_string)
            .unwrap_or_default()
    };
    let (old, new) = (dry("--part"), dry("--rules"));
    assert!(summary(&new).contains("4 parts on npu,cpu"), "{}", ok(&new));
    assert_eq!(summary(&old), summary(&new));
    assert!(
        stderr(&old).contains("--part is now --rules"),
        "{}",
        stderr(&old)
    );
    assert!(!stderr(&new).contains("is now"), "{}", stderr(&new));
    let joined = cleave(&[
        os("partition"),
        model.as_os_str(),
        os(&format!("--part={}", part.display())),
        os("--dry-run"),
    ]);
    assert_eq!(summary(&joined), summary(&new));
    // `profile` as the command is `measure`; as a value it is left alone.
    let o = cleave(&[os("profile"), os("--help")]);
    assert!(ok(&o).contains("Usage: cleave measure"), "{}", ok(&o));
    assert!(stderr(&o).contains("`cleave profile` is now `cleave measure`"));
    for args in [
        &["help", "profile"][..],
        &["--timings-json", "t.json", "profile", "--help"],
    ] {
        let args: Vec<&std::ffi::OsStr> = args.iter().map(os).collect();
        let o = cleave(&args);
        assert!(
            ok(&o).contains("Usage: cleave measure"),
            "{args:?}: {}",
            ok(&o)
        );
    }
    let o = cleave(&[os("inspect"), os("profile")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!stderr(&o).contains("is now"), "{}", stderr(&o));
}
