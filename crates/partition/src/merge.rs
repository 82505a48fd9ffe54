//! Greedy merging of parts while the part graph stays acyclic.
//!
//! The part graph keeps a topological order of its parts. Any path from `a` to `b` runs
//! through parts placed between them, so the test for a second path only searches that
//! window, and a merge reorders only the window: the parts reachable from `a` move after the
//! merged part, the others before it. On graphs whose parts stay local (real networks), each
//! test and merge costs about the size of the merged parts' neighbourhood. A search that
//! would go past `SEARCH_LIMIT` parts is abandoned and the pair left unmerged, which keeps
//! the pass near-linear on any graph and only ever costs a merge, never validity; part
//! graphs of up to `SEARCH_LIMIT` parts are always searched exactly.

use crate::dag::Dag;
use crate::start_partition::Start;
use crate::union_find::UnionFind;
use crate::unit_graph::{Partition, UnitGraph};

/// Parts a search for a second path may visit, and the most slots a merge may reorder.
const SEARCH_LIMIT: usize = 4096;

const FREE: u32 = u32::MAX;

/// Most parts for which `allow_disconnected` tries every pair of unrelated parts; above it,
/// the parts are first grouped by the epoch greedy, linear in the part graph.
const PAIRWISE_LIMIT: usize = 1024;

/// The part graph, kept up to date as parts merge (union-find over part ids).
struct Quotient {
    sets: UnionFind,
    device: Vec<u16>,
    /// Successors of each part: `(start, len)` in `arena`. A merge appends the joined list at
    /// the arena's end, so no part owns an allocation of its own.
    succ_at: Vec<(u32, u32)>,
    arena: Vec<u32>,
    stamp: Vec<u32>,
    epoch: u32,
    /// Roots in a topological order of the part graph; merged-away slots are `FREE`.
    order: Vec<u32>,
    /// Slot of each root in `order`.
    pos: Vec<u32>,
    /// Buffers reused by every search and merge: one allocation each, not one per call.
    stack: Vec<u32>,
    after: Vec<u32>,
}

impl Quotient {
    fn new(start: &Start) -> Quotient {
        let k = start.count();
        // Edges between parts, grouped by source part (counting sort), each list deduplicated.
        let mut at = vec![0u32; k + 1];
        for &(a, _) in &start.cross {
            at[a as usize + 1] += 1;
        }
        for x in 0..k {
            at[x + 1] += at[x];
        }
        let mut fill: Vec<u32> = at[..k].to_vec();
        let mut arena = vec![0u32; start.cross.len()];
        for &(a, b) in &start.cross {
            arena[fill[a as usize] as usize] = b;
            fill[a as usize] += 1;
        }
        drop(fill);
        let mut stamp = vec![u32::MAX; k];
        let mut indeg = vec![0u32; k];
        let mut succ_at = vec![(0u32, 0u32); k];
        let mut w = 0usize;
        for a in 0..k {
            let start = w;
            for i in at[a] as usize..at[a + 1] as usize {
                let b = arena[i];
                if stamp[b as usize] != a as u32 {
                    stamp[b as usize] = a as u32;
                    indeg[b as usize] += 1;
                    arena[w] = b;
                    w += 1;
                }
            }
            succ_at[a] = (start as u32, (w - start) as u32);
        }
        arena.truncate(w);
        // Kahn's order, lowest part first where there is a choice: parts are numbered by
        // their earliest vertex, so neighbours in the graph stay near each other in the order.
        // When every edge already climbs (as ONE's groups do), that order is the numbering.
        let order: Vec<u32> = if (0..k).all(|a| {
            arena[succ_at[a].0 as usize..(succ_at[a].0 + succ_at[a].1) as usize]
                .iter()
                .all(|&b| b as usize > a)
        }) {
            (0..k as u32).collect()
        } else {
            let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<u32>> = (0..k as u32)
                .filter(|&x| indeg[x as usize] == 0)
                .map(std::cmp::Reverse)
                .collect();
            let mut order = Vec::with_capacity(k);
            while let Some(std::cmp::Reverse(x)) = ready.pop() {
                order.push(x);
                let (at, len) = succ_at[x as usize];
                for &y in &arena[at as usize..(at + len) as usize] {
                    indeg[y as usize] -= 1;
                    if indeg[y as usize] == 0 {
                        ready.push(std::cmp::Reverse(y));
                    }
                }
            }
            order
        };
        debug_assert_eq!(
            order.len(),
            k,
            "merge_neighbours needs an acyclic partition"
        );
        let mut pos = vec![0u32; k];
        for (i, &x) in order.iter().enumerate() {
            pos[x as usize] = i as u32;
        }
        stamp.fill(0);
        Quotient {
            sets: UnionFind::new(k),
            device: start.device.clone(),
            succ_at,
            arena,
            stamp,
            epoch: 0,
            order,
            pos,
            stack: Vec::new(),
            after: Vec::new(),
        }
    }

