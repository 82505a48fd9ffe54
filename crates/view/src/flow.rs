//! The part graph's layout: boxes joined by labelled edges, drawn top to bottom.
//!
//! Graphviz's way with edge labels is followed: an edge's label is a vertex of its own in a
//! layer between the edge's ends, and an edge longer than one layer passes through a dummy
//! vertex in every layer it crosses. The graph is then "proper" (every edge joins adjacent
//! layers), and `rust-sugiyama` orders each layer (barycentres, transposition) and places it
//! (Brandes–Köpf). Labels and boxes are all vertices, so none overlaps another; an edge only
//! runs through the gap between two layers or down its own dummy's column, so it crosses no box.

use std::collections::BTreeMap;

/// A width and a height.
pub type Size = (f64, f64);

/// An edge from one box to another, with the size of its label, if any.
pub type FlowEdge = (usize, usize, Option<Size>);

/// What to lay out: box sizes, and the edges between boxes.
pub struct FlowGraph {
    pub boxes: Vec<Size>,
    pub edges: Vec<FlowEdge>,
}

#[derive(Clone, Copy, Debug)]
pub struct FlowSpacing {
    /// Least room between two vertices of one layer.
    pub gap_x: f64,
    /// Room between two layers.
    pub gap_y: f64,
    pub margin: f64,
}

/// Centres of boxes and labels, and each edge's route.
#[derive(Clone, Debug)]
pub struct FlowLayout {
    pub boxes: Vec<(f64, f64)>,
    /// The centre of each edge's label vertex (`None` for an unlabelled edge).
    pub labels: Vec<Option<(f64, f64)>>,
    /// Per edge: the SVG path data from the bottom of its source to the top of its target.
    pub paths: Vec<String>,
    pub width: f64,
    pub height: f64,
}

/// Above this many vertices (boxes, labels and dummies) crossing reduction by transposition is
/// left out: it is quadratic per layer and the order from barycentres is kept.
const TRANSPOSE_LIMIT: usize = 600;
/// Width of a dummy vertex: the column an edge runs down.
const DUMMY_W: f64 = 6.0;

struct Vertex {
    layer: usize,
    size: (f64, f64),
}

pub fn lay_out(g: &FlowGraph, s: FlowSpacing) -> FlowLayout {
    let n = g.boxes.len();
    let layer = box_layers(n, &g.edges);
    // Vertices: the boxes, then per edge its label and dummies; each edge's chain of vertices.
    let mut vs: Vec<Vertex> = (0..n)
        .map(|i| Vertex {
            layer: layer[i],
            size: g.boxes[i],
        })
        .collect();
    let mut chains: Vec<Vec<usize>> = Vec::with_capacity(g.edges.len());
    let mut label_at: Vec<Option<usize>> = Vec::with_capacity(g.edges.len());
    for &(a, b, label) in &g.edges {
        let (la, lb) = (layer[a], layer[b]);
        let mut chain = vec![a];
        let mut lab = None;
        // Labelled edges span two layers at least (see box_layers); the label sits midway. An
        // edge that closes a cycle (none in a part graph) runs up, unlabelled.
        let label_layer = label.filter(|_| lb > la + 1).map(|_| la + (lb - la) / 2);
        for l in la + 1..lb {
            let size = match (label, label_layer) {
                (Some(size), Some(ll)) if ll == l => size,
                _ => (DUMMY_W, 1.0),
            };
            if Some(l) == label_layer {
                lab = Some(vs.len());
            }
            chain.push(vs.len());
            vs.push(Vertex { layer: l, size });
        }
        chain.push(b);
        chains.push(chain);
        label_at.push(lab);
    }
    let xs = order_and_place(&vs, &chains, s);

    // Each layer is as tall as its tallest vertex; layers are stacked with gap_y between.
    let depth = vs.iter().map(|v| v.layer + 1).max().unwrap_or(0);
    let mut band = vec![0.0f64; depth];
    for v in &vs {
        band[v.layer] = band[v.layer].max(v.size.1);
    }
    let mut centre = vec![0.0; depth];
    let mut top = s.margin;
    for l in 0..depth {
        centre[l] = top + band[l] / 2.0;
        top += band[l] + s.gap_y;
    }
    let height = if depth == 0 {
        2.0 * s.margin
    } else {
        top - s.gap_y + s.margin
    };
    let left = vs
        .iter()
        .zip(&xs)
        .map(|(v, x)| x - v.size.0 / 2.0)
        .fold(f64::INFINITY, f64::min);
    let shift = if left.is_finite() {
        s.margin - left
    } else {
        0.0
    };
    let x: Vec<f64> = xs.iter().map(|x| x + shift).collect();
    let width = vs
        .iter()
        .zip(&x)
        .map(|(v, x)| x + v.size.0 / 2.0)
        .fold(0.0, f64::max)
        + s.margin;

    let boxes = (0..n).map(|i| (x[i], centre[layer[i]])).collect();
    let labels = label_at
        .iter()
        .map(|l| l.map(|v| (x[v], centre[vs[v].layer])))
        .collect();
    let paths = chains
        .iter()
        .zip(&label_at)
        .map(|(chain, &lab)| route(chain, lab, &vs, &x, &centre, &band))
        .collect();
    FlowLayout {
        boxes,
        labels,
        paths,
        width: width.max(2.0 * s.margin),
        height,
    }
}

