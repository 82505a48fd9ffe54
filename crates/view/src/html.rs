//! `stem.report.html`: one self-contained page (inline CSS, SVG and script; nothing loaded from
//! anywhere) with the part graph, a table per part, the fused groups when a fusion stage gave
//! them, and the node graph with parts as clusters up to [`crate::NODE_VIEW_LIMIT`] nodes.

use std::collections::HashMap;
use std::fmt::Write;

use crate::flow::{lay_out, FlowGraph, FlowSpacing, LABEL_LINE};
use crate::layout::{layered, wrap, Layout, Spacing};
use crate::mermaid::summary_line;
use crate::text::{bytes_label, count, fill, human_bytes, opt_bytes, params, shorten, stroke, xml};
use crate::{Report, NODE_VIEW_LIMIT, NODE_VIEW_OPEN};

const STYLE: &str = r#"
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #262626; margin: 0; background: #fafafa; }
main { max-width: 1280px; margin: 0 auto; padding: 16px 28px 48px; }
h1 { font-size: 22px; margin: 8px 0 4px; } h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 0 0 8px; display: flex; align-items: center; gap: 8px; }
.summary { margin: 4px 0 10px; color: #444; }
.legend { display: flex; gap: 18px; flex-wrap: wrap; padding: 0; margin: 0; list-style: none; }
.swatch { display: inline-block; width: 14px; height: 14px; border-radius: 3px; border: 1.5px solid; vertical-align: -2px; margin-right: 6px; }
.graph { overflow: auto; background: #fff; border: 1px solid #e2e2e2; border-radius: 6px; max-height: 80vh; }
.graph svg { display: block; margin: 0 auto; }
.parts { display: grid; grid-template-columns: repeat(auto-fill, minmax(380px, 1fr)); gap: 14px; }
article.part { background: #fff; border: 1px solid #e2e2e2; border-left-width: 6px; border-radius: 6px; padding: 12px 14px; }
article.part.hl { box-shadow: 0 0 0 2px #262626; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 0 0 10px; }
dt { color: #666; } dd { margin: 0; font-variant-numeric: tabular-nums; }
table { border-collapse: collapse; width: 100%; margin: 4px 0 10px; font-size: 13px; }
th, td { text-align: left; padding: 2px 6px; border-bottom: 1px solid #eee; vertical-align: top; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.t { word-break: break-all; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; }
.ops { display: flex; flex-wrap: wrap; gap: 4px 6px; margin: 0 0 10px; padding: 0; list-style: none; }
.ops li { background: #f1f1f1; border-radius: 10px; padding: 0 8px; font-size: 12px; }
code { font-size: 12px; word-break: break-all; }
svg text { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; }
svg text.edge-label { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, "Liberation Mono", monospace; }
.part-box rect, .cluster > rect { transition: stroke-width .1s; }
.part-box.hl rect, .cluster.hl > rect { stroke-width: 4; }
.part-box a { cursor: pointer; }
.node.hit rect { stroke: #D0021B; stroke-width: 3; }
.zoom { display: flex; gap: 4px; justify-content: flex-end; margin: 4px 0; }
.zoom button { font: inherit; font-size: 12px; min-width: 30px; padding: 1px 6px; border: 1px solid #ccc; border-radius: 4px; background: #fff; cursor: pointer; }
.graph { cursor: grab; } .graph.dragging { cursor: grabbing; user-select: none; }
details.nodes > summary { cursor: pointer; color: #444; margin: 6px 0; }
.toolbar { margin: 6px 0; display: flex; gap: 10px; align-items: center; }
.note { color: #666; }
p.file { margin: -4px 0 8px; }
"#;

// Hovering a part's box, cluster or table marks the others; the search box marks the nodes
// whose name or op contains the text.
const SCRIPT: &str = r#"
(function () {
  var byPart = {};
  document.querySelectorAll('[data-part]').forEach(function (e) {
    (byPart[e.dataset.part] = byPart[e.dataset.part] || []).push(e);
  });
  Object.keys(byPart).forEach(function (k) {
    byPart[k].forEach(function (e) {
      e.addEventListener('mouseenter', function () { byPart[k].forEach(function (x) { x.classList.add('hl'); }); });
      e.addEventListener('mouseleave', function () { byPart[k].forEach(function (x) { x.classList.remove('hl'); }); });
    });
  });
  // Zoom (buttons, or the wheel with Ctrl) and pan (drag) for every graph; a graph wider than
  // its frame starts centred on its top.
  document.querySelectorAll('.graph').forEach(function (frame) {
    var svg = frame.querySelector('svg');
    if (!svg) return;
    var w0 = parseFloat(svg.getAttribute('width')), h0 = parseFloat(svg.getAttribute('height')), z = 1;
    var zoom = function (to) {
      var cx = (frame.scrollLeft + frame.clientWidth / 2) / z, cy = (frame.scrollTop + frame.clientHeight / 2) / z;
      z = Math.min(4, Math.max(0.05, to));
      svg.setAttribute('width', (w0 * z).toFixed(0));
      svg.setAttribute('height', (h0 * z).toFixed(0));
      frame.scrollLeft = cx * z - frame.clientWidth / 2;
      frame.scrollTop = cy * z - frame.clientHeight / 2;
    };
    var bar = document.createElement('div');
    bar.className = 'zoom';
    [['\u2212', function () { zoom(z / 1.25); }], ['+', function () { zoom(z * 1.25); }], ['fit', function () { zoom(Math.min(1, frame.clientWidth / w0, frame.clientHeight / h0)); }], ['1:1', function () { zoom(1); }]].forEach(function (b) {
      var e = document.createElement('button');
      e.type = 'button';
      e.textContent = b[0];
      e.addEventListener('click', b[1]);
      bar.appendChild(e);
    });
    frame.parentNode.insertBefore(bar, frame);
    frame.addEventListener('wheel', function (e) {
      if (!e.ctrlKey) return;
      e.preventDefault();
      zoom(e.deltaY < 0 ? z * 1.1 : z / 1.1);
    }, { passive: false });
    var drag = null;
    frame.addEventListener('mousedown', function (e) {
      if (e.button !== 0 || e.target.closest('a')) return;
      drag = { x: e.clientX, y: e.clientY, l: frame.scrollLeft, t: frame.scrollTop };
      frame.classList.add('dragging');
    });
    window.addEventListener('mousemove', function (e) {
      if (!drag) return;
      frame.scrollLeft = drag.l - (e.clientX - drag.x);
      frame.scrollTop = drag.t - (e.clientY - drag.y);
    });
    window.addEventListener('mouseup', function () { drag = null; frame.classList.remove('dragging'); });
    if (frame.scrollWidth > frame.clientWidth) frame.scrollLeft = (frame.scrollWidth - frame.clientWidth) / 2;
  });
  var find = document.getElementById('find');
  if (!find) return;
  var nodes = Array.prototype.slice.call(document.querySelectorAll('#node-graph .node'));
  var count = document.getElementById('find-count');
  find.addEventListener('input', function () {
    var q = find.value.trim().toLowerCase();
    var fold = find.closest('details');
    if (fold && q !== '') fold.open = true;
    var hits = 0, first = null;
    nodes.forEach(function (g) {
      var hit = q !== '' && g.textContent.toLowerCase().indexOf(q) >= 0;
      g.classList.toggle('hit', hit);
      if (hit) { hits++; first = first || g; }
    });
    count.textContent = q === '' ? '' : hits + ' matching nodes';
    if (first) first.scrollIntoView({ block: 'center', inline: 'center' });
  });
})();
"#;

pub fn to_html(r: &Report) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{} · cleave partition</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>\n",
        xml(&r.model)
    );
    let _ = writeln!(
        s,
        "<h1>Partition of {}</h1>\n<p class=\"summary\">{}</p>",
        xml(&r.model),
        xml(&summary_line(r))
    );
    s.push_str("<ul class=\"legend\">");
    for (d, (name, n)) in r.parts_per_device().into_iter().enumerate() {
        let _ = write!(s, "<li><span class=\"swatch\" style=\"background:{};border-color:{}\"></span>{} · {n} part{}</li>", fill(d), stroke(d), xml(name), if n == 1 { "" } else { "s" });
    }
    s.push_str("</ul>\n");

    if let Some(l) = &r.latency {
        s.push_str("<section id=\"latency\">\n<h2>Predicted latency</h2>\n<pre>");
        for line in &l.lines {
            s.push_str(&xml(line));
            s.push('\n');
        }
        s.push_str("</pre>\n</section>\n");
    }
    s.push_str("<section id=\"part-graph\">\n<h2>Part graph</h2>\n<p class=\"note\">Each box is a part, coloured by device; edges are the tensors handed between parts, with their bytes per inference. Click a box for its table.</p>\n<div class=\"graph\">\n");
    part_svg(r, &mut s);
    s.push_str("</div>\n</section>\n");

    s.push_str("<section id=\"parts\">\n<h2>Parts</h2>\n<div class=\"parts\">\n");
    let ends = Ends::new(r);
    for k in 0..r.parts.len() {
        part_table(r, &ends, k, &mut s);
    }
    s.push_str("</div>\n</section>\n");

    if let Some(groups) = &r.fused {
        s.push_str("<section id=\"fused\">\n<h2>Fused groups</h2>\n<table><tr><th>group</th><th class=\"n\">part</th><th>nodes</th></tr>\n");
        for g in groups {
            let part = g
                .nodes
                .first()
                .map_or(String::new(), |&n| (r.nodes[n].part + 1).to_string());
            let names: Vec<String> = g.nodes.iter().map(|&n| xml(&r.nodes[n].label)).collect();
            let _ = writeln!(
                s,
                "<tr><td>{}</td><td class=\"n\">{part}</td><td class=\"t\">{}</td></tr>",
                xml(&g.name),
                names.join(", ")
            );
        }
        s.push_str("</table>\n</section>\n");
    }

    s.push_str("<section id=\"node-graph\">\n<h2>Node graph</h2>\n");
    if r.nodes.len() <= NODE_VIEW_LIMIT {
        // A big graph starts folded: the part graph above is the overview.
        let open = if r.nodes.len() <= NODE_VIEW_OPEN {
            " open"
        } else {
            ""
        };
        let _ = writeln!(s, "<details class=\"nodes\"{open}><summary>{} placed nodes, each part a cluster</summary>", r.nodes.len());
        s.push_str("<p class=\"note\">Every placed node (constant-computing nodes are weights and left out); each part is a cluster. Dashed edges cross between parts. Hover a node for its name.</p>\n");
        s.push_str("<div class=\"toolbar\"><input id=\"find\" type=\"search\" placeholder=\"find a node by name or op\" size=\"32\"><span id=\"find-count\" class=\"note\"></span></div>\n<div class=\"graph\">\n");
        node_svg(r, &mut s);
        s.push_str("</div>\n</details>\n");
    } else {
        let _ = writeln!(s, "<p class=\"note\">{} nodes: above {NODE_VIEW_LIMIT} the node graph is left out; see the part graph and tables.</p>", r.nodes.len());
    }
    s.push_str("</section>\n</main>\n<script>");
    s.push_str(SCRIPT);
    s.push_str("</script>\n</body>\n</html>\n");
    s
}

/// Width of a label in the SVG's font, roughly (no font metrics without a browser).
fn text_width(text: &str, px: f64) -> f64 {
    text.chars().count() as f64 * px * 0.6
}

fn defs(s: &mut String) {
    s.push_str("<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"#555\"/></marker></defs>\n");
}

/// A downward cubic from the bottom of one box to the top of another.
fn curve(x1: f64, y1: f64, x2: f64, y2: f64) -> String {
    let dy = (y2 - y1).max(20.0) / 2.0;
    format!(
        "M{x1:.1},{y1:.1} C{x1:.1},{:.1} {x2:.1},{:.1} {x2:.1},{y2:.1}",
        y1 + dy,
        y2 - dy
    )
}

fn part_svg(r: &Report, s: &mut String) {
    // Boxes: model inputs, the parts, model outputs.
    let k = r.parts.len();
    let (inp, out) = (k, k + 1);
    let mut labels: Vec<(String, String)> = r
        .parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            (
                format!("{} · {}", i + 1, r.devices[p.device]),
                format!(
                    "{} · {}",
                    count(p.nodes.len(), "node"),
                    params(p.param_bytes)
                ),
            )
        })
        .collect();
    labels.push(("model inputs".into(), count(r.inputs.len(), "tensor")));
    labels.push(("model outputs".into(), count(r.outputs.len(), "tensor")));
    let widths: Vec<f64> = labels
        .iter()
        .map(|(a, b)| text_width(a, 14.0).max(text_width(b, 12.0)) + 28.0)
        .map(|w| w.max(150.0))
        .collect();
    let ends: Vec<(usize, usize)> = r
        .part_edges
        .iter()
        .map(|e| (e.from.unwrap_or(inp), e.to.unwrap_or(out)))
        .collect();
    // Only drawn boxes take room: an unused "model inputs" box would float alone.
    let drawn: Vec<bool> = (0..k + 2)
        .map(|i| i < k || ends.iter().any(|&(a, b)| a == i || b == i))
        .collect();
    let texts: Vec<(String, String)> = r.part_edges.iter().map(label_lines).collect();
    let graph = FlowGraph {
        boxes: widths
            .iter()
            .zip(&drawn)
            .map(|(&w, &d)| if d { (w, BOX_H) } else { (0.0, 0.0) })
            .collect(),
        edges: ends
            .iter()
            .zip(&texts)
            .map(|(&(a, b), (what, size))| (a, b, Some((label_width(what, size), LABEL_H))))
            .collect(),
    };
    let l = lay_out(
        &graph,
        FlowSpacing {
            gap_x: 28.0,
            gap_y: 22.0,
            margin: 24.0,
        },
    );
    let h = BOX_H / 2.0;
    let _ = writeln!(s, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0}\" height=\"{:.0}\" viewBox=\"0 0 {:.0} {:.0}\">", l.width, l.height, l.width, l.height);
    defs(s);
    for (e, path) in r.part_edges.iter().zip(&l.paths) {
        let _ = writeln!(
            s,
            "<path class=\"part-edge\" d=\"{path}\" fill=\"none\" stroke=\"#555\" stroke-width=\"1.6\" marker-end=\"url(#arrow)\"><title>{}</title></path>",
            xml(&e.tensors.iter().map(|t| format!("{} ({})", t.name, opt_bytes(t.bytes))).collect::<Vec<_>>().join("\n"))
        );
    }
    for i in 0..k + 2 {
        let (cx, cy) = l.boxes[i];
        let (x, y, w) = (cx - widths[i] / 2.0, cy - h, widths[i]);
        let (a, b) = &labels[i];
        if i < k {
            let d = r.parts[i].device;
            let _ = writeln!(
                s,
                "<g class=\"part-box\" data-part=\"{n}\"><a href=\"#part-{n}\"><title>{}</title><rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{BOX_H}\" rx=\"6\" fill=\"{}\" stroke=\"{}\" stroke-width=\"2\"/><text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"600\">{}</text><text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"12\" fill=\"#444\">{}</text></a></g>",
                xml(&r.parts[i].file),
                fill(d),
                stroke(d),
                cy - 4.0,
                xml(a),
                cy + 14.0,
                xml(b),
                n = i + 1
            );
        } else if drawn[i] {
            let _ = writeln!(
                s,
                "<g class=\"io-box\"><rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{BOX_H}\" rx=\"24\" fill=\"#fff\" stroke=\"#9E9E9E\" stroke-width=\"1.5\"/><text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"13\">{}</text><text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"12\" fill=\"#666\">{}</text></g>",
                cy - 4.0,
                xml(a),
                cy + 14.0,
                xml(b)
            );
        }
    }
    // Each label is a vertex of the layout: its edge runs down its left side, the text beside,
    // in two lines (what, then how many bytes).
    for (((what, size), at), &(a, b)) in texts.iter().zip(&l.labels).zip(&ends) {
        let Some((lx, ly)) = *at else { continue };
        let w = label_width(what, size);
        let tx = lx - w / 2.0 + LABEL_LINE + LABEL_INSET;
        let _ = writeln!(
            s,
            "<text class=\"edge-label\" data-from=\"{a}\" data-to=\"{b}\" x=\"{tx:.1}\" y=\"{:.1}\" font-size=\"{LABEL_PX}\" font-family=\"{MONO}\" fill=\"#262626\">{}<tspan x=\"{tx:.1}\" dy=\"{LABEL_LINE_H}\" fill=\"#555\">{}</tspan></text>",
            ly - LABEL_H / 2.0 + LABEL_PX,
            xml(what),
            xml(size)
        );
    }
    s.push_str("</svg>\n");
}

const BOX_H: f64 = 48.0;
const LABEL_PX: f64 = 12.0;
const LABEL_LINE_H: f64 = 14.0;
const LABEL_H: f64 = 32.0;
/// Room between the edge's line and its label's text.
const LABEL_INSET: f64 = 5.0;
/// Labels are set in a monospace font so that their width is known without font metrics.
const MONO: &str =
    "ui-monospace, 'DejaVu Sans Mono', Menlo, Consolas, 'Liberation Mono', monospace";

/// The label vertex's width: line, inset, then the longer line of text (monospace advance is
/// about 0.6 em; a little more for safety) and a margin.
fn label_width(what: &str, size: &str) -> f64 {
    let chars = what.chars().count().max(size.chars().count());
    LABEL_LINE + LABEL_INSET + chars as f64 * LABEL_PX * 0.62 + 4.0
}

/// An edge label's two lines: the tensor (or how many), and the bytes.
fn label_lines(e: &crate::PartEdge) -> (String, String) {
    let (total, dynamic) = e.bytes();
    let what = match e.tensors.as_slice() {
        [t] => shorten(&t.name, 22),
        ts => format!("{} tensors", ts.len()),
    };
    (what, bytes_label(total, dynamic))
}

/// Where each boundary tensor comes from and goes to, by (part, tensor name): found once, so
/// that a table costs its own part's rows.
struct Ends<'a> {
    from: HashMap<(usize, &'a str), Option<usize>>,
    to: HashMap<(usize, &'a str), Vec<Option<usize>>>,
}

impl<'a> Ends<'a> {
    fn new(r: &'a Report) -> Ends<'a> {
        let mut ends = Ends {
            from: HashMap::new(),
            to: HashMap::new(),
        };
        for e in &r.part_edges {
            for t in &e.tensors {
                if let Some(k) = e.to {
                    ends.from.entry((k, t.name.as_str())).or_insert(e.from);
                }
                if let Some(k) = e.from {
                    ends.to.entry((k, t.name.as_str())).or_default().push(e.to);
                }
            }
        }
        ends
    }
}

fn part_table(r: &Report, ends: &Ends, k: usize, s: &mut String) {
    let p = &r.parts[k];
    let d = p.device;
    let _ = writeln!(
        s,
        "<article class=\"part\" id=\"part-{n}\" data-part=\"{n}\" style=\"border-left-color:{}\">",
        stroke(d),
        n = k + 1
    );
    let _ = writeln!(s, "<h3><span class=\"swatch\" style=\"background:{};border-color:{}\"></span>Part {} · {}</h3>", fill(d), stroke(d), k + 1, xml(&r.devices[d]));
    let _ = writeln!(
        s,
        "<p class=\"file\"><code>{}</code></p><dl><dt>nodes</dt><dd>{}</dd><dt>parameters</dt><dd>{}</dd><dt>constant nodes copied in</dt><dd>{}</dd></dl>",
        xml(&p.file),
        p.nodes.len(),
        if p.param_bytes == 0 { "none".to_string() } else { human_bytes(p.param_bytes) },
        p.constant_nodes
    );
    if let Some(ms) = r.latency.as_ref().and_then(|l| l.part_ms.get(k)) {
        let _ = writeln!(s, "<dl><dt>predicted latency</dt><dd>{ms:.3} ms</dd></dl>");
    }
    s.push_str("<ul class=\"ops\">");
    for (op, c) in &p.ops {
        let _ = write!(s, "<li>{} ×{c}</li>", xml(op));
    }
    s.push_str("</ul>\n<table><tr><th></th><th>boundary tensor</th><th>from / to</th><th class=\"n\">bytes</th></tr>\n");
    let part_name = |x: Option<usize>, model: &str| {
        x.map_or_else(|| model.to_string(), |j| format!("part {}", j + 1))
    };
    for t in &p.inputs {
        let from = ends.from.get(&(k, t.name.as_str())).copied().flatten();
        let _ = writeln!(
            s,
            "<tr><td>in</td><td class=\"t\">{}</td><td>{}</td><td class=\"n\">{}</td></tr>",
            xml(&t.name),
            part_name(from, "model input"),
            opt_bytes(t.bytes)
        );
    }
    for t in &p.outputs {
        let to: Vec<String> = ends
            .to
            .get(&(k, t.name.as_str()))
            .into_iter()
            .flatten()
            .map(|&to| part_name(to, "model output"))
            .collect();
        let _ = writeln!(
            s,
            "<tr><td>out</td><td class=\"t\">{}</td><td>{}</td><td class=\"n\">{}</td></tr>",
            xml(&t.name),
            to.join(", "),
            opt_bytes(t.bytes)
        );
    }
    s.push_str("</table>\n</article>\n");
}

const NODE_H: f64 = 32.0;
const PAD: f64 = 14.0;
const TITLE: f64 = 26.0;
const GAP: f64 = 48.0;
/// A part deeper than this many layers is cut into columns, as many side by side as fit in
/// [`WRAP_WIDTH`] pixels (about the page's width).
const WRAP_LAYERS: usize = 40;
const WRAP_WIDTH: f64 = 1180.0;

fn node_width(op: &str, label: &str) -> f64 {
    (text_width(op, 11.0).max(text_width(&shorten(label, 22), 10.0)) + 16.0).max(56.0)
}

/// Parts are laid out one by one and stacked in their (dependency) order, so clusters never
/// overlap and every edge between parts points down.
fn node_svg(r: &Report, s: &mut String) {
    let spacing = Spacing {
        node_height: NODE_H,
        gap_x: 14.0,
        gap_y: 26.0,
        margin: 0.0,
    };
    let mut local = vec![0usize; r.nodes.len()];
    let mut layouts: Vec<(Layout, Vec<f64>)> = Vec::new();
    for (k, p) in r.parts.iter().enumerate() {
        for (i, &n) in p.nodes.iter().enumerate() {
            local[n] = i;
        }
        let widths: Vec<f64> = p
            .nodes
            .iter()
            .map(|&n| node_width(&r.nodes[n].op, &r.nodes[n].label))
            .collect();
        let edges: Vec<(usize, usize)> = r
            .edges
            .iter()
            .filter(|(a, b, _)| r.nodes[*a].part == k && r.nodes[*b].part == k)
            .map(|&(a, b, _)| (local[a], local[b]))
            .collect();
        layouts.push((
            wrap(
                &layered(&widths, &edges, spacing),
                &widths,
                spacing,
                WRAP_LAYERS,
                WRAP_WIDTH,
            ),
            widths,
        ));
    }
    let io_w = |t: &crate::Tensor| text_width(&shorten(&t.name, 28), 11.0) + 24.0;
    let row_width = |ts: &[crate::Tensor]| ts.iter().map(|t| io_w(t) + 12.0).sum::<f64>();
    let inner = layouts
        .iter()
        .enumerate()
        .map(|(k, (l, _))| (l.width + 2.0 * PAD).max(text_width(&cluster_title(r, k), 13.0) + 24.0))
        .fold(0.0, f64::max)
        .max(row_width(&r.inputs))
        .max(row_width(&r.outputs))
        .max(300.0);
    let width = inner + 2.0 * 20.0;

    let mut x = vec![0.0; r.nodes.len()];
    let mut y = vec![0.0; r.nodes.len()];
    let mut top = 20.0;
    let in_y = top + NODE_H / 2.0;
    let in_x = row(&r.inputs, width, io_w);
    top += NODE_H + GAP;
    let mut clusters = Vec::new();
    for (k, (l, _)) in layouts.iter().enumerate() {
        let cw = (l.width + 2.0 * PAD).max(text_width(&cluster_title(r, k), 13.0) + 24.0);
        let ch = l.height + TITLE + PAD;
        let cx = (width - cw) / 2.0;
        let inset = (cw - l.width) / 2.0;
        for (i, &n) in r.parts[k].nodes.iter().enumerate() {
            x[n] = cx + inset + l.x[i];
            y[n] = top + TITLE + l.y[i];
        }
        clusters.push((cx, top, cw, ch));
        top += ch + GAP;
    }
    let out_y = top + NODE_H / 2.0;
    let out_x = row(&r.outputs, width, io_w);
    let height = top + NODE_H + 20.0;

    let _ = writeln!(s, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\">");
    defs(s);
    for (k, &(cx, cy, cw, ch)) in clusters.iter().enumerate() {
        let p = &r.parts[k];
        let _ = writeln!(
            s,
            "<g class=\"cluster\" data-part=\"{n}\"><rect x=\"{cx:.1}\" y=\"{cy:.1}\" width=\"{cw:.1}\" height=\"{ch:.1}\" rx=\"8\" fill=\"{}\" fill-opacity=\"0.18\" stroke=\"{}\" stroke-width=\"2\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"13\" font-weight=\"600\" paint-order=\"stroke\" stroke=\"#fff\" stroke-width=\"3\">{}</text></g>",
            fill(p.device),
            stroke(p.device),
            cx + 10.0,
            cy + 18.0,
            xml(&cluster_title(r, k)),
            n = k + 1
        );
    }
    let h = NODE_H / 2.0;
    for &(a, b, bytes) in &r.edges {
        let cross = r.nodes[a].part != r.nodes[b].part;
        // An edge that climbs joins two columns of a wrapped part: drawn faint, it stays out of
        // the way of the columns it crosses.
        let style = if cross {
            "stroke=\"#333\" stroke-width=\"1.4\" stroke-dasharray=\"5 3\""
        } else if y[b] < y[a] {
            "stroke=\"#777\" stroke-width=\"1\" stroke-opacity=\"0.35\""
        } else {
            "stroke=\"#777\" stroke-width=\"1\""
        };
        let _ = writeln!(s, "<path d=\"{}\" fill=\"none\" {style} marker-end=\"url(#arrow)\"><title>{}</title></path>", curve(x[a], y[a] + h, x[b], y[b] - h), opt_bytes(bytes));
    }
    for &(i, n) in &r.input_uses {
        let _ = writeln!(s, "<path d=\"{}\" fill=\"none\" stroke=\"#999\" stroke-width=\"1\" stroke-dasharray=\"2 3\" marker-end=\"url(#arrow)\"/>", curve(in_x[i], in_y + h, x[n], y[n] - h));
    }
    for &(n, o) in &r.output_from {
        let _ = writeln!(s, "<path d=\"{}\" fill=\"none\" stroke=\"#999\" stroke-width=\"1\" stroke-dasharray=\"2 3\" marker-end=\"url(#arrow)\"/>", curve(x[n], y[n] + h, out_x[o], out_y - h));
    }
    for (n, node) in r.nodes.iter().enumerate() {
        let w = node_width(&node.op, &node.label);
        let d = r.parts[node.part].device;
        let _ = writeln!(
            s,
            "<g class=\"node\"><title>{} ({})</title><rect x=\"{:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"{NODE_H}\" rx=\"5\" fill=\"{}\" stroke=\"{}\" stroke-width=\"1.2\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11\" font-weight=\"600\">{}</text><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\" fill=\"#444\">{}</text></g>",
            xml(&node.label),
            xml(&node.op),
            x[n] - w / 2.0,
            y[n] - h,
            fill(d),
            stroke(d),
            x[n],
            y[n] - 2.0,
            xml(&node.op),
            x[n],
            y[n] + 11.0,
            xml(&shorten(&node.label, 22))
        );
    }
    for (ts, xs, yy) in [(&r.inputs, &in_x, in_y), (&r.outputs, &out_x, out_y)] {
        for (t, &cx) in ts.iter().zip(xs) {
            let w = io_w(t);
            let _ = writeln!(
                s,
                "<g class=\"io\"><title>{} ({})</title><rect x=\"{:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"{NODE_H}\" rx=\"16\" fill=\"#fff\" stroke=\"#9E9E9E\"/><text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11\">{}</text></g>",
                xml(&t.name),
                opt_bytes(t.bytes),
                cx - w / 2.0,
                yy - h,
                yy + 4.0,
                xml(&shorten(&t.name, 28))
            );
        }
    }
    s.push_str("</svg>\n");
}

/// Centres of boxes in one centred row.
fn row(ts: &[crate::Tensor], width: f64, w: impl Fn(&crate::Tensor) -> f64) -> Vec<f64> {
    let total: f64 = ts.iter().map(|t| w(t) + 12.0).sum::<f64>() - 12.0;
    let mut left = (width - total.max(0.0)) / 2.0;
    ts.iter()
        .map(|t| {
            let c = left + w(t) / 2.0;
            left += w(t) + 12.0;
            c
        })
        .collect()
}

fn cluster_title(r: &Report, k: usize) -> String {
    let p = &r.parts[k];
    format!(
        "Part {} · {} · {}",
        k + 1,
        r.devices[p.device],
        count(p.nodes.len(), "node")
    )
}
