//! A layered (Sugiyama-style) layout for directed acyclic graphs, so the HTML report needs no
//! Graphviz: layers by longest path from the sources, a few barycentre sweeps to order each
//! layer, then each node placed under the mean of its predecessors, layers kept from overlapping
//! and centred on where their nodes want to be. Long edges get no dummy nodes; the SVG draws
//! them as curves.

/// Node centres, top to bottom.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    pub x: Vec<f64>,
    pub y: Vec<f64>,
    pub layer: Vec<usize>,
    pub width: f64,
    pub height: f64,
}

#[derive(Clone, Copy, Debug)]
pub struct Spacing {
    /// Height of every box.
    pub node_height: f64,
    pub gap_x: f64,
    pub gap_y: f64,
    pub margin: f64,
}

/// Lays out `widths.len()` boxes joined by `edges` (from, to). Edges that would close a cycle
/// are ignored for layering.
pub fn layered(widths: &[f64], edges: &[(usize, usize)], s: Spacing) -> Layout {
    let n = widths.len();
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut succs: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(a, b) in edges {
        if a != b && a < n && b < n {
            preds[b].push(a);
            succs[a].push(b);
        }
    }
    let order = topological(&preds, &succs);
    let mut layer = vec![0usize; n];
    let mut rank = vec![0usize; n];
    for (i, &v) in order.iter().enumerate() {
        rank[v] = i;
    }
    for &v in &order {
        layer[v] = preds[v]
            .iter()
            .filter(|&&p| rank[p] < rank[v])
            .map(|&p| layer[p] + 1)
            .max()
            .unwrap_or(0);
    }
    let depth = layer.iter().max().map_or(0, |m| m + 1);
    let mut layers: Vec<Vec<usize>> = vec![Vec::new(); depth];
    for &v in &order {
        layers[layer[v]].push(v);
    }
    order_layers(&mut layers, &preds, &succs, n);

    let mut x = vec![0.0; n];
    let mut y = vec![0.0; n];
    for (l, row) in layers.iter().enumerate() {
        let yl = s.margin + l as f64 * (s.node_height + s.gap_y) + s.node_height / 2.0;
        let mut right = f64::NEG_INFINITY;
        let mut shift_sum = 0.0;
        let mut wanting = 0usize;
        for &v in row {
            let placed: Vec<f64> = preds[v]
                .iter()
                .filter(|&&p| layer[p] < l)
                .map(|&p| x[p])
                .collect();
            let min_x = if right.is_finite() {
                right + s.gap_x + widths[v] / 2.0
            } else {
                widths[v] / 2.0
            };
            let xv = if placed.is_empty() {
                min_x
            } else {
                let want = placed.iter().sum::<f64>() / placed.len() as f64;
                let xv = want.max(min_x);
                shift_sum += xv - want;
                wanting += 1;
                xv
            };
            x[v] = xv;
            y[v] = yl;
            right = xv + widths[v] / 2.0;
        }
        // Pushing right only would drift every crowded layer to the right: move the whole row
        // back by the mean push, which keeps its spacing.
        if wanting > 0 {
            let back = shift_sum / wanting as f64;
            for &v in row {
                x[v] -= back;
            }
        }
    }
    let left = (0..n)
        .map(|v| x[v] - widths[v] / 2.0)
        .fold(f64::INFINITY, f64::min);
    let left = if left.is_finite() { left } else { 0.0 };
    for xv in &mut x {
        *xv += s.margin - left;
    }
    let width = (0..n).map(|v| x[v] + widths[v] / 2.0).fold(0.0, f64::max) + s.margin;
    let height = if depth == 0 {
        2.0 * s.margin
    } else {
        2.0 * s.margin + depth as f64 * s.node_height + (depth - 1) as f64 * s.gap_y
    };
    Layout {
        x,
        y,
        layer,
        width: width.max(2.0 * s.margin),
        height,
    }
}

