//! Choosing each unit's device to minimise the predicted latency.
//!
//! Small problems are solved exactly, by trying every placement. Larger ones start from the
//! caller's candidates (each single device, the capability placement) and a dynamic
//! programme over a topological order (a chain of device runs, paying a launch and the live
//! tensors at each switch), then climb: move a whole part, a unit, or (on small graphs) a run
//! of the order to another device while the model's total falls. Every step is priced by
//! the real partitioner, so the result is never worse than a candidate.

use std::time::{Duration, Instant};

use cleave_partition::UnitGraph;

use crate::problem::{Estimate, Problem};

/// Placements up to this many are all tried.
pub const EXACT_LIMIT: u64 = 1 << 16;

/// Below this many units the climb also tries moving every run of the topological order.
const RUN_MOVES_UP_TO: usize = 48;

/// Below this many units the climb also tries moving every pair of units.
const PAIR_MOVES_UP_TO: usize = 24;

/// Below this many units the climb tries every unit; above, only those next to another device.
const ALL_UNIT_MOVES_UP_TO: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Every placement tried.
    Exact { placements: u64 },
    /// Candidates, the chain programme and the climb; `finished` is false when the time
    /// budget ran out before no move helped.
    Scalable { evaluations: u64, finished: bool },
}

#[derive(Clone, Debug)]
pub struct Placed {
    pub device: Vec<u16>,
    pub estimate: Estimate,
    pub method: Method,
}

/// How many placements the units allow (`None` past `u64`).
pub fn search_space(p: &Problem) -> Option<u64> {
    let d = p.device_count() as u16;
    (0..p.units.len()).try_fold(1u64, |acc, u| {
        acc.checked_mul((0..d).filter(|&e| p.allows(u, e)).count() as u64)
    })
}

/// The best placement by exhaustive search; `None` when some unit may run nowhere.
pub fn exact(p: &Problem) -> Option<(Vec<u16>, u64)> {
    let d = p.device_count() as u16;
    let allowed: Vec<Vec<u16>> = (0..p.units.len())
        .map(|u| (0..d).filter(|&e| p.allows(u, e)).collect())
        .collect();
    if allowed.iter().any(Vec::is_empty) {
        return None;
    }
    let mut digit = vec![0usize; allowed.len()];
    let mut dev: Vec<u16> = allowed.iter().map(|a| a[0]).collect();
    let mut scratch = p.units.clone();
    let mut best = (p.total(&mut scratch, &dev), dev.clone());
    let mut count = 1u64;
    loop {
        // Next placement, odometer style.
        let mut k = 0;
        while k < digit.len() {
            digit[k] += 1;
            if digit[k] < allowed[k].len() {
                dev[k] = allowed[k][digit[k]];
                break;
            }
            digit[k] = 0;
            dev[k] = allowed[k][0];
            k += 1;
        }
        if k == digit.len() {
            return Some((best.1, count));
        }
        count += 1;
        let t = p.total(&mut scratch, &dev);
        if t < best.0 {
            best = (t, dev.clone());
        }
    }
}

/// The chain programme: units in topological order, each on a device that may run it,
/// paying a part launch, the tensors live across the cut and the link at every switch.
pub fn chain(p: &Problem) -> Option<Vec<u16>> {
    let n = p.units.len();
    let d = p.device_count();
    if n == 0 || d == 0 {
        return None;
    }
    let order = p.units.order();
    let pos = &p.units.topo;
    // live[i]: bytes made at or before position i and read after it.
    let mut delta = vec![0i128; n + 1];
    for f in &p.flows {
        let Some(src) = f.producer else { continue };
        let from = pos[src as usize] as usize;
        let last = f.readers.iter().map(|&r| pos[r as usize] as usize).max();
        if let Some(last) = last.filter(|&l| l > from) {
            delta[from] += i128::from(f.bytes);
            delta[last] -= i128::from(f.bytes);
        }
    }
    let mut live = vec![0u64; n];
    let mut run = 0i128;
    for i in 0..n {
        run += delta[i];
        live[i] = u64::try_from(run.max(0)).unwrap_or(u64::MAX);
    }
    let switch = |i: usize, a: usize, b: usize| {
        let bytes = live[i - 1];
        let (da, db) = (p.devices[a], p.devices[b]);
        db.launch_s
            + bytes as f64 / da.io_bytes_per_s
            + bytes as f64 / db.io_bytes_per_s
            + p.links[a * d + b].seconds(bytes)
    };
    let mut f: Vec<f64> = (0..d)
        .map(|e| p.unit_cost(order[0] as usize, e as u16) + p.devices[e].launch_s)
        .collect();
    let mut back = vec![0u16; n * d];
    for i in 1..n {
        let u = order[i] as usize;
        let mut next = vec![f64::INFINITY; d];
        for (b, slot) in next.iter_mut().enumerate() {
            let c = p.unit_cost(u, b as u16);
            if !c.is_finite() {
                continue;
            }
            let (mut best, mut from) = (f[b], b);
            for (a, &fa) in f.iter().enumerate() {
                if a != b && fa + switch(i, a, b) < best {
                    best = fa + switch(i, a, b);
                    from = a;
                }
            }
            *slot = best + c;
            back[i * d + b] = from as u16;
        }
        f = next;
    }
    let (mut e, best) = f
        .iter()
        .enumerate()
        .min_by(|x, y| x.1.total_cmp(y.1))
        .map(|(e, &v)| (e, v))?;
    if !best.is_finite() {
        return None;
    }
    let mut dev = vec![0u16; n];
    for i in (0..n).rev() {
        dev[order[i] as usize] = e as u16;
        e = back[i * d + e] as usize;
    }
    Some(dev)
}

