//! Rules for default-domain ops that arrived late (opsets 17 to 23: Attention,
//! RMSNormalization, RotaryEmbedding, windows and DFT), the training and loss ops, strings,
//! sequences and optionals. Element type and rank come first; dims where they are cheap.

use cleave_ir::{Dim, ElemType, TensorType};

use super::Cx;
use crate::elem_from_code;
use crate::op_table::OpTable;

fn unknown_dims(n: usize) -> Vec<Dim> {
    vec![Dim::Unknown; n]
}

fn like(cx: &Cx, i: usize) -> TensorType {
    cx.ty(i)
}

fn with_rank(elem: Option<ElemType>, rank: Option<usize>) -> TensorType {
    TensorType {
        elem,
        shape: rank.map(unknown_dims),
    }
}

fn dim(cx: &Cx, i: usize, axis: usize) -> Dim {
    cx.shape(i)
        .and_then(|s| s.get(axis).cloned())
        .unwrap_or(Dim::Unknown)
}

/// An `output_datatype`-style attribute, float32 when absent.
fn attr_elem(cx: &Cx, name: &str) -> Option<ElemType> {
    match cx.attr_i(name) {
        Some(code) => elem_from_code(i32::try_from(code).ok()?),
        None => Some(ElemType::F32),
    }
}

pub(crate) fn register(r: &mut OpTable) {
    r.shapes(&["Compress"], crate::validate::axis_only);
    r.shapes(&["OneHot"], |o| {
        match o.constant(1).as_deref().and_then(<[f64]>::first) {
            Some(&d) if d < 0.0 => Err(format!("depth {d} is negative")),
            _ => Ok(()),
        }
    });
    r.add(
        &[
            "RMSNormalization",
            "RotaryEmbedding",
            "CumProd",
            "TensorScatter",
        ],
        |cx| vec![like(cx, 0)],
    );
    r.add(&["DeformConv", "MaxUnpool"], |cx| {
        vec![with_rank(cx.elem(0), cx.rank(0))]
    });
    r.add(&["CastLike"], |cx| {
        vec![TensorType {
            elem: cx.elem(1),
            shape: cx.shape(0).map(<[Dim]>::to_vec),
        }]
    });
    r.add(&["Attention"], attention);
    r.add(
        &["SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"],
        |cx| {
            let loss = if cx.attr_str("reduction") == Some("none") {
                TensorType {
                    elem: cx.elem(0),
                    shape: cx.shape(1).map(<[Dim]>::to_vec),
                }
            } else {
                TensorType {
                    elem: cx.elem(0),
                    shape: Some(Vec::new()),
                }
            };
            vec![loss, like(cx, 0)]
        },
    );
    r.add(&["Unique"], |cx| {
        let rank = if cx.attr_i("axis").is_some() {
            cx.rank(0)
        } else {
            Some(1)
        };
        let idx = || with_rank(Some(ElemType::I64), Some(1));
        vec![with_rank(cx.elem(0), rank), idx(), idx(), idx()]
    });
    r.add(&["Einsum"], einsum);
    r.add(&["OneHot"], |cx| {
        vec![with_rank(cx.elem(2), cx.rank(0).map(|r| r + 1))]
    });
    r.add(&["Compress"], |cx| {
        let rank = if cx.attr_i("axis").is_some() {
            cx.rank(0)
        } else {
            Some(1)
        };
        vec![with_rank(cx.elem(0), rank)]
    });
    r.add(&["GatherND"], |cx| {
        let b = usize::try_from(cx.attr_i("batch_dims").unwrap_or(0)).ok();
        let rank = (|| {
            let (r, q) = (cx.rank(0)?, cx.rank(1)?);
            let last = usize::try_from(cx.shape(1)?.last()?.fixed()?).ok()?;
            (q + r).checked_sub(last)?.checked_sub(1)?.checked_sub(b?)
        })();
        vec![with_rank(cx.elem(0), rank)]
    });
    r.add(&["DFT"], |cx| vec![with_rank(cx.elem(0), cx.rank(0))]);
    r.add(&["STFT"], |cx| vec![with_rank(cx.elem(0), Some(4))]);
    r.add(&["HannWindow", "HammingWindow", "BlackmanWindow"], |cx| {
        vec![with_rank(attr_elem(cx, "output_datatype"), Some(1))]
    });
    r.add(&["MelWeightMatrix"], |cx| {
        vec![with_rank(attr_elem(cx, "output_datatype"), Some(2))]
    });
    r.add(&["Col2Im"], |cx| {
        vec![with_rank(cx.elem(0), cx.len_1d(1).map(|n| n + 2))]
    });
    r.add(&["AffineGrid"], |cx| {
        vec![with_rank(cx.elem(0), cx.len_1d(1))]
    });
    r.add(&["Det"], |cx| {
        vec![with_rank(
            cx.elem(0),
            cx.rank(0).and_then(|r| r.checked_sub(2)),
        )]
    });
    r.add(&["NonMaxSuppression"], |_| {
        vec![TensorType::new(
            ElemType::I64,
            vec![Dim::Unknown, Dim::Fixed(3)],
        )]
    });
    r.add(&["TfIdfVectorizer"], |cx| {
        vec![with_rank(Some(ElemType::F32), cx.rank(0))]
    });
    r.add(&["StringNormalizer"], |cx| {
        vec![with_rank(Some(ElemType::Str), cx.rank(0))]
    });
    r.add(&["StringConcat"], |cx| {
        let rank = match (cx.rank(0), cx.rank(1)) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
        vec![with_rank(Some(ElemType::Str), rank)]
    });
    r.add(&["RegexFullMatch"], |cx| {
        vec![TensorType {
            elem: Some(ElemType::Bool),
            shape: cx.shape(0).map(<[Dim]>::to_vec),
        }]
    });
    r.add(&["StringSplit"], |cx| {
        vec![
            with_rank(Some(ElemType::Str), cx.rank(0).map(|r| r + 1)),
            TensorType {
                elem: Some(ElemType::I64),
                shape: cx.shape(0).map(<[Dim]>::to_vec),
            },
        ]
    });
    r.add(&["ImageDecoder"], |_| {
        vec![with_rank(Some(ElemType::U8), Some(3))]
    });
    r.add(&["SequenceLength"], |_| {
        vec![TensorType::new(ElemType::I64, vec![])]
    });
    r.add(&["OptionalHasElement"], |_| {
        vec![TensorType::new(ElemType::Bool, vec![])]
    });
    r.add_in(
        "ai.onnx.preview.training",
        &["Adagrad", "Adam", "Momentum"],
        optimizer,
    );
    r.add(&["Scan"], scan);
    r.check(&["Scan"], check_scan);
}

