//! `stem.partition.md`: a summary table and a mermaid flowchart in the seed documents' style,
//! one `subgraph` per part and one `classDef` per device; above [`crate::MERMAID_NODE_LIMIT`]
//! nodes the chart shows parts as boxes joined by their boundary tensors.

use std::fmt::Write;

use crate::text::{
    bytes_label, count, fill, human_bytes, ident, opt_bytes, params, shorten, stroke,
};
use crate::{PartEdge, Report, MERMAID_NODE_LIMIT};

/// Mermaid label text: quotes and angle brackets as its entity codes (`#` first, since the
/// codes use it), inside a quoted label.
fn label(s: &str) -> String {
    let mut o = String::new();
    for c in s.chars() {
        match c {
            '#' => o.push_str("#35;"),
            '"' => o.push_str("#quot;"),
            '<' => o.push_str("#lt;"),
            '>' => o.push_str("#gt;"),
            '|' => o.push_str("#124;"),
            '`' => o.push_str("#96;"),
            _ => o.push(c),
        }
    }
    o
}

pub fn to_markdown(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Partition of {}\n", r.model);
    s.push_str(&summary_line(r));
    s.push_str("\n\n| part | file | device | nodes | parameters | inputs | outputs | output bytes |\n|---:|---|---|---:|---:|---:|---:|---:|\n");
    for (k, p) in r.parts.iter().enumerate() {
        let out: u64 = p.outputs.iter().filter_map(|t| t.bytes).sum();
        let dynamic = p.outputs.iter().any(|t| t.bytes.is_none());
        let _ = writeln!(
            s,
            "| {} | `{}` | {} | {} | {} | {} | {} | {} |",
            k + 1,
            p.file,
            r.devices[p.device],
            p.nodes.len(),
            human_bytes(p.param_bytes),
            p.inputs.len(),
            p.outputs.len(),
            bytes_label(out, dynamic)
        );
    }
    s.push_str("\n```mermaid\nflowchart TD\n");
    if r.nodes.len() > MERMAID_NODE_LIMIT {
        part_chart(r, &mut s);
    } else {
        node_chart(r, &mut s);
    }
    for (d, name) in r.devices.iter().enumerate() {
        let _ = writeln!(
            s,
            "classDef {} fill:{}, stroke: {}, color: #262626",
            ident(name),
            fill(d),
            stroke(d)
        );
    }
    s.push_str("classDef io fill:#FFFFFF, stroke: #9E9E9E, color: #262626\n");
    for (d, name) in r.devices.iter().enumerate() {
        let members: Vec<String> = if r.nodes.len() > MERMAID_NODE_LIMIT {
            r.parts
                .iter()
                .enumerate()
                .filter(|(_, p)| p.device == d)
                .map(|(k, _)| format!("p{}", k + 1))
                .collect()
        } else {
            r.nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| r.parts[n.part].device == d)
                .map(|(i, _)| format!("n{i}"))
                .collect()
        };
        if !members.is_empty() {
            let _ = writeln!(s, "class {} {}", members.join(","), ident(name));
        }
    }
    let io: Vec<String> = if r.nodes.len() > MERMAID_NODE_LIMIT {
        vec!["in0".into(), "out0".into()]
    } else {
        (0..r.inputs.len())
            .map(|i| format!("in{i}"))
            .chain((0..r.outputs.len()).map(|o| format!("out{o}")))
            .collect()
    };
    if !io.is_empty() {
        let _ = writeln!(s, "class {} io", io.join(","));
    }
    s.push_str("```\n");
    if let Some(groups) = &r.fused {
        s.push_str("\n## Fused groups\n\n| group | part | nodes |\n|---|---:|---|\n");
        for g in groups {
            let part = g
                .nodes
                .first()
                .map_or(String::new(), |&n| (r.nodes[n].part + 1).to_string());
            let names: Vec<&str> = g.nodes.iter().map(|&n| r.nodes[n].label.as_str()).collect();
            let _ = writeln!(s, "| {} | {part} | {} |", g.name, names.join(", "));
        }
    }
    s
}