/// Layers by longest path, a labelled edge counting two layers so its label has one between
/// its ends. Edges that would close a cycle are left out of the layering (a part graph has
/// none; the layout must still end).
fn box_layers(n: usize, edges: &[FlowEdge]) -> Vec<usize> {
    let mut succs: Vec<Vec<(usize, usize)>> = vec![Vec::new(); n];
    let mut indeg = vec![0usize; n];
    for &(a, b, label) in edges {
        if a != b && a < n && b < n {
            succs[a].push((b, if label.is_some() { 2 } else { 1 }));
            indeg[b] += 1;
        }
    }
    let mut layer = vec![0usize; n];
    let mut ready: Vec<usize> = (0..n).rev().filter(|&v| indeg[v] == 0).collect();
    while let Some(v) = ready.pop() {
        for &(w, span) in &succs[v] {
            layer[w] = layer[w].max(layer[v] + span);
            indeg[w] -= 1;
            if indeg[w] == 0 {
                ready.push(w);
            }
        }
    }
    layer
}

/// x of every vertex: rust-sugiyama's order and coordinates, then a sweep per layer that keeps
/// at least `gap_x` between neighbours (whatever the library gave). Should the library panic,
/// each layer is placed left to right in the order of its vertices.
fn order_and_place(vs: &[Vertex], chains: &[Vec<usize>], s: FlowSpacing) -> Vec<f64> {
    let vertices: Vec<(u32, (f64, f64))> = vs
        .iter()
        .enumerate()
        .map(|(i, v)| (i as u32, v.size))
        .collect();
    let mut edges: Vec<(u32, u32)> = Vec::new();
    for chain in chains {
        for w in chain.windows(2) {
            if vs[w[0]].layer < vs[w[1]].layer {
                edges.push((w[0] as u32, w[1] as u32));
            }
        }
    }
    // The library pads every vertex alike; boxes and labels want room between them, the
    // columns of long edges little: the padding is given per vertex instead.
    let vertices: Vec<(u32, (f64, f64))> = vertices
        .into_iter()
        .map(|(i, (w, h))| (i, (w + pad(&vs[i as usize], s.gap_x), h)))
        .collect();
    let config = rust_sugiyama::configure::Config {
        vertex_spacing: 0.0,
        transpose: vs.len() <= TRANSPOSE_LIMIT,
        ..Default::default()
    };
    let placed = std::panic::catch_unwind(|| {
        rust_sugiyama::from_vertices_and_edges(&vertices, &edges, &config)
    });
    let mut x = vec![f64::NAN; vs.len()];
    if let Ok(components) = placed {
        // Components come back each from x = 0: set them side by side.
        let mut offset = 0.0;
        for (coords, _, _) in components {
            let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
            for &(v, (cx, _)) in &coords {
                if let Some(size) = vs.get(v).map(|v| v.size) {
                    lo = lo.min(cx - size.0 / 2.0);
                    hi = hi.max(cx + size.0 / 2.0);
                }
            }
            if !lo.is_finite() {
                continue;
            }
            for &(v, (cx, _)) in &coords {
                if v < x.len() {
                    x[v] = cx - lo + offset;
                }
            }
            offset += hi - lo + s.gap_x;
        }
    }
    separate(vs, &mut x, s.gap_x);
    x
}

