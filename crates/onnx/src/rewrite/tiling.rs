//! Decomposition of a layer too large for its device's memory, as the VPU plugin's
//! "Decomposition Rules" describe it: the layer runs as tiles named `<name>@soc=M/N`, each
//! small enough that its input, output and weights fit the device's `tile_bytes`, and service
//! layers put the full tensor back together. Three schemes, the one needing the fewest tiles
//! chosen per layer:
//! - output channels (Conv with group 1, pools): each tile computes some output channels,
//!   a Concat joins them;
//! - space (Conv of any group, MaxPool, AveragePool): each tile computes a band of output rows
//!   (and columns when one row is too much) from a Slice of the input with the halo its window
//!   needs; the layer's padding is applied at the outer edges only; Concats join them;
//! - input channels (Conv with group 1, MatMul and Gemm with constant weights along K): each tile reads
//!   some input channels with their weights, a Sum adds the partial results; the bias is
//!   added once.
//!
//! A fused activation after a Conv goes into each tile where tiling commutes with it (output
//! channels and space), and stays after the Sum otherwise.

use cleave_fuse::Rule;
use cleave_ir::{NodeId, OpClass, ValueId, Weight};

use super::device::{name, split_node, weight};
use super::edit::{attr_float, attr_int, attr_ints, node, Edits};
use super::onnx_view::OnnxView;
use super::tensor::{bytes_of, i64_tensor, slice_dim0, slice_dim1, tensor};
use super::PassCx;
use crate::proto::NodeProto;

/// More tiles than this and the layer is left whole: the graph would grow past use.
const MAX_TILES: u64 = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Conv,
    Pool,
    GlobalPool,
    MatMul,
    /// With `transA` 0: reduced along A's columns like a MatMul.
    Gemm,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scheme {
    OutChannels(i64),
    /// `oc` > 1 also cuts each spatial tile over output channels (a Conv whose input and
    /// weights are both too large for one scheme alone).
    Space {
        rows: i64,
        cols: i64,
        oc: i64,
    },
    InChannels(i64),
}

impl Scheme {
    fn tiles(self) -> u64 {
        let n = match self {
            Scheme::OutChannels(k) | Scheme::InChannels(k) => k,
            Scheme::Space { rows, cols, oc } => rows.saturating_mul(cols).saturating_mul(oc),
        };
        n.max(1) as u64
    }

    fn describe(self) -> String {
        match self {
            Scheme::OutChannels(_) => "over output channels (Concat)".into(),
            Scheme::Space { cols: 1, oc: 1, .. } => "over rows (Slice, Concat)".into(),
            Scheme::Space { rows, cols, oc: 1 } => {
                format!("over {rows}×{cols} rows × columns (Slice, Concat)")
            }
            Scheme::Space { rows, cols, oc } => {
                format!("over {rows}×{cols}×{oc} rows × columns × output channels (Slice, Concat)")
            }
            Scheme::InChannels(_) => "over input channels (Split, Sum)".into(),
        }
    }
}

/// The window of a 2-D Conv or pool along H and W, its padding made explicit.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    /// Input and output extents.
    input: [i64; 2],
    output: [i64; 2],
    /// Kernel extent with dilation: (k - 1) · d + 1.
    span: [i64; 2],
    strides: [i64; 2],
    begin: [i64; 2],
    end: [i64; 2],
    ceil: bool,
}

/// One tile's stretch along an axis: input `[from, to)`, its own pads, output `[o0, o1)`.
#[derive(Clone, Copy, Debug)]
struct Stretch {
    from: i64,
    to: i64,
    pad_begin: i64,
    pad_end: i64,
}

impl Geometry {
    fn of(cx: &PassCx, n: NodeId, x: &[i64], y: &[i64]) -> Option<Geometry> {
        let view = cx.view();
        let w = view.window(n)?;
        if x.len() != 4 || y.len() != 4 || w.kernel.len() != 2 {
            return None;
        }
        let (input, output) = ([x[2], x[3]], [y[2], y[3]]);
        let mut g = Geometry {
            input,
            output,
            span: [0; 2],
            strides: [*w.strides.first()?, *w.strides.get(1)?],
            begin: [0; 2],
            end: [0; 2],
            ceil: w.ceil_mode,
        };
        let auto = crate::ops::auto_pad(view.node(n)).to_string();
        for i in 0..2 {
            let d = *w.dilations.get(i)?;
            g.span[i] = w.kernel[i].checked_sub(1)?.checked_mul(d)?.checked_add(1)?;
            let total = (output[i] - 1)
                .checked_mul(g.strides[i])?
                .checked_add(g.span[i])?
                .checked_sub(input[i])?
                .max(0);
            (g.begin[i], g.end[i]) = match auto.as_str() {
                "NOTSET" => (*w.pads.get(i)?, *w.pads.get(i + 2)?),
                "VALID" => (0, 0),
                "SAME_UPPER" => (total / 2, total - total / 2),
                "SAME_LOWER" => (total - total / 2, total / 2),
                _ => return None,
            };
        }
        // Extents past 2^31 are not a layer any device tiles; bounding them keeps every
        // product below in range.
        let sane = |v: i64| (0..1 << 31).contains(&v);
        let all = [g.input, g.output, g.span, g.strides, g.begin, g.end];
        (all.iter().flatten().all(|&v| sane(v))
            && g.strides.iter().all(|&s| s > 0)
            && g.span.iter().all(|&s| s > 0))
        .then_some(g)
    }

