//! A structure-aware mutator for ONNX models: most mutations decode the input, change one
//! thing a real exporter or a hostile file could get wrong (an attribute value, an
//! initializer's dims, bytes or type, a node's wiring or op type, the opset) and encode it
//! again, so the fuzzer spends its time past the protobuf decoder. Inputs that do not decode
//! get libFuzzer's byte-level mutations.

use cleave_onnx::proto::{attribute_proto::AttributeType, ModelProto};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*: deterministic per seed, as libFuzzer wants.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

const INTERESTING: [i64; 14] = [
    0,
    1,
    -1,
    2,
    3,
    -2,
    7,
    64,
    1 << 20,
    i32::MAX as i64,
    i32::MIN as i64,
    i64::MAX,
    i64::MIN,
    -9,
];

const OPS: [&str; 24] = [
    "Conv",
    "Relu",
    "Add",
    "MatMul",
    "Reshape",
    "Transpose",
    "Concat",
    "Split",
    "Gather",
    "Slice",
    "Resize",
    "DepthToSpace",
    "SpaceToDepth",
    "MaxPool",
    "AveragePool",
    "BatchNormalization",
    "Softmax",
    "Squeeze",
    "Unsqueeze",
    "Flatten",
    "If",
    "Loop",
    "QuantizeLinear",
    "ConstantOfShape",
];

pub fn mutate(data: &mut [u8], size: usize, max_size: usize, seed: u32) -> usize {
    let mut rng = Rng(u64::from(seed) | 1 << 40);
    if rng.below(4) != 0 {
        let bytes = bytes::Bytes::copy_from_slice(&data[..size]);
        if let Ok(mut m) = cleave_onnx::decode_model(bytes) {
            mutate_model(&mut m, &mut rng);
            let out = cleave_onnx::encode_model(&m);
            if out.len() <= max_size && out.len() <= data.len() {
                data[..out.len()].copy_from_slice(&out);
                return out.len();
            }
        }
    }
    libfuzzer_sys::fuzzer_mutate(data, size, max_size)
}

fn mutate_model(m: &mut ModelProto, rng: &mut Rng) {
    let value = INTERESTING[rng.below(INTERESTING.len())];
    match rng.below(8) {
        0 => {
            if let Some(op) = m.opset_import.get_mut(0) {
                op.version = Some([0, 1, 7, 11, 13, 17, 21, 23, 27, 28, 999][rng.below(11)]);
            }
            return;
        }
        1 => {
            m.ir_version = Some(rng.below(12) as i64);
            return;
        }
        _ => {}
    }
    let Some(g) = m.graph.as_mut() else {
        return;
    };
    let names: Vec<String> = g
        .node
        .iter()
        .flat_map(|n| n.output.iter().cloned())
        .chain(g.input.iter().filter_map(|i| i.name.clone()))
        .chain(g.initializer.iter().filter_map(|t| t.name.clone()))
        .collect();
    match rng.below(6) {
        0 | 1 => {
            let n = rng.below(g.node.len());
            let Some(node) = g.node.get_mut(n) else {
                return;
            };
            let a = rng.below(node.attribute.len());
            let Some(attr) = node.attribute.get_mut(a) else {
                return;
            };
            match attr.r#type() {
                AttributeType::Int => attr.i = Some(value),
                AttributeType::Ints => {
                    let k = rng.below(attr.ints.len() + 1);
                    match rng.below(3) {
                        0 if k < attr.ints.len() => attr.ints[k] = value,
                        1 => attr.ints.push(value),
                        _ => {
                            attr.ints.pop();
                        }
                    }
                }
                AttributeType::Float => attr.f = Some(value as f32),
                AttributeType::Graph => {
                    if let Some(body) = attr.g.as_mut() {
                        match rng.below(3) {
                            0 => {
                                body.output.pop();
                            }
                            1 => {
                                body.input.pop();
                            }
                            _ => {
                                body.node.pop();
                            }
                        }
                    }
                }
                _ => attr.r#type = Some(rng.below(14) as i32),
            }
        }
        2 => {
            let t = rng.below(g.initializer.len());
            let Some(init) = g.initializer.get_mut(t) else {
                return;
            };
            match rng.below(4) {
                0 => {
                    let k = rng.below(init.dims.len() + 1);
                    if k < init.dims.len() {
                        init.dims[k] = value;
                    } else {
                        init.dims.push(value);
                    }
                }
                1 => init.data_type = Some(rng.below(26) as i32),
                2 => {
                    if let Some(raw) = init.raw_data.as_mut() {
                        let keep = rng.below(raw.len() + 1);
                        *raw = raw.slice(..keep);
                    }
                }
                _ => {
                    init.dims.pop();
                }
            }
        }
        3 => {
            // Wiring: a read of another tensor (cycles, undefined names, type clashes).
            let n = rng.below(g.node.len());
            let Some(node) = g.node.get_mut(n) else {
                return;
            };
            let i = rng.below(node.input.len());
            if let (Some(slot), Some(name)) =
                (node.input.get_mut(i), names.get(rng.below(names.len())))
            {
                *slot = name.clone();
            }
        }
        4 => {
            let n = rng.below(g.node.len());
            if let Some(node) = g.node.get_mut(n) {
                node.op_type = Some(OPS[rng.below(OPS.len())].to_string());
            }
        }
        _ => {
            let n = rng.below(g.node.len());
            if n < g.node.len() {
                let dup = g.node[n].clone();
                g.node.insert(rng.below(g.node.len() + 1), dup);
            }
        }
    }
}
