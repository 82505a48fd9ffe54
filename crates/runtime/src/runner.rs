//! Running the parts of a partition, each as soon as its inputs are ready.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cleave_workdir::ConnFile;

use crate::engine::{part_format, EngineKind, EngineMap, LoadOptions, Registry, Session, Threads};
use crate::error::RuntimeError;
use crate::tensor::HostTensor;

/// The parts of a connection file, loaded into their engines.
pub struct LoadedParts {
    pub conn_path: PathBuf,
    pub conn: ConnFile,
    pub backends: Vec<String>,
    pub engines: Vec<EngineKind>,
    pub sessions: Vec<Box<dyn Session>>,
    /// What the caller should say: parts that run on another engine than their default,
    /// because the default could not load them.
    pub notes: Vec<String>,
}

/// Per-part counters (the VPU page's performance counts).
#[derive(Clone, Debug, Default)]
pub struct PartStats {
    pub calls: u64,
    pub exec: Duration,
    /// Time spent waiting for inputs (the VPU page's receive-tensor time; pipelined runs).
    pub wait: Duration,
    /// Bytes received from other parts.
    pub in_bytes: u64,
}

pub fn read_conn(path: &Path) -> Result<ConnFile, RuntimeError> {
    let text = std::fs::read_to_string(path).map_err(|source| RuntimeError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    ConnFile::from_json(&text).map_err(|e| RuntimeError::Conn {
        path: path.to_path_buf(),
        message: format!("not a connection file: {e}"),
    })
}

pub fn load_parts(
    conn_path: &Path,
    engines: &EngineMap,
    single_thread: bool,
) -> Result<LoadedParts, RuntimeError> {
    let opts = LoadOptions {
        threads: Threads::single(single_thread),
        optimize: false,
        gpu: None,
    };
    load_parts_with(conn_path, engines, opts)
}

/// [`load_parts`], each part loaded as `opts` says: generation loads for speed, as served
/// stages do, since only the logits are compared with the whole model's.
pub fn load_parts_with(
    conn_path: &Path,
    engines: &EngineMap,
    opts: LoadOptions,
) -> Result<LoadedParts, RuntimeError> {
    let conn = read_conn(conn_path)?;
    let dir = conn_path
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let mut backends = Vec::new();
    let mut kinds = Vec::new();
    let mut sessions = Vec::new();
    let mut made: HashMap<EngineKind, Box<dyn crate::Engine>> = HashMap::new();
    let mut notes = Vec::new();
    for p in &conn.parts {
        let backend = cleave_workdir::backend_of(&p.file, p.backend.as_deref());
        let path = dir.join(&p.file);
        let format = part_format(&path, p.format.as_deref());
        let kind = engines
            .for_conn_part(&backend, &path, &format, p.engine.as_deref())
            .map_err(|message| RuntimeError::Conn {
                path: conn_path.to_path_buf(),
                message,
            })?;
        let engine = match made.entry(kind.clone()) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(engines.registry().make(&kind)?)
            }
        };
        if !path.is_file() {
            return Err(RuntimeError::Conn {
                path: conn_path.to_path_buf(),
                message: format!("part file {} is missing", path.display()),
            });
        }
        let chosen = engines.is_default(&backend, &format, p.engine.as_deref(), &kind);
        // A precheck that fails keeps its session: where no other engine loads the part,
        // the default still runs it, and a run with real shapes says what it can.
        let loaded = match engine.load_with(&path, opts) {
            Ok(mut s) if chosen => match s.precheck() {
                Ok(()) => Ok(s),
                Err(e) => Err((e, Some(s))),
            },
            Ok(s) => Ok(s),
            Err(e) => Err((e, None)),
        };
        // Any precheck failure (a refusal, or the engine crashing on the model as declared)
        // asks the other engines; a load's refusal too. A load's other errors are the part's.
        let (session, kind) = match loaded {
            Ok(session) => (session, kind),
            Err((first, kept))
                if chosen
                    && (kept.is_some() || matches!(first, RuntimeError::Unsupported { .. })) =>
            {
                let why = first.to_string();
                match fall_back(engines, &path, &format, &kind, opts, first) {
                    Ok((session, other)) => {
                        notes.push(format!(
                            "{}: {} could not take it as declared, so it runs on {} (--engine {backend}=ENGINE chooses): {}",
                            p.file,
                            kind.label(),
                            other.label(),
                            why.lines().next().unwrap_or_default().chars().take(240).collect::<String>()
                        ));
                        (session, other)
                    }
                    Err(e) => match kept {
                        Some(session) => (session, kind),
                        None => return Err(e),
                    },
                }
            }
            Err((e, _)) => return Err(e),
        };
        sessions.push(session);
        backends.push(backend);
        kinds.push(kind);
    }
    Ok(LoadedParts {
        conn_path: conn_path.to_path_buf(),
        conn,
        backends,
        engines: kinds,
        sessions,
        notes,
    })
}

