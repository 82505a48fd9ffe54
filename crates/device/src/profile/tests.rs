//! The built-in profiles and profile files, checked node by node.

use super::*;
use crate::Profiles;
use cleave_ir::{ElemType, GraphBuilder, NamedOps, NodeSpec, TensorType};

fn ops() -> NamedOps {
    NamedOps::default().nondeterministic(&["RandomNormal", "RandomUniform"])
}

fn graph(op: &str, dims: &[i64], attrs: Vec<cleave_ir::Attribute>) -> Graph {
    let mut b = GraphBuilder::new("g");
    b.input("x", TensorType::fixed(ElemType::F32, dims));
    b.node(NodeSpec {
        name: "n".into(),
        op_type: op.into(),
        inputs: vec!["x".into()],
        outputs: vec!["y".into()],
        attrs,
        ..Default::default()
    });
    b.value_type("y", TensorType::fixed(ElemType::F32, dims));
    b.output("y");
    b.finish(false).unwrap()
}

#[test]
fn builtins_parse_and_cpu_runs_everything() {
    let p = Profiles::builtin();
    let g = graph("SomethingExotic", &[1, 2], vec![]);
    assert_eq!(p.check("cpu", &g, &g.nodes[0], &ops()), Verdict::Supported);
    assert_eq!(
        p.check("npu_without_profile", &g, &g.nodes[0], &ops()),
        Verdict::Supported
    );
    assert_eq!(
        p.check("myriad", &g, &g.nodes[0], &ops()),
        Verdict::UnsupportedOp
    );
}

#[test]
fn myriad_pads_only_4d_tensors() {
    let p = Profiles::builtin();
    let g4 = graph("Pad", &[1, 3, 8, 8], vec![]);
    assert_eq!(
        p.check("myriad", &g4, &g4.nodes[0], &ops()),
        Verdict::Supported
    );
    let g3 = graph("Pad", &[3, 8, 8], vec![]);
    assert!(
        matches!(p.check("myriad", &g3, &g3.nodes[0], &ops()), Verdict::Constraint(r) if r.contains("rank 3"))
    );
}

#[test]
fn constraints_check_types_attributes_and_static_shapes() {
    let text = r#"
        name = "npu"
        [defaults]
        dtypes = ["float16"]
        [ops]
        Relu = { dtypes = ["float32"] }
        Resize = { attrs = { mode = ["nearest"] } }
        "com.example::Gelu" = { static_shape = true }
    "#;
    let p = Profile::parse(text, Path::new("npu.toml")).unwrap();
    let g = graph("Relu", &[2], vec![]);
    assert_eq!(p.check(&g, &g.nodes[0], &ops()), Verdict::Supported);
    let linear = cleave_ir::Attribute {
        name: "mode".into(),
        value: cleave_ir::AttrValue::String("linear".into()),
    };
    let g = graph("Resize", &[2], vec![linear]);
    // float32 breaks the default dtype list before the attribute is looked at.
    assert!(
        matches!(p.check(&g, &g.nodes[0], &ops()), Verdict::Constraint(r) if r.contains("float32"))
    );
    let e = Profile::parse("name = \"x\"\nbogus = 1\n", Path::new("x.toml")).unwrap_err();
    assert!(e.to_string().contains("bogus"), "{e}");
}

/// `Conv(x, w)` where `w` is a weight, the output of a Relu of a weight, or a graph input.
fn conv_with(weight: &str, rank: usize) -> Graph {
    let dims: Vec<i64> = [1, 3, 8, 8, 8, 8][..rank].to_vec();
    let mut b = GraphBuilder::new("g");
    b.input("x", TensorType::fixed(ElemType::F32, &dims));
    let w = cleave_ir::Weight {
        elem: ElemType::F32,
        dims: vec![1],
        data: cleave_ir::WeightData::Bytes(vec![0u8; 4].into()),
    };
    b.weight("w0", w);
    match weight {
        "weight" => {}
        "computed" => {
            b.node(NodeSpec {
                name: "r".into(),
                op_type: "Relu".into(),
                inputs: vec!["w0".into()],
                outputs: vec!["w1".into()],
                ..Default::default()
            });
        }
        _ => {
            b.input("w2", TensorType::fixed(ElemType::F32, &[1]));
        }
    }
    let w = match weight {
        "weight" => "w0",
        "computed" => "w1",
        _ => "w2",
    };
    b.node(NodeSpec {
        name: "c".into(),
        op_type: "Conv".into(),
        inputs: vec!["x".into(), w.into()],
        outputs: vec!["y".into()],
        ..Default::default()
    });
    // Static shapes: NNAPI's profile wants them.
    b.value_type("w1", TensorType::fixed(ElemType::F32, &[1]));
    b.value_type("y", TensorType::fixed(ElemType::F32, &dims));
    b.output("y");
    b.finish(false).unwrap()
}

