//! tract builds bool tensors from the caller's bytes; a byte other than 0 or 1 is refused
//! (in Rust it would be undefined behaviour), a valid one runs.

use cleave_engines::Tract;
use cleave_ir::{ElemType, TensorType};
use cleave_onnx::emit::value_info;
use cleave_onnx::encode_model;
use cleave_onnx::proto::{GraphProto, ModelProto, NodeProto, OperatorSetIdProto, ValueInfoProto};
use cleave_runtime::{Engine, HostTensor, RuntimeError};

fn bool_info(name: &str) -> ValueInfoProto {
    value_info(name, &TensorType::fixed(ElemType::Bool, &[2]))
}

#[test]
fn bool_bytes_other_than_0_or_1_are_refused() {
    let m = ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(GraphProto {
            name: Some("g".into()),
            node: vec![NodeProto {
                op_type: Some("Not".into()),
                input: vec!["b".into()],
                output: vec!["y".into()],
                ..Default::default()
            }],
            input: vec![bool_info("b")],
            output: vec![bool_info("y")],
            ..Default::default()
        }),
        ..Default::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not.onnx");
    std::fs::write(&path, encode_model(&m)).unwrap();
    let mut s = Tract.load(&path, true).unwrap();
    let feed = |data: Vec<u8>| {
        vec![(
            "b".to_string(),
            HostTensor {
                elem: ElemType::Bool,
                shape: vec![2],
                data,
            },
        )]
    };
    let out = s.run(&feed(vec![0, 1])).unwrap();
    assert_eq!(out[0].1.data, [1, 0]);
    match s.run(&feed(vec![0, 2])) {
        Err(RuntimeError::Input { name, message, .. }) => {
            assert_eq!(name, "b");
            assert!(message.contains("0 or 1"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}
