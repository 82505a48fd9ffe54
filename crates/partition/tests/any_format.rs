//! The neutral stages on a model whose op names are not ONNX's (TFLite's spelling, NHWC):
//! fusion patterns, the pairs that must not be cut and the unit graph all come from the
//! front-end's semantics, with no change to these crates.

use bytes::Bytes;
use cleave_assign::{assign, inseparable_pairs, AssignOptions, PartFile, Placement};
use cleave_device::Profiles;
use cleave_fuse::{find_groups, Rule};
use cleave_ir::{
    ElemType, Graph, GraphBuilder, NamedOps, NodeSpec, OpClass, TensorType, Weight, WeightData,
};
use cleave_partition::{partition_default, Options, UnitGraph};

const NHWC: [i64; 4] = [1, 8, 8, 4];

fn tflite_ops() -> NamedOps {
    NamedOps::new(&[
        ("CONV_2D", OpClass::Conv),
        ("RELU", OpClass::Relu),
        ("MUL", OpClass::Mul),
        ("QUANTIZE", OpClass::Quantize),
        ("DEQUANTIZE", OpClass::Dequantize),
        ("ADD", OpClass::Add),
    ])
    .channel_axis(3)
}

fn weight(b: &mut GraphBuilder, name: &str, dims: &[i64]) {
    let count: i64 = dims.iter().product();
    let data: Vec<u8> = (0..count).flat_map(|i| (i as f32).to_le_bytes()).collect();
    b.weight(
        name,
        Weight {
            elem: ElemType::F32,
            dims: dims.to_vec(),
            data: WeightData::Bytes(Bytes::from(data)),
        },
    );
}

/// x → CONV_2D → MUL(per channel, NHWC) → RELU → QUANTIZE → DEQUANTIZE → ADD(x) → y
fn net() -> Graph {
    let mut b = GraphBuilder::new("g");
    b.input("x", TensorType::fixed(ElemType::F32, &NHWC));
    weight(&mut b, "w", &[4, 3, 3, 4]);
    weight(&mut b, "scale", &[4]);
    let ops = [
        ("conv", "CONV_2D", vec!["x", "w"], "c"),
        ("mul", "MUL", vec!["c", "scale"], "m"),
        ("relu", "RELU", vec!["m"], "r"),
        ("q", "QUANTIZE", vec!["r"], "qr"),
        ("dq", "DEQUANTIZE", vec!["qr"], "d"),
        ("add", "ADD", vec!["d", "x"], "y"),
    ];
    for (name, op, ins, out) in ops {
        b.node(NodeSpec {
            name: name.into(),
            op_type: op.into(),
            inputs: ins.iter().map(|s| s.to_string()).collect(),
            outputs: vec![out.into()],
            ..Default::default()
        });
        let elem = if op == "QUANTIZE" {
            ElemType::I8
        } else {
            ElemType::F32
        };
        b.value_type(out, TensorType::fixed(elem, &NHWC));
    }
    b.output("y");
    b.finish(false).unwrap()
}

fn labels(g: &Graph, nodes: &[cleave_ir::NodeId]) -> Vec<String> {
    nodes.iter().map(|&n| g.node_label(n).to_string()).collect()
}

#[test]
fn fusion_patterns_follow_the_front_ends_meanings_and_layout() {
    let g = net();
    let constant = g.constant_nodes(|_| true);
    let groups = find_groups(
        &g,
        &constant,
        &[Rule::ConvSimple, Rule::ConvSum],
        &tflite_ops(),
    );
    assert_eq!(groups.len(), 1, "{groups:?}");
    // The per-channel MUL is on axis 3 (NHWC), the quantize pair is FakeQuantize, and the
    // residual ADD reads the conv's own input, so conv_sum must not take it.
    assert_eq!(
        labels(&g, &groups[0].nodes),
        ["conv", "mul", "relu", "q", "dq"]
    );
    assert_eq!(groups[0].rule, Rule::ConvSimple);

    // Read as NCHW (channels on axis 1, 8 of them), the 4-vector no longer broadcasts over
    // channels only, and the chain stops at the conv: the layout is the front-end's answer.
    let nchw = tflite_ops().channel_axis(1);
    let groups = find_groups(&g, &constant, &[Rule::ConvSimple], &nchw);
    assert!(groups.is_empty(), "{groups:?}");

    // Under names the semantics do not know, nothing fuses.
    let groups = find_groups(&g, &constant, &[Rule::ConvSimple], &NamedOps::default());
    assert!(groups.is_empty());
}

#[test]
fn inseparable_pairs_come_from_the_semantics_and_stay_in_one_part() {
    let g = net();
    let sem = tflite_ops();
    let pairs = inseparable_pairs(&g, &sem);
    assert_eq!(pairs.len(), 1);
    assert_eq!(labels(&g, &[pairs[0].0, pairs[0].1]), ["q", "dq"]);

    // A rule sends the dequantize elsewhere: it follows its quantize, and the unit graph
    // holds the two in one unit.
    let part = PartFile::parse(
        "[partition]\nbackends=npu,cpu\ndefault=npu\ncomply=opname\n[OPNAME]\ndq=cpu\nadd=cpu\n",
        std::path::Path::new("t.part"),
        None,
        None,
    )
    .unwrap();
    let constant = vec![false; g.nodes.len()];
    let opts = AssignOptions {
        devices: vec![],
        default: None,
        part: Some(&part),
    };
    let a = assign(&g, &Profiles::builtin(), &opts, &constant, &sem).unwrap();
    let (q, dq) = pairs[0];
    assert_eq!(
        a.placement[q.index()].device(),
        a.placement[dq.index()].device()
    );
    assert!(matches!(a.placement[dq.index()], Placement::Device(0, _)));
    let ug = UnitGraph::from_assignment(&g, &a, &a.glue(&g, &sem));
    let together = ug.unit_nodes().any(|u| u.contains(&q) && u.contains(&dq));
    assert!(together, "{:?}", ug.unit_nodes().collect::<Vec<_>>());
    let p = partition_default(&ug, Options::default());
    assert_eq!(p.count, 2, "npu: conv..dq; cpu: add");
}
