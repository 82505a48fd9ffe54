//! Convolutions, pooling, matrix products, resizing, recurrent layers and TopK.

use cleave_ir::{AttrValue, Dim, ElemType, OpClass, TensorType};

use super::dims::{axis, broadcast, fits, map_fixed};
use super::Cx;
use crate::op_registry::Operands;
use crate::op_registry::{Flops, OpRegistry};
use crate::validate::{at_least, int, ints, show};

/// How DepthToSpace/SpaceToDepth change a spatial dim by the block size.
type SpatialMap = fn(i64, i64) -> Option<i64>;

pub(crate) fn register(r: &mut OpRegistry) {
    r.check(
        &[
            "Conv",
            "ConvTranspose",
            "ConvInteger",
            "QLinearConv",
            "MaxPool",
            "AveragePool",
            "LpPool",
            "DeformConv",
        ],
        |n, _| {
            at_least(n, "strides", 1)?;
            at_least(n, "dilations", 1)?;
            at_least(n, "kernel_shape", 1)?;
            at_least(n, "group", 1)?;
            at_least(n, "pads", 0)
        },
    );
    r.check(&["DepthToSpace", "SpaceToDepth"], |n, _| {
        at_least(n, "blocksize", 1)
    });
    r.shapes(&["Gemm"], |o| {
        for i in 0..2 {
            if let Some(r) = o.rank(i).filter(|&r| r != 2) {
                return Err(format!(
                    "input {i} has rank {r}; Gemm multiplies matrices (rank 2)"
                ));
            }
        }
        Ok(())
    });
    r.shapes(&["MatMul"], matmul_shapes);
    r.shapes(&["DepthToSpace", "SpaceToDepth"], |o| {
        let (Some(b), Some(x)) = (int(o.n, "blocksize"), o.dims(0)) else {
            return Ok(());
        };
        if b < 1 || x.len() != 4 {
            return Ok(());
        }
        // DepthToSpace spreads channels over b × b positions; SpaceToDepth gathers b × b
        // positions into channels: what does not divide leaves a fraction (or no) output.
        let need = |what: &str, have: Option<i64>, by: i64| match have {
            Some(v) if v % by != 0 => {
                Err(format!("blocksize {b}: {what} {v} does not divide by {by}"))
            }
            _ => Ok(()),
        };
        if o.n.op_type == "DepthToSpace" {
            need("channels", x[1], b.saturating_mul(b))
        } else {
            need("height", x[2], b)?;
            need("width", x[3], b)
        }
    });
    r.shapes(
        &[
            "Conv",
            "ConvTranspose",
            "ConvInteger",
            "MaxPool",
            "AveragePool",
            "LpPool",
        ],
        window_shapes,
    );
    r.shapes(&["Resize"], resize_shapes);
    r.shapes(&["TopK"], |o| {
        match o.int_constant(1).as_deref().and_then(<[i64]>::first) {
            Some(&k) if k < 0 => Err(format!("k {k} is negative")),
            _ => Ok(()),
        }
    });
    r.class("Conv", OpClass::Conv);
    r.class("MaxPool", OpClass::MaxPool);
    r.class("AveragePool", OpClass::AveragePool);
    r.class("GlobalAveragePool", OpClass::GlobalAveragePool);
    r.class("GlobalMaxPool", OpClass::GlobalMaxPool);
    r.class("Gemm", OpClass::FullyConnected);
    r.class("MatMul", OpClass::MatMul);
    r.flops(&["Conv", "ConvInteger"], Flops::Conv);
    r.flops(&["ConvTranspose"], Flops::ConvTranspose);
    r.flops(&["MatMul", "MatMulInteger"], Flops::MatMul);
    r.flops(&["Gemm"], Flops::Gemm);
    // Whatever their attributes or non-constant inputs do to the dims, the rank stands.
    r.rank_keeping(&[
        "Conv",
        "ConvInteger",
        "QLinearConv",
        "ConvTranspose",
        "MaxPool",
        "AveragePool",
        "LpPool",
        "Resize",
        "Upsample",
        "DepthToSpace",
        "SpaceToDepth",
        "TopK",
        "RoiAlign",
        "MaxRoiPool",
        "GridSample",
    ]);
    r.add(&["Conv", "ConvInteger", "QLinearConv"], |cx| {
        // QLinearConv: x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias.
        let (w, elem) = match cx.node.op_type.as_str() {
            "QLinearConv" => (3, cx.elem(7).or(Some(ElemType::U8))),
            "ConvInteger" => (1, Some(ElemType::I32)),
            _ => (1, cx.elem(0)),
        };
        let channels = cx
            .shape(w)
            .and_then(|s| s.first().cloned())
            .unwrap_or(Dim::Unknown);
        vec![TensorType {
            elem,
            shape: windowed(cx, w, channels),
        }]
    });
    r.add(&["ConvTranspose"], |cx| {
        vec![TensorType {
            elem: cx.elem(0),
            shape: conv_transpose(cx),
        }]
    });
    r.add(&["MaxPool", "AveragePool", "LpPool"], |cx| {
        let channels = cx
            .shape(0)
            .and_then(|s| s.get(1).cloned())
            .unwrap_or(Dim::Unknown);
        let shape = windowed(cx, usize::MAX, channels);
        vec![
            TensorType {
                elem: cx.elem(0),
                shape: shape.clone(),
            },
            TensorType {
                elem: Some(ElemType::I64),
                shape,
            },
        ]
    });
    r.add(
        &["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"],
        |cx| {
            let shape = cx.shape(0).map(|s| {
                s.iter()
                    .enumerate()
                    .map(|(i, d)| if i < 2 { d.clone() } else { Dim::Fixed(1) })
                    .collect()
            });
            vec![TensorType {
                elem: cx.elem(0),
                shape,
            }]
        },
    );
    r.add(&["Gemm"], |cx| {
        let pick = |i: usize, trans: bool| -> Option<(Dim, Dim)> {
            let s = cx.shape(i)?;
            (s.len() == 2).then(|| {
                if trans {
                    (s[1].clone(), s[0].clone())
                } else {
                    (s[0].clone(), s[1].clone())
                }
            })
        };
        let m = pick(0, cx.attr_i("transA").unwrap_or(0) != 0).map(|p| p.0);
        let n = pick(1, cx.attr_i("transB").unwrap_or(0) != 0).map(|p| p.1);
        let shape = Some(vec![m.unwrap_or(Dim::Unknown), n.unwrap_or(Dim::Unknown)]);
        vec![TensorType {
            elem: cx.elem(0),
            shape,
        }]
    });
    r.add(&["MatMul", "MatMulInteger", "QLinearMatMul"], |cx| {
        let (a, b, elem) = match cx.node.op_type.as_str() {
            "QLinearMatMul" => (0, 3, cx.elem(7).or(Some(ElemType::U8))),
            "MatMulInteger" => (0, 1, Some(ElemType::I32)),
            _ => (0, 1, cx.elem(0)),
        };
        let shape = match (cx.shape(a), cx.shape(b)) {
            (Some(x), Some(y)) => matmul(x, y),
            _ => None,
        };
        vec![TensorType { elem, shape }]
    });
    r.add(&["Resize", "Upsample"], |cx| {
        vec![TensorType {
            elem: cx.elem(0),
            shape: resize(cx),
        }]
    });
    r.add(&["DepthToSpace", "SpaceToDepth"], |cx| {
        // A block size below 1 is invalid (the onnx checker refuses it): no shape, no panic.
        let b = cx.attr_i("blocksize").unwrap_or(1);
        let bb = b.checked_mul(b).filter(|_| b >= 1);
        let up = cx.node.op_type == "DepthToSpace";
        let shape = cx.shape(0).filter(|s| s.len() == 4).zip(bb).map(|(s, bb)| {
            let (c, hw): (Dim, SpatialMap) = if up {
                (map_fixed(&s[1], |c| c.checked_div(bb)), i64::checked_mul)
            } else {
                (map_fixed(&s[1], |c| c.checked_mul(bb)), i64::checked_div)
            };
            vec![
                s[0].clone(),
                c,
                map_fixed(&s[2], |d| hw(d, b)),
                map_fixed(&s[3], |d| hw(d, b)),
            ]
        });
        vec![TensorType {
            elem: cx.elem(0),
            shape,
        }]
    });
    r.add(&["TopK"], |cx| {
        let k = if cx.opset >= 10 {
            cx.ints(1).and_then(|v| v.first().copied())
        } else {
            cx.attr_i("k")
        };
        let shape = cx.shape(0).and_then(|s| {
            let a = axis(cx.attr_i("axis").unwrap_or(-1), s.len())?;
            let mut out = s.to_vec();
            out[a] = k.map_or(Dim::Unknown, Dim::Fixed);
            Some(out)
        });
        vec![
            TensorType {
                elem: cx.elem(0),
                shape: shape.clone(),
            },
            TensorType {
                elem: Some(ElemType::I64),
                shape,
            },
        ]
    });
    r.add(&["LSTM", "GRU", "RNN"], |cx| {
        let h = cx.attr_i("hidden_size").map_or(Dim::Unknown, Dim::Fixed);
        let dirs = Dim::Fixed(if cx.attr_str("direction") == Some("bidirectional") {
            2
        } else {
            1
        });
        let x = cx.shape(0).filter(|s| s.len() == 3);
        let layout = cx.attr_i("layout").unwrap_or(0);
        let (seq, batch) = match x {
            Some(s) if layout == 0 => (s[0].clone(), s[1].clone()),
            Some(s) => (s[1].clone(), s[0].clone()),
            None => (Dim::Unknown, Dim::Unknown),
        };
        let e = cx.elem(0);
        let (y, state) = if layout == 0 {
            (
                vec![seq, dirs.clone(), batch.clone(), h.clone()],
                vec![dirs, batch, h],
            )
        } else {
            (
                vec![batch.clone(), seq, dirs.clone(), h.clone()],
                vec![batch, dirs, h],
            )
        };
        let state = TensorType {
            elem: e,
            shape: Some(state),
        };
        vec![
            TensorType {
                elem: e,
                shape: Some(y),
            },
            state.clone(),
            state,
        ]
    });
}