/// One part loaded alone, as a served part runs (`cleave serve`, Ray's part actors).
pub struct ServedPart {
    pub session: Box<dyn Session>,
    pub engine: EngineKind,
    /// Why it runs on another engine than the first choice, where it does.
    pub note: Option<String>,
}

/// Loads the part at `path` for serving on at most `threads` threads: on the engine the
/// connection file `recorded`, or the one `backend` names, else on the first of its format's
/// engines that loads it (`Registry::served_order`).
pub fn load_served(
    registry: &Registry,
    path: &Path,
    backend: &str,
    format: Option<&str>,
    recorded: Option<&str>,
    threads: Threads,
) -> Result<ServedPart, RuntimeError> {
    // Serving's placement gives a backend named gpu*/cuda* a GPU (Ray's num_gpus), which the
    // process sees as its first.
    let lower = backend.to_ascii_lowercase();
    let wants_gpu = lower.starts_with("gpu") || lower.starts_with("cuda");
    // Served for speed: the engine may fuse inside the part (its inputs and outputs stay).
    let opts = LoadOptions {
        threads,
        optimize: true,
        gpu: wants_gpu.then_some(0),
    };
    let format = part_format(path, format);
    let order = registry
        .served_order(backend, &format, recorded)
        .map_err(|message| RuntimeError::Conn {
            path: path.to_path_buf(),
            message,
        })?;
    let mut tried: Vec<String> = Vec::new();
    let mut first = None;
    for kind in order {
        // An engine that plans at the first run is asked now, so a part it cannot run goes to
        // the next engine rather than failing its first request.
        let loaded = registry.make(&kind).and_then(|e| {
            let mut session = e.load_with(path, opts)?;
            session.precheck()?;
            Ok(session)
        });
        match loaded {
            Ok(session) => {
                let mut notes = Vec::new();
                if !tried.is_empty() {
                    notes.push(format!(
                        "runs on {} ({})",
                        kind.label(),
                        tried.join("; ").chars().take(400).collect::<String>()
                    ));
                }
                match session.gpu() {
                    Some(Ok(_)) => {}
                    Some(Err(why)) => notes.push(format!(
                        "backend {backend} asks for a GPU, and {} runs on the CPU: {why}",
                        kind.label()
                    )),
                    None if wants_gpu && kind.device().is_none() => notes.push(format!(
                        "backend {backend} asks for a GPU, and {} runs on the CPU: name an engine \
                         and device for it (--engine {backend}=ENGINE:DEVICE)",
                        kind.label()
                    )),
                    None => {}
                }
                let note = (!notes.is_empty()).then(|| notes.join("; "));
                return Ok(ServedPart {
                    session,
                    engine: kind,
                    note,
                });
            }
            Err(e) => {
                tried.push(format!(
                    "{}: {}",
                    kind.label(),
                    e.to_string().lines().next().unwrap_or_default()
                ));
                first.get_or_insert(e);
            }
        }
    }
    Err(match first {
        Some(RuntimeError::Unsupported {
            path,
            engine,
            message,
        }) if tried.len() > 1 => RuntimeError::Unsupported {
            path,
            engine,
            message: format!(
                "{message}; nor did the other engines ({})",
                tried[1..].join("; ")
            ),
        },
        Some(e) => e,
        None => RuntimeError::Conn {
            path: path.to_path_buf(),
            message: "no engine to try".into(),
        },
    })
}

/// The next engine registered for `format` that loads the part `default` could not; where
/// none does, `first` (the default's refusal) with what each other engine said.
fn fall_back(
    engines: &EngineMap,
    path: &Path,
    format: &str,
    default: &EngineKind,
    opts: LoadOptions,
    first: RuntimeError,
) -> Result<(Box<dyn Session>, EngineKind), RuntimeError> {
    let mut tried = Vec::new();
    for kind in engines.registry().candidates(format) {
        if &kind == default {
            continue;
        }
        let loaded = engines
            .registry()
            .make(&kind)
            .and_then(|e| e.load_with(path, opts));
        match loaded {
            Ok(session) => return Ok((session, kind)),
            Err(e) => tried.push(format!("{}: {e}", kind.label())),
        }
    }
    match first {
        RuntimeError::Unsupported {
            path,
            engine,
            message,
        } if !tried.is_empty() => Err(RuntimeError::Unsupported {
            path,
            engine,
            message: format!(
                "{message}; nor did the other engines ({})",
                tried.join("; ")
            ),
        }),
        e => Err(e),
    }
}

