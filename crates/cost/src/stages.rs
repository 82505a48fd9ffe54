//! Pipeline stages under memory budgets: consecutive slices of a topological order, one per
//! device, that minimise the slowest stage (the pipeline's throughput) while each stage's
//! weights plus its peak of live activations fit its device's budget.
//!
//! Every slice `[i, j)` is priced in one sweep per start `i` (weights, activation peak and
//! boundary bytes grow with `j` incrementally), and a dynamic programme over (stages, end)
//! picks the cuts, so the plan is the exact optimum over contiguous slices of the order.

/// A tensor the stages may pass, hold or read, by positions in the order.
#[derive(Clone, Debug)]
pub struct StageTensor {
    /// Position of the unit that computes it; `None` for a graph input.
    pub producer: Option<u32>,
    /// Positions of the units that read it (any order, duplicates allowed).
    pub readers: Vec<u32>,
    pub bytes: u64,
    /// A graph output: kept to the end of its stage and sent on.
    pub output: bool,
}

/// One stage's device: what a call and a byte in or out cost, and its memory.
#[derive(Clone, Copy, Debug)]
pub struct StageDevice {
    pub launch_s: f64,
    /// Bytes per second the stage's inputs arrive and its outputs leave at; infinite when
    /// transfers are not priced.
    pub io_bytes_per_s: f64,
    /// Bytes the stage may hold; `None`: unbounded.
    pub budget: Option<u64>,
}

/// Units in the order the stages slice, and what each stage's device makes of them.
#[derive(Clone, Debug)]
pub struct StageProblem {
    /// `time[u * devices.len() + k]`: unit `u` (by position) on stage `k`'s device.
    pub time: Vec<f64>,
    pub devices: Vec<StageDevice>,
    /// Bytes of each weight; a stage holds every weight its units read, once.
    pub weight_bytes: Vec<u64>,
    /// Per unit, the weights it reads.
    pub reads: Vec<Vec<u32>>,
    pub tensors: Vec<StageTensor>,
    /// Where a stage may start (a decoder's layer boundaries), by position; `None`: anywhere.
    /// The first stage starts at 0 whatever this says.
    pub starts: Option<Vec<bool>>,
}

impl StageProblem {
    /// Whether a stage may start at position `q`.
    fn may_start(&self, q: usize) -> bool {
        q == 0
            || self
                .starts
                .as_ref()
                .is_none_or(|s| s.get(q).copied().unwrap_or(false))
    }
}

/// What one stage holds, moves and costs.
#[derive(Clone, Debug, PartialEq)]
pub struct StageFigures {
    /// Positions `[start, end)` of its units.
    pub start: usize,
    pub end: usize,
    pub weights: u64,
    /// The most activation bytes alive at once while its units run in order (its inputs from
    /// the moment they arrive to their last read here, its own tensors from their unit to
    /// their last read, or to the stage's end when sent on).
    pub activation_peak: u64,
    pub in_bytes: u64,
    pub out_bytes: u64,
    /// Its units' time alone.
    pub compute: f64,
    /// Its units' time plus one call plus its transfers.
    pub time: f64,
    pub budget: Option<u64>,
}

impl StageFigures {
    pub fn memory(&self) -> u64 {
        self.weights.saturating_add(self.activation_peak)
    }

    /// Bytes over budget (0 when it fits).
    pub fn shortfall(&self) -> u64 {
        self.budget.map_or(0, |b| self.memory().saturating_sub(b))
    }
}

/// The chosen slices, each with its figures.
#[derive(Clone, Debug)]
pub struct StagePlan {
    pub stages: Vec<StageFigures>,
}

impl StagePlan {
    /// The slowest stage's time: one result leaves the pipeline this often.
    pub fn bottleneck(&self) -> f64 {
        self.stages.iter().map(|s| s.time).fold(0.0, f64::max)
    }
}