/// Output shape of a sliding-window op over input 0 (`weights` is the weight input, or
/// `usize::MAX` for pooling, whose window comes from `kernel_shape`).
pub(crate) fn windowed(cx: &Cx, weights: usize, channels: Dim) -> Option<Vec<Dim>> {
    let x = cx.shape(0)?;
    if x.len() < 3 {
        return None;
    }
    let spatial = x.len() - 2;
    let kernel: Vec<i64> = match cx.attr_ints("kernel_shape") {
        Some(k) => k.to_vec(),
        None => cx
            .shape(weights)?
            .get(2..)?
            .iter()
            .map(Dim::fixed)
            .collect::<Option<_>>()?,
    };
    if kernel.len() != spatial {
        return None;
    }
    let (strides, dil, pads) = window_attrs(cx, spatial);
    let ceil = cx.attr_i("ceil_mode").unwrap_or(0) != 0;
    let auto = cx.attr_str("auto_pad").unwrap_or("NOTSET");
    if strides.len() != spatial || dil.len() != spatial || pads.len() != 2 * spatial {
        return None;
    }
    let mut out = vec![x[0].clone(), channels];
    for i in 0..spatial {
        // Attribute values come from the file: the arithmetic is done in i128, where products
        // of two i64 cannot overflow, and a size that does not fit back is unknown.
        let wide = |v: i64| i128::from(v);
        let span = wide(dil[i]) * (wide(kernel[i]) - 1) + 1;
        let (s, pb, pe) = (
            wide(strides[i].max(1)),
            wide(pads[i]),
            wide(pads[i + spatial]),
        );
        out.push(map_fixed(&x[i + 2], |n| {
            let n = wide(n);
            fits(match auto {
                "SAME_UPPER" | "SAME_LOWER" => (n + s - 1) / s,
                "VALID" => (n - span) / s + 1,
                _ => {
                    let room = n + pb + pe - span;
                    let mut o = if ceil {
                        (room + s - 1) / s + 1
                    } else {
                        room / s + 1
                    };
                    // With ceil_mode a window must start inside the input or its left padding.
                    if ceil && (o - 1) * s >= n + pb {
                        o -= 1;
                    }
                    o
                }
            })
        }));
    }
    Some(out)
}