    /// The input rows (axis 0) or columns (axis 1) that output `[o0, o1)` reads, and the pads
    /// the tile needs so that it computes exactly those outputs. The last tile keeps the
    /// layer's own end pad, so a ceil-mode window hanging past it is computed as before.
    fn stretch(&self, axis: usize, o0: i64, o1: i64) -> Stretch {
        let start = o0 * self.strides[axis] - self.begin[axis];
        let end = (o1 - 1) * self.strides[axis] - self.begin[axis] + self.span[axis];
        let from = start.max(0);
        if o1 == self.output[axis] && self.ceil {
            return Stretch {
                from,
                to: self.input[axis],
                pad_begin: from - start,
                pad_end: self.end[axis],
            };
        }
        let to = end.min(self.input[axis]);
        Stretch {
            from,
            to,
            pad_begin: from - start,
            pad_end: end - to,
        }
    }

    /// The largest input extent a tile of `size` outputs reads along `axis`.
    fn reach(&self, axis: usize, size: i64) -> i64 {
        ((size - 1) * self.strides[axis] + self.span[axis]).min(self.input[axis])
    }
}

/// `total` split into `k` near-equal consecutive ranges.
fn ranges(total: i64, k: i64) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut at = 0;
    for m in 0..k {
        let size = total / k + i64::from(m < total % k);
        out.push((at, at + size));
        at += size;
    }
    out
}

/// What one layer is and what it holds.
struct Layer<'a> {
    n: NodeId,
    kind: Kind,
    x: ValueId,
    y: ValueId,
    x_dims: Vec<i64>,
    y_dims: Vec<i64>,
    /// Bytes of one element of the activations.
    elem: u64,
    w: Option<&'a Weight>,
    b: Option<&'a Weight>,
    params: u64,
    group: i64,
    /// Gemm's `transB`: B is `[N, K]`.
    trans_b: bool,
    geometry: Option<Geometry>,
}

