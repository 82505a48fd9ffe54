//! The nnapi, coreml and coreml-mlprogram profiles against ONNX Runtime's own usability
//! checker (python -m onnxruntime.tools.check_onnx_model_mobile_usability), which reads the
//! same published tables: same unsupported op types, never more accelerator parts with
//! --allow-disconnected, same node totals after basic optimizations. And the committed
//! profiles are exactly what scripts/gen/ep_profiles.py makes from the installed wheel's tables.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use cleave_testdata::{light, light_random};
use common::*;

/// ORT's log names and cleave's profiles.
const EPS: [(&str, &str); 3] = [
    ("NNAPI", "nnapi"),
    ("CoreML NeuralNetwork", "coreml"),
    ("CoreML MLProgram", "coreml-mlprogram"),
];

#[derive(Debug)]
struct OrtReport {
    parts: usize,
    supported: usize,
    total: usize,
    unsupported: BTreeSet<String>,
}

/// The first analysis of each EP in the checker's log ("N partitions with a total of A/B
/// nodes ...", "Unsupported ops: a,b").
fn ort_check(model: &Path) -> BTreeMap<&'static str, OrtReport> {
    let o = Command::new("python3")
        .args(["-m", "onnxruntime.tools.check_onnx_model_mobile_usability"])
        .arg(model)
        .output()
        .expect("python3 with onnxruntime (scripts/install/requirements-test.txt)");
    assert!(
        o.status.success(),
        "ORT's checker failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let mut out = BTreeMap::new();
    let mut ep = None;
    for line in log.lines() {
        if let Some((_, name)) = EPS
            .iter()
            .find(|(ort, _)| line.ends_with(&format!("Checking {ort}")))
        {
            ep = (!out.contains_key(name)).then_some(*name);
            continue;
        }
        let Some(name) = ep else { continue };
        if let Some(rest) = line.split("INFO:").nth(1).map(str::trim) {
            if let Some((parts, tail)) = rest.split_once(" partitions with a total of ") {
                let counts = tail.split_whitespace().next().unwrap();
                let (a, b) = counts.split_once('/').unwrap();
                let report = OrtReport {
                    parts: parts.parse().unwrap(),
                    supported: a.parse().unwrap(),
                    total: b.parse().unwrap(),
                    unsupported: BTreeSet::new(),
                };
                out.insert(name, report);
            } else if let Some(ops) = rest.strip_prefix("Unsupported ops: ") {
                out.get_mut(name).unwrap().unsupported = ops.split(',').map(String::from).collect();
                ep = None;
            } else if rest.starts_with("Model should perform well") {
                ep = None;
            }
        }
    }
    assert_eq!(out.len(), 3, "no report for every EP in:\n{log}");
    out
}