fn conv_transpose(cx: &Cx) -> Option<Vec<Dim>> {
    let x = cx.shape(0)?;
    let w = cx.shape(1)?;
    if x.len() < 3 || w.len() != x.len() {
        return None;
    }
    let spatial = x.len() - 2;
    let group = cx.attr_i("group").unwrap_or(1);
    let channels = map_fixed(&w[1], |c| c.checked_mul(group));
    if let Some(shape) = cx.attr_ints("output_shape") {
        let tail = &shape[shape.len().saturating_sub(spatial)..];
        let mut out = vec![x[0].clone(), channels];
        out.extend(tail.iter().map(|&d| Dim::Fixed(d)));
        return Some(out);
    }
    let kernel: Vec<i64> = match cx.attr_ints("kernel_shape") {
        Some(k) => k.to_vec(),
        None => w[2..].iter().map(Dim::fixed).collect::<Option<_>>()?,
    };
    let (strides, dil, pads) = window_attrs(cx, spatial);
    let opad = cx
        .attr_ints("output_padding")
        .map_or_else(|| vec![0; spatial], <[i64]>::to_vec);
    let auto = cx.attr_str("auto_pad").unwrap_or("NOTSET");
    if kernel.len() != spatial
        || strides.len() != spatial
        || pads.len() != 2 * spatial
        || opad.len() != spatial
        || dil.len() != spatial
    {
        return None;
    }
    let mut out = vec![x[0].clone(), channels];
    for i in 0..spatial {
        let wide = |v: i64| i128::from(v);
        out.push(map_fixed(&x[i + 2], |n| {
            let (n, s) = (wide(n), wide(strides[i]));
            fits(match auto {
                "SAME_UPPER" | "SAME_LOWER" => n * s,
                _ => {
                    s * (n - 1) + wide(opad[i]) + (wide(kernel[i]) - 1) * wide(dil[i]) + 1
                        - wide(pads[i])
                        - wide(pads[i + spatial])
                }
            })
        }));
    }
    Some(out)
}

