//! Each fusion rule fuses its pattern, and each legality condition refuses a near miss.

use bytes::Bytes;
use cleave_fuse::{find_groups, Rule};
use cleave_ir::{
    AttrValue, Attribute, ElemType, Graph, GraphBuilder, NodeSpec, TensorType, Weight, WeightData,
};

struct Net {
    b: GraphBuilder,
}

fn ints(name: &str, v: &[i64]) -> Attribute {
    Attribute {
        name: name.into(),
        value: AttrValue::Ints(v.to_vec()),
    }
}

fn int(name: &str, v: i64) -> Attribute {
    Attribute {
        name: name.into(),
        value: AttrValue::Int(v),
    }
}

impl Net {
    fn new(inputs: &[(&str, &[i64])]) -> Net {
        let mut b = GraphBuilder::new("g");
        for (n, d) in inputs {
            b.input(*n, TensorType::fixed(ElemType::F32, d));
        }
        Net { b }
    }

    fn weight(&mut self, name: &str, dims: &[i64]) -> String {
        let count: i64 = dims.iter().product();
        let data = (0..count)
            .flat_map(|i| (i as f32 * 0.01).to_le_bytes())
            .collect::<Vec<u8>>();
        self.b.weight(
            name,
            Weight {
                elem: ElemType::F32,
                dims: dims.to_vec(),
                data: WeightData::Bytes(Bytes::from(data)),
            },
        );
        name.to_string()
    }

