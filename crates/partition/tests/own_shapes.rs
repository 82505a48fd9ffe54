//! A decoder's stages read shapes from tensors they hold: a copied `Shape` of layer 0's cache
//! reads the stage's own cache instead, so nothing of another layer crosses a hop.

use cleave_assign::{Assignment, Placement, Reason};
use cleave_ir::{Dim, ElemType, Graph, GraphBuilder, NodeSpec, TensorType, Weight, WeightData};
use cleave_partition::{check_plan, Partition, Plan, PlanError, UnitGraph};

fn ty(elem: ElemType, dims: &[&str]) -> TensorType {
    let dims = dims
        .iter()
        .map(|d| match d.parse::<i64>() {
            Ok(n) => Dim::Fixed(n),
            Err(_) => Dim::Param((*d).into()),
        })
        .collect();
    TensorType::new(elem, dims)
}

/// Two layers: the embedding of `input_ids`, then each layer appends to its cache and adds
/// a mask made from the past length, which `Shape(past0)` reads. `past1`'s heads are `heads1`.
fn decoder(heads1: &str) -> Graph {
    let mut b = GraphBuilder::new("g");
    b.input("input_ids", ty(ElemType::I64, &["b", "s"]));
    b.input("past0", ty(ElemType::F32, &["b", "2", "p", "4"]));
    b.input("past1", ty(ElemType::F32, &["b", heads1, "p", "4"]));
    b.weight(
        "table",
        Weight {
            elem: ElemType::F32,
            dims: vec![16, 4],
            data: WeightData::Bytes(vec![0u8; 16 * 4 * 4].into()),
        },
    );
    b.node(NodeSpec::new(
        "embed",
        "Gather",
        &["table", "input_ids"],
        &["e"],
    ));
    b.node(NodeSpec::new("len", "Shape", &["past0"], &["shape"]));
    b.node(NodeSpec::new("mask", "Cast", &["shape"], &["m"]));
    b.node(NodeSpec::new(
        "cat0",
        "Concat",
        &["past0", "e"],
        &["present0"],
    ));
    b.node(NodeSpec::new("h0", "Add", &["e", "m"], &["x0"]));
    b.node(NodeSpec::new(
        "cat1",
        "Concat",
        &["past1", "x0"],
        &["present1"],
    ));
    b.node(NodeSpec::new("h1", "Add", &["x0", "m"], &["y"]));
    for o in ["y", "present0", "present1"] {
        b.output(o);
    }
    b.finish(false).unwrap()
}

/// Which nodes a decoder's stages copy, as the ONNX front-end's semantics say.
fn copies(g: &Graph) -> Vec<bool> {
    let caches: Vec<_> = ["past0", "past1"]
        .iter()
        .map(|n| g.find(n).unwrap())
        .collect();
    g.recomputable_nodes(
        &caches,
        g.find("input_ids"),
        |_| true,
        |n| n.op_type.as_str() == "Shape",
    )
}

/// Layer 0 (with the embedding) on device 0, layer 1 on device 1, the copies where read.
fn stages(g: &Graph) -> (Assignment, Plan) {
    let copy = copies(g);
    let placement = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| match (copy[i], n.name.as_str()) {
            (true, _) => Placement::Constant,
            (false, "cat1" | "h1") => Placement::Device(1, Reason::Default),
            _ => Placement::Device(0, Reason::Default),
        })
        .collect();
    let a = Assignment {
        devices: vec!["s1".into(), "s2".into()],
        placement,
        groups: Vec::new(),
        warnings: Vec::new(),
    };
    let ug = UnitGraph::from_assignment(g, &a, &[]);
    // One part per device: each stage whole.
    let part_of = ug
        .unit_nodes()
        .map(|ns| match a.placement[ns[0].index()] {
            Placement::Device(d, _) => u32::from(d),
            Placement::Constant => unreachable!("copies form no unit"),
        })
        .collect();
    let p = Partition { part_of, count: 2 };
    let plan = Plan::build(g, &a, &ug, &p).unwrap();
    (a, plan)
}

#[test]
fn the_mask_is_copied_and_the_embedding_is_a_layers_work() {
    let g = decoder("2");
    let copy = copies(&g);
    let copied: Vec<&str> = g
        .nodes
        .iter()
        .zip(&copy)
        .filter(|(_, &c)| c)
        .map(|(n, _)| n.name.as_str())
        .collect();
    // The embedding reads the token ids' values: layer work. The past length reads a cache's
    // shape alone, and another cache is declared alike: every stage can read its own.
    assert_eq!(copied, ["len", "mask"]);
    // A cache no other is declared like is not a copy's to read.
    let g = decoder("3");
    assert!(copies(&g).iter().all(|&c| !c));
}

#[test]
fn a_later_stage_reads_its_own_caches_shape() {
    let g = decoder("2");
    let (a, mut plan) = stages(&g);
    let id = |n: &str| g.find(n).unwrap();
    assert_eq!(plan.parts.len(), 2);
    // Before: stage 2 takes layer 0's cache for its shape alone.
    assert!(plan.parts[1].inputs.contains(&id("past0")));
    let caches = [id("past0"), id("past1")];
    plan.read_own_shapes(&g, &caches, |n| n.op_type.as_str() == "Shape")
        .unwrap();
    assert_eq!(
        plan.parts[1].reads_instead,
        vec![(id("past0"), id("past1"))]
    );
    assert!(!plan.parts[1].inputs.contains(&id("past0")));
    assert!(plan.parts[0].reads_instead.is_empty());
    assert_eq!(check_plan(&g, &a, &plan), Ok(()));
    // Without the substitute the plan misses an input: the validator reads reads_instead.
    let mut broken = plan.clone();
    broken.parts[1].reads_instead.clear();
    assert!(check_plan(&g, &a, &broken).is_err());
}

#[test]
fn a_stage_without_a_cache_of_that_shape_is_refused() {
    // The plan of a model whose caches are declared alike, held against one whose stage 2
    // cache has another shape: no substitute, and the error names the stage and the cache.
    let g = decoder("2");
    let (_, mut plan) = stages(&g);
    let other = decoder("3");
    let id = |n: &str| other.find(n).unwrap();
    let e = plan
        .read_own_shapes(&other, &[id("past0"), id("past1")], |n| {
            n.op_type.as_str() == "Shape"
        })
        .unwrap_err();
    assert_eq!(
        e,
        PlanError::NoOwnCache {
            part: 2,
            tensor: "past0".into()
        }
    );
}