pub(crate) fn matmul(a: &[Dim], b: &[Dim]) -> Option<Vec<Dim>> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let a2: Vec<Dim> = if a.len() == 1 {
        vec![Dim::Fixed(1), a[0].clone()]
    } else {
        a.to_vec()
    };
    let b2: Vec<Dim> = if b.len() == 1 {
        vec![b[0].clone(), Dim::Fixed(1)]
    } else {
        b.to_vec()
    };
    let batch = broadcast(&[&a2[..a2.len() - 2], &b2[..b2.len() - 2]]);
    let mut out = batch;
    if a.len() > 1 {
        out.push(a2[a2.len() - 2].clone());
    }
    if b.len() > 1 {
        out.push(b2[b2.len() - 1].clone());
    }
    Some(out)
}

fn resize(cx: &Cx) -> Option<Vec<Dim>> {
    let x = cx.shape(0)?;
    let (scales_slot, sizes_slot) = match (cx.node.op_type.as_str(), cx.opset) {
        ("Upsample", v) if v < 9 => {
            let s = cx.attr_floats("scales")?;
            return scale(x, &s.iter().map(|&f| f as f64).collect::<Vec<_>>());
        }
        ("Upsample", _) | ("Resize", 10) => (1, usize::MAX),
        _ => (2, 3),
    };
    if cx.has_input(sizes_slot) {
        let sizes = cx.ints(sizes_slot)?;
        if sizes.len() == x.len() {
            return Some(sizes.iter().map(|&d| Dim::Fixed(d)).collect());
        }
        // With `axes`, sizes cover only the listed axes.
        let axes = cx.attr_ints("axes")?;
        let mut out = x.to_vec();
        for (&a, &s) in axes.iter().zip(sizes) {
            out[axis(a, x.len())?] = Dim::Fixed(s);
        }
        return Some(out);
    }
    let scales = float_const(cx, scales_slot)?;
    scale(x, &scales)
}

