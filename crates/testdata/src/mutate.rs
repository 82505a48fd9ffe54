//! Mutants of valid TFLite and circle models that still pass the flatbuffer verifier, for the
//! engine fuzzer (`crates/cli/tests/engine_mutants.rs`): a file that lies about a dim, a
//! type, a buffer, a name, its quantization, an operator's code, options or operands. Each
//! mutation is data with a one-line text form, so a mutant that once crashed an engine is
//! kept as its seed model's name and that line, and made again exactly, whatever the random
//! generator later becomes.

use std::fmt;
use std::str::FromStr;

use cleave_ir::XorShift64;

/// One change to a model (indices: subgraph, tensor, operator, element).
#[derive(Clone, Debug, PartialEq)]
pub enum Mutation {
    /// `shape[axis] = value` (`axis` past the end appends).
    Dim {
        sg: usize,
        tensor: usize,
        axis: usize,
        value: i32,
    },
    /// The shape cut or padded with 1s to `rank` dims (the signature too).
    Rank {
        sg: usize,
        tensor: usize,
        rank: usize,
    },
    Type {
        sg: usize,
        tensor: usize,
        code: i8,
    },
    Buffer {
        sg: usize,
        tensor: usize,
        index: u32,
    },
    Unname {
        sg: usize,
        tensor: usize,
    },
    ZeroPoint {
        sg: usize,
        tensor: usize,
        i: usize,
        value: i64,
    },
    Scale {
        sg: usize,
        tensor: usize,
        i: usize,
        value: f32,
    },
    NoScales {
        sg: usize,
        tensor: usize,
    },
    QuantDim {
        sg: usize,
        tensor: usize,
        value: i32,
    },
    OpCode {
        sg: usize,
        op: usize,
        index: u32,
    },
    /// The options of operator `from` given to operator `op`.
    Options {
        sg: usize,
        op: usize,
        from: usize,
    },
    OpInput {
        sg: usize,
        op: usize,
        i: usize,
        value: i32,
    },
    OpOutput {
        sg: usize,
        op: usize,
        i: usize,
        value: i32,
    },
    GraphInput {
        sg: usize,
        i: usize,
        value: i32,
    },
    /// Buffer `buffer`'s data cut or zero-padded to `len` bytes.
    Data {
        buffer: usize,
        len: usize,
    },
    /// Operator code `code` made builtin `value`.
    Builtin {
        code: usize,
        value: i32,
    },
    /// A byte of the finished file (may break what the verifier checks).
    Byte {
        offset: usize,
        value: u8,
    },
}

impl fmt::Display for Mutation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Mutation::*;
        match self {
            Dim {
                sg,
                tensor,
                axis,
                value,
            } => write!(f, "dim {sg} {tensor} {axis} {value}"),
            Rank { sg, tensor, rank } => write!(f, "rank {sg} {tensor} {rank}"),
            Type { sg, tensor, code } => write!(f, "type {sg} {tensor} {code}"),
            Buffer { sg, tensor, index } => write!(f, "buffer {sg} {tensor} {index}"),
            Unname { sg, tensor } => write!(f, "unname {sg} {tensor}"),
            ZeroPoint {
                sg,
                tensor,
                i,
                value,
            } => write!(f, "zero_point {sg} {tensor} {i} {value}"),
            Scale {
                sg,
                tensor,
                i,
                value,
            } => write!(f, "scale {sg} {tensor} {i} {value:?}"),
            NoScales { sg, tensor } => write!(f, "no_scales {sg} {tensor}"),
            QuantDim { sg, tensor, value } => write!(f, "quant_dim {sg} {tensor} {value}"),
            OpCode { sg, op, index } => write!(f, "opcode {sg} {op} {index}"),
            Options { sg, op, from } => write!(f, "options {sg} {op} {from}"),
            OpInput { sg, op, i, value } => write!(f, "op_input {sg} {op} {i} {value}"),
            OpOutput { sg, op, i, value } => write!(f, "op_output {sg} {op} {i} {value}"),
            GraphInput { sg, i, value } => write!(f, "graph_input {sg} {i} {value}"),
            Data { buffer, len } => write!(f, "data {buffer} {len}"),
            Builtin { code, value } => write!(f, "builtin {code} {value}"),
            Byte { offset, value } => write!(f, "byte {offset} {value}"),
        }
    }
}

impl FromStr for Mutation {
    type Err = String;

