//! TFLite ⇄ circle: every test model converts to circle and back to the same object tree,
//! reads as circle with the same IR, and what one format cannot express is refused.

use cleave_tflite::convert::convert;
use cleave_tflite::pack::{self, Layout};
use cleave_tflite::schema::{circle, tflite};
use cleave_tflite::{FlatModel, Format, TfliteSource};

fn flat(name: &str, bytes: Vec<u8>) -> FlatModel {
    FlatModel::from_bytes(std::path::Path::new(name), bytes.into()).unwrap()
}

#[test]
fn every_test_model_converts_to_circle_and_back_to_the_same_tree() {
    for path in cleave_testdata::tflite_files() {
        let src = FlatModel::load(&path).unwrap();
        let as_circle = convert(&src, Format::Circle).unwrap();
        assert_eq!(&as_circle.bytes[4..8], b"CIR0");
        let c = flat("m.circle", as_circle.bytes);
        assert_eq!(c.format, Format::Circle);
        // The circle file reads into the same IR.
        let a = TfliteSource::new(src.clone()).unwrap();
        let b = TfliteSource::new(c.clone()).unwrap();
        let ops = |s: &TfliteSource| -> Vec<String> {
            s.converted
                .model
                .graph
                .nodes
                .iter()
                .map(|n| n.op_type.to_string())
                .collect()
        };
        assert_eq!(ops(&a), ops(&b), "{}", path.display());
        assert_eq!(b.converted.model.format, "circle");
        // And it is a circle tree with the same operator codes.
        let ct = circle::root_as_model(&c.data).unwrap().unpack();
        assert_eq!(
            ct.operator_codes.as_ref().map(Vec::len),
            tflite::root_as_model(&src.data)
                .unwrap()
                .unpack()
                .operator_codes
                .as_ref()
                .map(Vec::len)
        );
        let back = convert(&c, Format::Tflite).unwrap();
        let before = tflite::root_as_model(&src.data).unwrap().unpack();
        let after = tflite::root_as_model(&back.bytes).unwrap().unpack();
        assert!(
            before == after,
            "{}: tflite → circle → tflite changed the tree",
            path.display()
        );
    }
}

fn one_op_circle(op: circle::BuiltinOperator, elem: circle::TensorType) -> Vec<u8> {
    let tensor = |name: &str| {
        let mut t = circle::TensorT::default();
        t.shape = Some(vec![1, 4]);
        t.type_ = elem;
        t.name = Some(name.into());
        t
    };
    let (small, big) = cleave_tflite::codes::encode_builtin_code(Format::Circle, op.0);
    let mut relu = circle::OperatorT::default();
    relu.inputs = Some(vec![0]);
    relu.outputs = Some(vec![1]);
    let mut sg = circle::SubGraphT::default();
    sg.tensors = Some(vec![tensor("x"), tensor("y")]);
    sg.inputs = Some(vec![0]);
    sg.outputs = Some(vec![1]);
    sg.operators = Some(vec![relu]);
    let mut code = circle::OperatorCodeT::default();
    code.deprecated_builtin_code = small;
    code.builtin_code = circle::BuiltinOperator(big);
    let mut m = circle::ModelT::default();
    m.operator_codes = Some(vec![code]);
    m.subgraphs = Some(vec![sg]);
    pack::circle::pack(&m, &[&[]], Layout::Inline, "CIR0")
}

#[test]
fn what_the_target_cannot_express_is_refused_by_name() {
    let norm = flat(
        "norm.circle",
        one_op_circle(
            circle::BuiltinOperator::INSTANCE_NORM,
            circle::TensorType::FLOAT32,
        ),
    );
    let e = convert(&norm, Format::Tflite).err().unwrap();
    assert!(
        e.contains("INSTANCE_NORM") && e.contains("only in circle"),
        "{e}"
    );
    // The same model with a builtin both know converts.
    let relu = flat(
        "relu.circle",
        one_op_circle(circle::BuiltinOperator::RELU, circle::TensorType::FLOAT32),
    );
    let t = convert(&relu, Format::Tflite).unwrap();
    let back = flat("relu.tflite", t.bytes);
    assert_eq!(
        TfliteSource::new(back).unwrap().converted.model.graph.nodes[0].op_type,
        "RELU"
    );
    // circle's UINT4 is TFLite's 20; its GGML block types have no TFLite name.
    let u4 = flat(
        "u4.circle",
        one_op_circle(circle::BuiltinOperator::RELU, circle::TensorType::UINT4),
    );
    let t = convert(&u4, Format::Tflite).unwrap();
    let tt = tflite::root_as_model(&t.bytes).unwrap().unpack();
    assert_eq!(
        tt.subgraphs.unwrap()[0].tensors.as_ref().unwrap()[0].type_,
        tflite::TensorType::UINT4
    );
    let ggml = flat(
        "q.circle",
        one_op_circle(circle::BuiltinOperator::RELU, circle::TensorType::GGML_Q4_0),
    );
    let e = convert(&ggml, Format::Tflite).err().unwrap();
    assert!(e.contains("GGML_Q4_0") && e.contains("tensor 'x'"), "{e}");
    // TFLite's BFLOAT16 has no circle 0.10 code.
    let mut m = tflite::root_as_model(&convert(&relu, Format::Tflite).unwrap().bytes)
        .unwrap()
        .unpack();
    m.subgraphs.as_mut().unwrap()[0].tensors.as_mut().unwrap()[1].type_ =
        tflite::TensorType::BFLOAT16;
    let bf16 = flat(
        "bf16.tflite",
        pack::tflite::pack(&m, &[&[]], Layout::Inline, "TFL3"),
    );
    let e = convert(&bf16, Format::Circle).err().unwrap();
    assert!(e.contains("BFLOAT16") && e.contains("tensor 'y'"), "{e}");
}