/// Room a vertex keeps about itself: a dummy (an edge's column) needs less than a box.
fn pad(v: &Vertex, gap: f64) -> f64 {
    if v.size.0 <= DUMMY_W {
        gap / 3.0
    } else {
        gap
    }
}

/// Within each layer, in the order the xs give (unplaced vertices last), pushes each vertex
/// right of its left neighbour by at least the larger of their pads, then moves the layer back by the mean push
/// so that it stays centred where the library put it.
fn separate(vs: &[Vertex], x: &mut [f64], gap: f64) {
    let mut layers: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (i, v) in vs.iter().enumerate() {
        layers.entry(v.layer).or_default().push(i);
    }
    for row in layers.values_mut() {
        row.sort_by(|&a, &b| {
            let key = |v: usize| if x[v].is_nan() { f64::INFINITY } else { x[v] };
            key(a).total_cmp(&key(b)).then(a.cmp(&b))
        });
        let mut right = f64::NEG_INFINITY;
        let mut right_pad = 0.0f64;
        let mut pushed = 0.0;
        let mut had = 0usize;
        for &v in row.iter() {
            let w = vs[v].size.0;
            let room = right_pad.max(pad(&vs[v], gap));
            let least = if right.is_finite() {
                right + room + w / 2.0
            } else {
                w / 2.0
            };
            let want = if x[v].is_nan() { least } else { x[v] };
            let at = want.max(least);
            if !x[v].is_nan() {
                pushed += at - want;
                had += 1;
            }
            x[v] = at;
            right = at + w / 2.0;
            right_pad = pad(&vs[v], gap);
        }
        if had > 0 && pushed > 0.0 {
            let back = pushed / had as f64;
            for &v in row.iter() {
                x[v] -= back;
            }
        }
    }
}

/// The path of one edge: from the bottom of its source down every layer it crosses (straight
/// down the column of its dummy or the left side of its label), to the top of its target, with
/// a vertical-tangent curve between layers.
fn route(
    chain: &[usize],
    label: Option<usize>,
    vs: &[Vertex],
    x: &[f64],
    centre: &[f64],
    band: &[f64],
) -> String {
    let column = |v: usize| {
        if Some(v) == label {
            x[v] - vs[v].size.0 / 2.0 + LABEL_LINE
        } else {
            x[v]
        }
    };
    let (first, last) = (chain[0], chain[chain.len() - 1]);
    let mut d = format!(
        "M{:.1},{:.1}",
        x[first],
        centre[vs[first].layer] + vs[first].size.1 / 2.0
    );
    let mut at = (x[first], centre[vs[first].layer] + vs[first].size.1 / 2.0);
    for &v in &chain[1..chain.len() - 1] {
        let l = vs[v].layer;
        let (cx, top, bottom) = (
            column(v),
            centre[l] - band[l] / 2.0,
            centre[l] + band[l] / 2.0,
        );
        curve_to(&mut d, at, (cx, top));
        d.push_str(&format!(" L{cx:.1},{bottom:.1}"));
        at = (cx, bottom);
    }
    let end = (x[last], centre[vs[last].layer] - vs[last].size.1 / 2.0);
    curve_to(&mut d, at, end);
    d
}

/// Where, from a label vertex's left side, its edge runs down; the text starts right of it.
pub const LABEL_LINE: f64 = 3.0;