fn verdict(p: &Profiles, device: &str, g: &Graph) -> Verdict {
    let n = g.nodes.iter().position(|n| n.op_type == "Conv").unwrap();
    p.check(device, g, &g.nodes[n], &ops())
}

#[test]
fn ep_profiles_check_constant_weights_and_ranks() {
    let p = Profiles::builtin();
    // NNAPI: "Only 2D Conv is supported. Weights and bias should be constant."
    assert_eq!(
        verdict(&p, "nnapi", &conv_with("weight", 4)),
        Verdict::Supported
    );
    assert_eq!(
        verdict(&p, "nnapi", &conv_with("computed", 4)),
        Verdict::Supported,
        "computed from weights alone is constant"
    );
    assert!(
        matches!(verdict(&p, "nnapi", &conv_with("input", 4)), Verdict::Constraint(r) if r.contains("input 1 ('w2') is not constant"))
    );
    assert!(
        matches!(verdict(&p, "nnapi", &conv_with("weight", 3)), Verdict::Constraint(r) if r.contains("rank 3"))
    );
    // CoreML: "Only 1D/2D Conv" takes rank 3 as well; MLProgram only wants a constant bias.
    assert_eq!(
        verdict(&p, "coreml", &conv_with("weight", 3)),
        Verdict::Supported
    );
    assert_eq!(
        verdict(&p, "coreml-mlprogram", &conv_with("input", 4)),
        Verdict::Supported
    );
    // CoreML's maximum rank of 5 is checked on every input.
    let relu6 = graph("Relu", &[1, 1, 1, 1, 1, 2], vec![]);
    assert!(
        matches!(p.check("coreml", &relu6, &relu6.nodes[0], &ops()), Verdict::Constraint(r) if r.contains("more than 5"))
    );
    let relu5 = graph("Relu", &[1, 1, 1, 1, 2], vec![]);
    assert_eq!(
        p.check("coreml", &relu5, &relu5.nodes[0], &ops()),
        Verdict::Supported
    );
    // Without constraints only the op type counts.
    let bare = p.without_constraints();
    assert_eq!(
        verdict(&bare, "nnapi", &conv_with("input", 3)),
        Verdict::Supported
    );
    assert!(bare
        .get("nnapi")
        .unwrap()
        .note(&conv_with("weight", 4).nodes[0], &ops())
        .is_none());
    let pad = graph("Pad", &[1, 1, 2, 2], vec![]);
    assert_eq!(
        bare.get("nnapi").unwrap().note(&pad.nodes[0], &ops()),
        Some("Input pads values should be non-negative."),
        "notes survive"
    );
}

#[test]
fn required_and_forbidden_attributes() {
    let p = Profiles::builtin();
    let s = |n: &str, v: &str| cleave_ir::Attribute {
        name: n.into(),
        value: cleave_ir::AttrValue::String(v.as_bytes().to_vec().into()),
    };
    // CoreML Resize: coordinate_transformation_mode must be asymmetric, and its default is not.
    let g = graph("Resize", &[1, 3, 8, 8], vec![s("mode", "nearest")]);
    assert!(
        matches!(p.check("coreml", &g, &g.nodes[0], &ops()), Verdict::Constraint(r) if r.contains("coordinate_transformation_mode is absent"))
    );
    let g = graph(
        "Resize",
        &[1, 3, 8, 8],
        vec![
            s("mode", "nearest"),
            s("coordinate_transformation_mode", "asymmetric"),
            s("nearest_mode", "floor"),
        ],
    );
    assert_eq!(
        p.check("coreml", &g, &g.nodes[0], &ops()),
        Verdict::Supported
    );
    // CoreML Shape: "Attribute `end` is not supported" (an empty list of allowed values).
    let end = cleave_ir::Attribute {
        name: "end".into(),
        value: cleave_ir::AttrValue::Int(2),
    };
    let g = graph("Shape", &[1, 3], vec![end]);
    assert!(
        matches!(p.check("coreml", &g, &g.nodes[0], &ops()), Verdict::Constraint(r) if r.contains("attribute end is not supported"))
    );
    let g = graph("Shape", &[1, 3], vec![]);
    assert_eq!(
        p.check("coreml", &g, &g.nodes[0], &ops()),
        Verdict::Supported
    );
}

