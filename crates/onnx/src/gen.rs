//! Random models shaped like real networks, for scale tests and benchmarks: layered DAGs of
//! chains, residual adds, branches joined by a concat, and occasional long skips, with a
//! device label per node. Every tensor is `[1, 4]` float, so a model of a million nodes has no
//! weights to speak of (one shared `axes` initializer) and still runs on any engine.

use crate::proto::{
    attribute_proto::AttributeType, tensor_proto::DataType, tensor_shape_proto::dimension,
    type_proto, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};

/// What to generate.
#[derive(Clone, Copy, Debug)]
pub struct GenOptions {
    pub nodes: usize,
    pub devices: usize,
    pub seed: u64,
}

/// A generated model and the device each of its nodes should run on.
pub struct Generated {
    pub model: ModelProto,
    /// Backend names, `cpu` first (the device nodes fall back to).
    pub backends: Vec<String>,
    /// Index into `backends` for each node of `model.graph.node`, in order.
    pub device: Vec<u16>,
}

const WIDTH: i64 = 4;
const UNARY: [&str; 5] = ["Relu", "Sigmoid", "Tanh", "Neg", "Abs"];
/// Mean length of a run of nodes on one device: accelerators take long stretches, the CPU
/// takes what they cannot run.
const REGION_MEAN: u64 = 48;
/// Share (per mille) of nodes that fall back to another device inside a region, as an
/// unsupported op would.
const FALLBACK_PER_MILLE: u64 = 30;
/// Block outputs kept as targets of long skip connections (U-Net and DenseNet style).
const SKIP_POOL: usize = 64;

/// The backends' names for `devices` devices: `cpu`, `npu`, `gpu`, `dsp`, then `dev4`...
pub fn backend_names(devices: usize) -> Vec<String> {
    (0..devices.max(1))
        .map(|i| match i {
            0 => "cpu".to_string(),
            1 => "npu".to_string(),
            2 => "gpu".to_string(),
            3 => "dsp".to_string(),
            _ => format!("dev{i}"),
        })
        .collect()
}

/// Generates a model with exactly `opts.nodes` nodes (at least one); the same options give
/// the same model.
pub fn generate(opts: GenOptions) -> Generated {
    let n = opts.nodes.max(1);
    let backends = backend_names(opts.devices);
    let mut b = Builder {
        nodes: Vec::with_capacity(n),
        device: Vec::with_capacity(n),
        rng: SplitMix(opts.seed),
        devices: backends.len() as u64,
        region_dev: 0,
        region_left: 0,
    };
    let mut cur = "x".to_string();
    let mut pool: Vec<String> = Vec::new();
    while b.nodes.len() < n {
        let left = n - b.nodes.len();
        let roll = b.rng.below(100);
        cur = if left < 6 || roll < 40 {
            let len = 1 + b.rng.below(left.min(6) as u64) as usize;
            b.chain(cur, len)
        } else if roll < 70 {
            // Residual: a short chain added back onto its input.
            let len = 1 + b.rng.below(4) as usize;
            let body = b.chain(cur.clone(), len);
            b.node("Add", vec![body, cur], Vec::new())
        } else if roll < 90 {
            // Two branches joined: concat on the batch axis, then summed back to one row.
            let (la, lb) = (1 + b.rng.below(2) as usize, 1 + b.rng.below(2) as usize);
            let left_branch = b.chain(cur.clone(), la);
            let right_branch = b.chain(cur, lb);
            let axis = AttributeProto {
                name: Some("axis".into()),
                r#type: Some(AttributeType::Int as i32),
                i: Some(0),
                ..Default::default()
            };
            let joined = b.node("Concat", vec![left_branch, right_branch], vec![axis]);
            b.node("ReduceSum", vec![joined, "axes0".to_string()], Vec::new())
        } else if !pool.is_empty() {
            let far = pool[b.rng.below(pool.len() as u64) as usize].clone();
            b.node("Add", vec![cur, far], Vec::new())
        } else {
            b.chain(cur, 1)
        };
        if pool.len() == SKIP_POOL {
            pool.remove(0);
        }
        pool.push(cur.clone());
    }
    let out = cur;
    let axes = TensorProto {
        name: Some("axes0".into()),
        dims: vec![1],
        data_type: Some(DataType::Int64 as i32),
        int64_data: vec![0],
        ..Default::default()
    };
    let graph = GraphProto {
        name: Some(format!("gen_{n}_{}_{}", backends.len(), opts.seed)),
        node: b.nodes,
        initializer: vec![axes],
        input: vec![row_info("x")],
        output: vec![row_info(&out)],
        ..Default::default()
    };
    let model = ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        producer_name: Some("cleave gen".into()),
        producer_version: Some(env!("CARGO_PKG_VERSION").into()),
        graph: Some(graph),
        ..Default::default()
    };
    Generated {
        model,
        backends,
        device: b.device,
    }
}