/// Why no plan fits.
#[derive(Clone, Debug)]
pub enum StageError {
    /// Fewer units than stages.
    TooFewUnits { units: usize, stages: usize },
    /// No split fits every budget; `closest` is the split whose worst shortfall is least.
    DoesNotFit { closest: StagePlan },
    /// Some unit cannot run (infinite time) on every device it could be sliced onto.
    NoFiniteTime,
}

/// Incremental figures of the slices `[i, j)` for one start `i` and growing `j`.
struct Sweep<'a> {
    p: &'a StageProblem,
    /// For each tensor, the last position that reads it (or its producer's, if none).
    last: Vec<u32>,
    /// Tensors produced at each position.
    made_at: Vec<Vec<u32>>,
    /// Tensors read at each position (deduplicated).
    read_at: Vec<Vec<u32>>,
    /// Tensors, not outputs, whose last read is at each position.
    dies_at: Vec<Vec<u32>>,
    weight_seen: Vec<u32>,
    tensor_seen: Vec<u32>,
    /// For inputs of the slice, the last position their life reaches so far.
    input_end: Vec<u32>,
    live: Vec<u64>,
}

const UNSEEN: u32 = u32::MAX;

impl<'a> Sweep<'a> {
    fn new(p: &'a StageProblem) -> Sweep<'a> {
        let n = p.reads.len();
        let mut made_at = vec![Vec::new(); n];
        let mut read_at = vec![Vec::new(); n];
        let mut dies_at = vec![Vec::new(); n];
        let mut last = vec![0u32; p.tensors.len()];
        for (t, x) in p.tensors.iter().enumerate() {
            let t = t as u32;
            if let Some(q) = x.producer {
                made_at[q as usize].push(t);
            }
            let mut l = x.producer.unwrap_or(0);
            for &r in &x.readers {
                l = l.max(r);
                read_at[r as usize].push(t);
            }
            last[t as usize] = l;
            if !x.output {
                dies_at[l as usize].push(t);
            }
        }
        for r in &mut read_at {
            r.sort_unstable();
            r.dedup();
        }
        Sweep {
            p,
            last,
            made_at,
            read_at,
            dies_at,
            weight_seen: vec![UNSEEN; p.weight_bytes.len()],
            tensor_seen: vec![UNSEEN; p.tensors.len()],
            input_end: vec![0; p.tensors.len()],
            live: vec![0; n],
        }
    }

    /// Calls `f(j, figures without time, compute time per device)` for every end `j > i`.
    /// Stops early when `f` returns false.
    fn row(&mut self, i: usize, mut f: impl FnMut(usize, &Partial, &[f64]) -> bool) {
        let d = self.p.devices.len();
        let n = self.p.reads.len();
        let stamp = i as u32;
        let mut acc = Partial::default();
        let mut inside: u64 = 0;
        let mut compute = vec![0.0; d];
        for q in i..n {
            for &w in &self.p.reads[q] {
                let seen = &mut self.weight_seen[w as usize];
                if *seen != stamp {
                    *seen = stamp;
                    acc.weights = acc.weights.saturating_add(self.p.weight_bytes[w as usize]);
                }
            }
            for (k, c) in compute.iter_mut().enumerate() {
                *c += self.p.time[q * d + k];
            }
            for &t in &self.made_at[q] {
                inside = inside.saturating_add(self.p.tensors[t as usize].bytes);
            }
            self.live[q] = inside;
            let mut peak_candidate = self.live[q];
            for &t in &self.read_at[q] {
                let x = &self.p.tensors[t as usize];
                if x.producer.is_some_and(|pr| pr as usize >= i) {
                    continue;
                }
                let seen = &mut self.tensor_seen[t as usize];
                let from = if *seen != stamp {
                    *seen = stamp;
                    acc.in_bytes = acc.in_bytes.saturating_add(x.bytes);
                    i
                } else {
                    self.input_end[t as usize] as usize + 1
                };
                for l in &mut self.live[from..=q] {
                    *l = l.saturating_add(x.bytes);
                    acc.activation_peak = acc.activation_peak.max(*l);
                }
                self.input_end[t as usize] = q as u32;
                peak_candidate = peak_candidate.max(self.live[q]);
            }
            acc.activation_peak = acc.activation_peak.max(peak_candidate);
            // Sent on: made here and read after q (or an output); no longer sent when its last
            // read is q, since the slice now ends past it.
            for &t in &self.made_at[q] {
                let x = &self.p.tensors[t as usize];
                if x.output || self.last[t as usize] as usize > q {
                    acc.out_bytes = acc.out_bytes.saturating_add(x.bytes);
                }
            }
            for &t in &self.dies_at[q] {
                let x = &self.p.tensors[t as usize];
                let Some(pr) = x.producer else { continue };
                if (pr as usize) < i {
                    continue;
                }
                inside = inside.saturating_sub(x.bytes);
                if (pr as usize) < q {
                    acc.out_bytes = acc.out_bytes.saturating_sub(x.bytes);
                }
            }
            if !f(q + 1, &acc, &compute) {
                return;
            }
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Partial {
    weights: u64,
    activation_peak: u64,
    in_bytes: u64,
    out_bytes: u64,
}

fn transfer_s(dev: &StageDevice, bytes: u64) -> f64 {
    if dev.io_bytes_per_s.is_finite() && dev.io_bytes_per_s > 0.0 {
        bytes as f64 / dev.io_bytes_per_s
    } else {
        0.0
    }
}

fn stage_time(dev: &StageDevice, part: &Partial, compute: f64) -> f64 {
    dev.launch_s + compute + transfer_s(dev, part.in_bytes.saturating_add(part.out_bytes))
}

fn figures_of(i: usize, j: usize, dev: &StageDevice, part: &Partial, compute: f64) -> StageFigures {
    StageFigures {
        start: i,
        end: j,
        weights: part.weights,
        activation_peak: part.activation_peak,
        in_bytes: part.in_bytes,
        out_bytes: part.out_bytes,
        compute,
        time: stage_time(dev, part, compute),
        budget: dev.budget,
    }
}

/// The figures of the stages that start at `cuts` (first 0, increasing; stage `k` runs on
/// device `k`).
pub fn stage_figures(p: &StageProblem, cuts: &[usize]) -> Vec<StageFigures> {
    let n = p.reads.len();
    let mut sweep = Sweep::new(p);
    let mut out = Vec::with_capacity(cuts.len());
    for (k, &i) in cuts.iter().enumerate() {
        let end = cuts.get(k + 1).copied().unwrap_or(n);
        let dev = &p.devices[k];
        let mut got = None;
        sweep.row(i, |j, part, compute| {
            if j == end {
                got = Some(figures_of(i, j, dev, part, compute[k]));
            }
            j < end
        });
        if let Some(f) = got {
            out.push(f);
        }
    }
    out
}

/// The contiguous split into exactly `devices.len()` stages with the least bottleneck among
/// those that fit every budget; ties go to the least total time.
pub fn plan_stages(p: &StageProblem) -> Result<StagePlan, StageError> {
    let n = p.reads.len();
    let s = p.devices.len();
    if n < s || s == 0 {
        return Err(StageError::TooFewUnits {
            units: n,
            stages: s,
        });
    }
    // A fitting plan's bottleneck bounds the optimum: slices slower than it are never used,
    // and neither are slices over budget, so a sweep stops once both hold for good.
    let bound = even_split(p).filter(|f| f.iter().all(|x| x.shortfall() == 0));
    let bound = bound.map_or(f64::INFINITY, |f| {
        f.iter().map(|x| x.time).fold(0.0, f64::max)
    });
    let useless = |f: &StageFigures| f.shortfall() > 0 || f.compute > bound;
    if let Some(cuts) = dp(p, |f| f.shortfall() == 0, |f| f.time, useless) {
        return Ok(StagePlan {
            stages: stage_figures(p, &cuts),
        });
    }
    if dp(p, |_| true, |f| f.time, |_| false).is_none() {
        return Err(StageError::NoFiniteTime);
    }
    let cuts =
        dp(p, |_| true, |f| f.shortfall() as f64, |_| false).ok_or(StageError::NoFiniteTime)?;
    Err(StageError::DoesNotFit {
        closest: StagePlan {
            stages: stage_figures(p, &cuts),
        },
    })
}

/// Stages of about equal time on the first device, cut along the order.
fn even_split(p: &StageProblem) -> Option<Vec<StageFigures>> {
    let n = p.reads.len();
    let s = p.devices.len();
    let d = s;
    let total: f64 = (0..n).map(|q| p.time[q * d]).sum();
    if !total.is_finite() {
        return None;
    }
    let mut cuts = vec![0];
    let mut acc = 0.0;
    for q in 0..n {
        let k = cuts.len();
        if k < s
            && acc >= total * k as f64 / s as f64
            && q > *cuts.last()?
            && n - q >= s - k
            && p.may_start(q)
        {
            cuts.push(q);
        }
        acc += p.time[q * d];
    }
    while cuts.len() < s {
        let last = *cuts.last()?;
        cuts.push(last + 1);
    }
    // A split at cuts the problem forbids bounds nothing.
    if !cuts.iter().all(|&c| p.may_start(c)) {
        return None;
    }
    Some(stage_figures(p, &cuts))
}

/// Minimises the largest `score` over the stages among slices `allowed` admits; returns the
/// cuts. Ties: the least sum of scores. `useless` says a slice, and so every longer one from
/// the same start (weights, activation peak and compute only grow), can be skipped.
fn dp(
    p: &StageProblem,
    allowed: impl Fn(&StageFigures) -> bool,
    score: impl Fn(&StageFigures) -> f64,
    useless: impl Fn(&StageFigures) -> bool,
) -> Option<Vec<usize>> {
    let n = p.reads.len();
    let s = p.devices.len();
    let worst = (f64::INFINITY, f64::INFINITY);
    // best[k][j]: (largest score, sum) of k stages covering [0, j).
    let mut best = vec![vec![worst; n + 1]; s + 1];
    let mut from = vec![vec![usize::MAX; n + 1]; s + 1];
    best[0][0] = (0.0, 0.0);
    let mut sweep = Sweep::new(p);
    for i in 0..n {
        let starts: Vec<usize> = (1..=s)
            .filter(|&k| best[k - 1][i].0.is_finite() && n - i > s - k && i + 1 >= k)
            .filter(|_| p.may_start(i))
            .collect();
        if starts.is_empty() {
            continue;
        }
        sweep.row(i, |j, part, compute| {
            let mut alive = false;
            for &k in &starts {
                // k stages end at j: leave a unit for each later stage.
                if n - j < s - k {
                    continue;
                }
                let f = figures_of(i, j, &p.devices[k - 1], part, compute[k - 1]);
                if useless(&f) {
                    continue;
                }
                alive = true;
                // The next stage starts at j: only where it may (a longer slice still may end
                // at an allowed start, so the sweep goes on).
                if (k < s && !p.may_start(j)) || !allowed(&f) {
                    continue;
                }
                let sc = score(&f);
                if !sc.is_finite() {
                    continue;
                }
                let (m, sum) = best[k - 1][i];
                let cand = (m.max(sc), sum + sc);
                if better(cand, best[k][j]) {
                    best[k][j] = cand;
                    from[k][j] = i;
                }
            }
            alive
        });
    }
    if !best[s][n].0.is_finite() {
        return None;
    }
    let mut cuts = vec![0; s];
    let mut j = n;
    for k in (1..=s).rev() {
        let i = from[k][j];
        cuts[k - 1] = i;
        j = i;
    }
    Some(cuts)
}

/// Less bottleneck first; within a relative 1e-9, less total.
fn better(a: (f64, f64), b: (f64, f64)) -> bool {
    let tol = 1e-9 * a.0.abs().max(b.0.abs());
    if a.0 < b.0 - tol {
        return true;
    }
    a.0 <= b.0 + tol && a.1 < b.1
}

#[cfg(test)]
#[path = "stages_tests.rs"]
mod tests;
