//! Greedy merging of parts while the part graph stays acyclic.

use crate::union_find::UnionFind;
use crate::unit_graph::{Partition, UnitGraph};

/// The part graph, kept up to date as parts merge (union-find over part ids).
struct Quotient {
    sets: UnionFind,
    device: Vec<u16>,
    succ: Vec<Vec<u32>>,
    stamp: Vec<u32>,
    epoch: u32,
}

impl Quotient {
    fn new(g: &UnitGraph, p: &Partition) -> Quotient {
        let k = p.count;
        let mut device = vec![0; k];
        let mut succ = vec![Vec::new(); k];
        for u in 0..g.len() {
            let a = p.part_of[u];
            device[a as usize] = g.device[u];
            for &s in &g.succ[u] {
                let b = p.part_of[s as usize];
                if a != b && !succ[a as usize].contains(&b) {
                    succ[a as usize].push(b);
                }
            }
        }
        Quotient { sets: UnionFind::new(k), device, succ, stamp: vec![0; k], epoch: 0 }
    }

    fn find(&mut self, x: u32) -> u32 {
        self.sets.find(x)
    }

    /// Current successors of a root, as roots.
    fn succ_of(&mut self, a: u32) -> Vec<u32> {
        let list = std::mem::take(&mut self.succ[a as usize]);
        let mut out: Vec<u32> = list.iter().map(|&s| self.find(s)).filter(|&s| s != a).collect();
        out.sort_unstable();
        out.dedup();
        self.succ[a as usize] = out.clone();
        out
    }

    /// Whether `to` is reachable from `from`; with `indirectly`, along a path other than the
    /// direct edge.
    fn reaches(&mut self, from: u32, to: u32, indirectly: bool) -> bool {
        self.epoch += 1;
        let mut stack: Vec<u32> = if indirectly { self.succ_of(from).into_iter().filter(|&s| s != to).collect() } else { vec![from] };
        while let Some(x) = stack.pop() {
            if x == to {
                return true;
            }
            if self.stamp[x as usize] == self.epoch {
                continue;
            }
            self.stamp[x as usize] = self.epoch;
            stack.extend(self.succ_of(x));
        }
        false
    }

    fn union(&mut self, a: u32, b: u32) {
        self.sets.union(a, b);
        let sb = std::mem::take(&mut self.succ[b as usize]);
        self.succ[a as usize].extend(sb);
    }
}

/// Merges same-device parts joined by an edge whenever no other path joins them (so the
/// part graph stays acyclic), until none is left; with `allow_disconnected`, also merges
/// same-device parts that no path joins at all.
pub fn merge_neighbours(g: &UnitGraph, p: &Partition, allow_disconnected: bool) -> Partition {
    let mut q = Quotient::new(g, p);
    let k = p.count as u32;
    loop {
        let mut merged = false;
        for a0 in 0..k {
            let a = q.find(a0);
            if a != a0 {
                continue;
            }
            for b in q.succ_of(a) {
                let a = q.find(a);
                if b == a || q.device[a as usize] != q.device[b as usize] {
                    continue;
                }
                if !q.reaches(a, b, true) {
                    q.union(a, b);
                    merged = true;
                }
            }
        }
        if !merged {
            break;
        }
    }
    if allow_disconnected {
        let roots: Vec<u32> = (0..k).filter(|&x| q.sets.is_root(x)).collect();
        for (i, &a) in roots.iter().enumerate() {
            for &b in &roots[i + 1..] {
                let (ra, rb) = (q.find(a), q.find(b));
                if ra == rb || q.device[ra as usize] != q.device[rb as usize] {
                    continue;
                }
                if !q.reaches(ra, rb, false) && !q.reaches(rb, ra, false) {
                    q.union(ra, rb);
                }
            }
        }
    }
    let labels: Vec<u32> = (0..g.len()).map(|u| q.find(p.part_of[u])).collect();
    Partition::from_labels(&labels)
}
