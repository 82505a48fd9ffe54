//! The probe model `cleave measure` times an engine's per-call and copy costs with: one
//! Identity node, so what is measured is the call and the tensor going in and out.

use cleave_ir::ElemType;

use crate::dtype::elem_to_code;
use crate::proto::tensor_shape_proto::{dimension, Dimension};
use crate::proto::{
    type_proto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto, TypeProto,
    ValueInfoProto,
};

fn info(name: &str, elem: ElemType, dims: &[i64]) -> ValueInfoProto {
    let shape = TensorShapeProto {
        dim: dims
            .iter()
            .map(|&v| Dimension {
                value: Some(dimension::Value::DimValue(v)),
                ..Default::default()
            })
            .collect(),
    };
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem_to_code(elem)),
                shape: Some(shape),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `y = Identity(x)` over a tensor of `elem` and `dims`.
pub fn identity_model(elem: ElemType, dims: &[i64]) -> ModelProto {
    let graph = GraphProto {
        name: Some("probe".into()),
        node: vec![NodeProto {
            op_type: Some("Identity".into()),
            input: vec!["x".into()],
            output: vec!["y".into()],
            name: Some("probe".into()),
            ..Default::default()
        }],
        input: vec![info("x", elem, dims)],
        output: vec![info("y", elem, dims)],
        ..Default::default()
    };
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        producer_name: Some("cleave measure".into()),
        graph: Some(graph),
        ..Default::default()
    }
}
