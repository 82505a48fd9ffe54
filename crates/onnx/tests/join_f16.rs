//! Joining sibling float16 Convs keeps the bias in float16 (it was once declared float32,
//! which wrote an invalid model for the VPU's own precision), and a Conv without a bias
//! contributes float16 zeros.

use bytes::Bytes;
use cleave_device::Profiles;
use cleave_ir::{ElemType, TensorType};
use cleave_onnx::emit::value_info;
use cleave_onnx::proto::{
    tensor_proto::DataType, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    ValueInfoProto,
};
use cleave_onnx::rewrite::{optimize, Level, OptimizeOptions};
use cleave_onnx::{encode_model, OnnxModel};

const F16: i32 = DataType::Float16 as i32;

fn f16_info(name: &str, dims: &[i64]) -> ValueInfoProto {
    value_info(name, &TensorType::fixed(ElemType::F16, dims))
}

/// A float16 tensor whose element i is the bit pattern `0x3c00 + i` (1.0, 1.00098, ...).
fn f16_tensor(name: &str, dims: &[i64]) -> TensorProto {
    let n: i64 = dims.iter().product();
    let raw: Vec<u8> = (0..n as u16)
        .flat_map(|i| (0x3c00 + i).to_le_bytes())
        .collect();
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(F16),
        raw_data: Some(Bytes::from(raw)),
        ..Default::default()
    }
}

fn conv(name: &str, ins: &[&str], out: &str) -> NodeProto {
    NodeProto {
        name: Some(name.into()),
        op_type: Some("Conv".into()),
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: vec![out.into()],
        ..Default::default()
    }
}

#[test]
fn joined_float16_convs_keep_a_float16_bias() {
    let m = ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(GraphProto {
            name: Some("g".into()),
            node: vec![
                conv("c1", &["x", "w1", "b1"], "y1"),
                conv("c2", &["x", "w2"], "y2"),
            ],
            initializer: vec![
                f16_tensor("w1", &[3, 2, 1, 1]),
                f16_tensor("b1", &[3]),
                f16_tensor("w2", &[5, 2, 1, 1]),
            ],
            input: vec![f16_info("x", &[1, 2, 4, 4])],
            output: vec![f16_info("y1", &[1, 3, 4, 4]), f16_info("y2", &[1, 5, 4, 4])],
            ..Default::default()
        }),
        ..Default::default()
    };
    let src = OnnxModel::from_bytes(encode_model(&m).into(), "m.onnx".into()).unwrap();
    let profiles = Profiles::builtin();
    let o = optimize(
        &src,
        &OptimizeOptions {
            level: Level::Device,
            devices: vec!["myriad".into()],
            profiles: &profiles,
            evaluator: None,
            fold_limit: cleave_onnx::rewrite::DEFAULT_FOLD_LIMIT,
        },
    )
    .unwrap();
    assert_eq!(o.applied.get("join"), Some(&1), "{:?}", o.applied);
    let p = o.model.proto().unwrap();
    let g = p.graph.as_ref().unwrap();
    let joined = g
        .node
        .iter()
        .find(|n| n.op_type() == "Conv")
        .expect("the joined Conv");
    let bias = g
        .initializer
        .iter()
        .find(|t| Some(t.name()) == joined.input.get(2).map(String::as_str))
        .expect("a bias initializer");
    assert_eq!(
        bias.data_type,
        Some(F16),
        "the bias keeps the weights' type"
    );
    assert_eq!(bias.dims, [8]);
    let raw = bias.raw_data.as_deref().unwrap();
    assert_eq!(raw.len(), 16, "8 float16 values");
    assert_eq!(&raw[..6], &f16_tensor("b", &[3]).raw_data.unwrap()[..]);
    assert!(raw[6..].iter().all(|&b| b == 0), "c2 has no bias: zeros");
}