impl Layer<'_> {
    fn in_bytes(&self) -> u64 {
        volume(&self.x_dims).saturating_mul(self.elem)
    }

    fn out_bytes(&self) -> u64 {
        volume(&self.y_dims).saturating_mul(self.elem)
    }

    /// The bytes each tile of `scheme` needs at most: its input, output and weights. Tiles
    /// take near-equal ranges, the first ones a channel more (16 over 3 is 6/5/5): the
    /// largest tile, not the average, must fit.
    fn need(&self, scheme: Scheme) -> u64 {
        let (in_b, out_b, params) = (self.in_bytes(), self.out_bytes(), self.params);
        let out_c = self.y_dims.get(1).copied().unwrap_or(1);
        match scheme {
            Scheme::OutChannels(k) => {
                if self.kind == Kind::Conv {
                    in_b.saturating_add(largest_share(out_b, out_c, k))
                        .saturating_add(largest_share(params, out_c, k))
                } else {
                    // A pool tile reads only its own channels.
                    largest_share(in_b.saturating_add(out_b), out_c, k)
                }
            }
            Scheme::InChannels(k) => {
                let reduced = match self.kind {
                    Kind::MatMul | Kind::Gemm => self.x_dims.last().copied().unwrap_or(1),
                    _ => self.x_dims.get(1).copied().unwrap_or(1),
                };
                largest_share(in_b, reduced, k)
                    .saturating_add(out_b)
                    .saturating_add(largest_share(params, reduced, k))
            }
            Scheme::Space { rows, cols, oc } => {
                let Some(g) = self.geometry else {
                    return u64::MAX;
                };
                let oc = oc.max(1);
                let (oh, ow) = (
                    ceil_div(g.output[0], rows.max(1)),
                    ceil_div(g.output[1], cols.max(1)),
                );
                let (ih, iw) = (g.reach(0, oh), g.reach(1, ow));
                let plane = |c: i64, h: i64, w: i64| {
                    volume(&[self.x_dims[0], c, h, w]).saturating_mul(self.elem)
                };
                plane(self.x_dims[1], ih, iw)
                    .saturating_add(plane(ceil_div(self.y_dims[1], oc), oh, ow))
                    .saturating_add(largest_share(params, self.y_dims[1], oc))
            }
        }
    }

    /// The schemes this layer allows, each with the fewest tiles that fit `budget`.
    fn candidates(&self, budget: u64) -> Vec<Scheme> {
        let mut out = Vec::new();
        // No scheme past MAX_TILES is used, so no search goes further: a file declaring
        // absurd dims costs nothing.
        let cap = MAX_TILES as i64;
        let fits = |s: Scheme| s.tiles() <= MAX_TILES && self.need(s) <= budget;
        let channels = self.y_dims.get(1).copied().unwrap_or(1);
        let by_out = matches!(self.kind, Kind::Pool | Kind::GlobalPool)
            || (self.kind == Kind::Conv && self.group == 1);
        if by_out {
            let weights_match =
                self.kind != Kind::Conv || self.w.and_then(|w| w.dims.first()) == Some(&channels);
            let k = (2..=channels.min(cap)).find(|&k| fits(Scheme::OutChannels(k)));
            if let (Some(k), true) = (k, weights_match) {
                out.push(Scheme::OutChannels(k));
            }
        }
        if let (Some(g), Kind::Conv | Kind::Pool) = (self.geometry, self.kind) {
            // Output-channel factors to combine with space: none for pools and grouped Convs,
            // else 1, 2, 4, … up to the channels (weights too large for a spatial tile).
            let factors: Vec<i64> = if by_out && self.kind == Kind::Conv {
                std::iter::successors(Some(1i64), |f| {
                    (*f < channels.min(cap)).then(|| (f * 2).min(channels))
                })
                .filter(|&f| f == 1 || self.w.and_then(|w| w.dims.first()) == Some(&channels))
                .collect()
            } else {
                vec![1]
            };
            let best = factors
                .into_iter()
                .filter_map(|oc| {
                    // One row band with oc > 1 is the output-channel scheme, searched above.
                    let rows_only = (2..=g.output[0].min(cap))
                        .find(|&rows| fits(Scheme::Space { rows, cols: 1, oc }));
                    let grid = || {
                        (2..=g.output[1].min(cap))
                            .filter_map(|cols| {
                                let rows = (1..=g.output[0].min(cap / cols))
                                    .find(|&rows| fits(Scheme::Space { rows, cols, oc }))?;
                                Some(Scheme::Space { rows, cols, oc })
                            })
                            .min_by_key(|s| s.tiles())
                    };
                    match rows_only {
                        Some(rows) => Some(Scheme::Space { rows, cols: 1, oc }),
                        None => grid(),
                    }
                })
                .min_by_key(|s| s.tiles());
            out.extend(best);
        }
        let by_in = (self.kind == Kind::Conv && self.group == 1)
            || matches!(self.kind, Kind::MatMul | Kind::Gemm);
        if by_in {
            let reduced = match self.kind {
                Kind::MatMul | Kind::Gemm => self.x_dims.last().copied().unwrap_or(1),
                _ => self.x_dims.get(1).copied().unwrap_or(1),
            };
            // The weights' reduced axis must be the input's, or slicing both alike is wrong.
            let w_axis = match self.kind {
                Kind::Gemm if self.trans_b => 1,
                Kind::MatMul | Kind::Gemm => 0,
                _ => 1,
            };
            let weights_match = self.w.and_then(|w| w.dims.get(w_axis)) == Some(&reduced);
            let k = (2..=reduced.min(cap)).find(|&k| fits(Scheme::InChannels(k)));
            if let (Some(k), true) = (k, weights_match) {
                out.push(Scheme::InChannels(k));
            }
        }
        out
    }
}

/// The bytes of the largest of `k` near-equal ranges of `units` (see [`ranges`]), when
/// `bytes` spread evenly over them.
fn largest_share(bytes: u64, units: i64, k: i64) -> u64 {
    let (units, k) = (units.max(1), k.max(1));
    let share = u128::from(bytes) * ceil_div(units, k) as u128 / units as u128;
    u64::try_from(share).unwrap_or(u64::MAX)
}

/// ⌈a / b⌉ for a ≥ 0 and b > 0, without an intermediate that could overflow.
fn ceil_div(a: i64, b: i64) -> i64 {
    a / b + i64::from(a % b != 0)
}

