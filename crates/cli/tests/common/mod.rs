//! Helpers shared by the CLI tests: running the binary and building small ONNX models.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cleave::onnx::proto::{
    self, tensor_proto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    ValueInfoProto,
};

pub fn cleave(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cleave"))
        .args(args)
        .output()
        .unwrap()
}

pub fn os<S: AsRef<std::ffi::OsStr> + ?Sized>(s: &S) -> &std::ffi::OsStr {
    s.as_ref()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit code 2, exactly one line on stderr naming the file, no panic.
pub fn assert_bad_input(o: &Output, file: &Path, cause: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains(&file.display().to_string()),
        "does not name {}: {err}",
        file.display()
    );
    assert!(err.contains(cause), "does not say '{cause}': {err}");
}

pub fn float_input(name: &str, dims: &[i64]) -> ValueInfoProto {
    use proto::tensor_shape_proto::{dimension, Dimension};
    use proto::type_proto::{Tensor, Value};
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(proto::TypeProto {
            value: Some(Value::TensorType(Tensor {
                elem_type: Some(tensor_proto::DataType::Float as i32),
                shape: Some(proto::TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| Dimension {
                            value: Some(dimension::Value::DimValue(d)),
                            ..Default::default()
                        })
                        .collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn node(name: &str, op: &str, ins: &[&str], outs: &[&str]) -> NodeProto {
    NodeProto {
        name: Some(name.into()),
        op_type: Some(op.into()),
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: outs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

pub fn model(nodes: Vec<NodeProto>, inits: Vec<TensorProto>, output: &str) -> ModelProto {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(GraphProto {
            name: Some("g".into()),
            node: nodes,
            initializer: inits,
            input: vec![float_input("x", &[1, 4])],
            output: vec![float_input(output, &[1, 4])],
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A bundled example model.
pub fn example(name: &str) -> PathBuf {
    repo().join("examples").join(name)
}

/// Stdout of a run that must succeed; otherwise fails with what it printed.
pub fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}: {}{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        stderr(o)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A small seeded generator (xorshift), so a failing split can be replayed.
pub struct Rng(cleave::ir::XorShift64);

impl Rng {
    pub fn new(state: u64) -> Rng {
        Rng(cleave::ir::XorShift64::raw(state))
    }

    pub fn below(&mut self, n: usize) -> usize {
        self.0.below(n as u64) as usize
    }
}

/// Runs `scripts/oracles/check_tflite_parts.py` (LiteRT as the oracle) and fails the test with its
/// output unless it passes; returns its summary line.
pub fn check_tflite_parts(conn: &Path, source: &Path, extra: &[&std::ffi::OsStr]) -> String {
    let out = std::process::Command::new("python3")
        .arg(repo().join("scripts/oracles/check_tflite_parts.py"))
        .arg(conn)
        .arg(source)
        .args(extra)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "check_tflite_parts.py {} {} {extra:?} failed:\n{text}",
        conn.display(),
        source.display()
    );
    text.trim().lines().last().unwrap_or_default().to_string()
}

/// (node name, op, device) of every node from `cleave query MODEL --json ARGS`; `None` when
/// the query is refused (a priority list that cannot place every node).
pub fn query_nodes(
    model: &Path,
    args: &[&std::ffi::OsStr],
) -> Option<Vec<(String, String, String)>> {
    let mut all = vec![os("query"), model.as_os_str(), os("--json")];
    all.extend_from_slice(args);
    let out = cleave(&all);
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let nodes = v["nodes"].as_array().unwrap().iter().map(|n| {
        let s = |k: &str| n[k].as_str().unwrap_or_default().to_string();
        (s("name"), s("op"), s("device"))
    });
    Some(nodes.collect())
}

/// `cleave partition MODEL --rules PART -o WORK`; the connection file it wrote.
pub fn partition_by_part(model: &Path, part: &Path, work: &Path) -> PathBuf {
    ok(&cleave(&[
        os("partition"),
        model.as_os_str(),
        os("--rules"),
        part.as_os_str(),
        os("-o"),
        work.as_os_str(),
    ]));
    let stem = model.file_stem().unwrap().to_str().unwrap();
    work.join(format!("{stem}.conn.json"))
}

/// Writes a ONE `.part` file: `backends` (the first the default) and one section of rules,
/// complied with by that section.
pub fn write_part_file(path: &Path, backends: &[&str], section: &str, rules: &[(String, &str)]) {
    let mut text = format!(
        "[partition]\nbackends={}\ndefault={}\ncomply={}\n\n[{section}]\n",
        backends.join(","),
        backends[0],
        section.to_lowercase()
    );
    for (k, v) in rules {
        text.push_str(&format!("{k}={v}\n"));
    }
    std::fs::write(path, text).unwrap();
}

/// Runs `scripts/SCRIPT` on python3 (the test requirements installed) and returns its stdout;
/// a failure shows both streams.
pub fn python<S: AsRef<std::ffi::OsStr>>(script: &str, args: &[S]) -> String {
    let o = Command::new("python3")
        .arg(repo().join("scripts").join(script))
        .args(args)
        .output()
        .expect("python3 (scripts/install/requirements-test.txt)");
    assert!(
        o.status.success(),
        "{script}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}