/// Attention (opset 23): Q, K, V as [batch, heads, seq, head_size] (4-D) or
/// [batch, seq, hidden] (3-D); outputs Y, present key, present value, and the QK product.
fn attention(cx: &Cx) -> Vec<TensorType> {
    let (q, k, v) = (cx.elem(0), cx.elem(1), cx.elem(2));
    let y = match cx.rank(0) {
        Some(4) => TensorType {
            elem: q,
            shape: Some(vec![
                dim(cx, 0, 0),
                dim(cx, 0, 1),
                dim(cx, 0, 2),
                dim(cx, 2, 3),
            ]),
        },
        Some(3) => {
            // Hidden of Y: V's head size times Q's heads.
            let hidden = match (cx.attr_i("q_num_heads"), cx.attr_i("kv_num_heads")) {
                (Some(qh), Some(kvh)) if kvh > 0 => dim(cx, 2, 2)
                    .fixed()
                    .and_then(|h| (h / kvh).checked_mul(qh))
                    .map_or(Dim::Unknown, Dim::Fixed),
                _ => Dim::Unknown,
            };
            TensorType {
                elem: q,
                shape: Some(vec![dim(cx, 0, 0), dim(cx, 0, 1), hidden]),
            }
        }
        _ => with_rank(q, None),
    };
    vec![
        y,
        with_rank(k, Some(4)),
        with_rank(v, Some(4)),
        with_rank(q, Some(4)),
    ]
}

/// Einsum with an explicit output (`->`) and no ellipsis: one dim per output letter, taken
/// from the input that has it.
fn einsum(cx: &Cx) -> Vec<TensorType> {
    let Some(eq) = cx.attr_str("equation") else {
        return vec![with_rank(cx.elem(0), None)];
    };
    let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
    let shape = (|| {
        let (ins, out) = eq.split_once("->")?;
        if eq.contains("...") {
            return None;
        }
        let mut letters = std::collections::HashMap::new();
        for (i, term) in ins.split(',').enumerate() {
            let s = cx.shape(i);
            for (a, c) in term.chars().enumerate() {
                let d = s.and_then(|s| s.get(a).cloned()).unwrap_or(Dim::Unknown);
                let e = letters.entry(c).or_insert(Dim::Unknown);
                if *e == Dim::Unknown {
                    *e = d;
                }
            }
        }
        Some(
            out.chars()
                .map(|c| letters.get(&c).cloned().unwrap_or(Dim::Unknown))
                .collect(),
        )
    })();
    vec![TensorType {
        elem: cx.elem(0),
        shape,
    }]
}

