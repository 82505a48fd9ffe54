//! `stem.dot`: the partition for Graphviz. Nodes inside one `cluster_pK` per part, filled with
//! their device's colour; above [`crate::NODE_VIEW_LIMIT`] nodes, parts as boxes.

use std::fmt::Write;

use crate::mermaid::edge_text;
use crate::text::{count, fill, opt_bytes, params, shorten, stroke};
use crate::{Report, NODE_VIEW_LIMIT};

/// A DOT double-quoted string.
fn q(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            _ => o.push(c),
        }
    }
    o.push('"');
    o
}

pub fn to_dot(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "digraph {} {{", q(&r.model));
    s.push_str("  rankdir=TB;\n  fontname=\"Helvetica\";\n  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=9, color=\"#606060\"];\n");
    for (i, t) in r.inputs.iter().enumerate() {
        let _ = writeln!(
            s,
            "  in{i} [shape=oval, style=filled, fillcolor=white, label={}];",
            q(&format!("{}\n{}", t.name, opt_bytes(t.bytes)))
        );
    }
    for (o, t) in r.outputs.iter().enumerate() {
        let _ = writeln!(
            s,
            "  out{o} [shape=oval, style=filled, fillcolor=white, label={}];",
            q(&format!("{}\n{}", t.name, opt_bytes(t.bytes)))
        );
    }
    if r.nodes.len() > NODE_VIEW_LIMIT {
        part_graph(r, &mut s);
    } else {
        node_graph(r, &mut s);
    }
    s.push_str("}\n");
    s
}

fn node_graph(r: &Report, s: &mut String) {
    for (k, p) in r.parts.iter().enumerate() {
        let d = p.device;
        let _ = writeln!(s, "  subgraph cluster_p{} {{", k + 1);
        let _ = writeln!(
            s,
            "    label={};",
            q(&format!(
                "{} · {} · {}",
                k + 1,
                r.devices[d],
                count(p.nodes.len(), "node")
            ))
        );
        let _ = writeln!(
            s,
            "    style=\"rounded\"; color={}; penwidth=2;",
            q(stroke(d))
        );
        for &n in &p.nodes {
            let node = &r.nodes[n];
            let _ = writeln!(
                s,
                "    n{n} [label={}, tooltip={}, fillcolor={}, color={}];",
                q(&format!("{}\n{}", node.op, shorten(&node.label, 28))),
                q(&node.label),
                q(fill(d)),
                q(stroke(d))
            );
        }
        s.push_str("  }\n");
    }
    for &(a, b, bytes) in &r.edges {
        if r.nodes[a].part == r.nodes[b].part {
            let _ = writeln!(s, "  n{a} -> n{b};");
        } else {
            let _ = writeln!(
                s,
                "  n{a} -> n{b} [label={}, penwidth=2, color=\"#303030\"];",
                q(&opt_bytes(bytes))
            );
        }
    }
    for &(i, n) in &r.input_uses {
        let _ = writeln!(s, "  in{i} -> n{n};");
    }
    for &(n, o) in &r.output_from {
        let _ = writeln!(s, "  n{n} -> out{o};");
    }
}

fn part_graph(r: &Report, s: &mut String) {
    for (k, p) in r.parts.iter().enumerate() {
        let d = p.device;
        let _ = writeln!(
            s,
            "  subgraph cluster_p{k1} {{ style=invis; p{k1} [label={}, fillcolor={}, color={}]; }}",
            q(&format!(
                "{} · {}\n{} · {}",
                k + 1,
                r.devices[d],
                count(p.nodes.len(), "node"),
                params(p.param_bytes)
            )),
            q(fill(d)),
            q(stroke(d)),
            k1 = k + 1
        );
    }
    for e in &r.part_edges {
        let text = q(&edge_text(e));
        match (e.from, e.to) {
            (Some(a), Some(b)) => {
                let _ = writeln!(s, "  p{} -> p{} [label={text}];", a + 1, b + 1);
            }
            (None, Some(b)) => {
                for t in &e.tensors {
                    if let Some(i) = r.inputs.iter().position(|x| x.name == t.name) {
                        let _ = writeln!(s, "  in{i} -> p{};", b + 1);
                    }
                }
            }
            (Some(a), None) => {
                for t in &e.tensors {
                    if let Some(o) = r.outputs.iter().position(|x| x.name == t.name) {
                        let _ = writeln!(s, "  p{} -> out{o};", a + 1);
                    }
                }
            }
            (None, None) => {}
        }
    }
}
