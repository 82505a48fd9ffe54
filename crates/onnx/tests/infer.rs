//! Type inference, checked against onnx's own shape inference as an independent oracle.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use cleave_ir::{Dim, TensorType};
use cleave_onnx::{infer_types, to_ir, OnnxModel};
use cleave_testdata::{light, onnx_files, LIGHT_MODELS};

fn load_inferred(path: &Path) -> (cleave_ir::Model, cleave_onnx::InferReport) {
    let m = OnnxModel::load(path).unwrap();
    let mut ir = to_ir(&m).unwrap();
    let report = infer_types(&mut ir);
    (ir, report)
}

#[test]
fn every_tensor_of_the_light_models_is_typed() {
    for name in LIGHT_MODELS {
        let (ir, report) = load_inferred(&light(name));
        assert!(
            report.untyped.is_empty(),
            "{name}: untyped {:?} (ops without rules: {:?})",
            report.untyped,
            report.unknown_ops
        );
        for v in &ir.graph.values {
            assert!(
                v.ty.elem.is_some() && v.ty.shape.is_some(),
                "{name}: {} is {}",
                v.name,
                v.ty
            );
        }
    }
}

#[test]
fn resnet50_shapes_are_static_down_to_the_softmax() {
    let (ir, _) = load_inferred(&light("light_resnet50"));
    let g = &ir.graph;
    let ty = |n: &str| g.value(g.find(n).unwrap()).ty.to_string();
    assert_eq!(ty("gpu_0/data_0"), "float32[1,3,224,224]");
    assert_eq!(ty("gpu_0/softmax_1"), "float32[1,1000]");
    let static_count = g
        .values
        .iter()
        .filter(|v| v.ty.static_dims().is_some())
        .count();
    assert_eq!(static_count, g.values.len());
}

/// Runs onnx.shape_inference on copies of all `paths` (one Python process) and returns each
/// model's value types by name.
fn onnx_oracle(paths: &[std::path::PathBuf], dir: &Path) -> Vec<HashMap<String, TensorType>> {
    let script = "import sys, onnx\n\
        out = sys.argv[1]\n\
        for i, p in enumerate(sys.argv[2:]):\n\
        \x20   m = onnx.shape_inference.infer_shapes(onnx.load(p, load_external_data=False), data_prop=True)\n\
        \x20   onnx.save(m, f'{out}/{i}.onnx')\n";
    let st = Command::new("python3")
        .args(["-c", script])
        .arg(dir)
        .args(paths)
        .status()
        .expect("python3 with onnx is needed (scripts/install/requirements-test.txt)");
    assert!(st.success(), "onnx shape inference failed");
    (0..paths.len())
        .map(|i| {
            let m = OnnxModel::load(dir.join(format!("{i}.onnx"))).unwrap();
            let ir = to_ir(&m).unwrap();
            ir.graph
                .values
                .iter()
                .map(|v| (v.name.to_string(), v.ty.clone()))
                .collect()
        })
        .collect()
}

fn agree(ours: &TensorType, theirs: &TensorType) -> bool {
    if let (Some(a), Some(b)) = (ours.elem, theirs.elem) {
        if a != b {
            return false;
        }
    }
    match (&ours.shape, &theirs.shape) {
        (Some(a), Some(b)) => {
            a.len() == b.len()
                && a.iter().zip(b).all(|(x, y)| match (x, y) {
                    (Dim::Fixed(p), Dim::Fixed(q)) => p == q,
                    _ => true,
                })
        }
        _ => true,
    }
}

#[test]
fn inferred_types_match_onnx_shape_inference() {
    let tmp = tempfile::tempdir().unwrap();
    let mut files: Vec<_> = LIGHT_MODELS.iter().map(|n| light(n)).collect();
    files.extend(onnx_files(&[
        "pytorch-converted",
        "pytorch-operator",
        "simple",
    ]));
    let mut compared = 0;
    let mut mismatches = Vec::new();
    let oracles = onnx_oracle(&files, tmp.path());
    for (f, oracle) in files.iter().zip(oracles) {
        let (ir, _) = load_inferred(f);
        for v in &ir.graph.values {
            if let Some(theirs) = oracle.get(v.name.as_str()) {
                compared += 1;
                if !agree(&v.ty, theirs) {
                    mismatches.push(format!(
                        "{}: {} ours {} onnx {}",
                        f.display(),
                        v.name,
                        v.ty,
                        theirs
                    ));
                }
            }
        }
    }
    eprintln!(
        "compared {compared} tensor types over {} models",
        files.len()
    );
    assert!(compared > 5000, "only {compared} tensors compared");
    assert!(
        mismatches.is_empty(),
        "{} mismatches:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

/// A shape computed as PyTorch exports it (`Shape → Gather → Mul → Unsqueeze → Concat →
/// Reshape`) gives the Reshape a static shape, with the batch symbol kept: each op's fold
/// follows the small integer tensors. A node of another domain with a default op's name
/// folds nothing.
#[test]
fn computed_shapes_fold_through_each_ops_registered_fold() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("computed.onnx");
    let script = r#"
import sys, numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto as T
c = lambda n, v: numpy_helper.from_array(np.array(v, np.int64), n)
nodes = [
    helper.make_node("Shape", ["x"], ["s"]),
    helper.make_node("Gather", ["s", "i0"], ["b"], axis=0),
    helper.make_node("Gather", ["s", "i1"], ["d1"], axis=0),
    helper.make_node("Gather", ["s", "i2"], ["d2"], axis=0),
    helper.make_node("Gather", ["s", "i3"], ["d3"], axis=0),
    helper.make_node("Mul", ["d1", "d2"], ["d12"]),
    helper.make_node("Mul", ["d12", "d3"], ["d123"]),
    helper.make_node("Unsqueeze", ["b", "ax"], ["bu"]),
    helper.make_node("Unsqueeze", ["d123", "ax"], ["du"]),
    helper.make_node("Concat", ["bu", "du"], ["shape"], axis=0),
    helper.make_node("Cast", ["shape"], ["shape64"], to=T.INT64),
    helper.make_node("Reshape", ["x", "shape64"], ["y"]),
    helper.make_node("Shape", ["x"], ["t"], domain="example.custom"),
    helper.make_node("Reshape", ["x", "t"], ["z"]),
]
g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, ["batch", 3, 4, 5])],
    [helper.make_tensor_value_info("y", T.FLOAT, None), helper.make_tensor_value_info("z", T.FLOAT, None)],
    [c("i0", 0), c("i1", 1), c("i2", 2), c("i3", 3), c("ax", [0])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("example.custom", 1)])
onnx.save(m, sys.argv[1])
"#;
    // Python's errors pass through to the test's output.
    let made = Command::new("python3")
        .args(["-c", script])
        .arg(&path)
        .status();
    assert!(made.unwrap().success(), "python3 could not write the model");
    let (ir, _) = load_inferred(&path);
    let g = &ir.graph;
    let ty = |name: &str| {
        g.values
            .iter()
            .find(|v| v.name.as_str() == name)
            .map(|v| v.ty.clone())
            .unwrap()
    };
    assert_eq!(
        ty("y").shape,
        Some(vec![Dim::Param("batch".into()), Dim::Fixed(60)]),
        "{}",
        ty("y")
    );
    // Folded as ONNX's Shape, the custom op would give `z` the input's shape.
    let static_z = ty("z")
        .shape
        .is_some_and(|s| s.iter().skip(1).all(|d| d.fixed().is_some()));
    assert!(!static_z, "z: {}", ty("z"));
}
