//! Pipelined execution, the VPU page's data-transfer pipelining: several requests in flight,
//! one worker per device, so part k of request i overlaps part k+1 of request i-1.

use std::collections::HashMap;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::error::RuntimeError;
use crate::runner::{LoadedParts, PartStats};
use crate::tensor::HostTensor;

struct Job {
    request: usize,
    part: usize,
    feed: Vec<(String, HostTensor)>,
}

struct Done {
    request: usize,
    part: usize,
    result: Result<Vec<(String, HostTensor)>, RuntimeError>,
    exec: Duration,
    wait: Duration,
}

pub struct Pipelined {
    /// Every tensor of every request, in request order.
    pub values: Vec<HashMap<String, HostTensor>>,
    pub stats: Vec<PartStats>,
    pub wall: Duration,
}

/// Runs all `requests` through the parts with one worker thread per backend. The parts'
/// sessions move into the workers and come back when the run ends. Load the parts with
/// `single_thread` so that workers do not compete for cores.
pub fn run_pipelined(
    parts: &mut LoadedParts,
    requests: Vec<Vec<(String, HostTensor)>>,
) -> Result<Pipelined, RuntimeError> {
    let n_parts = parts.sessions.len();
    let mut devices: Vec<String> = parts.backends.clone();
    devices.sort();
    devices.dedup();
    let worker_of: Vec<usize> = parts
        .backends
        .iter()
        .map(|b| devices.iter().position(|d| d == b).unwrap_or(0))
        .collect();
    let mut sessions: Vec<Option<Box<dyn crate::Session>>> =
        parts.sessions.drain(..).map(Some).collect();
    let conn = parts.conn.clone();
    let start = Instant::now();
    let (done_tx, done_rx) = mpsc::channel::<Done>();
    let outcome = std::thread::scope(|scope| {
        let mut job_txs = Vec::new();
        let mut handles = Vec::new();
        for w in 0..devices.len() {
            let (tx, rx) = mpsc::channel::<Job>();
            job_txs.push(tx);
            let mut mine: HashMap<usize, Box<dyn crate::Session>> = (0..n_parts)
                .filter(|&k| worker_of[k] == w)
                .filter_map(|k| sessions[k].take().map(|s| (k, s)))
                .collect();
            let done_tx = done_tx.clone();
            handles.push(scope.spawn(move || {
                let mut idle = Instant::now();
                while let Ok(job) = rx.recv() {
                    let wait = idle.elapsed();
                    let t = Instant::now();
                    let result = match mine.get_mut(&job.part) {
                        Some(s) => s.run(&job.feed),
                        None => Err(RuntimeError::Stuck {
                            path: Default::default(),
                            detail: format!("part {} has no session", job.part),
                        }),
                    };
                    let exec = t.elapsed();
                    idle = Instant::now();
                    if done_tx
                        .send(Done {
                            request: job.request,
                            part: job.part,
                            result,
                            exec,
                            wait,
                        })
                        .is_err()
                    {
                        break;
                    }
                }
                mine
            }));
        }
        drop(done_tx);

        let n_req = requests.len();
        let mut values: Vec<HashMap<String, HostTensor>> = requests
            .into_iter()
            .map(|r| r.into_iter().collect())
            .collect();
        let mut state = vec![vec![0u8; n_parts]; n_req]; // 0 waiting, 1 sent, 2 done
        let mut stats = vec![PartStats::default(); n_parts];
        let mut remaining = n_req * n_parts;
        let mut failure = None;
        let dispatch = |r: usize,
                        values: &Vec<HashMap<String, HostTensor>>,
                        state: &mut Vec<Vec<u8>>|
         -> usize {
            let mut sent = 0;
            for k in 0..n_parts {
                if state[r][k] == 0
                    && conn.parts[k]
                        .inputs
                        .iter()
                        .all(|i| values[r].contains_key(i))
                {
                    let feed = conn.parts[k]
                        .inputs
                        .iter()
                        .map(|i| (i.clone(), values[r][i].clone()))
                        .collect();
                    if job_txs[worker_of[k]]
                        .send(Job {
                            request: r,
                            part: k,
                            feed,
                        })
                        .is_ok()
                    {
                        state[r][k] = 1;
                        sent += 1;
                    }
                }
            }
            sent
        };
        let mut in_flight = 0;
        for r in 0..n_req {
            in_flight += dispatch(r, &values, &mut state);
        }
        while remaining > 0 && failure.is_none() {
            if in_flight == 0 {
                failure = Some(RuntimeError::Stuck {
                    path: parts.conn_path.clone(),
                    detail: "some parts' inputs are never produced".into(),
                });
                break;
            }
            let Ok(d) = done_rx.recv() else { break };
            in_flight -= 1;
            remaining -= 1;
            stats[d.part].calls += 1;
            stats[d.part].exec += d.exec;
            stats[d.part].wait += d.wait;
            match d.result {
                Ok(out) => {
                    for (name, t) in out {
                        values[d.request].insert(name, t);
                    }
                    state[d.request][d.part] = 2;
                    in_flight += dispatch(d.request, &values, &mut state);
                }
                Err(e) => failure = Some(e),
            }
        }
        drop(job_txs);
        for h in handles {
            if let Ok(back) = h.join() {
                for (k, s) in back {
                    sessions[k] = Some(s);
                }
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok((values, stats)),
        }
    });
    parts.sessions = sessions.into_iter().flatten().collect();
    let (values, stats) = outcome?;
    Ok(Pipelined {
        values,
        stats,
        wall: start.elapsed(),
    })
}
