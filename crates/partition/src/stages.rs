//! Pipeline stages: consecutive slices of a topological order with about equal cost.

use crate::unit_graph::{Partition, UnitGraph};

/// Cuts the units, in topological order, into at most `n` consecutive stages whose costs are
/// as close as a greedy cut gets to `total / n` each. Every edge runs from a stage to the same
/// or a later one, so the stages form a chain without cycles.
pub fn stage_partition(g: &UnitGraph, cost: &[u64], n: usize) -> Partition {
    let n = n.max(1);
    let order = g.order();
    let total: u128 = order.iter().map(|&u| u128::from(cost[u as usize])).sum();
    let mut part_of = vec![0u32; g.len()];
    let (mut acc, mut stage, mut in_stage) = (0u128, 0usize, 0usize);
    for (i, &u) in order.iter().enumerate() {
        let c = u128::from(cost[u as usize]);
        let left = order.len() - i;
        let stages_after = n - 1 - stage;
        // Open the next stage when this unit's midpoint lies past the current stage's share,
        // or when every remaining unit is needed to give each later stage one.
        let share_done = (acc + c / 2) * n as u128 >= total * (stage as u128 + 1);
        if stage + 1 < n && in_stage > 0 && (share_done || left <= stages_after) {
            stage += 1;
            in_stage = 0;
        }
        part_of[u as usize] = stage as u32;
        acc += c;
        in_stage += 1;
    }
    Partition::from_labels(&part_of)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_splits_at_equal_cost() {
        let g = UnitGraph::from_edges(vec![0; 6], &[(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]);
        let p = stage_partition(&g, &[10, 10, 10, 10, 10, 10], 2);
        assert_eq!(p.part_of, vec![0, 0, 0, 1, 1, 1]);
        let p = stage_partition(&g, &[50, 1, 1, 1, 1, 50], 2);
        assert_eq!(p.count, 2);
        assert!(g.is_valid(&p, false));
        let p = stage_partition(&g, &[1, 1, 1, 1, 1, 100], 3);
        assert_eq!(p.count, 3, "{p:?}");
    }
}