fn volume(dims: &[i64]) -> u64 {
    dims.iter()
        .fold(1u64, |acc, &d| acc.saturating_mul(d.max(0) as u64))
}

/// The layer at `n`, if it is one that tiles: static shapes, constant weights.
fn layer<'a>(cx: &'a PassCx, n: NodeId) -> Option<Layer<'a>> {
    let g = &cx.model.graph;
    let view = cx.view();
    // By the class the op registry gives: Gemm is the fully connected layer.
    let kind = match view.class(n) {
        OpClass::Conv => Kind::Conv,
        OpClass::MaxPool | OpClass::AveragePool => Kind::Pool,
        OpClass::GlobalAveragePool | OpClass::GlobalMaxPool => Kind::GlobalPool,
        OpClass::MatMul => Kind::MatMul,
        OpClass::FullyConnected if view.int_attr(n, "transA").unwrap_or(0) == 0 => Kind::Gemm,
        _ => return None,
    };
    let (x, y) = (view.input(n, 0)?, view.single_output(n)?);
    let (x_dims, y_dims) = (view.dims(x)?, view.dims(y)?);
    let elem = u64::from(g.value(x).ty.elem?.bits()?).div_ceil(8);
    let w = match kind {
        Kind::Conv | Kind::MatMul | Kind::Gemm => Some(weight(cx, view.input(n, 1))?),
        _ => None,
    };
    let b = match view.input(n, 2) {
        Some(b) if kind == Kind::Conv => Some(weight(cx, Some(b))?),
        // Gemm's C may be computed; a constant one counts as weights.
        Some(b) if kind == Kind::Gemm => weight(cx, Some(b)),
        _ => None,
    };
    if matches!(kind, Kind::MatMul | Kind::Gemm) && (w?.dims.len() != 2 || x_dims.len() < 2) {
        return None;
    }
    let geometry = match kind {
        Kind::Conv | Kind::Pool => Geometry::of(cx, n, &x_dims, &y_dims),
        _ => None,
    };
    Some(Layer {
        n,
        kind,
        x,
        y,
        x_dims,
        y_dims,
        elem,
        w,
        b,
        params: w
            .map_or(0, Weight::byte_len)
            .saturating_add(b.map_or(0, Weight::byte_len)),
        group: view.int_attr(n, "group").unwrap_or(1),
        trans_b: kind == Kind::Gemm && view.int_attr(n, "transB").unwrap_or(0) != 0,
        geometry,
    })
}

/// Convs, pools and MatMuls whose input, output and weights exceed their device's
/// `tile_bytes` are decomposed by the scheme that needs the fewest tiles.
pub(crate) fn tile(cx: &PassCx, e: &mut Edits) {
    let g = &cx.model.graph;
    for &n in g.topo_order() {
        let Some(budget) = cx
            .tile_bytes
            .get(n.index())
            .copied()
            .flatten()
            .filter(|_| cx.enabled(n, Rule::Tile))
        else {
            continue;
        };
        let label = g.node_label(n).to_string();
        // One level: a tile is never tiled again.
        if label.contains("@soc=") {
            continue;
        }
        let Some(l) = layer(cx, n) else { continue };
        let whole = l
            .in_bytes()
            .saturating_add(l.out_bytes())
            .saturating_add(l.params);
        if whole <= budget {
            continue;
        }
        let Some(scheme) = l.candidates(budget).into_iter().min_by_key(|s| s.tiles()) else {
            if !matches!(l.kind, Kind::MatMul | Kind::Gemm) {
                e.notes.push(format!(
                    "tile: {label}: needs {whole} B, and no tiling within {MAX_TILES} tiles fits tile_bytes ({budget} B): left whole"
                ));
            }
            continue;
        };
        let done = match scheme {
            Scheme::OutChannels(k) => out_channels(cx, e, &l, &label, k),
            Scheme::Space { rows, cols, oc } => space(cx, e, &l, &label, rows, cols, oc),
            Scheme::InChannels(k) => in_channels(cx, e, &l, &label, k),
        };
        if done {
            e.notes.push(format!(
                "tile: {label}: {} tiles {}, the largest needing {} of {budget} B",
                scheme.tiles(),
                scheme.describe(),
                l.need(scheme)
            ));
            e.count += 1;
        }
    }
}

/// The activation fused after a Conv, which goes into each tile when tiling commutes with it.
fn fused_activation(cx: &PassCx, l: &Layer) -> Option<NodeId> {
    let view = cx.view();
    let g = &cx.model.graph;
    view.sole_consumer(l.n).filter(|&a| {
        l.kind == Kind::Conv
            && cx.enabled(a, Rule::VpuConvActivation)
            && view.input(a, 0) == Some(l.y)
            && view.single_output(a).is_some()
            && (matches!(view.op(a), "Relu" | "LeakyRelu")
                || (view.op(a) == "Clip"
                    && g.node(a)
                        .inputs
                        .iter()
                        .skip(1)
                        .flatten()
                        .all(|&v| view.is_const(v))))
    })
}