/// The semantics of a TFLite or circle model, as the format key selects tables.
fn tflite() -> NamedOps {
    NamedOps::default().channel_axis(3).format("tflite")
}

/// `y = OP(x)` with x of type `input` and y of type `output`, in `domain`.
fn typed(
    domain: &str,
    op: &str,
    input: ElemType,
    output: ElemType,
    attrs: Vec<cleave_ir::Attribute>,
) -> Graph {
    let dims = [1, 8, 8, 4];
    let mut b = GraphBuilder::new("g");
    b.input("x", TensorType::fixed(input, &dims));
    b.node(NodeSpec {
        name: "n".into(),
        op_type: op.into(),
        domain: domain.into(),
        inputs: vec!["x".into()],
        outputs: vec!["y".into()],
        attrs,
        ..Default::default()
    });
    b.value_type("y", TensorType::fixed(output, &dims));
    b.output("y");
    b.finish(false).unwrap()
}

fn tfl(p: &Profiles, device: &str, op: &str, elem: ElemType) -> Verdict {
    let g = typed("", op, elem, elem, vec![]);
    p.check(device, &g, &g.nodes[0], &tflite())
}

#[test]
fn one_and_xnnpack_builtins_list_tflite_ops_only() {
    let p = Profiles::builtin();
    let names: Vec<&str> = p.names().collect();
    for name in ["cpu", "acl_cl", "acl_neon", "xnnpack"] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    for name in ["acl_cl", "acl_neon", "xnnpack"] {
        let profile = p.get(name).unwrap();
        assert!(profile.general.ops.is_empty(), "{name}");
        // ONNX .part files name acl_cl, which ran every op before it had a profile.
        assert_eq!(profile.general.all_ops, name != "xnnpack", "{name}");
        assert!(profile.table("tflite").ops.len() > 30, "{name}");
    }
    // cpu keeps running every op of other formats; its TFLite list is ONE's.
    let cpu = p.get("cpu").unwrap();
    assert!(cpu.runs_every_op("onnx") && cpu.runs_every_op(""));
    assert!(!cpu.runs_every_op("tflite"));
    assert!(cpu.table("tflite").ops.len() > 90);
}

#[test]
fn onnx_models_read_the_general_table() {
    let p = Profiles::builtin();
    // What ONNX semantics answer, and what semantics without a format answer.
    for sem in [ops().format("onnx"), ops()] {
        let g = graph("Conv", &[1, 3, 8, 8], vec![]);
        assert_eq!(p.check("cpu", &g, &g.nodes[0], &sem), Verdict::Supported);
        assert_eq!(p.check("myriad", &g, &g.nodes[0], &sem), Verdict::Supported);
        // ONE's ACL backends keep running every ONNX op; the TFLite delegate runs none.
        let exotic = graph("SomethingExotic", &[1, 2], vec![]);
        for device in ["acl_cl", "acl_neon"] {
            assert_eq!(
                p.check(device, &exotic, &exotic.nodes[0], &sem),
                Verdict::Supported,
                "{device}"
            );
        }
        assert_eq!(
            p.check("xnnpack", &g, &g.nodes[0], &sem),
            Verdict::UnsupportedOp
        );
    }
    let xnnpack = p.get("xnnpack").unwrap();
    assert_eq!(
        xnnpack.format_note("onnx").as_deref(),
        Some("xnnpack runs no onnx op: its profile lists ops for tflite models only")
    );
    assert_eq!(
        xnnpack.format_note("").as_deref(),
        Some("xnnpack runs no op of this model's format: its profile lists ops for tflite models only")
    );
    assert_eq!(xnnpack.format_note("tflite"), None);
    assert_eq!(p.get("acl_cl").unwrap().format_note("onnx"), None);
    // Profiles with one table explain nothing: they refuse op by op.
    assert_eq!(p.get("nnapi").unwrap().format_note("tflite"), None);
    assert_eq!(p.get("cpu").unwrap().format_note("onnx"), None);
}

