//! Graphs real exports make: symbolic dims, subgraphs, quantize/dequantize pairs, copied constants, dims learned by running.

use super::*;

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
        &["--rules", part.to_str().unwrap()],
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
    partition(&path, &work, &["--rules", part.to_str().unwrap()]);
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
        os("--rules"),
        part.as_os_str(),
        os("--json"),
    ])))
    .unwrap();
    assert_eq!(q["nodes"][1]["device"], "A");
    assert_eq!(q["nodes"][1]["reason"], "Q/DQ pair");
    let work = tmp.path().join("w");
    partition(&path, &work, &["--rules", part.to_str().unwrap()]);
    let c = conn(&work, "qdq");
    assert_eq!(c.parts.len(), 2);
    assert_eq!(strs(&c.parts[0].outputs), ["dq"]);
    oracle(&work.join("qdq.conn.json"));
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
        os("--rules"),
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
            os("--rules"),
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