/// Claims the layer (and its activation), and reserves the tiles' names; false if either is
/// taken.
fn claim(
    e: &mut Edits,
    l: &Layer,
    act: Option<NodeId>,
    label: &str,
    k: u64,
) -> Option<Vec<String>> {
    let claimed = match act {
        Some(a) => e.claim(&[l.n, a]),
        None => e.claim(&[l.n]),
    };
    if !claimed {
        return None;
    }
    let names: Vec<String> = (1..=k).map(|m| format!("{label}@soc={m}/{k}")).collect();
    if !names.iter().all(|t| e.take_exact(t)) {
        e.notes.push(format!(
            "tile: {label}: a node named {label}@soc=… already exists, left whole"
        ));
        return None;
    }
    Some(names)
}

/// Adds the tile nodes and, with `act`, a copy of the activation after each; returns what
/// each tile gives and the tensor the joined tiles stand for.
fn emit_tiles(
    cx: &PassCx,
    e: &mut Edits,
    l: &Layer,
    act: Option<NodeId>,
    tiles: Vec<NodeProto>,
    new_nodes: &mut Vec<NodeProto>,
) -> (Vec<String>, ValueId) {
    let view = cx.view();
    let g = &cx.model.graph;
    let k = tiles.len();
    let mut joined = Vec::new();
    let mut final_out = l.y;
    for (m, tile) in tiles.into_iter().enumerate() {
        let out = tile.output[0].clone();
        e.origin(tile.name(), &[l.n]);
        new_nodes.push(tile);
        joined.push(out.clone());
        if let Some((a, a_out)) = act.and_then(|a| Some((a, view.single_output(a)?))) {
            let a_label = g.node_label(a).to_string();
            let a_name = e.fresh(&format!("{a_label}@soc={}/{k}", m + 1));
            let a_tile_out = e.fresh(&format!("{}@soc={}/{k}", name(cx, a_out), m + 1));
            let mut at = cx.record(a).clone();
            at.name = Some(a_name.clone());
            at.input[0] = out;
            at.output = vec![a_tile_out.clone()];
            new_nodes.push(at);
            e.origin(&a_name, &[a]);
            joined[m] = a_tile_out;
            final_out = a_out;
        }
    }
    (joined, final_out)
}

fn finish(e: &mut Edits, l: &Layer, act: Option<NodeId>, new_nodes: Vec<NodeProto>) {
    for nn in new_nodes {
        e.insert_at(l.n, nn);
    }
    e.remove(l.n);
    if let Some(a) = act {
        e.remove(a);
    }
}

fn tile_output(cx: &PassCx, e: &mut Edits, l: &Layer, m: usize, k: u64) -> String {
    e.fresh(&format!("{}@soc={}/{k}", name(cx, l.y), m + 1))
}

/// Output channels: each tile computes some channels (a Conv tile with those filters, a pool
/// tile from those input channels); a Concat joins them.
fn out_channels(cx: &PassCx, e: &mut Edits, l: &Layer, label: &str, k: i64) -> bool {
    let act = fused_activation(cx, l);
    let Some(names) = claim(e, l, act, label, k as u64) else {
        return false;
    };
    let channels = l.y_dims[1];
    let sizes: Vec<i64> = ranges(channels, k).iter().map(|(a, b)| b - a).collect();
    let proto = cx.record(l.n);
    let mut new_nodes = Vec::new();
    let inputs: Vec<Vec<String>> = if l.kind == Kind::Conv {
        // Every tile reads the whole input with its slice of the filters.
        let Some(groups) = out_channel_weights(cx, e, l, k) else {
            return false;
        };
        groups
            .into_iter()
            .map(|g| std::iter::once(name(cx, l.x)).chain(g).collect())
            .collect()
    } else {
        let parts: Vec<String> = (1..=k)
            .map(|m| e.fresh(&format!("{}@soc={m}/{k}", name(cx, l.x))))
            .collect();
        new_nodes.push(split_node(
            cx,
            e,
            &format!("{label}@split"),
            name(cx, l.x),
            parts.clone(),
            1,
            &sizes,
        ));
        parts.into_iter().map(|p| vec![p]).collect()
    };
    let tiles: Vec<NodeProto> = names
        .iter()
        .zip(inputs)
        .enumerate()
        .map(|(m, (t, ins))| {
            let mut tile = proto.clone();
            tile.name = Some(t.clone());
            tile.input = ins;
            tile.output = vec![tile_output(cx, e, l, m, k as u64)];
            tile
        })
        .collect();
    let (joined, final_out) = emit_tiles(cx, e, l, act, tiles, &mut new_nodes);
    let concat = e.fresh(&format!("{label}@concat"));
    new_nodes.push(node(
        "Concat",
        &concat,
        joined,
        vec![name(cx, final_out)],
        vec![attr_int("axis", 1)],
    ));
    e.origin(&concat, &[l.n]);
    finish(e, l, act, new_nodes);
    true
}