fn scale(x: &[Dim], scales: &[f64]) -> Option<Vec<Dim>> {
    (scales.len() == x.len()).then(|| {
        x.iter()
            .zip(scales)
            .map(|(d, &s)| {
                if s == 1.0 {
                    d.clone()
                } else {
                    map_fixed(d, |n| {
                        let v = (n as f64 * s).floor();
                        // `as` saturates; only sizes an i64 holds exactly are kept.
                        (v.is_finite() && v.abs() < 9.0e18).then_some(v as i64)
                    })
                }
            })
            .collect()
    })
}

fn float_const(cx: &Cx, slot: usize) -> Option<Vec<f64>> {
    let id = cx.input_id(slot)?;
    if let Some(w) = cx.g.value(id).weight() {
        return w.to_f64s();
    }
    // A Constant node's tensor.
    let p = cx.g.value(id).producer()?;
    match cx.g.node(p).attr("value")? {
        AttrValue::Tensor(t) => t.to_f64s(),
        _ => None,
    }
}

/// The inner dimensions of a matrix product agree.
fn matmul_shapes(o: &Operands) -> Result<(), String> {
    let (Some(a), Some(b)) = (o.dims(0), o.dims(1)) else {
        return Ok(());
    };
    let inner_b = if b.len() >= 2 { b.len() - 2 } else { 0 };
    if let (Some(Some(k)), Some(Some(kb))) = (a.last(), b.get(inner_b)) {
        if k != kb {
            return Err(format!(
                "inner dimensions differ: {k} (input 0's last) and {kb} (input 1's {})",
                if b.len() >= 2 {
                    "second-to-last"
                } else {
                    "only"
                }
            ));
        }
    }
    Ok(())
}

/// Scales above 0, one per axis resized.
fn resize_shapes(o: &Operands) -> Result<(), String> {
    let Some(scales) = o.constant(2).filter(|s| !s.is_empty()) else {
        return Ok(());
    };
    if let Some(bad) = scales.iter().find(|&&x| x.is_nan() || x <= 0.0) {
        return Err(format!("scales {scales:?}: {bad} is not above 0"));
    }
    let axes = ints(o.n, "axes").map(<[i64]>::len);
    let want = axes.map(|a| a as i64).or(o.rank(0));
    if let Some(want) = want.filter(|&w| w != scales.len() as i64) {
        return Err(format!(
            "scales has {} entries; the input has rank {want}",
            scales.len()
        ));
    }
    Ok(())
}

