//! The default partitioner against a bare Kahn topological sort on `cleave gen` models of
//! 10^4, 10^5 and 10^6 nodes (two devices): criterion's figures for the two, side by side.
//! Run: `cargo bench -p cleave --bench scale`.

use cleave::assign::{Assignment, Placement, Reason};
use cleave::onnx::gen::{generate, GenOptions};
use cleave::onnx::{encode_model, to_ir, OnnxModel};
use cleave::partition::{kahn_order, partition_default, Options, UnitGraph};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

fn unit_graph(nodes: usize) -> UnitGraph {
    let g = generate(GenOptions {
        nodes,
        devices: 2,
        seed: 0,
    });
    let bytes = encode_model(&g.model);
    let onnx =
        OnnxModel::from_bytes(bytes.into(), "gen.onnx".into()).expect("a generated model decodes");
    let model = to_ir(&onnx).expect("a generated model is a valid graph");
    let placement = g
        .device
        .iter()
        .map(|&d| Placement::Device(d, Reason::OpName))
        .collect();
    let a = Assignment {
        devices: g.backends,
        placement,
        groups: Vec::new(),
        warnings: Vec::new(),
    };
    UnitGraph::from_assignment(&model.graph, &a, &[])
}

fn scale(c: &mut Criterion) {
    let mut group = c.benchmark_group("partition_vs_toposort");
    group.sample_size(10);
    for n in [10_000usize, 100_000, 1_000_000] {
        let g = unit_graph(n);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::new("partition_default", n), &g, |b, g| {
            b.iter(|| partition_default(g, Options::default()))
        });
        group.bench_with_input(BenchmarkId::new("kahn_toposort", n), &g, |b, g| {
            b.iter(|| kahn_order(g))
        });
    }
    group.finish();
}

criterion_group!(benches, scale);
criterion_main!(benches);
