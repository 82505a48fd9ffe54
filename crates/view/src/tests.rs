//! The views of a small hand-built partition: x → a(Relu, npu) → b(Neg, cpu) → c(Add, npu) → y,
//! `c` also reading `k`, computed by a constant node from the weight `shape`.

use cleave_ir::{ElemType, Graph, GraphBuilder, NodeId, NodeSpec, TensorType, Weight, WeightData};
use cleave_partition::{Part, Plan};
use cleave_workdir::{ConnFile, ConnModel};

use crate::*;

fn graph() -> Graph {
    let t = TensorType::fixed(ElemType::F32, &[1, 4]);
    let mut b = GraphBuilder::new("g");
    b.input("x", t.clone());
    b.weight(
        "shape",
        Weight {
            elem: ElemType::I64,
            dims: vec![2],
            data: WeightData::Bytes(vec![1u8, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0].into()),
        },
    );
    b.node(NodeSpec::new("fill", "ConstantOfShape", &["shape"], &["k"]));
    b.node(NodeSpec::new("a\"<1>", "Relu", &["x"], &["ta"]));
    b.node(NodeSpec::new("b", "Neg", &["ta"], &["tb"]));
    b.node(NodeSpec::new("c", "Add", &["tb", "k"], &["y"]));
    for v in ["k", "ta", "tb", "y"] {
        b.value_type(v, t.clone());
    }
    b.output("y");
    b.finish(false).unwrap()
}

fn report() -> Report {
    let g = graph();
    let id = |name: &str| g.find(name).unwrap();
    let part =
        |device, nodes: Vec<u32>, constant_nodes: Vec<u32>, inputs: &[&str], outputs: &[&str]| {
            Part {
                device,
                nodes: nodes.into_iter().map(NodeId).collect(),
                constant_nodes: constant_nodes.into_iter().map(NodeId).collect(),
                weights: Vec::new(),
                inputs: inputs.iter().map(|n| id(n)).collect(),
                outputs: outputs.iter().map(|n| id(n)).collect(),
                reads_instead: Vec::new(),
            }
        };
    let plan = Plan {
        devices: vec!["npu".into(), "cpu".into()],
        parts: vec![
            part(0, vec![1], vec![], &["x"], &["ta"]),
            part(1, vec![2], vec![], &["ta"], &["tb"]),
            part(0, vec![3], vec![0], &["tb"], &["y"]),
        ],
    };
    let m = |f: &str| ConnModel {
        file: f.into(),
        ..Default::default()
    };
    let conn = ConnFile {
        source: m("g.onnx"),
        parts: vec![
            m("g.00001_npu.onnx"),
            m("g.00002_cpu.onnx"),
            m("g.00003_npu.onnx"),
        ],
    };
    Report::build(&g, &plan, &conn, "g.onnx")
}

#[test]
fn the_report_holds_parts_edges_and_bytes() {
    let r = report();
    assert_eq!(
        r.nodes.iter().map(|n| n.op.as_str()).collect::<Vec<_>>(),
        ["Relu", "Neg", "Add"],
        "the constant node is not a placed node"
    );
    assert_eq!(r.edges, vec![(0, 1, Some(16)), (1, 2, Some(16))]);
    assert_eq!(
        r.parts[2].param_bytes, 16,
        "k, computed by a constant node, is a parameter of part 3"
    );
    assert_eq!(r.parts[0].param_bytes, 0);
    assert_eq!(r.parts_per_device(), vec![("npu", 2), ("cpu", 1)]);
    let ends: Vec<_> = r
        .part_edges
        .iter()
        .map(|e| (e.from, e.to, e.bytes()))
        .collect();
    assert_eq!(
        ends,
        vec![
            (None, Some(0), (16, false)),
            (Some(0), Some(1), (16, false)),
            (Some(1), Some(2), (16, false)),
            (Some(2), None, (16, false))
        ]
    );
    assert_eq!(r.boundary().len(), 2);
    assert_eq!(r.input_uses, vec![(0, 0)]);
    assert_eq!(r.output_from, vec![(2, 0)]);
}

#[test]
fn mermaid_has_a_subgraph_per_part_and_a_class_per_device() {
    let md = to_markdown(&report());
    assert_eq!(md.matches("    subgraph p").count(), 3, "{md}");
    assert!(md.contains("classDef dev_npu fill:#B9D6E5"), "{md}");
    assert!(
        md.contains("class n0,n2 dev_npu\nclass n1 dev_cpu\n"),
        "{md}"
    );
    assert!(
        md.contains("n0(\"Relu<br/>a#quot;#lt;1#gt;\")"),
        "names are escaped: {md}"
    );
    assert!(
        md.contains("n0 -->|\"16 B\"| n1"),
        "edges between parts carry bytes: {md}"
    );
    assert!(
        md.contains("| 3 | `g.00003_npu.onnx` | npu | 1 | 16 B | 1 | 1 | 16 B |"),
        "{md}"
    );
    assert!(!md.contains("Fused groups"));
}

#[test]
fn large_graphs_get_a_part_level_chart() {
    let mut r = report();
    let extra = MERMAID_NODE_LIMIT;
    for _ in 0..extra {
        r.nodes.push(NodeView {
            source: None,
            label: "x".into(),
            op: "Relu".into(),
            part: 1,
        });
        let n = r.nodes.len() - 1;
        r.parts[1].nodes.push(n);
    }
    let md = to_markdown(&r);
    assert!(!md.contains("subgraph"), "{md}");
    assert!(
        md.contains("p2[\"2 · cpu<br/>301 nodes · no parameters\"]"),
        "{md}"
    );
    assert!(md.contains("p1 -->|\"ta · 16 B\"| p2"), "{md}");
    assert!(md.contains("class p1,p3 dev_npu"), "{md}");
}

#[test]
fn dot_has_a_cluster_per_part() {
    let dot = to_dot(&report());
    assert_eq!(dot.matches("subgraph cluster_p").count(), 3, "{dot}");
    assert!(dot.contains("n0 [label=\"Relu\\na\\\"<1>\""), "{dot}");
    assert!(dot.contains("n1 -> n2 [label=\"16 B\""), "{dot}");
}

#[test]
fn html_is_self_contained_and_has_a_box_per_part() {
    let html = to_html(&report());
    assert_eq!(html.matches("<g class=\"part-box\"").count(), 3);
    assert_eq!(html.matches("<g class=\"cluster\"").count(), 3);
    assert_eq!(html.matches("<g class=\"node\"").count(), 3);
    assert_eq!(html.matches("<article class=\"part\"").count(), 3);
    assert!(html.contains("a&quot;&lt;1&gt;"), "names are escaped");
    // Nothing fetched: the only URL is the SVG namespace.
    for (i, _) in html.match_indices("http") {
        assert!(
            html[i..].starts_with("http://www.w3.org/2000/svg"),
            "{}",
            &html[i..i + 60]
        );
    }
    for needle in [" src=", "<link", "@import", "<iframe"] {
        assert!(!html.contains(needle), "{needle}");
    }
    assert!(!html.contains("id=\"fused\""));
}

#[test]
fn fused_groups_get_their_section_when_present() {
    let mut r = report();
    r.fused = Some(vec![FusedGroup {
        name: "relu_neg".into(),
        nodes: vec![0],
    }]);
    assert!(to_html(&r).contains("<section id=\"fused\">"));
    assert!(to_markdown(&r).contains(
        "## Fused groups\n\n| group | part | nodes |\n|---|---:|---|\n| relu_neg | 1 | a\"<1> |"
    ));
}