    fn from_str(s: &str) -> Result<Mutation, String> {
        let w: Vec<&str> = s.split_whitespace().collect();
        let bad = || format!("not a mutation: '{s}'");
        let n = |i: usize| -> Result<usize, String> {
            w.get(i).and_then(|x| x.parse().ok()).ok_or_else(bad)
        };
        let v = |i: usize| -> Result<i64, String> {
            w.get(i).and_then(|x| x.parse().ok()).ok_or_else(bad)
        };
        let i32_at = |i: usize| -> Result<i32, String> { i32::try_from(v(i)?).map_err(|_| bad()) };
        use Mutation::*;
        Ok(match *w.first().ok_or_else(bad)? {
            "dim" => Dim {
                sg: n(1)?,
                tensor: n(2)?,
                axis: n(3)?,
                value: i32_at(4)?,
            },
            "rank" => Rank {
                sg: n(1)?,
                tensor: n(2)?,
                rank: n(3)?,
            },
            "type" => Type {
                sg: n(1)?,
                tensor: n(2)?,
                code: i8::try_from(v(3)?).map_err(|_| bad())?,
            },
            "buffer" => Buffer {
                sg: n(1)?,
                tensor: n(2)?,
                index: u32::try_from(v(3)?).map_err(|_| bad())?,
            },
            "unname" => Unname {
                sg: n(1)?,
                tensor: n(2)?,
            },
            "zero_point" => ZeroPoint {
                sg: n(1)?,
                tensor: n(2)?,
                i: n(3)?,
                value: v(4)?,
            },
            "scale" => Scale {
                sg: n(1)?,
                tensor: n(2)?,
                i: n(3)?,
                value: w.get(4).and_then(|x| x.parse().ok()).ok_or_else(bad)?,
            },
            "no_scales" => NoScales {
                sg: n(1)?,
                tensor: n(2)?,
            },
            "quant_dim" => QuantDim {
                sg: n(1)?,
                tensor: n(2)?,
                value: i32_at(3)?,
            },
            "opcode" => OpCode {
                sg: n(1)?,
                op: n(2)?,
                index: u32::try_from(v(3)?).map_err(|_| bad())?,
            },
            "options" => Options {
                sg: n(1)?,
                op: n(2)?,
                from: n(3)?,
            },
            "op_input" => OpInput {
                sg: n(1)?,
                op: n(2)?,
                i: n(3)?,
                value: i32_at(4)?,
            },
            "op_output" => OpOutput {
                sg: n(1)?,
                op: n(2)?,
                i: n(3)?,
                value: i32_at(4)?,
            },
            "graph_input" => GraphInput {
                sg: n(1)?,
                i: n(2)?,
                value: i32_at(3)?,
            },
            "data" => Data {
                buffer: n(1)?,
                len: n(2)?,
            },
            "builtin" => Builtin {
                code: n(1)?,
                value: i32_at(2)?,
            },
            "byte" => Byte {
                offset: n(1)?,
                value: u8::try_from(v(2)?).map_err(|_| bad())?,
            },
            _ => return Err(bad()),
        })
    }
}

/// Sizes of a model, to draw indices that land.
#[derive(Default, Debug)]
pub struct Shape {
    /// Per subgraph: tensors, operators.
    pub subgraphs: Vec<(usize, usize)>,
    pub buffers: usize,
    pub codes: usize,
    pub bytes: usize,
}

/// Values that have broken engines before: zero, one, past a small buffer, negative, huge.
const DIMS: [i32; 9] = [0, 1, 4, 3, -1, -7, 1 << 16, i32::MAX, 2];
const ZERO_POINTS: [i64; 6] = [-16711682, 128, -129, 255, 70000, i64::MIN];
const SCALES: [f32; 5] = [0.0, -1.0, f32::NAN, f32::INFINITY, 1e-38];

/// A random mutation of a model of this shape.
pub fn random(shape: &Shape, rng: &mut XorShift64) -> Mutation {
    let mut below = |n: usize| -> usize {
        if n == 0 {
            0
        } else {
            (rng.next_u64() % n as u64) as usize
        }
    };
    let sg = below(shape.subgraphs.len());
    let (tensors, ops) = shape.subgraphs.get(sg).copied().unwrap_or_default();
    let tensor = below(tensors);
    let op = below(ops);
    let pick = below(17);
    let index_or_wild = |k: usize, n: usize| -> i32 {
        match k % 4 {
            0 => -1,
            1 => n as i32 + (k as i32 % 3),
            _ => (k % n.max(1)) as i32,
        }
    };
    use Mutation::*;
    match pick {
        0 | 1 => Dim {
            sg,
            tensor,
            axis: below(5),
            value: DIMS[below(DIMS.len())],
        },
        2 => Rank {
            sg,
            tensor,
            rank: [0, 1, 5, 7, 8, 9, 100][below(7)],
        },
        3 => Type {
            sg,
            tensor,
            code: below(24) as i8 - 1,
        },
        4 => Buffer {
            sg,
            tensor,
            index: below(shape.buffers + 2) as u32,
        },
        5 => Unname { sg, tensor },
        6 => ZeroPoint {
            sg,
            tensor,
            i: below(2),
            value: ZERO_POINTS[below(ZERO_POINTS.len())],
        },
        7 => Scale {
            sg,
            tensor,
            i: below(2),
            value: SCALES[below(SCALES.len())],
        },
        8 => NoScales { sg, tensor },
        9 => QuantDim {
            sg,
            tensor,
            value: [1, 2, 3, 4, -1][below(5)],
        },
        10 => OpCode {
            sg,
            op,
            index: below(shape.codes + 2) as u32,
        },
        11 => Options {
            sg,
            op,
            from: below(ops),
        },
        12 => OpInput {
            sg,
            op,
            i: below(3),
            value: index_or_wild(below(64), tensors),
        },
        13 => OpOutput {
            sg,
            op,
            i: below(2),
            value: index_or_wild(below(64), tensors),
        },
        14 => GraphInput {
            sg,
            i: below(2),
            value: index_or_wild(below(64), tensors),
        },
        15 => Data {
            buffer: below(shape.buffers),
            len: [0, 1, 3, 7, 64][below(5)],
        },
        _ => {
            if below(2) == 0 {
                Builtin {
                    code: below(shape.codes),
                    value: below(210) as i32,
                }
            } else {
                Byte {
                    offset: below(shape.bytes),
                    value: below(256) as u8,
                }
            }
        }
    }
}