/// Cuts a deep layout into columns of at most `max_layers` layers, side by side, starting a new
/// row of columns where the next would pass `max_width`: a deep, narrow graph (a chain of
/// hundreds of layers) then fills the page instead of a long stripe.
pub fn wrap(l: &Layout, widths: &[f64], s: Spacing, max_layers: usize, max_width: f64) -> Layout {
    let n = widths.len();
    let depth = l.layer.iter().max().map_or(0, |m| m + 1);
    if depth <= max_layers || max_layers == 0 {
        return l.clone();
    }
    let chunks = depth.div_ceil(max_layers);
    let step = s.node_height + s.gap_y;
    let column_height = max_layers as f64 * step - s.gap_y;
    let (mut lo, mut hi) = (vec![f64::INFINITY; chunks], vec![f64::NEG_INFINITY; chunks]);
    for (v, w) in widths.iter().enumerate().take(n) {
        let c = l.layer[v] / max_layers;
        lo[c] = lo[c].min(l.x[v] - w / 2.0);
        hi[c] = hi[c].max(l.x[v] + w / 2.0);
    }
    let column_gap = 3.0 * s.gap_x;
    let mut shift = vec![(0.0, 0.0); chunks];
    let (mut left, mut row, mut width) = (s.margin, 0usize, 0.0f64);
    for c in 0..chunks {
        let w = hi[c] - lo[c];
        if left > s.margin && left + w + s.margin > max_width {
            row += 1;
            left = s.margin;
        }
        let top = row as f64 * (column_height + 2.0 * s.gap_y);
        shift[c] = (left - lo[c], top - (c * max_layers) as f64 * step);
        left += w + column_gap;
        width = width.max(left - column_gap + s.margin);
    }
    let x: Vec<f64> = (0..n)
        .map(|v| l.x[v] + shift[l.layer[v] / max_layers].0)
        .collect();
    let y: Vec<f64> = (0..n)
        .map(|v| l.y[v] + shift[l.layer[v] / max_layers].1)
        .collect();
    let height = y.iter().fold(0.0f64, |m, &y| m.max(y)) + s.node_height / 2.0 + s.margin;
    Layout {
        x,
        y,
        layer: l.layer.clone(),
        width,
        height,
    }
}

/// Kahn's order, smallest index first among the ready; nodes on a cycle follow in index order.
fn topological(preds: &[Vec<usize>], succs: &[Vec<usize>]) -> Vec<usize> {
    let n = preds.len();
    let mut indeg: Vec<usize> = preds.iter().map(Vec::len).collect();
    let mut ready: std::collections::BTreeSet<usize> = (0..n).filter(|&v| indeg[v] == 0).collect();
    let mut out = Vec::with_capacity(n);
    let mut done = vec![false; n];
    while let Some(v) = ready.pop_first() {
        out.push(v);
        done[v] = true;
        for &w in &succs[v] {
            indeg[w] -= 1;
            if indeg[w] == 0 {
                ready.insert(w);
            }
        }
    }
    out.extend((0..n).filter(|&v| !done[v]));
    out
}

/// Barycentre sweeps, down then up, keeping the order when a sweep does not reduce crossings.
fn order_layers(layers: &mut [Vec<usize>], preds: &[Vec<usize>], succs: &[Vec<usize>], n: usize) {
    let mut pos = vec![0.0f64; n];
    let index = |layers: &[Vec<usize>], pos: &mut Vec<f64>| {
        for row in layers {
            for (i, &v) in row.iter().enumerate() {
                pos[v] = (i as f64 + 0.5) / row.len() as f64;
            }
        }
    };
    index(layers, &mut pos);
    let mut best = crossings(layers, succs, &pos);
    for sweep in 0..6 {
        let mut trial = layers.to_vec();
        let mut tpos = pos.clone();
        let rows: Vec<usize> = if sweep % 2 == 0 {
            (1..trial.len()).collect()
        } else {
            (0..trial.len().saturating_sub(1)).rev().collect()
        };
        for l in rows {
            let neighbours = if sweep % 2 == 0 { preds } else { succs };
            let mut keyed: Vec<(f64, usize)> = trial[l]
                .iter()
                .map(|&v| {
                    let ns = &neighbours[v];
                    let key = if ns.is_empty() {
                        tpos[v]
                    } else {
                        ns.iter().map(|&u| tpos[u]).sum::<f64>() / ns.len() as f64
                    };
                    (key, v)
                })
                .collect();
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
            trial[l] = keyed.into_iter().map(|(_, v)| v).collect();
            let len = trial[l].len() as f64;
            for (i, &v) in trial[l].iter().enumerate() {
                tpos[v] = (i as f64 + 0.5) / len;
            }
        }
        let c = crossings(&trial, succs, &tpos);
        if c < best {
            best = c;
            layers.clone_from_slice(&trial);
            pos = tpos;
        }
    }
}