#[test]
fn tflite_models_get_one_runtime_table_answers() {
    let p = Profiles::builtin();
    // ONE's table, raw-data: OneHot is O on CPU and ACL-CL, blank on ACL-NEON; TopKV2 is
    // O on ACL-NEON alone.
    let f32 = ElemType::F32;
    assert_eq!(tfl(&p, "cpu", "ONE_HOT", f32), Verdict::Supported);
    assert_eq!(tfl(&p, "acl_cl", "ONE_HOT", f32), Verdict::Supported);
    assert_eq!(tfl(&p, "acl_neon", "ONE_HOT", f32), Verdict::UnsupportedOp);
    assert_eq!(tfl(&p, "acl_neon", "TOPK_V2", f32), Verdict::Supported);
    assert_eq!(tfl(&p, "acl_cl", "TOPK_V2", f32), Verdict::UnsupportedOp);
    assert_eq!(tfl(&p, "cpu", "TOPK_V2", f32), Verdict::UnsupportedOp);
    // ReLU: raw-data on every backend, uint8 only on the ACL ones.
    assert_eq!(tfl(&p, "cpu", "RELU", f32), Verdict::Supported);
    assert!(
        matches!(tfl(&p, "cpu", "RELU", ElemType::U8), Verdict::Constraint(r) if r.contains("element type uint8 of 'x'")),
        "{:?}",
        tfl(&p, "cpu", "RELU", ElemType::U8)
    );
    assert_eq!(tfl(&p, "acl_cl", "RELU", ElemType::U8), Verdict::Supported);
    // Mul on ACL-NEON: int8 is marked, uint8 is not.
    assert_eq!(tfl(&p, "acl_neon", "MUL", ElemType::I8), Verdict::Supported);
    assert!(matches!(
        tfl(&p, "acl_neon", "MUL", ElemType::U8),
        Verdict::Constraint(_)
    ));
    // ONNX names mean nothing in a TFLite table, even on cpu.
    assert_eq!(tfl(&p, "cpu", "Relu", f32), Verdict::UnsupportedOp);
    // Dequantize is listed under the quantized sections only; its output is float.
    let g = typed("", "DEQUANTIZE", ElemType::U8, f32, vec![]);
    assert_eq!(
        p.check("acl_cl", &g, &g.nodes[0], &tflite()),
        Verdict::Supported
    );
    // circle's INSTANCE_NORM: ACL only; custom ops onert's loader maps: cpu only.
    assert_eq!(tfl(&p, "acl_cl", "INSTANCE_NORM", f32), Verdict::Supported);
    assert_eq!(tfl(&p, "cpu", "INSTANCE_NORM", f32), Verdict::UnsupportedOp);
    let einsum = typed("custom", "Einsum", f32, f32, vec![]);
    assert_eq!(
        p.check("cpu", &einsum, &einsum.nodes[0], &tflite()),
        Verdict::Supported
    );
    assert_eq!(
        p.check("acl_cl", &einsum, &einsum.nodes[0], &tflite()),
        Verdict::UnsupportedOp
    );
    // Without constraints only the op type counts.
    let bare = p.without_constraints();
    assert_eq!(tfl(&bare, "cpu", "RELU", ElemType::U8), Verdict::Supported);
    assert_eq!(
        tfl(&bare, "acl_neon", "ONE_HOT", f32),
        Verdict::UnsupportedOp
    );
}