/// A Slice of `x` over H and W (`cols` false: H only).
fn slice_node(
    cx: &PassCx,
    e: &mut Edits,
    x: String,
    out: String,
    rows: Stretch,
    cols: Option<Stretch>,
) -> NodeProto {
    let name = e.fresh(&format!("{out}@slice"));
    let (starts, ends, axes) = match cols {
        Some(c) => (vec![rows.from, c.from], vec![rows.to, c.to], vec![2, 3]),
        None => (vec![rows.from], vec![rows.to], vec![2]),
    };
    if cx.opset >= 10 {
        let mut inputs = vec![x];
        for (what, v) in [("starts", &starts), ("ends", &ends), ("axes", &axes)] {
            let t = e.fresh(&format!("{name}_{what}"));
            e.initializer(i64_tensor(&t, v));
            inputs.push(t);
        }
        node("Slice", &name, inputs, vec![out], Vec::new())
    } else {
        node(
            "Slice",
            &name,
            vec![x],
            vec![out],
            vec![
                attr_ints("starts", &starts),
                attr_ints("ends", &ends),
                attr_ints("axes", &axes),
            ],
        )
    }
}

/// Space: a grid of `rows` × `cols` tiles, each from a Slice of the input with its halo, the
/// layer's pads kept at the outer edges only; with `oc` > 1 each cut further over output
/// channels (Concat over channels first); Concats over W, then over H.
#[allow(clippy::too_many_arguments)]
fn space(
    cx: &PassCx,
    e: &mut Edits,
    l: &Layer,
    label: &str,
    rows: i64,
    cols: i64,
    oc: i64,
) -> bool {
    let Some(geo) = l.geometry else { return false };
    let act = fused_activation(cx, l);
    let k = (rows * cols * oc) as u64;
    let Some(names) = claim(e, l, act, label, k) else {
        return false;
    };
    let groups = if oc > 1 {
        match out_channel_weights(cx, e, l, oc) {
            Some(g) => g,
            None => return false,
        }
    } else {
        Vec::new()
    };
    let proto = cx.record(l.n);
    let mut new_nodes = Vec::new();
    let mut tiles = Vec::new();
    let (row_ranges, col_ranges) = (ranges(geo.output[0], rows), ranges(geo.output[1], cols));
    for (r, &(r0, r1)) in row_ranges.iter().enumerate() {
        let hs = geo.stretch(0, r0, r1);
        for (c, &(c0, c1)) in col_ranges.iter().enumerate() {
            let at = r * col_ranges.len() + c;
            let ws = geo.stretch(1, c0, c1);
            let part = e.fresh(&format!("{}@soc={}/{}", name(cx, l.x), at + 1, rows * cols));
            new_nodes.push(slice_node(
                cx,
                e,
                name(cx, l.x),
                part.clone(),
                hs,
                (cols > 1).then_some(ws),
            ));
            for j in 0..oc.max(1) as usize {
                let m = at * oc.max(1) as usize + j;
                let mut tile = proto.clone();
                tile.name = Some(names[m].clone());
                tile.input[0] = part.clone();
                if let Some(inputs) = groups.get(j) {
                    tile.input.truncate(1);
                    tile.input.extend(inputs.iter().cloned());
                }
                tile.output = vec![tile_output(cx, e, l, m, k)];
                tile.attribute
                    .retain(|a| a.name() != "auto_pad" && a.name() != "pads");
                tile.attribute.push(attr_ints(
                    "pads",
                    &[hs.pad_begin, ws.pad_begin, hs.pad_end, ws.pad_end],
                ));
                tiles.push(tile);
            }
        }
    }
    let (joined, final_out) = emit_tiles(cx, e, l, act, tiles, &mut new_nodes);
    let target = name(cx, final_out);
    let mut join = |parts: Vec<String>, axis: i64, what: String, last: bool| -> String {
        let out = if last {
            target.clone()
        } else {
            e.fresh(&format!("{target}@{what}"))
        };
        let concat = e.fresh(&format!("{label}@concat_{what}"));
        new_nodes.push(node(
            "Concat",
            &concat,
            parts,
            vec![out.clone()],
            vec![attr_int("axis", axis)],
        ));
        e.origin(&concat, &[l.n]);
        out
    };
    // Over channels within each spatial tile, then over W within each band, then over H.
    let per_tile: Vec<String> = if oc > 1 {
        joined
            .chunks(oc as usize)
            .enumerate()
            .map(|(t, c)| join(c.to_vec(), 1, format!("c{}", t + 1), false))
            .collect()
    } else {
        joined
    };
    let bands: Vec<String> = if cols > 1 {
        per_tile
            .chunks(cols as usize)
            .enumerate()
            .map(|(r, band)| join(band.to_vec(), 3, format!("w{}", r + 1), rows == 1))
            .collect()
    } else {
        per_tile
    };
    if rows > 1 {
        join(bands, 2, "h".to_string(), true);
    }
    finish(e, l, act, new_nodes);
    true
}

