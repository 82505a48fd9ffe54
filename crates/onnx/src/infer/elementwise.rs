//! Ops whose output has the shape of an input, or the broadcast of their inputs.

use cleave_ir::{Dim, ElemType, OpClass, TensorType};

use super::dims::broadcast;
use super::fold::{self, is_int, same_elements};
use super::Cx;
use crate::dtype::elem_from_code;
use crate::op_registry::OpRegistry;

const SAME: &[&str] = &[
    "Abs",
    "Acos",
    "Acosh",
    "Asin",
    "Asinh",
    "Atan",
    "Atanh",
    "Ceil",
    "Celu",
    "Clip",
    "Cos",
    "Cosh",
    "CumSum",
    "Elu",
    "Erf",
    "Exp",
    "Floor",
    "Gelu",
    "HardSigmoid",
    "HardSwish",
    "Hardmax",
    "Identity",
    "InstanceNormalization",
    "LeakyRelu",
    "Log",
    "LogSoftmax",
    "LpNormalization",
    "LRN",
    "MeanVarianceNormalization",
    "Mish",
    "Neg",
    "Reciprocal",
    "Relu",
    "Round",
    "Selu",
    "Shrink",
    "Sigmoid",
    "Sign",
    "Sin",
    "Sinh",
    "Softmax",
    "Softplus",
    "Softsign",
    "Sqrt",
    "Tan",
    "Tanh",
    "ThresholdedRelu",
    "Trilu",
    "BitwiseNot",
    "Not",
    "ReverseSequence",
    "ScatterElements",
    "ScatterND",
    "Scatter",
    "Swish",
];

const ARITH: &[&str] = &[
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Max",
    "Min",
    "Sum",
    "Mean",
    "Mod",
    "PRelu",
    "BitShift",
    "BitwiseAnd",
    "BitwiseOr",
    "BitwiseXor",
];

const PREDICATES: &[&str] = &[
    "Equal",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
    "And",
    "Or",
    "Xor",
];

pub(crate) fn register(r: &mut OpRegistry) {
    register_folds(r);
    r.shapes(
        &[
            "Softmax",
            "LogSoftmax",
            "Hardmax",
            "ScatterElements",
            "LayerNormalization",
        ],
        crate::validate::axis_only,
    );
    r.check(&["LRN"], |n, _| crate::validate::at_least(n, "size", 1));
    for (op, class) in [
        ("Relu", OpClass::Relu),
        ("LeakyRelu", OpClass::LeakyRelu),
        ("Elu", OpClass::Elu),
        ("Sigmoid", OpClass::Sigmoid),
        ("Tanh", OpClass::Tanh),
        ("HardSigmoid", OpClass::HardSigmoid),
        ("Softplus", OpClass::Softplus),
        ("Clip", OpClass::Clip),
        ("PRelu", OpClass::PRelu),
        ("Add", OpClass::Add),
        ("Mul", OpClass::Mul),
        ("Max", OpClass::Max),
        ("Sum", OpClass::Sum),
        ("QuantizeLinear", OpClass::Quantize),
        ("DequantizeLinear", OpClass::Dequantize),
    ] {
        r.class(op, class);
    }
    r.add(SAME, |cx| vec![cx.ty(0)]);
    r.add(ARITH, |cx| {
        vec![TensorType {
            elem: cx.elem(0),
            shape: broadcast_inputs(cx, 0..cx.n_inputs()),
        }]
    });
    r.add(PREDICATES, |cx| {
        vec![TensorType {
            elem: Some(ElemType::Bool),
            shape: broadcast_inputs(cx, 0..cx.n_inputs()),
        }]
    });
    r.add(&["IsNaN", "IsInf"], |cx| {
        cx.like_input(Some(ElemType::Bool))
    });
    r.add(&["Where"], |cx| {
        vec![TensorType {
            elem: cx.elem(1).or(cx.elem(2)),
            shape: broadcast_inputs(cx, 0..3),
        }]
    });
    r.add(&["Cast"], |cx| {
        cx.like_input(cx.attr_i("to").and_then(|c| elem_from_code(c as i32)))
    });
    r.add(&["CastLike"], |cx| cx.like_input(cx.elem(1)));
    r.add(&["Dropout"], |cx| {
        let x = cx.ty(0);
        vec![
            x.clone(),
            TensorType {
                elem: Some(ElemType::Bool),
                shape: x.shape,
            },
        ]
    });
    r.add(&["BatchNormalization"], |cx| {
        // Outputs after the first are per-channel statistics (training mode only).
        let stat = TensorType {
            elem: cx.elem(0),
            shape: cx.shape(1).map(<[Dim]>::to_vec),
        };
        vec![cx.ty(0), stat.clone(), stat.clone(), stat.clone(), stat]
    });
    r.add(&["LayerNormalization"], |cx| {
        let x = cx.ty(0);
        let stats = x.shape.as_ref().and_then(|s| {
            let axis = super::dims::axis(cx.attr_i("axis").unwrap_or(-1), s.len())?;
            Some(
                s.iter()
                    .enumerate()
                    .map(|(i, d)| if i < axis { d.clone() } else { Dim::Fixed(1) })
                    .collect(),
            )
        });
        let stash = cx
            .attr_i("stash_type")
            .and_then(|c| elem_from_code(c as i32))
            .or(Some(ElemType::F32));
        let st = TensorType {
            elem: stash,
            shape: stats,
        };
        vec![x, st.clone(), st]
    });
    r.add(&["QuantizeLinear"], |cx| {
        let elem = cx
            .attr_i("output_dtype")
            .filter(|&c| c != 0)
            .and_then(|c| elem_from_code(c as i32))
            .or_else(|| {
                if cx.has_input(2) {
                    cx.elem(2)
                } else {
                    Some(ElemType::U8)
                }
            });
        cx.like_input(elem)
    });
    r.add(&["DequantizeLinear"], |cx| {
        let elem = cx
            .attr_i("output_dtype")
            .filter(|&c| c != 0)
            .and_then(|c| elem_from_code(c as i32))
            .or(cx.elem(1));
        cx.like_input(elem)
    });
    r.add(&["DynamicQuantizeLinear"], |cx| {
        vec![
            TensorType {
                elem: Some(ElemType::U8),
                shape: cx.ty(0).shape,
            },
            TensorType::fixed(ElemType::F32, &[]),
            TensorType::fixed(ElemType::U8, &[]),
        ]
    });
}