    fn find(&mut self, x: u32) -> u32 {
        self.sets.find(x)
    }

    /// Rewrites the successors of a root as distinct roots other than itself.
    fn refresh(&mut self, a: u32) {
        let (at, len) = self.succ_at[a as usize];
        let list = &mut self.arena[at as usize..(at + len) as usize];
        let mut changed = false;
        for s in list.iter_mut() {
            let r = self.sets.find(*s);
            changed |= r != *s;
            *s = r;
        }
        if changed {
            list.sort_unstable();
            let mut w = 0;
            for i in 0..list.len() {
                let s = list[i];
                if s != a && (w == 0 || list[w - 1] != s) {
                    list[w] = s;
                    w += 1;
                }
            }
            self.succ_at[a as usize].1 = w as u32;
        }
    }

    fn succ(&self, a: u32) -> &[u32] {
        let (at, len) = self.succ_at[a as usize];
        &self.arena[at as usize..(at + len) as usize]
    }

    /// `b`'s successors join `a`'s, at the arena's end.
    fn join_lists(&mut self, a: u32, b: u32) {
        let ((sa, la), (sb, lb)) = (self.succ_at[a as usize], self.succ_at[b as usize]);
        let start = self.arena.len() as u32;
        self.arena
            .extend_from_within(sa as usize..(sa + la) as usize);
        self.arena
            .extend_from_within(sb as usize..(sb + lb) as usize);
        self.succ_at[a as usize] = (start, la + lb);
        self.succ_at[b as usize] = (0, 0);
    }

    /// Whether `b` is reachable from `a` along a path other than the direct edge; `None` when
    /// the search outgrew its limit. Marks the parts it visits with the current epoch: when
    /// `b` is not reachable they are exactly the parts between `a` and `b` that `a` reaches.
    fn second_path(&mut self, a: u32, b: u32) -> Option<bool> {
        self.epoch += 1;
        let limit = self.pos[b as usize];
        let mut stack = std::mem::take(&mut self.stack);
        stack.clear();
        stack.push(a);
        let mut visited = 0usize;
        let found = loop {
            let Some(x) = stack.pop() else {
                break Some(false);
            };
            self.refresh(x);
            let (at, len) = self.succ_at[x as usize];
            for i in at..at + len {
                let s = self.arena[i as usize];
                if s == b {
                    if x != a {
                        self.stack = stack;
                        return Some(true);
                    }
                    continue;
                }
                if self.pos[s as usize] < limit && self.stamp[s as usize] != self.epoch {
                    self.stamp[s as usize] = self.epoch;
                    visited += 1;
                    stack.push(s);
                }
            }
            if visited > SEARCH_LIMIT {
                break None;
            }
        };
        self.stack = stack;
        found
    }

    /// Merges `b` into `a` (edge a→b, no second path, `second_path` just run): the window
    /// between them becomes the parts `a` does not reach, then the merged part, then the
    /// parts it reaches.
    fn merge(&mut self, a: u32, b: u32) {
        let (lo, hi) = (self.pos[a as usize] as usize, self.pos[b as usize] as usize);
        let mut after = std::mem::take(&mut self.after);
        after.clear();
        let mut w = lo;
        for slot in lo + 1..hi {
            let x = self.order[slot];
            if x == FREE {
                continue;
            }
            if self.stamp[x as usize] == self.epoch {
                after.push(x);
            } else {
                self.order[w] = x;
                self.pos[x as usize] = w as u32;
                w += 1;
            }
        }
        self.order[w] = a;
        self.pos[a as usize] = w as u32;
        w += 1;
        for &x in &after {
            self.order[w] = x;
            self.pos[x as usize] = w as u32;
            w += 1;
        }
        self.after = after;
        for slot in &mut self.order[w..=hi] {
            *slot = FREE;
        }
        self.sets.union(a, b);
        self.join_lists(a, b);
    }

    /// Whether `to` is reachable from `from` (both roots), unbounded.
    fn reaches(&mut self, from: u32, to: u32) -> bool {
        self.epoch += 1;
        let mut stack = vec![from];
        while let Some(x) = stack.pop() {
            if x == to {
                return true;
            }
            if self.stamp[x as usize] == self.epoch {
                continue;
            }
            self.stamp[x as usize] = self.epoch;
            self.refresh(x);
            let (at, len) = self.succ_at[x as usize];
            stack.extend_from_slice(&self.arena[at as usize..(at + len) as usize]);
        }
        false
    }