/// The weights (and bias) of `oc` output-channel groups of a Conv, added as initializers:
/// each group's inputs after the data.
fn out_channel_weights(cx: &PassCx, e: &mut Edits, l: &Layer, oc: i64) -> Option<Vec<Vec<String>>> {
    let (w, w_raw) = l.w.and_then(|w| Some((w, bytes_of(w)?)))?;
    let b_raw = match l.b {
        Some(b) => Some((b, bytes_of(b)?)),
        None => None,
    };
    let w_input = cx
        .view()
        .input(l.n, 1)
        .map_or_else(String::new, |v| name(cx, v));
    let mut out = Vec::new();
    for (j, (start, end)) in ranges(l.y_dims[1], oc).into_iter().enumerate() {
        let mut dims = w.dims.clone();
        dims[0] = end - start;
        let w_name = e.fresh(&format!("{w_input}@oc={}/{oc}", j + 1));
        e.initializer(tensor(
            &w_name,
            w.elem,
            &dims,
            slice_dim0(&w_raw, &w.dims, start, end),
        ));
        let mut inputs = vec![w_name];
        if let Some((b, raw)) = &b_raw {
            let b_name = e.fresh(&format!("{w_input}_B@oc={}/{oc}", j + 1));
            e.initializer(tensor(
                &b_name,
                b.elem,
                &[end - start],
                slice_dim0(raw, &b.dims, start, end),
            ));
            inputs.push(b_name);
        }
        out.push(inputs);
    }
    Some(out)
}

/// Input channels: a Split of the input over its channels (the last axis for a MatMul), each
/// tile with the matching slice of the weights, a Sum of the partial results; the bias goes
/// to the first tile only. A fused activation stays after the Sum.
fn in_channels(cx: &PassCx, e: &mut Edits, l: &Layer, label: &str, k: i64) -> bool {
    let Some((w, w_raw)) = l.w.and_then(|w| Some((w, bytes_of(w)?))) else {
        return false;
    };
    let b_input = cx.view().input(l.n, 2).map(|v| name(cx, v));
    let Some(names) = claim(e, l, None, label, k as u64) else {
        return false;
    };
    let (axis, reduced) = match l.kind {
        Kind::MatMul | Kind::Gemm => (l.x_dims.len() as i64 - 1, l.x_dims[l.x_dims.len() - 1]),
        _ => (1, l.x_dims[1]),
    };
    // B's rows are A's columns, unless Gemm takes B transposed.
    let rows_of_b = l.kind == Kind::MatMul || (l.kind == Kind::Gemm && !l.trans_b);
    let spans = ranges(reduced, k);
    let sizes: Vec<i64> = spans.iter().map(|(a, b)| b - a).collect();
    let parts: Vec<String> = (1..=k)
        .map(|m| e.fresh(&format!("{}@soc={m}/{k}", name(cx, l.x))))
        .collect();
    let mut new_nodes = vec![split_node(
        cx,
        e,
        &format!("{label}@split"),
        name(cx, l.x),
        parts.clone(),
        axis,
        &sizes,
    )];
    let w_input = cx
        .view()
        .input(l.n, 1)
        .map_or_else(String::new, |v| name(cx, v));
    let proto = cx.record(l.n);
    let mut partials = Vec::new();
    for (m, ((start, end), part)) in spans.into_iter().zip(parts).enumerate() {
        let mut dims = w.dims.clone();
        let raw = if rows_of_b {
            dims[0] = end - start;
            slice_dim0(&w_raw, &w.dims, start, end)
        } else {
            dims[1] = end - start;
            slice_dim1(&w_raw, &w.dims, start, end)
        };
        let w_name = e.fresh(&format!("{w_input}@soc={}/{k}", m + 1));
        e.initializer(tensor(&w_name, w.elem, &dims, raw));
        let mut tile = proto.clone();
        tile.name = Some(names[m].clone());
        tile.input = vec![part, w_name];
        match (m, &b_input) {
            (0, Some(b)) => tile.input.push(b.clone()),
            // Gemm before opset 11 must have C: the other tiles read it scaled by zero.
            (_, Some(b)) if l.kind == Kind::Gemm && cx.opset < 11 => {
                tile.input.push(b.clone());
                tile.attribute.retain(|a| a.name() != "beta");
                tile.attribute.push(attr_float("beta", 0.0));
            }
            _ => {}
        }
        let out = tile_output(cx, e, l, m, k as u64);
        tile.output = vec![out.clone()];
        e.origin(&names[m], &[l.n]);
        new_nodes.push(tile);
        partials.push(out);
    }
    let sum = e.fresh(&format!("{label}@sum"));
    new_nodes.push(node("Sum", &sum, partials, vec![name(cx, l.y)], Vec::new()));
    e.origin(&sum, &[l.n]);
    finish(e, l, None, new_nodes);
    true
}

