//! The default partitioner on `cleave gen` models (real-net structure: chains, residual adds,
//! branches, long skips) of up to tens of thousands of units, and on a graph whose merges
//! would need searches past the merge pass's limit: always valid, never more parts than ONE's
//! rule or the epoch greedy, and no more than the unbounded merge of the old portfolio.

use cleave::assign::{Assignment, Placement, Reason};
use cleave::onnx::gen::{generate, GenOptions};
use cleave::onnx::{encode_model, to_ir, OnnxModel};
use cleave::partition::{
    device_levels, epoch_greedy, merge_neighbours, one_rule, partition_default, Options, UnitGraph,
};

fn unit_graph(nodes: usize, devices: usize, seed: u64) -> UnitGraph {
    let g = generate(GenOptions {
        nodes,
        devices,
        seed,
    });
    let onnx = OnnxModel::from_bytes(encode_model(&g.model).into(), "gen.onnx".into()).unwrap();
    let model = to_ir(&onnx).unwrap();
    let placement = g
        .device
        .iter()
        .map(|&d| Placement::Device(d, Reason::OpName))
        .collect();
    UnitGraph::from_assignment(
        &model.graph,
        &Assignment {
            devices: g.backends,
            placement,
            groups: Vec::new(),
            warnings: Vec::new(),
        },
        &[],
    )
}

#[test]
fn generated_models_partition_validly_and_never_worse_than_the_references() {
    for (nodes, devices, seed) in [(200, 2, 1), (3000, 2, 2), (3000, 3, 3), (20_000, 4, 4)] {
        let g = unit_graph(nodes, devices, seed);
        let best = partition_default(&g, Options::default());
        assert!(g.is_valid(&best, true), "{nodes} nodes: invalid partition");
        let (one, epoch) = (one_rule(&g), epoch_greedy(&g));
        assert!(g.is_valid(&one, true) && g.is_valid(&epoch, true));
        assert!(
            best.count <= one.count && best.count <= epoch.count,
            "{nodes}: {} vs one {} epoch {}",
            best.count,
            one.count,
            epoch.count
        );
        // The same portfolio through the public, uncontracted entry points: contraction
        // changes nothing the constructions see.
        let portfolio = [
            device_levels(&g, true),
            device_levels(&g, false),
            one,
            epoch,
        ]
        .iter()
        .map(|p| merge_neighbours(&g, p, false).count)
        .min()
        .unwrap();
        assert_eq!(best.count, portfolio, "{nodes} nodes");
        // A generated model has far fewer parts than units: the test says something.
        assert!(
            best.count * 4 < g.len(),
            "{} parts for {} units",
            best.count,
            g.len()
        );
    }
}

#[test]
fn merges_past_the_search_limit_are_skipped_and_stay_valid() {
    // A chain alternating between two devices, 10 001 units, plus a long edge from the first
    // to the last unit (same device): the part graph is wider than any search may go.
    let n = 10_001u32;
    let device: Vec<u16> = (0..n).map(|u| (u % 2) as u16).collect();
    let mut edges: Vec<(u32, u32)> = (1..n).map(|u| (u - 1, u)).collect();
    edges.push((0, n - 1));
    let g = UnitGraph::from_edges(device, &edges);
    let best = partition_default(&g, Options::default());
    assert!(g.is_valid(&best, true));
    assert_eq!(best.count, n as usize, "nothing here can merge");
}

#[test]
fn disconnected_parts_join_by_epochs_on_large_part_graphs() {
    // Over a thousand connected parts: too many to try every pair (on this graph that took
    // minutes, for the same 3117 parts), so the epochs group them first, in linear time.
    let g = unit_graph(60_000, 3, 5);
    let connected = partition_default(&g, Options::default());
    assert!(
        connected.count > 1024,
        "{} parts: the test needs a large part graph",
        connected.count
    );
    let loose = partition_default(
        &g,
        Options {
            allow_disconnected: true,
        },
    );
    assert!(g.is_valid(&loose, false), "invalid disconnected partition");
    // A sequential net has few unrelated same-device parts to join, but it has some.
    assert!(
        loose.count < connected.count,
        "{} disconnected parts for {} connected",
        loose.count,
        connected.count
    );
}