fn broadcast_inputs(cx: &Cx, slots: std::ops::Range<usize>) -> Option<Vec<Dim>> {
    let shapes: Option<Vec<&[Dim]>> = slots
        .filter(|&i| cx.has_input(i))
        .map(|i| cx.shape(i))
        .collect();
    shapes.map(|s| broadcast(&s))
}

/// The elements these ops give when their inputs' are tracked (shapes, axes, sizes).
fn register_folds(r: &mut OpRegistry) {
    r.fold(&["Identity"], same_elements);
    r.fold(&["Cast"], |cx| match cx.attr_i("to") {
        Some(6 | 7) if is_int(cx, 0) => same_elements(cx),
        // To bool: a dim tested for zero, as exporters write `if x.shape[0]:`.
        Some(9) if is_int(cx, 0) => Some(
            cx.dims_value(0)?
                .iter()
                .map(|d| match d {
                    Dim::Fixed(v) => Dim::Fixed(i64::from(*v != 0)),
                    _ => Dim::Unknown,
                })
                .collect(),
        ),
        _ => None,
    });
    r.fold(&["Add", "Sub", "Mul", "Div"], |cx| {
        (is_int(cx, 0) && is_int(cx, 1))
            .then(|| fold::elementwise(cx, fold::arith))
            .flatten()
    });
    // Comparisons of dims decide If branches: 1 for true, 0 for false.
    r.fold(
        &["Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual"],
        |cx| {
            (is_int(cx, 0) && is_int(cx, 1))
                .then(|| fold::elementwise(cx, fold::compare))
                .flatten()
        },
    );
    // PyTorch's `expand` picks each target dim, or the input's where it is -1.
    r.fold(&["Where"], |cx| {
        (is_int(cx, 1) && is_int(cx, 2))
            .then(|| fold::select(cx))
            .flatten()
    });
    r.fold(&["Not"], |cx| {
        Some(
            cx.dims_value(0)?
                .iter()
                .map(|d| match d {
                    Dim::Fixed(v) => Dim::Fixed(i64::from(*v == 0)),
                    _ => Dim::Unknown,
                })
                .collect(),
        )
    });
}
