//! `cleave query`, `partition` and `check` end to end, with the onnx checker and onnxruntime
//! (through scripts/oracles/check_parts.py) as independent oracles.

#[path = "../common/mod.rs"]
mod common;
mod graphs;
mod rules;
mod writing;

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
