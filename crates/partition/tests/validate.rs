//! The validator must reject every kind of broken plan.

use cleave_assign::{Assignment, Placement, Reason};
use cleave_ir::{ElemType, Graph, GraphBuilder, NodeId, NodeSpec, TensorType, Weight, WeightData};
use cleave_partition::{check_plan, partition_default, Options, Plan, UnitGraph, ValidationError};

/// x → a(A) → b(B) → c(A) → y, with a constant `k` computed by `fill` and read by `c`.
fn graph() -> (Graph, Assignment) {
    let mut b = GraphBuilder::new("g");
    b.input("x", TensorType::fixed(ElemType::F32, &[2]));
    b.weight(
        "shape",
        Weight {
            elem: ElemType::I64,
            dims: vec![1],
            data: WeightData::Bytes(2i64.to_le_bytes().to_vec().into()),
        },
    );
    b.node(NodeSpec::new("a", "Relu", &["x"], &["ta"]));
    b.node(NodeSpec::new("b", "Neg", &["ta"], &["tb"]));
    b.node(NodeSpec::new("fill", "ConstantOfShape", &["shape"], &["k"]));
    b.node(NodeSpec::new("c", "Add", &["tb", "k"], &["y"]));
    b.output("y");
    let g = b.finish(false).unwrap();
    let dev = |d| Placement::Device(d, Reason::OpName);
    let a = Assignment {
        devices: vec!["A".into(), "B".into()],
        placement: vec![dev(0), dev(1), Placement::Constant, dev(0)],
        groups: Vec::new(),
        warnings: Vec::new(),
    };
    (g, a)
}

fn plan(g: &Graph, a: &Assignment) -> Plan {
    let ug = UnitGraph::from_assignment(g, a, &[]);
    Plan::build(g, a, &ug, &partition_default(&ug, Options::default())).unwrap()
}

#[test]
fn a_sound_plan_passes_and_copies_the_constant_where_read() {
    let (g, a) = graph();
    let p = plan(&g, &a);
    assert_eq!(p.parts.len(), 3);
    assert_eq!(check_plan(&g, &a, &p), Ok(()));
    assert_eq!(p.parts[2].constant_nodes, vec![NodeId(2)]);
    assert!(p.parts[0].constant_nodes.is_empty());
}

#[test]
fn every_broken_plan_is_caught() {
    let (g, a) = graph();
    let good = plan(&g, &a);

    let mut p = good.clone();
    p.parts.swap(0, 1);
    assert!(matches!(
        check_plan(&g, &a, &p),
        Err(ValidationError::InputNotReady { .. })
    ));

    let mut p = good.clone();
    p.parts[2].nodes.push(NodeId(0));
    assert!(matches!(
        check_plan(&g, &a, &p),
        Err(ValidationError::PlacedTwice { .. })
    ));

    let mut p = good.clone();
    p.parts[1].nodes.clear();
    assert!(matches!(
        check_plan(&g, &a, &p),
        Err(ValidationError::NotPlaced { .. })
    ));

    let mut p = good.clone();
    p.parts[1].device = 0;
    assert!(matches!(
        check_plan(&g, &a, &p),
        Err(ValidationError::WrongDevice { .. })
    ));

    let mut p = good.clone();
    p.parts[0].constant_nodes.push(NodeId(2));
    assert!(matches!(
        check_plan(&g, &a, &p),
        Err(ValidationError::ConstantUnused { .. })
    ));

    let mut p = good.clone();
    p.parts[2].constant_nodes.clear();
    assert!(matches!(
        check_plan(&g, &a, &p),
        Err(ValidationError::MissingInput { .. })
    ));

    let mut p = good.clone();
    p.parts[2].outputs.clear();
    assert!(matches!(
        check_plan(&g, &a, &p),
        Err(ValidationError::OutputNotProduced { .. })
    ));

    let mut p = good;
    p.parts[2].nodes.push(NodeId(2));
    assert!(matches!(
        check_plan(&g, &a, &p),
        Err(ValidationError::ConstantPlaced { .. })
    ));
}

/// A pinned constant node (a weight unpacker an [OPNAME] rule places) read only through a
/// constant copied into its own part hands nothing on: the part's outputs are what other parts
/// read, not every value a copied constant reads.
#[test]
fn a_placed_constant_read_only_by_a_copy_in_its_own_part_is_no_output() {
    let mut b = GraphBuilder::new("g");
    b.input("x", TensorType::fixed(ElemType::F32, &[2]));
    b.weight(
        "w",
        Weight {
            elem: ElemType::F32,
            dims: vec![2],
            data: WeightData::Bytes(vec![0u8; 8].into()),
        },
    );
    b.node(NodeSpec::new("unpack", "Densify", &["w"], &["dense"]));
    b.node(NodeSpec::new("deq", "Dequantize", &["dense"], &["k"]));
    b.node(NodeSpec::new("c", "Add", &["x", "k"], &["y"]));
    b.output("y");
    let g = b.finish(false).unwrap();
    let dev = |d| Placement::Device(d, Reason::OpName);
    for (unpack_on, parts) in [(0u16, 1usize), (1, 2)] {
        let a = Assignment {
            devices: vec!["A".into(), "B".into()],
            placement: vec![dev(unpack_on), Placement::Constant, dev(0)],
            groups: Vec::new(),
            warnings: Vec::new(),
        };
        let p = plan(&g, &a);
        assert_eq!(p.parts.len(), parts);
        assert_eq!(check_plan(&g, &a, &p), Ok(()));
        let dense = g.find("dense").unwrap();
        let reader = p
            .parts
            .iter()
            .find(|q| q.nodes.contains(&NodeId(2)))
            .unwrap();
        assert_eq!(reader.outputs, vec![g.find("y").unwrap()]);
        assert_eq!(reader.constant_nodes, vec![NodeId(1)]);
        if parts == 2 {
            // On another device the unpacked weight crosses between the parts.
            let maker = p
                .parts
                .iter()
                .find(|q| q.nodes.contains(&NodeId(0)))
                .unwrap();
            assert_eq!(maker.outputs, vec![dense]);
            assert!(reader.inputs.contains(&dense));
        }
    }
}