/// Crossings between edges that join adjacent layers (the ones ordering can change).
fn crossings(layers: &[Vec<usize>], succs: &[Vec<usize>], pos: &[f64]) -> usize {
    let mut layer_of = vec![usize::MAX; pos.len()];
    for (l, row) in layers.iter().enumerate() {
        for &v in row {
            layer_of[v] = l;
        }
    }
    let mut total = 0;
    for (l, row) in layers.iter().enumerate() {
        let mut es: Vec<(f64, f64)> = row
            .iter()
            .flat_map(|&v| {
                succs[v]
                    .iter()
                    .filter(|&&w| layer_of[w] == l + 1)
                    .map(move |&w| (pos[v], pos[w]))
            })
            .collect();
        es.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
        for i in 0..es.len() {
            for j in i + 1..es.len() {
                if es[i].0 < es[j].0 && es[i].1 > es[j].1 {
                    total += 1;
                }
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: Spacing = Spacing {
        node_height: 20.0,
        gap_x: 10.0,
        gap_y: 30.0,
        margin: 5.0,
    };

    fn check(widths: &[f64], edges: &[(usize, usize)]) -> Layout {
        let l = layered(widths, edges, S);
        for &(a, b) in edges {
            assert!(l.y[b] > l.y[a], "edge {a}->{b} does not point down");
        }
        for a in 0..widths.len() {
            assert!(
                l.x[a] - widths[a] / 2.0 >= S.margin - 1e-9
                    && l.x[a] + widths[a] / 2.0 <= l.width - S.margin + 1e-9
            );
            assert!(l.y[a] + S.node_height / 2.0 <= l.height - S.margin + 1e-9);
            for b in a + 1..widths.len() {
                if l.layer[a] == l.layer[b] {
                    let gap = (l.x[a] - l.x[b]).abs() - (widths[a] + widths[b]) / 2.0;
                    assert!(gap >= S.gap_x - 1e-9, "boxes {a} and {b} overlap");
                }
            }
        }
        l
    }

    #[test]
    fn a_diamond_is_centred_under_its_source() {
        let l = check(&[40.0; 4], &[(0, 1), (0, 2), (1, 3), (2, 3)]);
        assert_eq!(l.layer, vec![0, 1, 1, 2]);
        assert!((l.x[3] - l.x[0]).abs() < 1e-9, "{l:?}");
        assert!((l.x[1] + l.x[2]) / 2.0 - l.x[0] < 1e-9);
    }

    #[test]
    fn barycentres_untangle_a_crossing() {
        // 0→3, 1→2 with 2 before 3 in the initial order: sorting by barycentre uncrosses them.
        let l = check(&[40.0; 4], &[(0, 3), (1, 2)]);
        assert!(l.x[3] < l.x[2], "{l:?}");
    }

    #[test]
    fn a_deep_chain_wraps_into_columns_that_do_not_overlap() {
        let n = 100;
        let widths = vec![40.0; n];
        let edges: Vec<(usize, usize)> = (1..n).map(|i| (i - 1, i)).collect();
        let l = wrap(&layered(&widths, &edges, S), &widths, S, 30, 200.0);
        // 4 columns of 30, 30, 30, 10 layers, 40 px wide with 30 px between: 3 fit in 200 px,
        // the fourth starts a second row under the first.
        let columns: std::collections::BTreeSet<i64> =
            l.x.iter().map(|&x| x.round() as i64).collect();
        assert_eq!(columns.len(), 3, "{columns:?}");
        assert!(
            l.width <= 200.0 && l.height < 2.0 * 30.0 * 50.0 + 60.0,
            "{} x {}",
            l.width,
            l.height
        );
        for a in 0..n {
            assert!(
                l.x[a] - 20.0 >= S.margin - 1e-9
                    && l.x[a] + 20.0 <= l.width + 1e-9
                    && l.y[a] + 10.0 <= l.height + 1e-9
            );
            for b in a + 1..n {
                let apart =
                    (l.x[a] - l.x[b]).abs() >= 40.0 || (l.y[a] - l.y[b]).abs() >= S.node_height;
                assert!(apart, "nodes {a} and {b} overlap");
            }
        }
        // Within a column the chain still runs down.
        assert!(l.y[1] > l.y[0] && l.y[29] > l.y[28] && l.y[30] < l.y[29]);
    }

    proptest! {
        #[test]
        fn random_dags_lay_out_without_overlap(n in 1usize..40, raw in proptest::collection::vec((0usize..40, 0usize..40), 0..80), w in proptest::collection::vec(20.0f64..120.0, 40)) {
            let edges: Vec<(usize, usize)> = raw.into_iter().filter(|&(a, b)| a < n && b < n && a < b).collect();
            check(&w[..n], &edges);
        }
    }
}