    /// Joins the parts the epoch greedy takes together: in the part graph, every ready part
    /// of one device (the device of the ready part earliest in the order), and those of that
    /// device that become ready meanwhile. Later epochs only read earlier ones, so the joined
    /// parts still form a DAG.
    fn join_epochs(&mut self) {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        let roots: Vec<u32> = self.order.iter().copied().filter(|&x| x != FREE).collect();
        let mut indeg = vec![0u32; self.device.len()];
        for &x in &roots {
            self.refresh(x);
            for &s in self.succ(x) {
                indeg[s as usize] += 1;
            }
        }
        let devices = roots
            .iter()
            .map(|&x| self.device[x as usize] as usize + 1)
            .max()
            .unwrap_or(0);
        let mut ready: Vec<BinaryHeap<Reverse<(u32, u32)>>> = vec![BinaryHeap::new(); devices];
        for &x in &roots {
            if indeg[x as usize] == 0 {
                ready[self.device[x as usize] as usize].push(Reverse((self.pos[x as usize], x)));
            }
        }
        let mut queue = Vec::new();
        while let Some(dev) = (0..devices)
            .filter_map(|d| ready[d].peek().map(|r| (r.0, d)))
            .min()
            .map(|(_, d)| d)
        {
            queue.extend(ready[dev].drain().map(|r| r.0 .1));
            let mut epoch: Vec<u32> = Vec::new();
            while let Some(x) = queue.pop() {
                epoch.push(x);
                let (at, len) = self.succ_at[x as usize];
                for i in at..at + len {
                    let s = self.arena[i as usize];
                    indeg[s as usize] -= 1;
                    if indeg[s as usize] == 0 {
                        if self.device[s as usize] as usize == dev {
                            queue.push(s);
                        } else {
                            ready[self.device[s as usize] as usize]
                                .push(Reverse((self.pos[s as usize], s)));
                        }
                    }
                }
            }
            // One joined successor list for the epoch, copied once.
            let start = self.arena.len() as u32;
            for &x in &epoch {
                let (at, len) = std::mem::take(&mut self.succ_at[x as usize]);
                self.arena
                    .extend_from_within(at as usize..(at + len) as usize);
                self.sets.union(epoch[0], x);
            }
            self.succ_at[epoch[0] as usize] = (start, self.arena.len() as u32 - start);
        }
    }

    fn union_unordered(&mut self, a: u32, b: u32) {
        self.sets.union(a, b);
        self.join_lists(a, b);
    }
}

/// Merges same-device parts joined by an edge whenever no other path joins them (so the
/// part graph stays acyclic), until none is left; with `allow_disconnected`, also merges
/// same-device parts that no path joins at all.
pub fn merge_neighbours(g: &UnitGraph, p: &Partition, allow_disconnected: bool) -> Partition {
    let d = Dag::new(g, false);
    let start = Start::from_labels(&d, &d.restrict(&p.part_of));
    let merged = merge(&start, allow_disconnected);
    d.expand(
        |v| merged.part_of[start.part_of[v as usize] as usize],
        merged.count,
    )
}

/// The merged parts of a start's parts: `part_of[start part]`, dense in `0..count`.
pub(crate) struct Merged {
    pub part_of: Vec<u32>,
    pub count: usize,
}

/// The same on the compact graph.
pub(crate) fn merge(start: &Start, allow_disconnected: bool) -> Merged {
    let mut q = Quotient::new(start);
    let k = start.count() as u32;
    let mut candidates = Vec::new();
    // One pass suffices: a pair found joined by a second path stays so after any merge
    // (merging only contracts paths), so only a merged part's new readers need a look, and
    // the part is looked at again until nothing more joins it.
    for a in 0..k {
        if !q.sets.is_root(a) {
            continue;
        }
        loop {
            q.refresh(a);
            candidates.clear();
            candidates.extend_from_slice(q.succ(a));
            let mut merged = false;
            for &b in &candidates {
                if q.device[a as usize] != q.device[b as usize] || !q.sets.is_root(b) {
                    continue;
                }
                let window = (q.pos[b as usize] - q.pos[a as usize]) as usize;
                if window <= SEARCH_LIMIT && q.second_path(a, b) == Some(false) {
                    q.merge(a, b);
                    merged = true;
                }
            }
            if !merged {
                break;
            }
        }
    }
    if allow_disconnected {
        let roots = (0..k).filter(|&x| q.sets.is_root(x)).count();
        if roots > PAIRWISE_LIMIT {
            q.join_epochs();
        }
        let roots: Vec<u32> = (0..k).filter(|&x| q.sets.is_root(x)).collect();
        if roots.len() <= PAIRWISE_LIMIT {
            // Pairs of unrelated parts: quadratic, so only on part graphs this small.
            for (i, &a) in roots.iter().enumerate() {
                for &b in &roots[i + 1..] {
                    let (ra, rb) = (q.find(a), q.find(b));
                    if ra == rb || q.device[ra as usize] != q.device[rb as usize] {
                        continue;
                    }
                    if !q.reaches(ra, rb) && !q.reaches(rb, ra) {
                        q.union_unordered(ra, rb);
                    }
                }
            }
        }
    }
    let mut dense = vec![u32::MAX; k as usize];
    let mut count = 0;
    let part_of = (0..k)
        .map(|x| {
            let r = q.find(x) as usize;
            if dense[r] == u32::MAX {
                dense[r] = count;
                count += 1;
            }
            dense[r]
        })
        .collect();
    Merged {
        part_of,
        count: count as usize,
    }
}
