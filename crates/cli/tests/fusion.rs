//! `cleave optimize` and `partition --optimize` end to end. scripts/testdata/make_fusion_models.py
//! builds one small graph per rewrite (and near misses a legality condition must refuse) with
//! random weights; scripts/oracles/check_optimized.py proves each result with the onnx checker and
//! onnxruntime, comparing every tensor the two graphs share.

mod common;

use std::path::Path;

use cleave_testdata::{light, light_random, LIGHT_MODELS};
use common::*;

fn optimize(model: &Path, devices: &str, out: &Path) -> serde_json::Value {
    let o = cleave(&[
        os("optimize"),
        model.as_os_str(),
        os("--devices"),
        os(devices),
        os("-o"),
        out.as_os_str(),
        os("--json"),
    ]);
    serde_json::from_str(&ok(&o)).unwrap()
}

#[test]
fn each_rewrite_applies_exactly_where_legal_and_keeps_every_tensor() {
    let dir = tempfile::tempdir().unwrap();
    python("testdata/make_fusion_models.py", &[dir.path().as_os_str()]);
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("expected.json")).unwrap())
            .unwrap();
    let cases = expected.as_object().unwrap();
    assert!(cases.len() >= 15);
    for (name, case) in cases {
        let src = dir.path().join(format!("{name}.onnx"));
        let out = dir.path().join(format!("{name}.opt.onnx"));
        let report = optimize(&src, case["devices"].as_str().unwrap(), &out);
        assert_eq!(
            report["applied"], case["applied"],
            "{name}: rewrites applied"
        );
        let line = python(
            "oracles/check_optimized.py",
            &[src.as_os_str(), out.as_os_str()],
        );
        assert!(line.starts_with("ok "), "{name}: {line}");
    }
    // Split → 3 Convs → Concat is one Conv with group 3.
    let m = cleave::onnx::OnnxModel::load(dir.path().join("group_conv.opt.onnx")).unwrap();
    let proto = m.proto().unwrap();
    let nodes = &proto.graph.as_ref().unwrap().node;
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].op_type(), "Conv");
    assert_eq!(
        nodes[0]
            .attribute
            .iter()
            .find(|a| a.name() == "group")
            .and_then(|a| a.i),
        Some(3)
    );
    // Tiles carry OpenVINO's @soc=M/N names.
    let m = cleave::onnx::OnnxModel::load(dir.path().join("tile_conv.opt.onnx")).unwrap();
    let proto = m.proto().unwrap();
    let names: Vec<&str> = proto
        .graph
        .as_ref()
        .unwrap()
        .node
        .iter()
        .map(|n| n.name())
        .collect();
    assert!(
        names.contains(&"big@soc=1/2") && names.contains(&"big@soc=2/2"),
        "{names:?}"
    );
    // Space: three row tiles, each a Slice, the Conv and its Relu, joined over H.
    let ops = |case: &str| -> Vec<(String, String)> {
        let m = cleave::onnx::OnnxModel::load(dir.path().join(format!("{case}.opt.onnx"))).unwrap();
        let proto = m.proto().unwrap();
        proto
            .graph
            .as_ref()
            .unwrap()
            .node
            .iter()
            .map(|n| (n.op_type().to_string(), n.name().to_string()))
            .collect()
    };
    let space = ops("tile_space_conv");
    let count = |v: &[(String, String)], op: &str| v.iter().filter(|(o, _)| o == op).count();
    assert_eq!(
        (
            count(&space, "Slice"),
            count(&space, "Conv"),
            count(&space, "Relu"),
            count(&space, "Concat")
        ),
        (3, 3, 3, 1),
        "{space:?}"
    );
    assert!(
        space.iter().any(|(o, n)| o == "Conv" && n == "big@soc=3/3"),
        "{space:?}"
    );
    // Rows and columns when one row is too much.
    let grid = ops("tile_space_rows_and_columns");
    assert!(
        count(&grid, "Slice") >= 4
            && grid
                .iter()
                .any(|(o, n)| o == "Concat" && n.contains("concat_w")),
        "{grid:?}"
    );
    // Input channels: a Split, the tiles, a Sum; the Relu after the Sum, not in the tiles.
    let inch = ops("tile_in_channels_conv");
    assert_eq!(
        (
            count(&inch, "Split"),
            count(&inch, "Conv"),
            count(&inch, "Sum"),
            count(&inch, "Relu")
        ),
        (1, 3, 1, 1),
        "{inch:?}"
    );
    assert_eq!(
        inch.last().map(|(o, _)| o.as_str()),
        Some("Relu"),
        "{inch:?}"
    );
    // Input and weights both too large: row tiles, each cut over output channels.
    let both = ops("tile_space_and_out_channels");
    let convs = count(&both, "Conv");
    assert!(
        convs > count(&both, "Slice") && count(&both, "Slice") > 1,
        "{both:?}"
    );
    assert!(both
        .iter()
        .any(|(o, n)| o == "Conv" && n == &format!("big@soc={convs}/{convs}")));
}

