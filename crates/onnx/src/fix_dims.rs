//! `--shape` and `--dim`: dynamic dims made fixed in the protobuf itself, so that inference,
//! the devices' static-shape checks and every written part see them.

use std::collections::HashMap;

use cleave_frontend::FixedDims;
use cleave_ir::words::{Arg, Message};

use crate::proto::{tensor_shape_proto::dimension::Value, type_proto, ModelProto, ValueInfoProto};

/// Sets `fixed` in `proto`'s graph inputs; each symbol those inputs bind, and each `--dim`
/// symbol, is replaced wherever the top-level graph declares it (inputs, outputs,
/// value_info). Errors say which flag is wrong and why, in a sentence.
pub fn fix_dims(proto: &mut ModelProto, fixed: &FixedDims) -> Result<(), Message> {
    let graph = proto
        .graph
        .as_mut()
        .ok_or_else(|| Message::text("the model has no graph"))?;
    let mut symbols: HashMap<String, (i64, Message)> = HashMap::new();
    let mut bind = |symbol: &str, v: i64, flag: Message| -> Result<(), Message> {
        match symbols.get(symbol) {
            Some((w, by)) if *w != v => {
                let mut m = flag.then(format!(" sets '{symbol}' to {v}, but "));
                m.extend(by.clone());
                Err(m.then(format!(" sets it to {w}")))
            }
            _ => {
                symbols.insert(symbol.to_string(), (v, flag));
                Ok(())
            }
        }
    };
    let input_names = graph
        .input
        .iter()
        .map(|i| i.name().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    for (name, dims) in &fixed.shapes {
        let flag = Message::default().given(Arg::Shape, format!("{name}={}", join(dims)));
        if let Some(d) = dims.iter().find(|&&d| d < 0) {
            return Err(flag.clone().then(format!(": {d} is not a dimension")));
        }
        let Some(input) = graph.input.iter_mut().find(|i| i.name() == name) else {
            return Err(flag.clone().then(format!(
                ": the model has no input '{name}' (its inputs: {input_names})"
            )));
        };
        let declared = shape_of(input);
        if let Some(declared) = declared {
            if declared.len() != dims.len() {
                return Err(flag.clone().then(format!(
                    ": input '{name}' has rank {}, not {}",
                    declared.len(),
                    dims.len()
                )));
            }
            // Exporters reuse one name for dims that differ (Paddle2ONNX writes '?' for
            // each): a name this shape gives two values stays local to this input.
            let mut here: HashMap<&str, Option<i64>> = HashMap::new();
            for (axis, (d, &v)) in declared.iter().zip(dims).enumerate() {
                match d {
                    // A negative dim_value is how some exporters say "dynamic".
                    Some(Value::DimValue(w)) if *w >= 0 && *w != v => {
                        return Err(flag.clone().then(format!(
                            ": dim {axis} of input '{name}' is fixed at {w} in the model"
                        )))
                    }
                    Some(Value::DimParam(p)) => {
                        let e = here.entry(p).or_insert(Some(v));
                        if *e != Some(v) {
                            *e = None;
                        }
                    }
                    _ => {}
                }
            }
            for (p, v) in here {
                if let Some(v) = v {
                    bind(p, v, flag.clone())?;
                }
            }
        }
        set_shape(input, dims);
    }
    let declared: Vec<String> = graph
        .input
        .iter()
        .chain(&graph.output)
        .chain(&graph.value_info)
        .filter_map(shape_of)
        .flatten()
        .filter_map(|d| match d {
            Some(Value::DimParam(p)) => Some(p),
            _ => None,
        })
        .collect();
    for (symbol, v) in &fixed.dims {
        let flag = Message::default().given(Arg::Dim, format!("{symbol}={v}"));
        if *v < 0 {
            return Err(flag.clone().then(format!(": {v} is not a dimension")));
        }
        if !declared.contains(symbol) {
            let mut known: Vec<&str> = declared.iter().map(String::as_str).collect();
            known.sort_unstable();
            known.dedup();
            return Err(if known.is_empty() {
                flag.clone().then(": the model names no dims")
            } else {
                flag.clone().then(format!(
                    ": no dim is named '{symbol}' (named dims: {})",
                    known.join(", ")
                ))
            });
        }
        bind(symbol, *v, flag)?;
    }
    let fixing = !fixed.shapes.is_empty() || !fixed.dims.is_empty();
    for vi in graph
        .input
        .iter_mut()
        .chain(graph.output.iter_mut())
        .chain(graph.value_info.iter_mut())
    {
        replace_symbols(vi, &symbols);
        if fixing {
            forget_negative_dims(vi);
        }
    }
    Ok(())
}

/// A negative dim_value (an exporter's "dynamic") left on an output or intermediate tensor
/// would contradict the dims the fixed inputs give it: it is left for inference.
fn forget_negative_dims(vi: &mut ValueInfoProto) {
    let Some(shape) = tensor_mut(vi).and_then(|t| t.shape.as_mut()) else {
        return;
    };
    for d in &mut shape.dim {
        if matches!(d.value, Some(Value::DimValue(v)) if v < 0) {
            d.value = None;
        }
    }
}

fn join(dims: &[i64]) -> String {
    dims.iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn tensor(vi: &ValueInfoProto) -> Option<&type_proto::Tensor> {
    match vi.r#type.as_ref()?.value.as_ref()? {
        type_proto::Value::TensorType(t) => Some(t),
        _ => None,
    }
}

fn tensor_mut(vi: &mut ValueInfoProto) -> Option<&mut type_proto::Tensor> {
    match vi.r#type.as_mut()?.value.as_mut()? {
        type_proto::Value::TensorType(t) => Some(t),
        _ => None,
    }
}