fn query(model: &Path, ep: &str, flags: &[&str]) -> serde_json::Value {
    let devices = format!("{ep},cpu");
    let mut args = vec![
        os("query"),
        model.as_os_str(),
        os("--devices"),
        os(&devices),
        os("--optimize"),
        os("basic"),
        os("--json"),
    ];
    args.extend(flags.iter().map(os));
    let o = cleave(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let q: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    q["coverage"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["device"] == ep)
        .cloned()
        .unwrap()
}

/// cleave's query of `model` on each EP next to ORT's checker: same unsupported op types, the
/// same node totals after basic optimizations and nodes covered, never more parts (`exact`:
/// the same number).
fn agrees_with_ort(model: &Path, exact: bool) {
    let name = model.file_stem().unwrap().to_string_lossy();
    let ort = ort_check(model);
    for (_, ep) in EPS {
        let o = &ort[ep];
        let bare = query(model, ep, &["--no-constraints", "--allow-disconnected"]);
        let unsupported: BTreeSet<String> = bare["unsupported_ops"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            unsupported, o.unsupported,
            "{name} on {ep}: unsupported op types"
        );
        let parts = bare["parts"].as_array().unwrap().len();
        assert!(
            parts <= o.parts && (!exact || parts == o.parts),
            "{name} on {ep}: cleave makes {parts} parts, ORT's checker {}",
            o.parts
        );
        assert_eq!(
            bare["nodes_total"], o.total,
            "{name} on {ep}: node totals after basic optimizations"
        );
        assert_eq!(
            bare["nodes_on_device"], o.supported,
            "{name} on {ep}: nodes covered"
        );
        // The light models break no checked condition: constraints change nothing here.
        let checked = query(model, ep, &["--allow-disconnected"]);
        assert_eq!(
            checked["nodes_on_device"], bare["nodes_on_device"],
            "{name} on {ep}"
        );
        assert!(
            checked["constraint_failures"]
                .as_object()
                .unwrap()
                .is_empty(),
            "{name} on {ep}: {}",
            checked["constraint_failures"]
        );
    }
}

#[test]
fn profiles_agree_with_onnxruntimes_checker_on_light_models() {
    // shufflenet: Sum unsupported everywhere, 14 parts; inception_v1: LRN unsupported on MLProgram.
    for name in ["light_shufflenet", "light_inception_v1"] {
        agrees_with_ort(&light_random(name), false);
    }
}

#[test]
fn basic_level_folds_the_original_light_models_as_onnxruntime_does() {
    // The originals make every weight with ConstantOfShape: folded on a real engine, then
    // BatchNorm folds into Conv and equal branches merge, as in ORT: densenet121 491 nodes and
    // 63 coreml-mlprogram parts, inception_v2 168 and 3, resnet50 123 and 17.
    for name in ["light_densenet121", "light_inception_v2", "light_resnet50"] {
        agrees_with_ort(&light(name), true);
    }
}

#[test]
fn committed_profiles_are_what_the_script_makes_from_the_installed_tables() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new("python3")
        .arg(repo().join("scripts/gen/ep_profiles.py"))
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for name in ["nnapi", "coreml", "coreml-mlprogram"] {
        let file = format!("{name}.toml");
        let made = std::fs::read_to_string(dir.path().join(&file)).unwrap();
        let committed =
            std::fs::read_to_string(repo().join("crates/device/src/profiles").join(&file)).unwrap();
        let first = made
            .lines()
            .zip(committed.lines())
            .position(|(a, b)| a != b);
        assert!(made == committed, "{file} drifted from onnxruntime's table at line {first:?}: rerun scripts/gen/ep_profiles.py");
    }
}

#[test]
fn constant_weights_are_checked_and_the_summary_says_why() {
    // ONNX's node test feeds the Conv weights as a graph input: NNAPI wants them constant.
    let model = cleave_testdata::dir().join("node/test_basic_conv_with_padding/model.onnx");
    let checked = query(&model, "nnapi", &[]);
    assert_eq!(checked["nodes_on_device"], 0);
    let failures = checked["constraint_failures"].as_object().unwrap();
    assert_eq!(
        failures.get("ai.onnx:Conv: input 1 ('…') is not constant"),
        Some(&serde_json::json!(1)),
        "{failures:?}"
    );
    assert!(checked["verdict"]
        .as_str()
        .unwrap()
        .starts_with("no: nnapi runs no node"));
    // By op type alone (ORT's checker) it would run there.
    let bare = query(&model, "nnapi", &["--no-constraints"]);
    assert_eq!(bare["parts"], serde_json::json!([1]));
    assert!(bare["verdict"].as_str().unwrap().starts_with("yes"));
}

#[test]
fn query_prints_coverage_caveats_and_verdict() {
    let o = cleave(&[
        os("query"),
        light_random("light_resnet50").as_os_str(),
        os("--devices"),
        os("nnapi,cpu"),
        os("--optimize"),
        os("basic"),
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary = &out[out.find("\nnnapi: ").expect("a summary for nnapi")..];
    assert!(
        summary.starts_with("\nnnapi: 17 parts [9, 6, 6, 7,"),
        "{summary}"
    );
    assert!(summary.contains("107/123 nodes (87.0%)"), "{summary}");
    assert!(
        summary.contains("unsupported op types (16 nodes): ai.onnx:Sum"),
        "{summary}"
    );
    assert!(
        summary.contains("ai.onnx:Gemm: If input B is not constant, transB should be 1."),
        "{summary}"
    );
    assert!(
        summary.contains("worth it? no: 17 parts on nnapi"),
        "{summary}"
    );
    assert!(
        !out.contains("\ncpu: "),
        "cpu runs every op: no summary for it"
    );
}