/// Generates, for one schema, `shape_of` and `apply`.
macro_rules! mutator {
    ($schema:ident, $id:literal) => {
        pub mod $schema {
            use super::{Mutation, Shape};
            use cleave_tflite::pack::Layout;
            use cleave_tflite::schema::$schema as s;

            fn unpack(bytes: &[u8]) -> Result<(s::ModelT, Vec<Vec<u8>>), String> {
                let root = s::root_as_model(bytes).map_err(|e| e.to_string())?;
                let mut model = root.unpack();
                let data = model
                    .buffers
                    .take()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|b| b.data.unwrap_or_default())
                    .collect();
                Ok((model, data))
            }

            /// The sizes of a valid model.
            pub fn shape_of(bytes: &[u8]) -> Result<Shape, String> {
                let (m, data) = unpack(bytes)?;
                Ok(Shape {
                    subgraphs: m
                        .subgraphs
                        .iter()
                        .flatten()
                        .map(|g| {
                            (
                                g.tensors.as_ref().map_or(0, Vec::len),
                                g.operators.as_ref().map_or(0, Vec::len),
                            )
                        })
                        .collect(),
                    buffers: data.len(),
                    codes: m.operator_codes.as_ref().map_or(0, Vec::len),
                    bytes: bytes.len(),
                })
            }

            /// `bytes` with `mutations` applied; an error where one names nothing in it.
            pub fn apply(bytes: &[u8], mutations: &[Mutation]) -> Result<Vec<u8>, String> {
                let (mut m, mut data) = unpack(bytes)?;
                let mut raw = Vec::new();
                for mu in mutations {
                    if let Mutation::Byte { offset, value } = mu {
                        raw.push((*offset, *value));
                    } else {
                        one(&mut m, &mut data, mu)
                            .ok_or_else(|| format!("'{mu}' names nothing"))?;
                    }
                }
                let slices: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
                let mut out = cleave_tflite::pack::$schema::pack(&m, &slices, Layout::Inline, $id);
                for (offset, value) in raw {
                    *out.get_mut(offset).ok_or("a byte past the end")? = value;
                }
                Ok(out)
            }

            fn graph(m: &mut s::ModelT, sg: usize) -> Option<&mut s::SubGraphT> {
                m.subgraphs.as_mut()?.get_mut(sg)
            }

            fn one(m: &mut s::ModelT, data: &mut [Vec<u8>], mu: &Mutation) -> Option<()> {
                use Mutation::*;
                match *mu {
                    Dim {
                        sg,
                        tensor,
                        axis,
                        value,
                    } => {
                        let t = graph(m, sg)?.tensors.as_mut()?.get_mut(tensor)?;
                        let shape = t.shape.get_or_insert_with(Vec::new);
                        match shape.get_mut(axis) {
                            Some(d) => *d = value,
                            None => shape.push(value),
                        }
                    }
                    Rank { sg, tensor, rank } => {
                        let t = graph(m, sg)?.tensors.as_mut()?.get_mut(tensor)?;
                        t.shape.get_or_insert_with(Vec::new).resize(rank, 1);
                        if let Some(sig) = t.shape_signature.as_mut() {
                            sig.resize(rank, 1);
                        }
                    }
                    Type { sg, tensor, code } => {
                        graph(m, sg)?.tensors.as_mut()?.get_mut(tensor)?.type_ =
                            s::TensorType(code);
                    }
                    Buffer { sg, tensor, index } => {
                        graph(m, sg)?.tensors.as_mut()?.get_mut(tensor)?.buffer = index;
                    }
                    Unname { sg, tensor } => {
                        graph(m, sg)?.tensors.as_mut()?.get_mut(tensor)?.name = None;
                    }
                    ZeroPoint {
                        sg,
                        tensor,
                        i,
                        value,
                    } => {
                        let t = graph(m, sg)?.tensors.as_mut()?.get_mut(tensor)?;
                        let q = t.quantization.as_mut()?;
                        *q.zero_point.as_mut()?.get_mut(i)? = value;
                    }
                    Scale {
                        sg,
                        tensor,
                        i,
                        value,
                    } => {
                        let t = graph(m, sg)?.tensors.as_mut()?.get_mut(tensor)?;
                        *t.quantization.as_mut()?.scale.as_mut()?.get_mut(i)? = value;
                    }
                    NoScales { sg, tensor } => {
                        let t = graph(m, sg)?.tensors.as_mut()?.get_mut(tensor)?;
                        t.quantization.as_mut()?.scale = Some(Vec::new());
                    }
                    QuantDim { sg, tensor, value } => {
                        let t = graph(m, sg)?.tensors.as_mut()?.get_mut(tensor)?;
                        t.quantization.as_mut()?.quantized_dimension = value;
                    }
                    OpCode { sg, op, index } => {
                        graph(m, sg)?.operators.as_mut()?.get_mut(op)?.opcode_index = index;
                    }
                    Options { sg, op, from } => {
                        let ops = graph(m, sg)?.operators.as_mut()?;
                        let o = ops.get(from)?.builtin_options.clone();
                        ops.get_mut(op)?.builtin_options = o;
                    }
                    OpInput { sg, op, i, value } => {
                        let o = graph(m, sg)?.operators.as_mut()?.get_mut(op)?;
                        let v = o.inputs.get_or_insert_with(Vec::new);
                        match v.get_mut(i) {
                            Some(x) => *x = value,
                            None => v.push(value),
                        }
                    }
                    OpOutput { sg, op, i, value } => {
                        let o = graph(m, sg)?.operators.as_mut()?.get_mut(op)?;
                        *o.outputs.as_mut()?.get_mut(i)? = value;
                    }
                    GraphInput { sg, i, value } => {
                        *graph(m, sg)?.inputs.as_mut()?.get_mut(i)? = value;
                    }
                    Data { buffer, len } => {
                        let d = data.get_mut(buffer)?;
                        if d.is_empty() {
                            return None;
                        }
                        d.resize(len, 0);
                    }
                    Builtin { code, value } => {
                        let c = m.operator_codes.as_mut()?.get_mut(code)?;
                        c.builtin_code = s::BuiltinOperator(value);
                        c.deprecated_builtin_code = value.min(127) as i8;
                    }
                    Byte { .. } => return None,
                }
                Some(())
            }
        }
    };
}