impl LoadedParts {
    /// Runs every part once, in any order whose inputs are ready, and returns every tensor
    /// produced (source inputs included). Stops with ONE's message when no part can run.
    pub fn run(
        &mut self,
        inputs: Vec<(String, HostTensor)>,
        stats: &mut [PartStats],
    ) -> Result<HashMap<String, HostTensor>, RuntimeError> {
        self.run_keeping(inputs, stats, true)
    }

    /// Runs every part once, as [`LoadedParts::run`], but hands each tensor to the last part
    /// that reads it instead of copying it (a decoder's caches are most of what moves): the
    /// result holds the model's outputs and what no part read.
    pub fn run_moving(
        &mut self,
        inputs: Vec<(String, HostTensor)>,
        stats: &mut [PartStats],
    ) -> Result<HashMap<String, HostTensor>, RuntimeError> {
        self.run_keeping(inputs, stats, false)
    }

    fn run_keeping(
        &mut self,
        inputs: Vec<(String, HostTensor)>,
        stats: &mut [PartStats],
        keep: bool,
    ) -> Result<HashMap<String, HostTensor>, RuntimeError> {
        let mut values: HashMap<String, HostTensor> = inputs.into_iter().collect();
        // Reads still to come of each tensor; a source output is always kept.
        let mut reads_left: HashMap<&str, usize> = HashMap::new();
        if !keep {
            for p in &self.conn.parts {
                for i in &p.inputs {
                    *reads_left.entry(i.as_str()).or_default() += 1;
                }
            }
            for o in &self.conn.source.outputs {
                reads_left.insert(o.as_str(), usize::MAX);
            }
        }
        let mut done = vec![false; self.sessions.len()];
        while done.iter().any(|d| !d) {
            let ready = (0..self.sessions.len()).find(|&k| {
                !done[k]
                    && self.conn.parts[k]
                        .inputs
                        .iter()
                        .all(|i| values.contains_key(i))
            });
            let Some(k) = ready else {
                let mut missing = Vec::new();
                for (k, part) in self
                    .conn
                    .parts
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| !done[*k])
                {
                    for i in part.inputs.iter().filter(|i| !values.contains_key(*i)) {
                        missing.push(format!(
                            "{} needs '{i}', which nothing produces",
                            self.conn.parts[k].file
                        ));
                    }
                }
                missing.truncate(3);
                return Err(RuntimeError::Stuck {
                    path: self.conn_path.clone(),
                    detail: missing.join(", "),
                });
            };
            let part = &self.conn.parts[k];
            let mut feed: Vec<(String, HostTensor)> = Vec::with_capacity(part.inputs.len());
            for i in &part.inputs {
                let last = match reads_left.get_mut(i.as_str()) {
                    Some(n) if *n != usize::MAX => {
                        *n -= 1;
                        *n == 0
                    }
                    _ => false,
                };
                let t = if last {
                    values.remove(i)
                } else {
                    values.get(i).cloned()
                };
                let t = match t {
                    Some(t) => t,
                    None => {
                        return Err(RuntimeError::Stuck {
                            path: self.conn_path.clone(),
                            detail: format!("{} needs '{i}', which nothing produces", part.file),
                        })
                    }
                };
                if let Some(s) = stats.get_mut(k) {
                    if !self.conn.source.inputs.contains(i) {
                        s.in_bytes += t.data.len() as u64;
                    }
                }
                feed.push((i.clone(), t));
            }
            let start = Instant::now();
            let out = self.sessions[k].run(&feed)?;
            if let Some(s) = stats.get_mut(k) {
                s.calls += 1;
                s.exec += start.elapsed();
            }
            for (name, t) in out {
                values.insert(name, t);
            }
            for o in &part.outputs {
                // A final output no part reads may be a sequence or map, which engines give
                // no tensor for (ZipMap's probabilities, say); anything read on must exist.
                let final_only = self.conn.source.outputs.contains(o)
                    && !self.conn.parts.iter().any(|p| p.inputs.contains(o));
                if !values.contains_key(o) && !final_only {
                    return Err(RuntimeError::Conn {
                        path: self.conn_path.clone(),
                        message: format!(
                            "{} did not produce '{o}', which the connection file lists",
                            part.file
                        ),
                    });
                }
            }
            done[k] = true;
        }
        Ok(values)
    }
}