/// Real models on a device with 256 KiB for a layer (the myriad profile with `tile_bytes`
/// replaced): every layer over it is tiled, no tile passes it, and onnxruntime computes the
/// same on both models, every shared tensor compared (scripts/reports/tile_report.py).
#[test]
fn real_models_tiled_for_a_256_kib_device_fit_it_and_compute_the_same() {
    let dddd = cleave_testdata::dir().join("corpus/ddddocr_det.onnx");
    let nude = format!(
        "{}:images=1,3,320,320",
        cleave_testdata::dir()
            .join("corpus/nudenet_320n.onnx")
            .display()
    );
    let squeeze = light_random("light_squeezenet");
    let out = python(
        "reports/tile_report.py",
        &[
            os(env!("CARGO_BIN_EXE_cleave")),
            os("262144"),
            squeeze.as_os_str(),
            dddd.as_os_str(),
            os(&nude),
            os("--json"),
        ],
    );
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(rows.len(), 3, "{out}");
    for r in &rows {
        assert_eq!(r["ok"], true, "{r}");
        assert!(r["tiled_layers"].as_u64().unwrap() >= 20, "{r}");
        assert_eq!(r["left_whole"], 0, "{r}");
        assert!(r["largest_tile_bytes"].as_u64().unwrap() <= 262144, "{r}");
        eprintln!("{r}");
    }
}

#[test]
fn light_models_keep_their_outputs_at_both_levels_of_rewrites() {
    let dir = tempfile::tempdir().unwrap();
    for m in LIGHT_MODELS {
        let src = light_random(m);
        for devices in ["cpu", "myriad,cpu"] {
            let out = dir.path().join(format!("{m}.{devices}.onnx"));
            let report = optimize(&src, devices, &out);
            let line = python(
                "oracles/check_optimized.py",
                &[src.as_os_str(), out.as_os_str()],
            );
            assert!(line.starts_with("ok "), "{m} on {devices}: {line}");
            if m == "light_resnet50" && devices == "cpu" {
                // onnxruntime's checker counts 123 nodes after its basic optimisations.
                assert_eq!(report["nodes_after"], 123, "{report}");
                assert_eq!(report["applied"]["fold_batchnorm"], 53);
                assert_eq!(report["groups"]["conv_sum"], 16, "{}", report["groups"]);
            }
            if m == "light_densenet121" && devices == "cpu" {
                // And 491 here: caffe2's Conv → Mul → Add (BatchNorm's affine part) folds into the Conv.
                assert_eq!(report["nodes_after"], 491, "{report}");
                assert_eq!(report["applied"]["fold_conv_mul_add"], 118);
            }
        }
    }
}

#[test]
fn partition_with_optimize_cuts_the_rewritten_model_and_keeps_groups_whole() {
    let dir = tempfile::tempdir().unwrap();
    let part = dir.path().join("split.part");
    // Concats go to the CPU, so the joined and tiled myriad layers sit between parts.
    std::fs::write(&part, "[partition]\nbackends=myriad,cpu\ndefault=myriad\ncomply=opcode\n[OPCODE]\nCONCAT=cpu\nSOFTMAX=cpu\n").unwrap();
    let src = light_random("light_inception_v1");
    let work = dir.path().join("work");
    let out = ok(&cleave(&[
        os("partition"),
        src.as_os_str(),
        os("--rules"),
        part.as_os_str(),
        os("--optimize"),
        os("device"),
        os("--report"),
        os("-o"),
        work.as_os_str(),
    ]));
    assert!(
        out.contains("rewritten before assignment: 144 nodes"),
        "{out}"
    );
    assert!(
        out.contains("fused groups, each kept whole in one part: vpu_conv_activation"),
        "{out}"
    );
    let html = std::fs::read_to_string(work.join("light_inception_v1.report.html")).unwrap();
    assert!(
        html.contains("<section id=\"fused\">") && html.contains("(vpu_conv_activation)"),
        "the report lists the fused groups"
    );
    let conn = work.join("light_inception_v1.conn.json");
    let text = std::fs::read_to_string(&conn).unwrap();
    assert!(
        text.contains("light_inception_v1.optimized/light_inception_v1.onnx"),
        "conn.json names the rewritten model: {text}"
    );
    let line = python("oracles/check_parts.py", &[conn.as_os_str()]);
    assert!(line.contains("match onnxruntime"), "{line}");
    // And the rewritten model computes what the source does.
    let line = python(
        "oracles/check_optimized.py",
        &[
            src.as_os_str(),
            work.join("light_inception_v1.optimized/light_inception_v1.onnx")
                .as_os_str(),
        ],
    );
    assert!(line.starts_with("ok "), "{line}");
}