fn shape_of(vi: &ValueInfoProto) -> Option<Vec<Option<Value>>> {
    let shape = tensor(vi)?.shape.as_ref()?;
    Some(shape.dim.iter().map(|d| d.value.clone()).collect())
}

fn set_shape(vi: &mut ValueInfoProto, dims: &[i64]) {
    use crate::proto::{tensor_shape_proto::Dimension, TensorShapeProto};
    let shape = TensorShapeProto {
        dim: dims
            .iter()
            .map(|&v| Dimension {
                value: Some(Value::DimValue(v)),
                denotation: None,
            })
            .collect(),
    };
    match tensor_mut(vi) {
        Some(t) => t.shape = Some(shape),
        None => {
            // An input declared without a tensor type gets one whose element type stays open.
            vi.r#type = Some(crate::proto::TypeProto {
                value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                    elem_type: None,
                    shape: Some(shape),
                })),
                denotation: None,
            });
        }
    }
}

fn replace_symbols(vi: &mut ValueInfoProto, symbols: &HashMap<String, (i64, Message)>) {
    let Some(shape) = tensor_mut(vi).and_then(|t| t.shape.as_mut()) else {
        return;
    };
    for d in &mut shape.dim {
        if let Some(Value::DimParam(p)) = &d.value {
            if let Some((v, _)) = symbols.get(p) {
                d.value = Some(Value::DimValue(*v));
            } else if mentions_any(p, symbols) {
                // An expression of fixed symbols (PyTorch writes `floor(height/2 - 1/2) + 1`)
                // is left for inference to compute from the fixed dims.
                d.value = None;
            }
        }
    }
}