pub(crate) fn summary_line(r: &Report) -> String {
    let boundary = r.boundary();
    let total: u64 = boundary.iter().filter_map(|t| t.bytes).sum();
    let dynamic = boundary.iter().any(|t| t.bytes.is_none());
    let per_device: Vec<String> = r
        .parts_per_device()
        .iter()
        .map(|(d, n)| format!("{n} on {d}"))
        .collect();
    let constants: usize = r.parts.iter().map(|p| p.constant_nodes).sum();
    format!(
        "{} parts ({}), {} nodes placed, {constants} constant-node copies; {} boundary tensors, {} per inference.",
        r.parts.len(),
        per_device.join(", "),
        r.nodes.len(),
        boundary.len(),
        bytes_label(total, dynamic)
    )
}

fn node_chart(r: &Report, s: &mut String) {
    for (i, t) in r.inputs.iter().enumerate() {
        let _ = writeln!(
            s,
            "    in{i}([\"{}<br/>{}\"])",
            label(&shorten(&t.name, 32)),
            opt_bytes(t.bytes)
        );
    }
    for (k, p) in r.parts.iter().enumerate() {
        let _ = writeln!(
            s,
            "    subgraph p{}[\"{} · {} · {}\"]",
            k + 1,
            k + 1,
            label(&r.devices[p.device]),
            count(p.nodes.len(), "node")
        );
        s.push_str("    direction TB\n");
        for &n in &p.nodes {
            let node = &r.nodes[n];
            let _ = writeln!(
                s,
                "    n{n}(\"{}<br/>{}\")",
                label(&node.op),
                label(&shorten(&node.label, 32))
            );
        }
        for &(a, b, _) in r
            .edges
            .iter()
            .filter(|(a, b, _)| r.nodes[*a].part == k && r.nodes[*b].part == k)
        {
            let _ = writeln!(s, "    n{a} --> n{b}");
        }
        s.push_str("    end\n");
    }
    for &(a, b, bytes) in r
        .edges
        .iter()
        .filter(|(a, b, _)| r.nodes[*a].part != r.nodes[*b].part)
    {
        let _ = writeln!(s, "    n{a} -->|\"{}\"| n{b}", opt_bytes(bytes));
    }
    for &(i, n) in &r.input_uses {
        let _ = writeln!(s, "    in{i} --> n{n}");
    }
    for (o, t) in r.outputs.iter().enumerate() {
        let _ = writeln!(
            s,
            "    out{o}([\"{}<br/>{}\"])",
            label(&shorten(&t.name, 32)),
            opt_bytes(t.bytes)
        );
    }
    for &(n, o) in &r.output_from {
        let _ = writeln!(s, "    n{n} --> out{o}");
    }
}

pub(crate) fn edge_text(e: &PartEdge) -> String {
    let (total, dynamic) = e.bytes();
    match e.tensors.as_slice() {
        [t] => format!("{} · {}", shorten(&t.name, 24), bytes_label(total, dynamic)),
        ts => format!("{} tensors · {}", ts.len(), bytes_label(total, dynamic)),
    }
}

fn part_chart(r: &Report, s: &mut String) {
    s.push_str("    in0([\"model inputs\"])\n");
    for (k, p) in r.parts.iter().enumerate() {
        let _ = writeln!(
            s,
            "    p{}[\"{} · {}<br/>{} · {}\"]",
            k + 1,
            k + 1,
            label(&r.devices[p.device]),
            count(p.nodes.len(), "node"),
            params(p.param_bytes)
        );
    }
    s.push_str("    out0([\"model outputs\"])\n");
    for e in &r.part_edges {
        let from = e.from.map_or("in0".to_string(), |k| format!("p{}", k + 1));
        let to = e.to.map_or("out0".to_string(), |k| format!("p{}", k + 1));
        let _ = writeln!(s, "    {from} -->|\"{}\"| {to}", label(&edge_text(e)));
    }
}