#[test]
fn a_rule_pinning_one_member_dissolves_the_group_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let part = dir.path().join("pin.part");
    std::fs::write(
        &part,
        "[partition]\nbackends=cpu,npu\ndefault=cpu\ncomply=opname\n[OPNAME]\nrelu1=npu\n",
    )
    .unwrap();
    let o = cleave(&[
        os("query"),
        example("tiny_cnn.onnx").as_os_str(),
        os("--rules"),
        part.as_os_str(),
    ]);
    let table = ok(&o);
    let err = stderr(&o);
    assert!(
        err.contains("warning")
            && err.contains("conv1 + relu1 (conv_simple) dissolved: [OPNAME] puts relu1 on npu"),
        "{err}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("relu1") && l.contains("npu")),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("relu2") && l.contains("fused group")
                || l.starts_with("relu2") && l.contains("cpu")),
        "{table}"
    );
}

#[test]
fn optimize_refuses_to_overwrite_its_source_and_unknown_rules() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("m.onnx");
    std::fs::copy(example("tiny_cnn.onnx"), &src).unwrap();
    let before = std::fs::read(&src).unwrap();
    let o = cleave(&[
        os("optimize"),
        src.as_os_str(),
        os("--devices"),
        os("cpu"),
        os("-o"),
        src.as_os_str(),
    ]);
    assert_bad_input(&o, &src, "refusing to overwrite the source model");
    assert_eq!(std::fs::read(&src).unwrap(), before);
    let profile = dir.path().join("npu.toml");
    std::fs::write(
        &profile,
        "name = \"npu\"\nall_ops = true\n[fuse]\nrules = [\"conv_relu\"]\n",
    )
    .unwrap();
    let o = cleave(&[
        os("optimize"),
        src.as_os_str(),
        os("--devices"),
        profile.as_os_str(),
        os("-o"),
        dir.path().join("o.onnx").as_os_str(),
    ]);
    assert_bad_input(&o, &src, "unknown fusion rule 'conv_relu'");
    // --optimize belongs to query/partition; optimize has --level.
    let o = cleave(&[
        os("optimize"),
        src.as_os_str(),
        os("--devices"),
        os("cpu"),
        os("--optimize"),
        os("basic"),
        os("-o"),
        dir.path().join("o.onnx").as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--level"), "{}", stderr(&o));
}

#[test]
fn verify_with_optimize_compares_the_parts_with_the_untouched_source() {
    // Joins and tiles on myriad, the rest on the CPU; every boundary tensor that also exists
    // in the source, and every output, must match the source run whole (in tract).
    let src = light_random("light_squeezenet");
    let o = cleave(&[
        os("verify"),
        src.as_os_str(),
        os("--devices"),
        os("myriad,cpu"),
        os("--optimize"),
        os("device"),
        os("--boundaries"),
    ]);
    let out = ok(&o);
    assert!(out.contains("tensors match the whole model"), "{out}");
}

#[test]
fn constants_fold_on_an_engine_within_the_fold_limit() {
    // resnet50 as fetched makes all 53 Conv weights and its BatchNorm parameters with
    // ConstantOfShape: folded, BatchNorm folds into the Conv and 123 nodes remain (ORT's count).
    let dir = tempfile::tempdir().unwrap();
    let src = light("light_resnet50");
    let out = dir.path().join("all.onnx");
    let all = optimize(&src, "cpu", &out);
    assert_eq!(all["nodes_after"], 123, "{all}");
    assert_eq!(all["applied"]["fold_batchnorm"], 53, "{}", all["applied"]);
    let line = python(
        "oracles/check_optimized.py",
        &[src.as_os_str(), out.as_os_str()],
    );
    assert!(line.starts_with("ok "), "{line}");
    // Within 1 MiB, the biggest weights stay nodes, the notes name them, outputs do not change.
    let out = dir.path().join("limited.onnx");
    let o = cleave(&[
        os("optimize"),
        src.as_os_str(),
        os("--devices"),
        os("cpu"),
        os("--fold-limit"),
        os("1"),
        os("-o"),
        out.as_os_str(),
        os("--json"),
    ]);
    let limited: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
    let written = cleave::onnx::OnnxModel::load(&out).unwrap();
    let kept = written
        .proto()
        .unwrap()
        .into_owned()
        .graph
        .unwrap()
        .node
        .iter()
        .filter(|n| n.op_type() == "ConstantOfShape")
        .count();
    assert!(kept > 0, "{limited}");
    let notes = limited["notes"].as_array().unwrap();
    assert!(
        notes.iter().any(|n| n
            .as_str()
            .unwrap()
            .contains("would pass the folding limit of 1048576 bytes")),
        "{notes:?}"
    );
    assert!(limited["nodes_after"].as_u64().unwrap() > 123, "{limited}");
    let line = python(
        "oracles/check_optimized.py",
        &[src.as_os_str(), out.as_os_str()],
    );
    assert!(line.starts_with("ok "), "{line}");
}
