//! Rules for ops outside the default domain: `ai.onnx.ml` (classic ML, as skl2onnx and
//! onnxmltools export it) and the `com.microsoft` ops that ONNX Runtime's exporters and
//! optimisers write. Element type and rank come first; dims where they are cheap.

use cleave_ir::{Dim, ElemType, TensorType};

use super::nn::{matmul, windowed};
use super::Cx;
use crate::op_registry::OpRegistry;

const ML: &str = "ai.onnx.ml";
const MS: &str = "com.microsoft";

pub(crate) fn register(r: &mut OpRegistry) {
    register_ml(r);
    register_ms(r);
}

fn batch(cx: &Cx) -> Dim {
    cx.shape(0)
        .and_then(|s| s.first().cloned())
        .unwrap_or(Dim::Unknown)
}

/// Label type of a classifier: strings when it was given string labels.
fn label_elem(cx: &Cx) -> ElemType {
    if cx.attr("classlabels_strings").is_some() {
        ElemType::Str
    } else {
        ElemType::I64
    }
}

fn classes(cx: &Cx) -> Dim {
    let n = match cx.attr("classlabels_strings") {
        Some(cleave_ir::AttrValue::Strings(v)) => v.len(),
        _ => cx.attr_ints("classlabels_ints").map_or(0, <[i64]>::len),
    };
    // A binary classifier given one label still scores two classes.
    match n {
        0 | 1 => Dim::Unknown,
        n => Dim::Fixed(n as i64),
    }
}

fn register_ml(r: &mut OpRegistry) {
    r.add_in(
        ML,
        &[
            "LinearClassifier",
            "SVMClassifier",
            "TreeEnsembleClassifier",
        ],
        |cx| {
            vec![
                TensorType::new(label_elem(cx), vec![batch(cx)]),
                TensorType::new(ElemType::F32, vec![batch(cx), classes(cx)]),
            ]
        },
    );
    r.add_in(
        ML,
        &["LinearRegressor", "SVMRegressor", "TreeEnsembleRegressor"],
        |cx| {
            let targets = cx.attr_i("targets").or(cx.attr_i("n_targets")).unwrap_or(1);
            vec![TensorType::new(
                ElemType::F32,
                vec![batch(cx), Dim::Fixed(targets)],
            )]
        },
    );
    r.add_in(ML, &["TreeEnsemble"], |cx| {
        vec![TensorType {
            elem: cx.elem(0),
            shape: Some(vec![batch(cx), Dim::Unknown]),
        }]
    });
    r.add_in(
        ML,
        &["Normalizer", "Scaler", "Binarizer", "Imputer"],
        |cx| {
            let elem = if cx.node.op_type == "Binarizer" || cx.node.op_type == "Imputer" {
                cx.elem(0)
            } else {
                Some(ElemType::F32)
            };
            cx.like_input(elem)
        },
    );
    r.add_in(ML, &["LabelEncoder", "CategoryMapper"], |cx| {
        let elem = if cx.node.op_type == "CategoryMapper" {
            match cx.elem(0) {
                Some(ElemType::Str) => Some(ElemType::I64),
                _ => Some(ElemType::Str),
            }
        } else if cx.attr("values_strings").is_some() {
            Some(ElemType::Str)
        } else if cx.attr("values_floats").is_some() {
            Some(ElemType::F32)
        } else if cx.attr("values_int64s").is_some() {
            Some(ElemType::I64)
        } else {
            match cx.attr("values_tensor") {
                Some(cleave_ir::AttrValue::Tensor(t)) => Some(t.elem),
                _ => None,
            }
        };
        cx.like_input(elem)
    });
    r.add_in(ML, &["OneHotEncoder"], |cx| {
        let shape = cx.shape(0).map(|s| {
            let mut s = s.to_vec();
            s.push(Dim::Unknown);
            s
        });
        vec![TensorType {
            elem: Some(ElemType::F32),
            shape,
        }]
    });
    r.add_in(ML, &["FeatureVectorizer"], |cx| {
        vec![TensorType::new(
            ElemType::F32,
            vec![batch(cx), Dim::Unknown],
        )]
    });
    // The indices pick from the last axis, flattened: X[..., Y] has X's leading dims and one
    // dim of Y's element count (a vector X gives one row, as onnxruntime does).
    r.add_in(ML, &["ArrayFeatureExtractor"], |cx| {
        let picked = cx.shape(1).map_or(Dim::Unknown, |s| {
            s.iter()
                .try_fold(1i64, |n, d| n.checked_mul(d.fixed()?))
                .map_or(Dim::Unknown, Dim::Fixed)
        });
        let shape = cx.shape(0).map(|x| match x.split_last() {
            Some((_, lead)) if !lead.is_empty() => {
                lead.iter().cloned().chain([picked.clone()]).collect()
            }
            _ => vec![Dim::Fixed(1), picked.clone()],
        });
        vec![TensorType {
            elem: cx.elem(0),
            shape,
        }]
    });
}