#[cfg(test)]
mod tests {
    use super::{largest_share, ranges, Geometry, Kind, Layer, Scheme};
    use cleave_ir::{NodeId, ValueId};

    /// A MaxPool of 16 channels whose 16,000 bytes of input and output make 3 tiles of 5,334
    /// on average, but 6/5/5 channels: its largest tile needs 6,000 B, past a 5,500 B budget,
    /// so 4 tiles are taken.
    #[test]
    fn the_budget_holds_for_the_largest_tile() {
        let pool = Layer {
            n: NodeId(0),
            kind: Kind::Pool,
            x: ValueId(0),
            y: ValueId(1),
            x_dims: vec![1, 16, 10, 20],
            y_dims: vec![1, 16, 5, 10],
            elem: 4,
            w: None,
            b: None,
            params: 0,
            group: 1,
            trans_b: false,
            geometry: None,
        };
        assert_eq!(pool.need(Scheme::OutChannels(3)), 6_000);
        assert_eq!(pool.need(Scheme::OutChannels(4)), 4_000);
        assert_eq!(pool.candidates(5_500), vec![Scheme::OutChannels(4)]);
        assert_eq!(largest_share(u64::MAX, 2, 1), u64::MAX);
        let sizes: Vec<i64> = ranges(16, 3).iter().map(|(a, b)| b - a).collect();
        assert_eq!(sizes, [6, 5, 5]);
    }

    fn geo(input: i64, span: i64, stride: i64, begin: i64, end: i64, ceil: bool) -> Geometry {
        let out = if ceil {
            (input + begin + end - span + stride - 1) / stride + 1
        } else {
            (input + begin + end - span) / stride + 1
        };
        Geometry {
            input: [input; 2],
            output: [out; 2],
            span: [span; 2],
            strides: [stride; 2],
            begin: [begin; 2],
            end: [end; 2],
            ceil,
        }
    }

    /// Every tile computes exactly its outputs: (its input + pads − span) / stride + 1, with
    /// ceil mode where the layer has it.
    #[test]
    fn each_stretch_gives_exactly_its_outputs_and_pads_only_at_the_edges() {
        for (input, span, stride, begin, end, ceil) in [
            (96, 3, 1, 1, 1, false),
            (97, 5, 2, 2, 1, false),
            (31, 2, 3, 0, 0, false),
            (33, 3, 2, 0, 1, true),
            (20, 5, 1, 0, 3, false),
            (64, 7, 2, 3, 3, false),
        ] {
            let g = geo(input, span, stride, begin, end, ceil);
            for k in 1..=g.output[0].min(9) {
                for (m, (o0, o1)) in ranges(g.output[0], k).into_iter().enumerate() {
                    let s = g.stretch(0, o0, o1);
                    let extent = s.to - s.from + s.pad_begin + s.pad_end - span;
                    let got = if ceil {
                        (extent + stride - 1) / stride + 1
                    } else {
                        extent / stride + 1
                    };
                    assert_eq!(
                        got,
                        o1 - o0,
                        "{input} {span} {stride} {begin} {end} {ceil}: tile {m} of {k}"
                    );
                    assert!(s.from >= 0 && s.to <= input && s.from < s.to);
                    assert!(s.pad_begin <= begin && s.pad_end <= end.max(0) + stride);
                    if o0 > 0 && o0 * stride - begin >= 0 {
                        assert_eq!(s.pad_begin, 0, "an inner tile is not padded at its start");
                    }
                }
            }
        }
    }
}
