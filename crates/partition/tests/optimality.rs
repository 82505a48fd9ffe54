//! The default partitioner on random DAGs: always valid, never worse than ONE's rule or the
//! epoch greedy, and measured against a brute-force optimum on small graphs.

use cleave_partition::{epoch_greedy, one_rule, partition_default, Options, Partition, UnitGraph};
use proptest::prelude::*;

/// A random DAG: edges only from lower to higher units; devices in `0..devices`.
fn dag(n: usize, devices: u16, edge_bits: &[bool], dev: &[u16]) -> UnitGraph {
    let mut edges = Vec::new();
    let mut k = 0;
    for j in 1..n {
        for i in 0..j {
            if edge_bits[k % edge_bits.len()] {
                edges.push((i as u32, j as u32));
            }
            k += 1;
        }
    }
    UnitGraph::from_edges(dev[..n].iter().map(|d| d % devices).collect(), &edges)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn default_is_valid_and_never_worse_than_the_references(
        n in 2usize..40,
        devices in 2u16..=4,
        edge_bits in proptest::collection::vec(prop::bool::weighted(0.15), 64..200),
        dev in proptest::collection::vec(0u16..4, 40),
    ) {
        let g = dag(n, devices, &edge_bits, &dev);
        let best = partition_default(&g, Options::default());
        prop_assert!(g.is_valid(&best, true), "invalid: {best:?}");
        let one = one_rule(&g);
        let epoch = epoch_greedy(&g);
        prop_assert!(g.is_valid(&one, true) && g.is_valid(&epoch, true));
        prop_assert!(best.count <= one.count && best.count <= epoch.count, "{} vs one {} epoch {}", best.count, one.count, epoch.count);
        let loose = partition_default(&g, Options { allow_disconnected: true });
        prop_assert!(g.is_valid(&loose, false));
        prop_assert!(loose.count <= best.count);
    }
}

/// The fewest parts over every valid partition (connected, single-device, acyclic), by
/// branch and bound over restricted-growth labelings.
fn optimum(g: &UnitGraph) -> usize {
    fn go(g: &UnitGraph, u: usize, labels: &mut Vec<u32>, dev_of: &mut Vec<u16>, best: &mut usize) {
        if dev_of.len() >= *best {
            return;
        }
        if u == g.len() {
            let p = Partition {
                part_of: labels.clone(),
                count: dev_of.len(),
            };
            if g.is_valid(&p, true) {
                *best = dev_of.len();
            }
            return;
        }
        for l in 0..dev_of.len() {
            if dev_of[l] == g.device[u] {
                labels.push(l as u32);
                go(g, u + 1, labels, dev_of, best);
                labels.pop();
            }
        }
        labels.push(dev_of.len() as u32);
        dev_of.push(g.device[u]);
        go(g, u + 1, labels, dev_of, best);
        dev_of.pop();
        labels.pop();
    }
    let mut best = g.len() + 1;
    go(g, 0, &mut Vec::new(), &mut Vec::new(), &mut best);
    best
}

#[test]
fn default_hits_the_brute_force_optimum_on_small_graphs() {
    // xorshift: the same graphs on every run.
    let mut rng = cleave_ir::XorShift64::raw(0x2545_F491_4F6C_DD1D);
    let mut next = move || rng.next_u64();
    let trials = 1000;
    let mut hits = 0;
    let mut gaps = Vec::new();
    let (mut one_hits, mut epoch_hits) = (0, 0);
    for _ in 0..trials {
        let n = 4 + (next() % 9) as usize; // 4..=12 units
        let devices = 2 + (next() % 3) as u16;
        let density = 10 + next() % 30; // percent
        let bits: Vec<bool> = (0..64).map(|_| next() % 100 < density).collect();
        let dev: Vec<u16> = (0..n).map(|_| (next() % 4) as u16).collect();
        let g = dag(n, devices, &bits, &dev);
        let ours = partition_default(&g, Options::default()).count;
        let best = optimum(&g);
        assert!(
            ours >= best,
            "brute force found more parts than the heuristic: oracle bug"
        );
        one_hits += usize::from(one_rule(&g).count == best);
        epoch_hits += usize::from(epoch_greedy(&g).count == best);
        if ours == best {
            hits += 1;
        } else {
            gaps.push(ours - best);
        }
    }
    let share = hits as f64 / trials as f64;
    eprintln!("default partitioner hit the optimum on {hits}/{trials} graphs ({:.1} %); misses by {gaps:?}", share * 100.0);
    eprintln!("for comparison: ONE's rule {one_hits}/{trials}, epoch greedy {epoch_hits}/{trials}");
    // The oracle must be able to tell a good partitioner from a poor one.
    assert!(
        one_hits < trials * 9 / 10,
        "the random graphs are too easy to judge anything"
    );
    assert!(share >= 0.95, "optimum share {share:.3} below 0.95");
}

#[test]
fn oracle_agrees_with_the_instance_norm_example() {
    // ONE's Net_InstanceNorm_003 with ADD on acl_cl: ONE gives 5 parts, 4 is the optimum.
    let g = UnitGraph::from_edges(
        vec![0, 0, 0, 0, 1, 0, 0, 0, 1],
        &[
            (0, 1),
            (1, 2),
            (2, 3),
            (3, 4),
            (4, 5),
            (5, 6),
            (1, 6),
            (6, 7),
            (7, 8),
        ],
    );
    assert_eq!(optimum(&g), 4);
    assert_eq!(one_rule(&g).count, 5);
}