#[test]
fn xnnpack_checks_types_fused_activations_and_static_filters() {
    let p = Profiles::builtin();
    let act = |v: &str| cleave_ir::Attribute {
        name: "fused_activation_function".into(),
        value: cleave_ir::AttrValue::String(v.as_bytes().to_vec().into()),
    };
    let conv = |filter_is_weight: bool, activation: &str| {
        let mut b = GraphBuilder::new("g");
        b.input("x", TensorType::fixed(ElemType::F32, &[1, 8, 8, 4]));
        let w = cleave_ir::Weight {
            elem: ElemType::F32,
            dims: vec![4, 1, 1, 4],
            data: cleave_ir::WeightData::Bytes(vec![0u8; 64].into()),
        };
        if filter_is_weight {
            b.weight("w", w);
        } else {
            b.input("w", TensorType::fixed(ElemType::F32, &[4, 1, 1, 4]));
        }
        b.node(NodeSpec {
            name: "c".into(),
            op_type: "CONV_2D".into(),
            inputs: vec!["x".into(), "w".into()],
            outputs: vec!["y".into()],
            attrs: vec![act(activation)],
            ..Default::default()
        });
        b.value_type("y", TensorType::fixed(ElemType::F32, &[1, 8, 8, 4]));
        b.output("y");
        b.finish(false).unwrap()
    };
    let verdict = |g: &Graph| p.check("xnnpack", g, &g.nodes[0], &tflite());
    assert_eq!(verdict(&conv(true, "RELU6")), Verdict::Supported);
    assert!(
        matches!(verdict(&conv(true, "TANH")), Verdict::Constraint(r) if r.contains("fused_activation_function=\"TANH\""))
    );
    assert!(
        matches!(verdict(&conv(false, "NONE")), Verdict::Constraint(r) if r.contains("input 1 ('w') is not constant"))
    );
    // FP32 list only: SQRT on uint8 is refused; quantized lists add 8-bit types.
    assert_eq!(
        tfl(&p, "xnnpack", "SQRT", ElemType::F32),
        Verdict::Supported
    );
    assert!(matches!(
        tfl(&p, "xnnpack", "SQRT", ElemType::U8),
        Verdict::Constraint(_)
    ));
    assert_eq!(tfl(&p, "xnnpack", "TANH", ElemType::I8), Verdict::Supported);
    assert_eq!(
        tfl(&p, "xnnpack", "GATHER", ElemType::F32),
        Verdict::UnsupportedOp
    );
    // What cannot be checked is a note of the TFLite table.
    let softmax = typed("", "SOFTMAX", ElemType::F32, ElemType::F32, vec![]);
    let x = p.get("xnnpack").unwrap();
    assert_eq!(
        x.note(&softmax.nodes[0], &tflite()),
        Some("Only `beta = 1.0` is supported.")
    );
    assert_eq!(x.note(&softmax.nodes[0], &ops()), None);
}

#[test]
fn format_tables_parse_and_replace_the_general_one() {
    let text = r#"
        name = "npu"
        all_ops = true
        [formats.tflite]
        [formats.tflite.defaults]
        dtypes = ["int8"]
        [formats.tflite.ops]
        CONV_2D = {}
        "custom::Gelu" = { dtypes = ["float32"] }
    "#;
    let p = Profile::parse(text, Path::new("npu.toml")).unwrap();
    let mut ps = Profiles::builtin();
    ps.insert(p);
    assert_eq!(tfl(&ps, "npu", "CONV_2D", ElemType::I8), Verdict::Supported);
    assert!(matches!(
        tfl(&ps, "npu", "CONV_2D", ElemType::F32),
        Verdict::Constraint(_)
    ));
    assert_eq!(tfl(&ps, "npu", "ADD", ElemType::I8), Verdict::UnsupportedOp);
    let gelu = typed("custom", "Gelu", ElemType::F32, ElemType::F32, vec![]);
    assert_eq!(
        ps.check("npu", &gelu, &gelu.nodes[0], &tflite()),
        Verdict::Supported
    );
    // Any other format reads the general table: every op.
    let g = graph("Anything", &[2], vec![]);
    assert_eq!(ps.check("npu", &g, &g.nodes[0], &ops()), Verdict::Supported);
    for bad in [
        "name = \"x\"\n[formats.\"\"]\nall_ops = true\n",
        "name = \"x\"\n[formats.tflite]\nbogus = 1\n",
    ] {
        let e = Profile::parse(bad, Path::new("x.toml")).unwrap_err();
        assert!(
            e.to_string().contains("must not be empty") || e.to_string().contains("bogus"),
            "{e}"
        );
    }
}