struct Climb<'a> {
    p: &'a Problem,
    scratch: UnitGraph,
    deadline: Instant,
    evaluations: u64,
    out_of_time: bool,
}

impl Climb<'_> {
    fn better(&mut self, trial: &[u16], best: f64) -> Option<f64> {
        if self.out_of_time || Instant::now() > self.deadline {
            self.out_of_time = true;
            return None;
        }
        self.evaluations += 1;
        let t = self.p.total(&mut self.scratch, trial);
        (t < best * (1.0 - 1e-9)).then_some(t)
    }

    /// Tries `moved` units on `e`; keeps the move when the total falls.
    fn try_move(&mut self, dev: &mut [u16], moved: &[usize], e: u16, best: &mut f64) -> bool {
        let changes: Vec<(usize, u16)> = moved.iter().map(|&u| (u, e)).collect();
        self.try_changes(dev, &changes, best)
    }

    /// Applies every `(unit, device)` change at once (each alone may not pay); keeps them
    /// when the total falls. Refused when a change is no change or not allowed.
    fn try_changes(&mut self, dev: &mut [u16], changes: &[(usize, u16)], best: &mut f64) -> bool {
        if changes.is_empty()
            || changes
                .iter()
                .any(|&(u, e)| !self.p.allows(u, e) || dev[u] == e)
        {
            return false;
        }
        let mut trial = dev.to_vec();
        for &(u, e) in changes {
            trial[u] = e;
        }
        match self.better(&trial, *best) {
            Some(t) => {
                dev.copy_from_slice(&trial);
                *best = t;
                true
            }
            None => false,
        }
    }

    /// One improving move, if any: a whole part, a unit, a run of the order.
    fn step(&mut self, dev: &mut [u16], best: &mut f64) -> bool {
        let p = self.p;
        let n = p.units.len();
        let d = p.device_count() as u16;
        let est = p.estimate_with(&mut self.scratch, dev);
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); est.partition.count];
        for u in 0..n {
            members[est.partition.part_of[u] as usize].push(u);
        }
        for m in &members {
            for e in 0..d {
                if self.try_move(dev, m, e, best) {
                    return true;
                }
            }
        }
        for u in 0..n {
            let near_other = n <= ALL_UNIT_MOVES_UP_TO
                || p.units
                    .succ(u as u32)
                    .iter()
                    .chain(p.units.pred(u as u32))
                    .any(|&v| dev[v as usize] != dev[u]);
            if !near_other {
                continue;
            }
            for e in 0..d {
                if self.try_move(dev, &[u], e, best) {
                    return true;
                }
            }
        }
        if n <= PAIR_MOVES_UP_TO {
            for u in 0..n {
                for v in u + 1..n {
                    for e in 0..d {
                        for f in 0..d {
                            if self.try_changes(dev, &[(u, e), (v, f)], best) {
                                return true;
                            }
                        }
                    }
                }
            }
        }
        if n <= RUN_MOVES_UP_TO {
            let order = p.units.order();
            for i in 0..n {
                for j in i + 2..=n {
                    for e in 0..d {
                        let run: Vec<usize> = order[i..j]
                            .iter()
                            .map(|&u| u as usize)
                            .filter(|&u| p.allows(u, e) && dev[u] != e)
                            .collect();
                        if self.try_move(dev, &run, e, best) {
                            return true;
                        }
                    }
                }
            }
        }
        false
    }
}

