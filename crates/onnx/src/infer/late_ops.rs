//! Rules for default-domain ops that arrived late (opsets 17 to 23: Attention,
//! RMSNormalization, RotaryEmbedding, windows and DFT), the training and loss ops, strings,
//! sequences and optionals. Element type and rank come first; dims where they are cheap.

use cleave_ir::{Dim, ElemType, TensorType};

use super::Cx;
use crate::elem_from_code;
use crate::op_registry::OpRegistry;

fn unknown_dims(n: usize) -> Vec<Dim> {
    vec![Dim::Unknown; n]
}

fn like(cx: &Cx, i: usize) -> TensorType {
    cx.ty(i)
}

pub(crate) fn with_rank(elem: Option<ElemType>, rank: Option<usize>) -> TensorType {
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

pub(crate) fn register(r: &mut OpRegistry) {
    r.shapes(&["Compress"], crate::validate::axis_only);
    r.shapes(&["Einsum"], |o| match o.n.attr("equation") {
        Some(cleave_ir::AttrValue::String(b)) => match std::str::from_utf8(b) {
            Ok(eq) => einsum_equation(eq, o.n.inputs.len()),
            Err(_) => Err("equation is not UTF-8".into()),
        },
        _ => Ok(()),
    });
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

/// An Einsum equation as ONNX defines it: comma-separated terms of letters (one `...` each at
/// most), one per input, then optionally `->` and an output term whose letters appear in the
/// inputs, each once.
fn einsum_equation(eq: &str, inputs: usize) -> Result<(), String> {
    let compact: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
    let why = |w: String| format!("equation '{eq}': {w}");
    let bad = |w: String| Err(why(w));
    let (lhs, out) = match compact.split_once("->") {
        Some((_, o)) if o.contains("->") || o.contains(',') => {
            return bad("more than one '->', or a ',' after it".into())
        }
        Some((l, o)) => (l, Some(o)),
        None => (compact.as_str(), None),
    };
    let term = |t: &str| -> Result<Vec<char>, String> {
        if t.matches("...").count() > 1 {
            return Err(format!("term '{t}' has more than one '...'"));
        }
        let letters: Vec<char> = t.replacen("...", "", 1).chars().collect();
        match letters.iter().find(|c| !c.is_ascii_alphabetic()) {
            Some(c) => Err(format!("'{c}' is not a letter")),
            None => Ok(letters),
        }
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != inputs {
        return bad(format!(
            "{} input term{} for {inputs} input{}",
            terms.len(),
            if terms.len() == 1 { "" } else { "s" },
            if inputs == 1 { "" } else { "s" }
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for t in terms {
        seen.extend(term(t).map_err(why)?);
    }
    if let Some(o) = out {
        let letters = term(o).map_err(why)?;
        for (i, c) in letters.iter().enumerate() {
            if !seen.contains(c) {
                return bad(format!("output letter '{c}' is in no input"));
            }
            if letters[..i].contains(c) {
                return bad(format!("output letter '{c}' appears twice"));
            }
        }
    }
    Ok(())
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