fn row_info(name: &str) -> ValueInfoProto {
    let dim = |v: i64| dimension::Value::DimValue(v);
    let shape = TensorShapeProto {
        dim: [1, WIDTH]
            .iter()
            .map(|&v| crate::proto::tensor_shape_proto::Dimension {
                value: Some(dim(v)),
                ..Default::default()
            })
            .collect(),
    };
    let tensor = type_proto::Tensor {
        elem_type: Some(DataType::Float as i32),
        shape: Some(shape),
    };
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(tensor)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

struct Builder {
    nodes: Vec<NodeProto>,
    device: Vec<u16>,
    rng: SplitMix,
    devices: u64,
    region_dev: u64,
    region_left: u64,
}

impl Builder {
    /// Appends a node with one output, named after its index; returns the output's name.
    fn node(&mut self, op: &str, input: Vec<String>, attribute: Vec<AttributeProto>) -> String {
        let i = self.nodes.len();
        let out = format!("t{i}");
        self.nodes.push(NodeProto {
            name: Some(format!("n{i}")),
            op_type: Some(op.into()),
            input,
            output: vec![out.clone()],
            attribute,
            ..Default::default()
        });
        let d = self.next_device();
        self.device.push(d);
        out
    }

    fn chain(&mut self, mut cur: String, len: usize) -> String {
        for _ in 0..len {
            let op = UNARY[self.rng.below(UNARY.len() as u64) as usize];
            cur = self.node(op, vec![cur], Vec::new());
        }
        cur
    }

    fn next_device(&mut self) -> u16 {
        if self.devices == 1 {
            return 0;
        }
        if self.region_left == 0 {
            self.region_dev = self.rng.below(self.devices);
            self.region_left = 1 + self.rng.below(2 * REGION_MEAN);
        }
        self.region_left -= 1;
        let d = if self.rng.below(1000) < FALLBACK_PER_MILLE {
            self.rng.below(self.devices)
        } else {
            self.region_dev
        };
        d as u16
    }
}

/// SplitMix64: small, seedable, and the same on every platform.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_node_count_and_every_tensor_read_once_defined() {
        for n in [1, 2, 5, 7, 100, 1000] {
            let g = generate(GenOptions {
                nodes: n,
                devices: 3,
                seed: 7,
            });
            let graph = g.model.graph.as_ref().unwrap();
            assert_eq!(graph.node.len(), n);
            assert_eq!(g.device.len(), n);
            assert!(g.device.iter().all(|&d| d < 3));
            // Every node output is read by a later node or is the graph output: no dead ends.
            let mut read = std::collections::HashSet::new();
            for node in &graph.node {
                read.extend(node.input.iter().cloned());
            }
            let out = graph.output[0].name();
            for node in &graph.node {
                assert!(
                    read.contains(&node.output[0]) || node.output[0] == out,
                    "{} is never read",
                    node.output[0]
                );
            }
        }
    }

    #[test]
    fn same_seed_same_model_and_the_structures_all_occur() {
        let a = generate(GenOptions {
            nodes: 2000,
            devices: 2,
            seed: 1,
        });
        let b = generate(GenOptions {
            nodes: 2000,
            devices: 2,
            seed: 1,
        });
        let c = generate(GenOptions {
            nodes: 2000,
            devices: 2,
            seed: 2,
        });
        assert_eq!(a.model, b.model);
        assert_ne!(a.model, c.model);
        let ops: std::collections::HashSet<&str> = a
            .model
            .graph
            .as_ref()
            .unwrap()
            .node
            .iter()
            .map(|n| n.op_type())
            .collect();
        for op in ["Add", "Concat", "ReduceSum", "Relu"] {
            assert!(ops.contains(op), "{op} missing");
        }
        assert!(a.device.contains(&0) && a.device.contains(&1));
    }
}