mutator!(tflite, "TFL3");
mutator!(circle, "CIR0");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_read_back_from_their_lines() {
        let mut rng = XorShift64::raw(7);
        let shape = Shape {
            subgraphs: vec![(10, 4), (3, 1)],
            buffers: 5,
            codes: 3,
            bytes: 900,
        };
        for _ in 0..500 {
            let m = random(&shape, &mut rng);
            let back: Mutation = m.to_string().parse().unwrap();
            // NaN scales compare unequal to themselves: compare the lines.
            assert_eq!(back.to_string(), m.to_string());
        }
    }

    #[test]
    fn a_mutant_differs_only_where_told() {
        let model = crate::synth::int8_per_channel();
        let root = cleave_tflite::schema::tflite::root_as_model(&model).unwrap();
        let tensors = root.subgraphs().unwrap().get(0).tensors().unwrap();
        let tensor = tensors
            .iter()
            .position(|t| t.name() == Some("input_int8"))
            .unwrap();
        let z = Mutation::ZeroPoint {
            sg: 0,
            tensor,
            i: 0,
            value: -16711682,
        };
        let mutant = tflite::apply(&model, &[z]).unwrap();
        let m = cleave_tflite::schema::tflite::root_as_model(&mutant).unwrap();
        let t = m.subgraphs().unwrap().get(0).tensors().unwrap().get(tensor);
        let zp: Vec<i64> = t
            .quantization()
            .unwrap()
            .zero_point()
            .unwrap()
            .iter()
            .collect();
        assert_eq!(zp[0], -16711682);
        let again = tflite::apply(&model, &[]).unwrap();
        let again = cleave_tflite::schema::tflite::root_as_model(&again).unwrap();
        assert_eq!(
            again.subgraphs().unwrap().get(0).tensors().unwrap().len(),
            tensors.len()
        );
        assert!(tflite::apply(&model, &["dim 9 0 0 1".parse().unwrap()]).is_err());
    }
}
