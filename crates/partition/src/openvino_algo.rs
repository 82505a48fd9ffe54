//! OpenVINO's hetero subgraph selection, as its design page states it: select a root, merge
//! adjacent nodes of the same affinity, reject others, check the global condition (no
//! indirect self-reference through a rejected node), roll back while it fails; keep the
//! largest subgraph, repeat on the remaining nodes. The self-reference check uses a full
//! transitive closure, so the algorithm is far from linear: it runs under a budget.

use std::time::{Duration, Instant};

use crate::unit_graph::{Partition, UnitGraph};

#[derive(Clone, Debug)]
pub struct OpenVinoOptions {
    pub time_budget: Duration,
    /// The closure takes units² bits: refuse graphs above this many units.
    pub max_units: usize,
}

impl Default for OpenVinoOptions {
    fn default() -> Self {
        OpenVinoOptions {
            time_budget: Duration::from_secs(10),
            max_units: 20_000,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum OpenVinoError {
    #[error("the openvino algorithm needs a {units}×{units} reachability matrix; it is limited to {max} units (use the default algorithm)")]
    TooLarge { units: usize, max: usize },
    #[error("the openvino algorithm ran out of its {budget_s:.1} s budget after selecting {selected} subgraphs (use the default algorithm)")]
    OutOfTime { budget_s: f64, selected: usize },
}

struct Bits {
    words: usize,
    data: Vec<u64>,
}

impl Bits {
    fn new(rows: usize, cols: usize) -> Bits {
        let words = cols.div_ceil(64);
        Bits {
            words,
            data: vec![0; rows * words],
        }
    }
    fn row(&self, r: usize) -> &[u64] {
        &self.data[r * self.words..(r + 1) * self.words]
    }
    fn get(&self, r: usize, c: usize) -> bool {
        self.data[r * self.words + c / 64] >> (c % 64) & 1 == 1
    }
}

struct Run<'a> {
    g: &'a UnitGraph,
    labels: &'a [String],
    reach: Bits,
    trace: &'a mut Vec<String>,
}

impl Run<'_> {
    fn list(&self, units: &[u32]) -> String {
        let mut u = units.to_vec();
        u.sort_unstable();
        format!(
            "[{}]",
            u.iter()
                .map(|&x| self.labels[x as usize].as_str())
                .collect::<Vec<_>>()
                .join(",")
        )
    }

    /// The seed's global condition for subgraph `s`: no node outside it that is rejected (or
    /// already placed in a selected subgraph) lies on a path between two of its nodes.
    /// Returns (ok, message).
    fn global_condition(&self, s: &[u32], rejected: &[u32], taken: &[bool]) -> (bool, String) {
        let n = self.g.len();
        let mut in_s = vec![false; n];
        for &x in s {
            in_s[x as usize] = true;
        }
        let mut below = vec![0u64; self.reach.words];
        for &x in s {
            for (w, r) in below.iter_mut().zip(self.reach.row(x as usize)) {
                *w |= r;
            }
        }
        let mut bad = Vec::new();
        let mut unknown = Vec::new();
        for x in 0..n {
            if in_s[x] || below[x / 64] >> (x % 64) & 1 == 0 {
                continue;
            }
            if s.iter().any(|&y| self.reach.get(x, y as usize)) {
                if rejected.contains(&(x as u32)) || taken[x] {
                    bad.push(x as u32);
                } else {
                    unknown.push(x as u32);
                }
            }
        }
        if !bad.is_empty() {
            (
                false,
                format!(
                    "There are self-references throughout a node {}, reject",
                    self.list(&bad)
                ),
            )
        } else if !unknown.is_empty() {
            (true, format!("There are possible self-references throughout a node {} but they are not known yet, ok", self.list(&unknown)))
        } else {
            (true, "ok".to_string())
        }
    }

    fn step(&mut self, k: &mut usize, what: String, s: &[u32], rejected: &[u32], cond: &str) {
        *k += 1;
        self.trace.push(format!("{k}. {what}"));
        self.trace.push(format!("    * Subgraph: {}", self.list(s)));
        self.trace
            .push(format!("    * Rejected: {}", self.list(rejected)));
        self.trace.push(format!("    * Global condition: {cond}"));
    }

    /// Grows one subgraph of device `d` from `root`, depth first, successors before
    /// predecessors, each in unit order.
    fn grow(&mut self, root: u32, d: u16, taken: &[bool]) -> Vec<u32> {
        let g = self.g;
        let mut k = 0;
        let mut s = vec![root];
        let mut rejected: Vec<u32> = Vec::new();
        let (_, cond) = self.global_condition(&s, &rejected, taken);
        self.step(
            &mut k,
            format!("Select root [{}]", self.labels[root as usize]),
            &s,
            &rejected,
            &cond,
        );
        let mut stack: Vec<(u32, usize)> = vec![(root, 0)];
        while let Some(&mut (t, ref mut next)) = stack.last_mut() {
            if !s.contains(&t) {
                stack.pop();
                continue;
            }
            let neighbours: Vec<u32> = g.succ(t).iter().chain(g.pred(t)).copied().collect();
            let Some(&n) = neighbours.get(*next) else {
                stack.pop();
                continue;
            };
            *next += 1;
            if s.contains(&n) || rejected.contains(&n) || taken[n as usize] {
                continue;
            }
            let what = if g.device[n as usize] == d {
                s.push(n);
                stack.push((n, 0));
                format!("Merge [{}]", self.labels[n as usize])
            } else {
                rejected.push(n);
                format!("Failed to merge [{}]", self.labels[n as usize])
            };
            let (mut ok, cond) = self.global_condition(&s, &rejected, taken);
            self.step(&mut k, what, &s, &rejected, &cond);
            while !ok {
                let Some(last) = s.pop() else { break };
                rejected.push(last);
                let (now_ok, cond) = self.global_condition(&s, &rejected, taken);
                ok = now_ok;
                self.step(
                    &mut k,
                    format!("Rollback [{}]", self.labels[last as usize]),
                    &s,
                    &rejected,
                    &cond,
                );
            }
        }
        self.trace
            .push(format!("{}. There are no nodes to merge **end**", k + 1));
        s
    }
}

/// Runs the seed algorithm. `labels` name units in the trace; `device_names` name devices.
pub fn openvino(
    g: &UnitGraph,
    labels: &[String],
    device_names: &[String],
    opts: &OpenVinoOptions,
    trace: &mut Vec<String>,
) -> Result<Partition, OpenVinoError> {
    let n = g.len();
    if n > opts.max_units {
        return Err(OpenVinoError::TooLarge {
            units: n,
            max: opts.max_units,
        });
    }
    let start = Instant::now();
    let mut reach = Bits::new(n, n);
    let order = g.order();
    // Reverse topological order: a successor's row is complete before it is folded in.
    for &u in order.iter().rev() {
        let u = u as usize;
        let w = reach.words;
        for &s in g.succ(u as u32) {
            let s = s as usize;
            let below: Vec<u64> = reach.row(s).to_vec();
            let row = &mut reach.data[u * w..(u + 1) * w];
            for (d, x) in row.iter_mut().zip(&below) {
                *d |= x;
            }
            row[s / 64] |= 1 << (s % 64);
        }
    }
    let mut run = Run {
        g,
        labels,
        reach,
        trace,
    };
    let mut taken = vec![false; n];
    let mut part_of = vec![u32::MAX; n];
    let mut selected = 0u32;
    let mut devices: Vec<u16> = g.device.clone();
    devices.sort_unstable();
    devices.dedup();
    while taken.iter().any(|t| !t) {
        let mut candidates: Vec<(u16, Vec<u32>)> = Vec::new();
        for &d in &devices {
            let mut built = vec![false; n];
            loop {
                if start.elapsed() > opts.time_budget {
                    return Err(OpenVinoError::OutOfTime {
                        budget_s: opts.time_budget.as_secs_f64(),
                        selected: selected as usize,
                    });
                }
                let roots: Vec<u32> = order
                    .iter()
                    .copied()
                    .filter(|&u| {
                        g.device[u as usize] == d && !taken[u as usize] && !built[u as usize]
                    })
                    .collect();
                let Some(&root) = roots.first() else {
                    if candidates.iter().any(|c| c.0 == d)
                        || !order
                            .iter()
                            .any(|&u| g.device[u as usize] == d && !taken[u as usize])
                    {
                        run.trace.push(format!(
                            "Possible roots for {}: [] no roots",
                            device_names.get(d as usize).map_or("?", String::as_str)
                        ));
                    }
                    break;
                };
                run.trace.push(format!(
                    "Possible roots for {}: {}",
                    device_names.get(d as usize).map_or("?", String::as_str),
                    run.list(&roots)
                ));
                let s = run.grow(root, d, &taken);
                for &x in &s {
                    built[x as usize] = true;
                }
                candidates.push((d, s));
            }
        }
        let Some(best) = candidates
            .iter()
            .enumerate()
            .max_by_key(|(i, c)| (c.1.len(), std::cmp::Reverse(*i)))
            .map(|(_, c)| c.clone())
        else {
            break;
        };
        let all: Vec<String> = candidates.iter().map(|c| run.list(&c.1)).collect();
        run.trace.push(format!("Subgraphs: {}", all.join(", ")));
        run.trace.push(format!(
            "Select best subgraph: {} on {}",
            run.list(&best.1),
            device_names
                .get(best.0 as usize)
                .map_or("?", String::as_str)
        ));
        for &x in &best.1 {
            taken[x as usize] = true;
            part_of[x as usize] = selected;
        }
        selected += 1;
        let rest: Vec<u32> = (0..n as u32).filter(|&u| !taken[u as usize]).collect();
        if !rest.is_empty() {
            run.trace
                .push(format!("Repeat with remaining nodes {}", run.list(&rest)));
        }
    }
    Ok(Partition {
        part_of,
        count: selected as usize,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed's example: 1→2, 2→3, 2→4, 3→5, 4→5, 5→6, 6→7; all on the first device but 4.
    fn seed_example() -> (UnitGraph, Vec<String>) {
        let dev = vec![0, 0, 0, 1, 0, 0, 0];
        let g = UnitGraph::from_edges(
            dev,
            &[(0, 1), (1, 2), (1, 3), (2, 4), (3, 4), (4, 5), (5, 6)],
        );
        (g, (1..=7).map(|i| i.to_string()).collect())
    }

    #[test]
    fn reproduces_the_seed_example() {
        let (g, labels) = seed_example();
        let mut trace = Vec::new();
        let p = openvino(
            &g,
            &labels,
            &["A".into(), "B".into()],
            &OpenVinoOptions::default(),
            &mut trace,
        )
        .unwrap();
        let parts: Vec<Vec<u32>> = (0..p.count as u32)
            .map(|k| {
                (0..7)
                    .filter(|&u| p.part_of[u as usize] == k)
                    .map(|u| u + 1)
                    .collect()
            })
            .collect();
        assert_eq!(parts, vec![vec![3, 5, 6, 7], vec![1, 2], vec![4]]);
        let text = trace.join("\n");
        for line in [
            "Possible roots for A: [1,2,3,5,6,7]",
            "7. Failed to merge [4]",
            "    * Global condition: There are self-references throughout a node [4], reject",
            "8. Rollback [7]",
            "10. Rollback [5]",
            "Possible roots for A: [5,6,7]",
            "4. Merge [3]",
            "5. Merge [2]",
            "    * Global condition: There are possible self-references throughout a node [4] but they are not known yet, ok",
            "7. Rollback [2]",
            "Subgraphs: [1,2,3], [3,5,6,7], [4]",
            "Select best subgraph: [3,5,6,7] on A",
        ] {
            assert!(text.contains(line), "missing '{line}' in\n{text}");
        }
        assert!(g.is_valid(&p, true));
    }

    #[test]
    fn refuses_graphs_above_its_limit() {
        let (g, labels) = seed_example();
        let opts = OpenVinoOptions {
            max_units: 3,
            ..Default::default()
        };
        let e = openvino(&g, &labels, &[], &opts, &mut Vec::new()).unwrap_err();
        assert_eq!(e, OpenVinoError::TooLarge { units: 7, max: 3 });
    }
}
