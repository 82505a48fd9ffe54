//! Property: with fusion on, no fused group is ever split across parts (so never across
//! devices), whatever the graph, the devices' support and the rules pinning nodes.

use std::path::Path;

use bytes::Bytes;
use cleave_assign::{assign, AssignOptions, PartFile};
use cleave_device::{Profile, Profiles};
use cleave_ir::{
    AttrValue, Attribute, ElemType, Graph, GraphBuilder, NamedOps, NodeSpec, OpClass, TensorType,
    Weight, WeightData,
};
use cleave_partition::{check_plan, partition_default, Options, Plan, UnitGraph};
use proptest::prelude::*;

const OPS: [&str; 5] = ["Conv", "Relu", "Sigmoid", "Add", "MaxPool"];
const MAP: [i64; 4] = [1, 4, 8, 8];

fn semantics() -> NamedOps {
    NamedOps::new(&[
        ("Conv", OpClass::Conv),
        ("Relu", OpClass::Relu),
        ("Sigmoid", OpClass::Sigmoid),
        ("Add", OpClass::Add),
        ("MaxPool", OpClass::MaxPool),
    ])
}

/// Node `i` has op `OPS[op]` and reads the outputs of nodes `i - 1 - back` (or `x`).
fn build(spec: &[(usize, usize, usize)], extra_outputs: &[usize]) -> Graph {
    let mut b = GraphBuilder::new("g");
    b.input("x", TensorType::fixed(ElemType::F32, &MAP));
    let name = |i: i64| {
        if i < 0 {
            "x".to_string()
        } else {
            format!("t{i}")
        }
    };
    for (i, &(op, back1, back2)) in spec.iter().enumerate() {
        let i = i as i64;
        let a = name(i - 1 - back1 as i64);
        let mut inputs = vec![a.clone()];
        let mut attrs = Vec::new();
        match OPS[op] {
            "Conv" => {
                let w = format!("W{i}");
                let data: Vec<u8> = (0..144)
                    .flat_map(|k| (k as f32 * 0.1 - i as f32).to_le_bytes())
                    .collect();
                b.weight(
                    w.as_str(),
                    Weight {
                        elem: ElemType::F32,
                        dims: vec![4, 4, 3, 3],
                        data: WeightData::Bytes(Bytes::from(data)),
                    },
                );
                inputs.push(w);
                attrs.push(Attribute {
                    name: "pads".into(),
                    value: AttrValue::Ints(vec![1, 1, 1, 1]),
                });
            }
            "Add" => {
                let other = name(i - 1 - back2 as i64);
                inputs.push(if other == a { "x".to_string() } else { other });
            }
            "MaxPool" => attrs.push(Attribute {
                name: "kernel_shape".into(),
                value: AttrValue::Ints(vec![1, 1]),
            }),
            _ => {}
        }
        b.node(NodeSpec {
            name: format!("n{i}"),
            op_type: OPS[op].into(),
            inputs,
            outputs: vec![name(i)],
            attrs,
            ..Default::default()
        });
        b.value_type(name(i).as_str(), TensorType::fixed(ElemType::F32, &MAP));
    }
    b.output(name(spec.len() as i64 - 1).as_str());
    for &o in extra_outputs {
        if o + 1 < spec.len() {
            b.output(name(o as i64).as_str());
        }
    }
    b.finish(false).unwrap()
}

fn npu_profile(supported: &[bool], vpu_rules: bool) -> Profile {
    let ops: Vec<String> = OPS
        .iter()
        .zip(supported)
        .filter(|(_, s)| **s)
        .map(|(o, _)| format!("{o} = {{}}"))
        .collect();
    let rules = if vpu_rules {
        r#"["vpu_conv_pool", "vpu_conv_activation", "vpu_pool_relu", "vpu_eltwise_activation"]"#
    } else {
        r#"["conv_simple", "conv_depthwise", "conv_sum"]"#
    };
    Profile::parse(
        &format!(
            "name = \"npu\"\n[ops]\n{}\n[fuse]\nrules = {rules}\n",
            ops.join("\n")
        ),
        Path::new("npu.toml"),
    )
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
    #[test]
    fn no_group_is_split(
        spec in prop::collection::vec((0..OPS.len(), 0usize..3, 0usize..4), 3..30),
        extra_outputs in prop::collection::vec(0usize..30, 0..3),
        supported in prop::collection::vec(any::<bool>(), OPS.len()),
        vpu_rules in any::<bool>(),
        pins in prop::collection::vec((0usize..30, any::<bool>()), 0..4),
        allow_disconnected in any::<bool>(),
    ) {
        let g = build(&spec, &extra_outputs);
        let mut profiles = Profiles::builtin();
        profiles.insert(npu_profile(&supported, vpu_rules));
        let mut text = "[partition]\nbackends=npu,cpu\ndefault=npu\ncomply=opname\n[OPNAME]\n".to_string();
        for (n, on_npu) in &pins {
            if *n < spec.len() {
                text.push_str(&format!("n{n}={}\n", if *on_npu { "npu" } else { "cpu" }));
            }
        }
        let part = PartFile::parse(&text, Path::new("p.part"), None, None).unwrap();
        let constant = g.constant_nodes(|_| true);
        let sem = semantics();
        let a = match assign(&g, &profiles, &AssignOptions { devices: vec![], default: None, part: Some(&part) }, &constant, &sem) {
            Ok(a) => a,
            // A pin onto a device that cannot run the op: nothing to partition.
            Err(_) => return Ok(()),
        };
        let ug = UnitGraph::from_assignment(&g, &a, &a.glue(&g, &sem));
        let p = partition_default(&ug, Options { allow_disconnected });
        let plan = Plan::build(&g, &a, &ug, &p).unwrap();
        prop_assert_eq!(check_plan(&g, &a, &plan), Ok(()));
        let mut part_of = vec![usize::MAX; g.nodes.len()];
        for (k, part) in plan.parts.iter().enumerate() {
            for n in &part.nodes {
                part_of[n.index()] = k;
            }
        }
        for (d, grp) in &a.groups {
            let k = part_of[grp.anchor().index()];
            for m in &grp.nodes {
                prop_assert_eq!(part_of[m.index()], k, "group {:?} split", grp);
                prop_assert_eq!(a.placement[m.index()].device(), Some(*d));
            }
        }
    }
}