fn mentions_any(expr: &str, symbols: &HashMap<String, (i64, Message)>) -> bool {
    expr.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
        .any(|word| symbols.contains_key(word))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{tensor_shape_proto::Dimension, GraphProto, TensorShapeProto, TypeProto};

    fn vi(name: &str, dims: &[Value]) -> ValueInfoProto {
        ValueInfoProto {
            name: Some(name.into()),
            r#type: Some(TypeProto {
                value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                    elem_type: Some(1),
                    shape: Some(TensorShapeProto {
                        dim: dims
                            .iter()
                            .map(|v| Dimension {
                                value: Some(v.clone()),
                                denotation: None,
                            })
                            .collect(),
                    }),
                })),
                denotation: None,
            }),
            ..Default::default()
        }
    }

    fn model() -> ModelProto {
        let p = |s: &str| Value::DimParam(s.into());
        ModelProto {
            graph: Some(GraphProto {
                input: vec![vi("x", &[p("batch"), Value::DimValue(3), p("h"), p("w")])],
                output: vec![vi("y", &[p("batch"), Value::DimValue(10)])],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn dims(vi: &ValueInfoProto) -> Vec<Option<Value>> {
        shape_of(vi).unwrap()
    }

    #[test]
    fn a_shape_fixes_its_symbols_everywhere() {
        let mut m = model();
        let f = FixedDims {
            shapes: vec![("x".into(), vec![2, 3, 32, 48])],
            dims: vec![],
        };
        fix_dims(&mut m, &f).unwrap();
        let g = m.graph.unwrap();
        assert_eq!(
            dims(&g.input[0]),
            [2, 3, 32, 48].map(|v| Some(Value::DimValue(v)))
        );
        assert_eq!(
            dims(&g.output[0]),
            [2, 10].map(|v| Some(Value::DimValue(v)))
        );
    }

    #[test]
    fn expressions_of_fixed_symbols_are_left_to_inference() {
        let mut m = model();
        let g = m.graph.as_mut().unwrap();
        let expr = Value::DimParam("floor(h/2 - 1/2) + 1".into());
        g.value_info
            .push(vi("t", &[expr, Value::DimParam("hw".into())]));
        let f = FixedDims {
            shapes: vec![],
            dims: vec![("h".into(), 8)],
        };
        fix_dims(&mut m, &f).unwrap();
        let g = m.graph.unwrap();
        assert_eq!(
            dims(&g.value_info[0]),
            [None, Some(Value::DimParam("hw".into()))]
        );
    }

    #[test]
    fn a_dim_fixes_one_symbol() {
        let mut m = model();
        let f = FixedDims {
            shapes: vec![],
            dims: vec![("batch".into(), 1)],
        };
        fix_dims(&mut m, &f).unwrap();
        let g = m.graph.unwrap();
        assert_eq!(dims(&g.input[0])[0], Some(Value::DimValue(1)));
        assert_eq!(dims(&g.input[0])[2], Some(Value::DimParam("h".into())));
        assert_eq!(dims(&g.output[0])[0], Some(Value::DimValue(1)));
    }

    #[test]
    fn wrong_flags_are_explained() {
        let err = |shapes: Vec<(&str, Vec<i64>)>, d: Vec<(&str, i64)>| {
            let f = FixedDims {
                shapes: shapes.into_iter().map(|(n, v)| (n.into(), v)).collect(),
                dims: d.into_iter().map(|(n, v)| (n.into(), v)).collect(),
            };
            fix_dims(&mut model(), &f).unwrap_err().to_string()
        };
        assert!(err(vec![("z", vec![1])], vec![]).contains("no input 'z' (its inputs: x)"));
        assert!(err(vec![("x", vec![1, 3])], vec![]).contains("has rank 4, not 2"));
        assert!(err(vec![("x", vec![1, 4, 8, 8])], vec![]).contains("fixed at 3"));
        assert!(err(vec![], vec![("height", 8)]).contains("named dims: batch, h, w"));
        let clash = err(vec![("x", vec![2, 3, 8, 8])], vec![("batch", 1)]);
        assert!(
            clash.contains("sets 'batch' to 1, but --shape x=2,3,8,8 sets it to 2"),
            "{clash}"
        );
        assert!(err(vec![("x", vec![1, 3, -1, 8])], vec![]).contains("-1 is not a dimension"));
    }

    #[test]
    fn negative_dims_elsewhere_are_left_to_inference_once_inputs_are_fixed() {
        let mut m = model();
        let g = m.graph.as_mut().unwrap();
        let q = || Value::DimParam("?".into());
        g.input[0] = vi("x", &[Value::DimValue(-1), Value::DimValue(3), q(), q()]);
        g.output[0] = vi("y", &[Value::DimValue(-1), Value::DimValue(5)]);
        let fixed = FixedDims {
            shapes: vec![("x".into(), vec![1, 3, 8, 8])],
            dims: vec![],
        };
        fix_dims(&mut m, &fixed).unwrap();
        let g = m.graph.as_ref().unwrap();
        assert_eq!(dims(&g.output[0]), vec![None, Some(Value::DimValue(5))]);
        let untouched = model();
        let mut same = untouched.clone();
        fix_dims(&mut same, &FixedDims::default()).unwrap();
        assert_eq!(same, untouched);
    }

    #[test]
    fn a_name_one_shape_gives_two_values_is_not_spread() {
        let q = || Value::DimParam("?".into());
        let mut m = model();
        let g = m.graph.as_mut().unwrap();
        g.input[0] = vi("x", &[Value::DimValue(-1), Value::DimValue(3), q(), q()]);
        g.output[0] = vi("y", &[q(), Value::DimValue(10)]);
        let f = FixedDims {
            shapes: vec![("x".into(), vec![1, 3, 48, 192])],
            dims: vec![],
        };
        fix_dims(&mut m, &f).unwrap();
        let g = m.graph.unwrap();
        assert_eq!(
            dims(&g.input[0]),
            [1, 3, 48, 192].map(|v| Some(Value::DimValue(v)))
        );
        assert_eq!(dims(&g.output[0])[0], Some(q()));
    }
}