/// Adagrad (R, T, X.., G.., H..), Momentum (R, T, X.., G.., V..) and Adam (R, T, X.., G..,
/// V.., H..): each output is the new value of an input of the same type; gradients are not
/// outputs.
fn optimizer(cx: &Cx) -> Vec<TensorType> {
    let groups = if cx.node.op_type == "Adam" { 4 } else { 3 };
    let n = cx.n_inputs().saturating_sub(2) / groups;
    (0..cx.n_outputs())
        .map(|o| {
            let (group, i) = (o / n.max(1), o % n.max(1));
            // Output group 0 is X; later groups skip the gradients.
            let input_group = if group == 0 { 0 } else { group + 1 };
            like(cx, 2 + input_group * n + i)
        })
        .collect()
}

/// Scan (opset 9+): the final states, then each scan output stacked along its axis.
fn scan(cx: &Cx) -> Vec<TensorType> {
    let Some(cleave_ir::AttrValue::Graph(body)) = cx.attr("body") else {
        return Vec::new();
    };
    let n_scan_in = usize::try_from(cx.attr_i("num_scan_inputs").unwrap_or(0)).unwrap_or(0);
    // Opset 8 adds a first input (sequence lengths) and a batch axis to every scan output.
    let (lens, stacked) = if cx.opset < 9 { (1, 2) } else { (0, 1) };
    let n_state = cx.n_inputs().saturating_sub(n_scan_in + lens);
    // The number of iterations: the first scan input's length along its scan axis.
    let steps = (lens == 0)
        .then(|| {
            let first = lens + n_state;
            let shape = cx.shape(first)?;
            let axis = cx
                .attr_ints("scan_input_axes")
                .and_then(|a| a.first().copied())
                .unwrap_or(0);
            let axis = if axis < 0 {
                axis + shape.len() as i64
            } else {
                axis
            };
            shape.get(usize::try_from(axis).ok()?).cloned()
        })
        .flatten()
        .unwrap_or(Dim::Unknown);
    body.outputs
        .iter()
        .enumerate()
        .map(|(k, &o)| {
            let t = body.value(o).ty.clone();
            if k < n_state {
                // Opset 8's states carry the batch axis too.
                match lens {
                    0 => t,
                    _ => with_rank(t.elem, t.rank().map(|r| r + 1)),
                }
            } else if let (0, Some(shape)) = (lens, t.shape.as_ref()) {
                // Stacked along its output axis (0 unless scan_output_axes says).
                let axis = cx
                    .attr_ints("scan_output_axes")
                    .and_then(|a| a.get(k - n_state).copied())
                    .unwrap_or(0);
                let rank = shape.len() as i64 + 1;
                let axis = if axis < 0 { axis + rank } else { axis };
                let mut shape = shape.clone();
                match usize::try_from(axis).ok().filter(|&a| a <= shape.len()) {
                    Some(a) => shape.insert(a, steps.clone()),
                    None => return with_rank(t.elem, Some(shape.len() + 1)),
                }
                TensorType {
                    elem: t.elem,
                    shape: Some(shape),
                }
            } else {
                with_rank(t.elem, t.rank().map(|r| r + stacked))
            }
        })
        .collect()
}

/// The body sees every input but opset 8's optional sequence_lens, and gives every output;
/// `num_scan_inputs` is within the inputs.
fn check_scan(n: &cleave_ir::Node, opset: i64) -> Result<(), String> {
    let inputs = n.inputs.len().saturating_sub(usize::from(opset < 9));
    if let Some(m) = crate::validate::int(n, "num_scan_inputs") {
        if m < 1 || usize::try_from(m).map_or(true, |m| m > inputs) {
            return Err(format!(
                "num_scan_inputs {m} is more than its {inputs} inputs or below 1"
            ));
        }
    }
    if let Some(cleave_ir::AttrValue::Graph(body)) = n.attr("body") {
        if body.inputs.len() != inputs || body.outputs.len() != n.outputs.len() {
            return Err(format!(
                "body has {} inputs and {} outputs; the node has {inputs} and {}",
                body.inputs.len(),
                body.outputs.len(),
                n.outputs.len()
            ));
        }
    }
    Ok(())
}