/// The op's first input, element type and shape unchanged.
fn same(cx: &Cx) -> Vec<TensorType> {
    vec![cx.ty(0)]
}

fn register_ms(r: &mut OpRegistry) {
    r.add_in(
        MS,
        &[
            "Gelu",
            "FastGelu",
            "BiasGelu",
            "QuickGelu",
            "BiasAdd",
            "LayerNormalization",
            "SimplifiedLayerNormalization",
            "RotaryEmbedding",
            "QLinearSigmoid",
            "QLinearLeakyRelu",
            "QLinearSoftmax",
            "BiasDropout",
            "BiasSoftmax",
            "NhwcMaxPool",
            "Inverse",
        ],
        same,
    );
    r.add_in(
        MS,
        &["SkipLayerNormalization", "SkipSimplifiedLayerNormalization"],
        |cx| {
            let x = cx.ty(0);
            let stats = TensorType {
                elem: Some(ElemType::F32),
                shape: x.shape.as_ref().map(|s| {
                    let mut s = s.clone();
                    if let Some(last) = s.last_mut() {
                        *last = Dim::Fixed(1);
                    }
                    s
                }),
            };
            vec![x.clone(), stats.clone(), stats, x]
        },
    );
    r.add_in(MS, &["FusedConv", "NhwcConv"], |cx| {
        let channels = cx
            .shape(1)
            .and_then(|s| s.first().cloned())
            .unwrap_or(Dim::Unknown);
        let shape = windowed(cx, 1, channels).or_else(|| cx.rank(0).map(|r| vec![Dim::Unknown; r]));
        vec![TensorType {
            elem: cx.elem(0),
            shape,
        }]
    });
    r.add_in(MS, &["FusedMatMul", "TransposeMatMul"], |cx| {
        let shape = match (cx.shape(0), cx.shape(1)) {
            (Some(a), Some(b)) => {
                let t = |s: &[Dim], on: bool| {
                    let mut s = s.to_vec();
                    let n = s.len();
                    if on && n >= 2 {
                        s.swap(n - 2, n - 1);
                    }
                    s
                };
                matmul(
                    &t(a, cx.attr_i("transA").unwrap_or(0) != 0),
                    &t(b, cx.attr_i("transB").unwrap_or(0) != 0),
                )
            }
            _ => None,
        };
        vec![TensorType {
            elem: cx.elem(0),
            shape,
        }]
    });
    r.add_in(
        MS,
        &["DynamicQuantizeMatMul", "MatMulIntegerToFloat"],
        |cx| {
            let shape = match (cx.shape(0), cx.shape(1)) {
                (Some(a), Some(b)) => matmul(a, b),
                _ => None,
            };
            vec![TensorType {
                elem: Some(ElemType::F32),
                shape,
            }]
        },
    );
    r.add_in(MS, &["MatMulNBits"], |cx| {
        let shape = cx.shape(0).zip(cx.attr_i("N")).map(|(a, n)| {
            let mut s = a.to_vec();
            if let Some(last) = s.last_mut() {
                *last = Dim::Fixed(n);
            }
            s
        });
        vec![TensorType {
            elem: cx.elem(0),
            shape,
        }]
    });
    r.add_in(MS, &["QLinearAdd", "QLinearMul"], |cx| {
        let shapes: Option<Vec<&[Dim]>> = [0, 3].iter().map(|&i| cx.shape(i)).collect();
        vec![TensorType {
            elem: cx.elem(0),
            shape: shapes.map(|s| super::dims::broadcast(&s)),
        }]
    });
    r.add_in(
        MS,
        &["QLinearGlobalAveragePool", "QLinearAveragePool"],
        |cx| {
            vec![TensorType {
                elem: cx.elem(0),
                shape: cx.rank(0).map(|r| vec![Dim::Unknown; r]),
            }]
        },
    );
    r.add_in(MS, &["QuantizeLinear", "DequantizeLinear"], |cx| {
        let elem = if cx.node.op_type == "DequantizeLinear" {
            cx.elem(1)
        } else if cx.has_input(2) {
            cx.elem(2)
        } else {
            Some(ElemType::U8)
        };
        cx.like_input(elem)
    });
    r.add_in(
        MS,
        &[
            "Attention",
            "MultiHeadAttention",
            "GroupQueryAttention",
            "PackedAttention",
        ],
        |cx| {
            // [batch, sequence, hidden]; the hidden size is the query's for the
            // separate-input forms, and unknown where the weights would have to be split.
            let q = cx.shape(0);
            let hidden = if cx.node.op_type == "Attention" {
                cx.attr_ints("qkv_hidden_sizes")
                    .and_then(|v| v.get(2).copied())
                    .map(Dim::Fixed)
                    .or_else(|| {
                        let w = cx.shape(1)?;
                        w.get(1)?.fixed().map(|n| Dim::Fixed(n / 3))
                    })
            } else {
                q.and_then(|s| s.get(2).cloned())
            };
            let out = q.filter(|s| s.len() == 3).map(|s| {
                vec![
                    s[0].clone(),
                    s[1].clone(),
                    hidden.clone().unwrap_or(Dim::Unknown),
                ]
            });
            let present = TensorType {
                elem: cx.elem(0),
                shape: None,
            };
            let mut outs = vec![TensorType {
                elem: cx.elem(0),
                shape: out.or(Some(vec![Dim::Unknown; 3])),
            }];
            outs.extend(std::iter::repeat_n(
                present,
                cx.n_outputs().saturating_sub(1),
            ));
            outs
        },
    );
    r.add_in(MS, &["EmbedLayerNormalization"], |cx| {
        let ids = cx.shape(0);
        let (b, s) = ids
            .filter(|s| s.len() == 2)
            .map_or((Dim::Unknown, Dim::Unknown), |s| {
                (s[0].clone(), s[1].clone())
            });
        let hidden = cx
            .shape(2)
            .and_then(|w| w.get(1).cloned())
            .unwrap_or(Dim::Unknown);
        let elem = cx.elem(2);
        vec![
            TensorType {
                elem,
                shape: Some(vec![b.clone(), s.clone(), hidden.clone()]),
            },
            TensorType::new(ElemType::I32, vec![b.clone()]),
            TensorType {
                elem,
                shape: Some(vec![b, s, hidden]),
            },
        ]
    });
    r.add_in(MS, &["BiasSplitGelu"], |cx| {
        let shape = cx.shape(0).map(|s| {
            let mut s = s.to_vec();
            if let Some(last) = s.last_mut() {
                *last = super::dims::map_fixed(last, |n| Some(n / 2));
            }
            s
        });
        vec![TensorType {
            elem: cx.elem(0),
            shape,
        }]
    });
    r.add_in(MS, &["QLinearConcat"], |cx| {
        vec![TensorType {
            elem: cx.elem(0),
            shape: cx.rank(2).map(|r| vec![Dim::Unknown; r]),
        }]
    });
}