/// Convolutions and pools: one stride, dilation and kernel entry per spatial axis, two pads,
/// weights of the input's rank whose channels match the input's.
/// A window (kernel × dilation) wider than its padded input leaves no output: a Conv or pool
/// whose output dims would be 0 or below. Explicit pads only (`auto_pad` SAME always fits).
fn window_fits(o: &Operands, spatial: i64) -> Result<(), String> {
    let n = o.n;
    let auto = crate::ops::auto_pad(n);
    // SAME pads always leave an output; so may a ceil-mode pool's last, partial window.
    if (auto != "NOTSET" && auto != "VALID") || int(n, "ceil_mode") == Some(1) {
        return Ok(());
    }
    let x = o.dims(0).unwrap_or_default();
    let kernel: Vec<Option<i64>> = match ints(n, "kernel_shape") {
        Some(k) => k.iter().map(|&v| Some(v)).collect(),
        None => o
            .dims(1)
            .map(|w| w.into_iter().skip(2).collect())
            .unwrap_or_default(),
    };
    let pads = ints(n, "pads").filter(|_| auto == "NOTSET");
    for a in 0..spatial as usize {
        let (Some(Some(len)), Some(Some(k))) = (x.get(a + 2), kernel.get(a)) else {
            continue;
        };
        let d = ints(n, "dilations")
            .and_then(|v| v.get(a))
            .copied()
            .unwrap_or(1);
        let (b, e) = pads.map_or((0, 0), |p| {
            (
                p.get(a).copied().unwrap_or(0),
                p.get(a + spatial as usize).copied().unwrap_or(0),
            )
        });
        let span = (i128::from(*k) - 1) * i128::from(d) + 1;
        let room = i128::from(*len) + i128::from(b) + i128::from(e);
        if *k >= 1 && d >= 1 && span > room {
            return Err(format!(
                "the window spans {span} along spatial axis {a} (kernel {k}, dilation {d}), more than the input's {len} plus pads {b} and {e}: no output"
            ));
        }
    }
    Ok(())
}

fn window_shapes(o: &Operands) -> Result<(), String> {
    let n = o.n;
    let Some(rank) = o.rank(0) else {
        return Ok(());
    };
    let spatial = rank - 2;
    if spatial < 1 {
        return Err(format!(
            "the input has rank {rank}; {} needs batch, channels and at least one spatial axis",
            n.op_type
        ));
    }
    for (name, per_axis) in [
        ("strides", 1),
        ("dilations", 1),
        ("kernel_shape", 1),
        ("pads", 2),
        ("output_padding", 1),
    ] {
        if let Some(v) = ints(n, name) {
            let want = per_axis * spatial;
            if v.len() as i64 != want {
                return Err(format!(
                    "{name} {v:?} has {} entries; {spatial} spatial axes need {want}",
                    v.len()
                ));
            }
        }
    }
    if n.op_type != "ConvTranspose" {
        window_fits(o, spatial)?;
    }
    if !matches!(n.op_type.as_str(), "Conv" | "ConvInteger" | "ConvTranspose") {
        return Ok(());
    }
    let Some(w) = o.dims(1) else {
        return Ok(());
    };
    if w.len() as i64 != rank {
        return Err(format!(
            "weights {} have rank {}; the input has rank {rank}",
            show(&w),
            w.len()
        ));
    }
    let group = int(n, "group").unwrap_or(1);
    let x = o.dims(0).unwrap_or_default();
    if n.op_type == "ConvTranspose" {
        if let (Some(Some(c)), Some(m)) = (x.get(1), w[0]) {
            if *c != m {
                return Err(format!(
                    "weights {} take {m} input channels; the input has {c}",
                    show(&w)
                ));
            }
        }
        return Ok(());
    }
    if let (Some(Some(c)), Some(per_group)) = (x.get(1), w[1]) {
        if per_group.checked_mul(group) != Some(*c) {
            return Err(format!(
                "weights {} take {per_group} input channels per group × group {group}; the input has {c}",
                show(&w)
            ));
        }
    }
    if let Some(m) = w[0] {
        if group > 0 && m % group != 0 {
            return Err(format!(
                "{m} output channels do not divide into group {group}"
            ));
        }
    }
    Ok(())
}

/// A convolution's or pool's `strides`, `dilations` and `pads`, with ONNX's defaults (1, 1, 0)
/// where the node leaves them out.
fn window_attrs(cx: &Cx, spatial: usize) -> (Vec<i64>, Vec<i64>, Vec<i64>) {
    let or = |name: &str, n: usize, v: i64| {
        cx.attr_ints(name)
            .map_or_else(|| vec![v; n], <[i64]>::to_vec)
    };
    (
        or("strides", spatial, 1),
        or("dilations", spatial, 1),
        or("pads", 2 * spatial, 0),
    )
}