/// Candidates, the chain programme, then the climb from each while `budget` lasts.
pub fn scalable(p: &Problem, starts: &[Vec<u16>], budget: Duration) -> Option<(Vec<u16>, Method)> {
    let mut climb = Climb {
        p,
        scratch: p.units.clone(),
        deadline: Instant::now() + budget,
        evaluations: 0,
        out_of_time: false,
    };
    let mut seeds: Vec<Vec<u16>> = starts
        .iter()
        .filter(|s| s.len() == p.units.len())
        .cloned()
        .collect();
    seeds.extend(chain(p));
    let mut priced: Vec<(f64, Vec<u16>)> = seeds
        .into_iter()
        .map(|s| (p.total(&mut climb.scratch, &s), s))
        .filter(|(t, _)| t.is_finite())
        .collect();
    priced.sort_by(|a, b| a.0.total_cmp(&b.0));
    priced.dedup_by(|a, b| a.1 == b.1);
    let mut best: Option<(f64, Vec<u16>)> = None;
    for (mut t, mut dev) in priced {
        while climb.step(&mut dev, &mut t) {}
        if best.as_ref().is_none_or(|b| t < b.0) {
            best = Some((t, dev));
        }
    }
    let method = Method::Scalable {
        evaluations: climb.evaluations,
        finished: !climb.out_of_time,
    };
    best.map(|(_, dev)| (dev, method))
}

/// Time the closing sweep of whole parts may take, beyond the climb's budget.
pub const SETTLE_BUDGET: Duration = Duration::from_secs(5);

/// Moves whole parts to another device while that lowers the total: after a climb its budget
/// cut short, no part is left whose launch and copies cost more than running its units
/// elsewhere saves, unless `budget` runs out first (then `false`). Each kept move lowers the
/// total, so it ends; after a move the sweep goes on from the next part.
pub fn settle_parts(p: &Problem, dev: &mut [u16], budget: Duration) -> (u64, bool) {
    let mut climb = Climb {
        p,
        scratch: p.units.clone(),
        deadline: Instant::now() + budget,
        evaluations: 0,
        out_of_time: false,
    };
    let mut best = p.total(&mut climb.scratch, dev);
    if !best.is_finite() {
        return (0, true);
    }
    let d = p.device_count() as u16;
    // The part index to try next, in the order of the current partition.
    let mut next = 0usize;
    let mut since_move = 0usize;
    loop {
        let est = p.estimate_with(&mut climb.scratch, dev);
        let count = est.partition.count;
        if count == 0 || since_move >= count {
            break;
        }
        let k = next % count;
        let members: Vec<usize> = (0..p.units.len())
            .filter(|&u| est.partition.part_of[u] as usize == k)
            .collect();
        let moved = (0..d).any(|e| climb.try_move(dev, &members, e, &mut best));
        if climb.out_of_time {
            break;
        }
        if moved {
            since_move = 0;
        } else {
            since_move += 1;
            next = k + 1;
        }
    }
    (climb.evaluations, !climb.out_of_time)
}

/// Exact when the placements number at most [`EXACT_LIMIT`], else [`scalable`]. `None`
/// when some unit may run nowhere.
pub fn cheapest_placement(p: &Problem, starts: &[Vec<u16>], budget: Duration) -> Option<Placed> {
    let (device, method) = match search_space(p) {
        Some(0) => return None,
        Some(k) if k <= EXACT_LIMIT => {
            let (dev, placements) = exact(p)?;
            (dev, Method::Exact { placements })
        }
        _ => match scalable(p, starts, budget)? {
            // A climb that finished found no part worth moving; one cut short may have.
            (
                mut dev,
                Method::Scalable {
                    evaluations,
                    finished: false,
                },
            ) => {
                let (more, settled) = settle_parts(p, &mut dev, SETTLE_BUDGET);
                let method = Method::Scalable {
                    evaluations: evaluations + more,
                    finished: settled,
                };
                (dev, method)
            }
            done => done,
        },
    };
    let estimate = p.estimate(&device);
    Some(Placed {
        device,
        estimate,
        method,
    })
}