fn curve_to(d: &mut String, from: (f64, f64), to: (f64, f64)) {
    let dy = ((to.1 - from.1) / 2.0).max(4.0);
    d.push_str(&format!(
        " C{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}",
        from.0,
        from.1 + dy,
        to.0,
        to.1 - dy,
        to.0,
        to.1
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: FlowSpacing = FlowSpacing {
        gap_x: 12.0,
        gap_y: 20.0,
        margin: 8.0,
    };

    /// Every box and label rectangle, checked pairwise: none overlaps another.
    fn check(g: &FlowGraph) -> FlowLayout {
        let l = lay_out(g, S);
        let mut rects: Vec<(f64, f64, f64, f64)> = g
            .boxes
            .iter()
            .zip(&l.boxes)
            .map(|(&(w, h), &(x, y))| (x - w / 2.0, y - h / 2.0, w, h))
            .collect();
        for (e, c) in g.edges.iter().zip(&l.labels) {
            if let (Some((w, h)), Some((x, y))) = (e.2, c) {
                rects.push((x - w / 2.0, y - h / 2.0, w, h));
            }
        }
        for (i, a) in rects.iter().enumerate() {
            assert!(a.0 >= S.margin - 1e-6 && a.0 + a.2 <= l.width - S.margin + 1e-6);
            assert!(a.1 >= S.margin - 1e-6 && a.1 + a.3 <= l.height - S.margin + 1e-6);
            for b in &rects[i + 1..] {
                let apart = a.0 + a.2 <= b.0 + 1e-6
                    || b.0 + b.2 <= a.0 + 1e-6
                    || a.1 + a.3 <= b.1 + 1e-6
                    || b.1 + b.3 <= a.1 + 1e-6;
                assert!(apart, "{a:?} and {b:?} overlap");
            }
        }
        for (&(a, b, _), p) in g.edges.iter().zip(&l.paths) {
            assert!(
                l.boxes[b].1 > l.boxes[a].1,
                "edge {a}->{b} does not point down"
            );
            assert!(p.starts_with('M') && p.contains('C'), "{p}");
        }
        l
    }

    #[test]
    fn a_label_sits_between_its_ends_and_a_long_edge_goes_round() {
        // 0 → 1 → 2 and 0 → 2 labelled: the long edge's label is a layer of its own.
        let g = FlowGraph {
            boxes: vec![(80.0, 40.0); 3],
            edges: vec![
                (0, 1, Some((60.0, 16.0))),
                (1, 2, Some((60.0, 16.0))),
                (0, 2, Some((90.0, 16.0))),
            ],
        };
        let l = check(&g);
        let (y0, y2) = (l.boxes[0].1, l.boxes[2].1);
        let (_, ly) = l.labels[2].unwrap();
        assert!(y0 < ly && ly < y2, "{l:?}");
        // The long edge passes through three layers between its ends: three vertical runs.
        assert_eq!(l.paths[2].matches(" L").count(), 3, "{}", l.paths[2]);
    }

    #[test]
    fn an_edge_that_closes_a_cycle_does_not_break_the_layout() {
        let g = FlowGraph {
            boxes: vec![(50.0, 30.0); 3],
            edges: vec![
                (0, 1, Some((40.0, 14.0))),
                (1, 2, Some((40.0, 14.0))),
                (2, 0, Some((40.0, 14.0))),
            ],
        };
        let l = lay_out(&g, S);
        assert_eq!(l.paths.len(), 3);
        for ((&(a, b, _), label), path) in g.edges.iter().zip(&l.labels).zip(&l.paths) {
            assert!(path.starts_with('M'), "{path}");
            // A label only where its edge runs down past a layer of its own.
            assert_eq!(label.is_some(), l.boxes[b].1 > l.boxes[a].1, "{l:?}");
        }
    }

    #[test]
    fn disconnected_pieces_sit_side_by_side() {
        let g = FlowGraph {
            boxes: vec![(50.0, 30.0); 4],
            edges: vec![(0, 1, Some((40.0, 14.0))), (2, 3, Some((40.0, 14.0)))],
        };
        check(&g);
    }

    proptest! {
        #[test]
        fn random_part_graphs_lay_out_without_overlap(
            n in 1usize..24,
            raw in proptest::collection::vec((0usize..24, 0usize..24, 0usize..3), 0..50),
            w in proptest::collection::vec(30.0f64..160.0, 24),
        ) {
            let edges = raw
                .into_iter()
                .filter(|&(a, b, _)| a < n && b < n && a < b)
                .map(|(a, b, k)| (a, b, (k > 0).then_some((20.0 + 30.0 * k as f64, 16.0))))
                .collect();
            let g = FlowGraph { boxes: w[..n].iter().map(|&w| (w, 40.0)).collect(), edges };
            check(&g);
        }
    }
}