    fn op(
        &mut self,
        name: &str,
        op: &str,
        inputs: &[&str],
        out: &[i64],
        attrs: Vec<Attribute>,
    ) -> String {
        let o = format!("{name}_out");
        self.b.node(NodeSpec {
            name: name.into(),
            op_type: op.into(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: vec![o.clone()],
            attrs,
            ..Default::default()
        });
        self.b
            .value_type(o.as_str(), TensorType::fixed(ElemType::F32, out));
        o
    }

    /// A 3×3 pad-1 Conv from `c_in` to `c_out` channels on an 8×8 map.
    fn conv(&mut self, name: &str, x: &str, c_in: i64, c_out: i64) -> String {
        let w = self.weight(&format!("{name}_W"), &[c_out, c_in, 3, 3]);
        self.op(
            name,
            "Conv",
            &[x, &w],
            &[1, c_out, 8, 8],
            vec![ints("pads", &[1, 1, 1, 1]), ints("kernel_shape", &[3, 3])],
        )
    }

    fn unary(&mut self, name: &str, op: &str, x: &str, dims: &[i64]) -> String {
        self.op(name, op, &[x], dims, vec![])
    }

    fn finish(mut self, outputs: &[&str]) -> Graph {
        for o in outputs {
            self.b.output(*o);
        }
        self.b.finish(false).unwrap()
    }
}

const MAP: [i64; 4] = [1, 4, 8, 8];

/// The groups as (rule, member names).
fn groups(g: &Graph, rules: &[Rule]) -> Vec<(Rule, Vec<String>)> {
    let constant = g.constant_nodes(|_| true);
    find_groups(g, &constant, rules, &cleave_onnx::OnnxSemantics)
        .into_iter()
        .map(|grp| {
            (
                grp.rule,
                grp.nodes
                    .iter()
                    .map(|&n| g.node_label(n).to_string())
                    .collect(),
            )
        })
        .collect()
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn cpu() -> Vec<Rule> {
    vec![
        Rule::ConvSimple,
        Rule::ConvDepthwise,
        Rule::ConvSum,
        Rule::PoolFakeQuantize,
        Rule::FcActivation,
    ]
}

fn vpu() -> Vec<Rule> {
    vec![
        Rule::VpuConvPool,
        Rule::VpuConvActivation,
        Rule::VpuPoolRelu,
        Rule::VpuFcRelu,
        Rule::VpuEltwiseActivation,
    ]
}

#[test]
fn conv_takes_any_number_and_order_of_simple_layers() {
    let mut n = Net::new(&[("x", &MAP)]);
    let c = n.conv("conv", "x", 4, 4);
    let r = n.unary("relu", "Relu", &c, &MAP);
    let s = n.weight("scale", &[1, 4, 1, 1]);
    let m = n.op("scale_mul", "Mul", &[&s, &r], &MAP, vec![]);
    let sh = n.weight("shift", &[4, 1, 1]);
    let a = n.op("shift_add", "Add", &[&m, &sh], &MAP, vec![]);
    let slope = n.weight("slope", &[4, 1, 1]);
    let p = n.op("prelu", "PRelu", &[&a, &slope], &MAP, vec![]);
    let (lo, hi) = (n.weight("lo", &[]), n.weight("hi", &[]));
    let cl = n.op("clip", "Clip", &[&p, &lo, &hi], &MAP, vec![]);
    let sg = n.unary("sigmoid", "Sigmoid", &cl, &MAP);
    let (qs, qz) = (n.weight("q_scale", &[]), n.weight("q_zero", &[]));
    let q = n.op("q", "QuantizeLinear", &[&sg, &qs, &qz], &MAP, vec![]);
    let dq = n.op("dq", "DequantizeLinear", &[&q, &qs, &qz], &MAP, vec![]);
    let e = n.unary("elu", "Elu", &dq, &MAP);
    let g = n.finish(&[&e]);
    let all = names(&[
        "conv",
        "relu",
        "scale_mul",
        "shift_add",
        "prelu",
        "clip",
        "sigmoid",
        "q",
        "dq",
        "elu",
    ]);
    assert_eq!(groups(&g, &cpu()), vec![(Rule::ConvSimple, all)]);
    assert_eq!(
        groups(&g, &vpu()),
        vec![(Rule::VpuConvActivation, names(&["conv", "relu"]))],
        "the VPU fuses one activation"
    );
    assert!(
        groups(&g, &[Rule::FcActivation]).is_empty(),
        "conv rules off: nothing"
    );
}

#[test]
fn simple_layers_must_be_sole_readers_per_channel_and_constant() {
    // The Relu's output has a second reader: the chain ends at the Relu.
    let mut n = Net::new(&[("x", &MAP)]);
    let c = n.conv("conv", "x", 4, 4);
    let r = n.unary("relu", "Relu", &c, &MAP);
    let s = n.unary("sigmoid", "Sigmoid", &r, &MAP);
    let t = n.unary("tanh", "Tanh", &r, &MAP);
    let g = n.finish(&[&s, &t]);
    assert_eq!(
        groups(&g, &cpu()),
        vec![(Rule::ConvSimple, names(&["conv", "relu"]))]
    );

    // The Conv's output is also a graph output: no group.
    let mut n = Net::new(&[("x", &MAP)]);
    let c = n.conv("conv", "x", 4, 4);
    let r = n.unary("relu", "Relu", &c, &MAP);
    let g = n.finish(&[&r, &c]);
    assert!(groups(&g, &cpu()).is_empty());

    // A constant whose inferred dims multiply past i64 (found by fuzzing: a Conv over a
    // constant input) is no ScaleShift, and asking must not overflow.
    let mut n = Net::new(&[("x", &MAP)]);
    let c = n.conv("conv", "x", 4, 4);
    let w = n.weight("w", &[1, 4, 1, 1]);
    let k = n.op("soft", "Softmax", &[&w], &[1 << 32, 1 << 32, 1, 1], vec![]);
    let m = n.op("mul", "Mul", &[&c, &k], &MAP, vec![]);
    let g = n.finish(&[&m]);
    assert!(groups(&g, &cpu()).is_empty());

    // Mul by a full-size constant is no ScaleShift; Mul by a graph input is no constant.
    for (dims, from_input) in [(&MAP[..], false), (&[1, 4, 1, 1][..], true)] {
        let mut n = Net::new(&[("x", &MAP), ("y", dims)]);
        let c = n.conv("conv", "x", 4, 4);
        let k = if from_input {
            "y".to_string()
        } else {
            n.weight("k", dims)
        };
        let m = n.op("mul", "Mul", &[&c, &k], &MAP, vec![]);
        let g = n.finish(&[&m]);
        assert!(
            groups(&g, &cpu()).is_empty(),
            "dims {dims:?}, from input {from_input}"
        );
    }
}

#[test]
fn depthwise_conv_joins_only_when_group_equals_its_channels() {
    for (group, fused) in [(8, true), (4, false)] {
        let mut n = Net::new(&[("x", &MAP)]);
        let c = n.conv("conv", "x", 4, 8);
        let r = n.unary("relu", "Relu", &c, &[1, 8, 8, 8]);
        let w = n.weight("dw_W", &[8, 8 / group, 3, 3]);
        let dw = n.op(
            "dw",
            "Conv",
            &[&r, &w],
            &[1, 8, 8, 8],
            vec![ints("pads", &[1, 1, 1, 1]), int("group", group)],
        );
        let r2 = n.unary("relu2", "Relu", &dw, &[1, 8, 8, 8]);
        let g = n.finish(&[&r2]);
        let got = groups(&g, &cpu());
        if fused {
            assert_eq!(
                got,
                vec![(Rule::ConvDepthwise, names(&["conv", "relu", "dw", "relu2"]))]
            );
        } else {
            assert_eq!(
                got,
                vec![
                    (Rule::ConvSimple, names(&["conv", "relu"])),
                    (Rule::ConvSimple, names(&["dw", "relu2"]))
                ]
            );
        }
    }
}

#[test]
fn conv_sum_needs_another_tensor_and_a_sole_reader() {
    // Legal: the Add's other operand comes from elsewhere.
    let mut n = Net::new(&[("x", &MAP), ("y", &MAP)]);
    let other = n.unary("other", "Relu", "y", &MAP);
    let c = n.conv("conv", "x", 4, 4);
    let r = n.unary("relu", "Relu", &c, &MAP);
    let a = n.op("add", "Add", &[&other, &r], &MAP, vec![]);
    let r2 = n.unary("relu2", "Relu", &a, &MAP);
    let g = n.finish(&[&r2]);
    assert_eq!(
        groups(&g, &cpu()),
        vec![(Rule::ConvSum, names(&["conv", "relu", "add", "relu2"]))]
    );

    // Illegal: the other operand is the Conv's own input.
    let mut n = Net::new(&[("x", &MAP)]);
    let c = n.conv("conv", "x", 4, 4);
    let a = n.op("add", "Add", &[&c, "x"], &MAP, vec![]);
    let g = n.finish(&[&a]);
    assert!(groups(&g, &cpu()).is_empty());

    // Illegal: the Conv's output has another reader.
    let mut n = Net::new(&[("x", &MAP), ("y", &MAP)]);
    let c = n.conv("conv", "x", 4, 4);
    let a = n.op("add", "Add", &[&c, "y"], &MAP, vec![]);
    let s = n.unary("sig", "Sigmoid", &c, &MAP);
    let g = n.finish(&[&a, &s]);
    assert!(groups(&g, &cpu()).is_empty());

    // Illegal: the sum broadcasts (the other operand is smaller).
    let mut n = Net::new(&[("x", &MAP), ("y", &[1, 4, 1, 1])]);
    let c = n.conv("conv", "x", 4, 4);
    let a = n.op("add", "Add", &[&c, "y"], &MAP, vec![]);
    let g = n.finish(&[&a]);
    assert!(groups(&g, &cpu()).is_empty());
}

#[test]
fn pool_fake_quantize_and_fully_connected_activation() {
    for (pool, fused) in [("AveragePool", true), ("MaxPool", false)] {
        let mut n = Net::new(&[("x", &MAP)]);
        let p = n.op(
            "pool",
            pool,
            &["x"],
            &[1, 4, 4, 4],
            vec![ints("kernel_shape", &[2, 2]), ints("strides", &[2, 2])],
        );
        let (s, z) = (n.weight("s", &[]), n.weight("z", &[]));
        let q = n.op("q", "QuantizeLinear", &[&p, &s, &z], &[1, 4, 4, 4], vec![]);
        let dq = n.op(
            "dq",
            "DequantizeLinear",
            &[&q, &s, &z],
            &[1, 4, 4, 4],
            vec![],
        );
        let g = n.finish(&[&dq]);
        let want = if fused {
            vec![(Rule::PoolFakeQuantize, names(&["pool", "q", "dq"]))]
        } else {
            vec![]
        };
        assert_eq!(groups(&g, &cpu()), want, "{pool}");
    }
    for (act, fused) in [("Relu", true), ("Softmax", false)] {
        let mut n = Net::new(&[("x", &[2, 16])]);
        let w = n.weight("W", &[16, 8]);
        let fc = n.op("fc", "Gemm", &["x", &w], &[2, 8], vec![]);
        let a = n.unary("act", act, &fc, &[2, 8]);
        let g = n.finish(&[&a]);
        let want = if fused {
            vec![(Rule::FcActivation, names(&["fc", "act"]))]
        } else {
            vec![]
        };
        assert_eq!(groups(&g, &cpu()), want, "{act}");
    }
}

#[test]
fn vpu_pairs_and_their_conditions() {
    // Conv 3×3 s1 p1 + MaxPool 2×2 s2 p0; with pads 0 the pair is refused.
    for (pads, fused) in [([1, 1, 1, 1], true), ([0, 0, 0, 0], false)] {
        let mut n = Net::new(&[("x", &MAP)]);
        let w = n.weight("W", &[4, 4, 3, 3]);
        let out = if fused { [1, 4, 8, 8] } else { [1, 4, 6, 6] };
        let c = n.op(
            "conv",
            "Conv",
            &["x", &w],
            &out,
            vec![ints("pads", &pads), ints("kernel_shape", &[3, 3])],
        );
        let half = [1, 4, out[2] / 2, out[3] / 2];
        let p = n.op(
            "pool",
            "MaxPool",
            &[&c],
            &half,
            vec![ints("kernel_shape", &[2, 2]), ints("strides", &[2, 2])],
        );
        let g = n.finish(&[&p]);
        let want = if fused {
            vec![(Rule::VpuConvPool, names(&["conv", "pool"]))]
        } else {
            vec![]
        };
        assert_eq!(groups(&g, &vpu()), want);
    }
    let pair = |first: &str, second: &str| {
        let mut n = Net::new(&[("x", &MAP), ("y", &MAP)]);
        let a = match first {
            "Add" | "Mul" | "Max" | "Sub" => n.op("first", first, &["x", "y"], &MAP, vec![]),
            _ => n.op(
                "first",
                first,
                &["x"],
                &MAP,
                vec![ints("kernel_shape", &[1, 1])],
            ),
        };
        let b = n.unary("second", second, &a, &MAP);
        groups(&n.finish(&[&b]), &vpu())
    };
    assert_eq!(
        pair("MaxPool", "Relu"),
        vec![(Rule::VpuPoolRelu, names(&["first", "second"]))]
    );
    assert_eq!(pair("AveragePool", "Sigmoid"), vec![]);
    assert_eq!(
        pair("Add", "LeakyRelu"),
        vec![(Rule::VpuEltwiseActivation, names(&["first", "second"]))]
    );
    assert_eq!(
        pair("Max", "Relu"),
        vec![(Rule::VpuEltwiseActivation, names(&["first", "second"]))]
    );
    assert_eq!(pair("Sub", "Relu"), vec![], "Sub is no VPU eltwise fusion");
    let mut n = Net::new(&[("x", &[2, 16])]);
    let w = n.weight("W", &[16, 8]);
    let fc = n.op("fc", "Gemm", &["x", &w], &[2, 8], vec![]);
    let r = n.unary("relu", "Relu", &fc, &[2, 8]);
    assert_eq!(
        groups(&n.finish(&[&r]), &vpu()),
        vec![(Rule::VpuFcRelu, names(&["fc", "relu"]))]
    );
}
