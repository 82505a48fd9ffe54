//! cleave's side: one worker process per engine (and device), started on first use, hosting
//! every session of that engine; a session whose worker has died is loaded again on a new one
//! at its next run, so one crash costs the call it happened in and no more.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use cleave_runtime::{Engine, HostTensor, LoadOptions, RuntimeError, Session, Threads};

use super::wire::{self, Fields};
use super::{worker, Launcher};

/// What a worker answered.
enum Reply {
    Loaded,
    Outputs(Vec<(String, HostTensor)>),
    Dims(Option<Vec<Option<Vec<i64>>>>),
    Failed(RuntimeError),
}

/// How a worker ended, in words: its signal or exit code, and the last thing it printed.
#[derive(Clone, Debug)]
struct Death(String);

#[derive(Default)]
struct Pending {
    waiting: HashMap<u32, Sender<Result<Reply, Death>>>,
    dead: Option<Death>,
}

/// The worker's standard input: a socket written with `MSG_NOSIGNAL`, so that writing to a
/// worker that has just died is an error here, not a SIGPIPE that ends the `cleave` binary
/// (which restores SIGPIPE's default, to stop quietly in a closed pipeline).
struct Requests(UnixStream);

impl Write for Requests {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        // SAFETY: sends from a live buffer of `b.len()` bytes on a socket this owns.
        let n = unsafe {
            libc::send(
                self.0.as_raw_fd(),
                b.as_ptr().cast(),
                b.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A running worker process.
struct Worker {
    stdin: Mutex<Requests>,
    pending: Arc<Mutex<Pending>>,
    next: AtomicU32,
}

/// The last lines a worker printed on standard error (which is passed on as it comes), and
/// whether it has closed it.
#[derive(Default)]
struct Said {
    lines: Mutex<(VecDeque<String>, bool)>,
    closed: Condvar,
}

impl Said {
    fn last_words(&self) -> Option<String> {
        let mut g = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        // The reader of a dead worker's output gets there before the reader of its standard
        // error has read the last lines: give it a moment.
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while !g.1 {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            g = self
                .closed
                .wait_timeout(g, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        g.0.iter().rev().find(|l| !l.trim().is_empty()).map(|l| {
            let l = l.trim();
            match l.char_indices().nth(240) {
                Some((i, _)) => format!("{}…", &l[..i]),
                None => l.to_string(),
            }
        })
    }
}

fn signal_name(sig: i32) -> String {
    let known = match sig {
        libc::SIGSEGV => "SIGSEGV, a segmentation fault",
        libc::SIGABRT => "SIGABRT, it aborted",
        libc::SIGBUS => "SIGBUS, a bus error",
        libc::SIGFPE => "SIGFPE, an arithmetic fault",
        libc::SIGILL => "SIGILL, an illegal instruction",
        libc::SIGKILL => "SIGKILL, killed: out of memory?",
        libc::SIGTERM => "SIGTERM",
        _ => return format!("signal {sig}"),
    };
    known.to_string()
}

impl Worker {
    fn spawn(
        launcher: &Launcher,
        engine: &'static str,
        label: &str,
        library: &(&'static str, PathBuf),
    ) -> Result<Arc<Worker>, String> {
        let (ours, theirs) = UnixStream::pair().map_err(|e| format!("no socket pair ({e})"))?;
        let mut c = Command::new(&launcher.program);
        // The label last, for `ps` (the worker itself reads it from each request).
        c.args(&launcher.args)
            .arg(label)
            .env(library.0, &library.1)
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c
            .spawn()
            .map_err(|e| format!("cannot start {} ({e})", launcher.program.display()))?;
        // The child's end, held by `c` until here, must close: the worker's end of input is
        // this side's socket closing.
        drop(c);
        let stdin = Requests(ours);
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            let _ = child.kill();
            return Err("its pipes were not made".into());
        };
        let said = Arc::new(Said::default());
        let pending = Arc::new(Mutex::new(Pending::default()));
        let s = said.clone();
        std::thread::Builder::new()
            .name("cleave-worker-stderr".into())
            .spawn(move || pass_on_stderr(stderr, &s))
            .map_err(|e| e.to_string())?;
        let p = pending.clone();
        std::thread::Builder::new()
            .name("cleave-worker-replies".into())
            .spawn(move || read_replies(stdout, child, engine, &p, &said))
            .map_err(|e| e.to_string())?;
        Ok(Arc::new(Worker {
            stdin: Mutex::new(stdin),
            pending,
            next: AtomicU32::new(1),
        }))
    }

    fn is_dead(&self) -> bool {
        let p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        p.dead.is_some()
    }

    fn session_id(&self) -> u32 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends a request and waits for its reply, or for the worker's end.
    fn call(&self, session: u32, op: u8, parts: &[&[u8]]) -> Result<Reply, Death> {
        let (tx, rx) = mpsc::channel();
        {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(d) = &p.dead {
                return Err(d.clone());
            }
            p.waiting.insert(session, tx);
        }
        {
            let mut w = self.stdin.lock().unwrap_or_else(|e| e.into_inner());
            // A failed write means the worker is gone; its reader says how.
            let _ = wire::write_frame(&mut *w, session, op, parts);
        }
        rx.recv()
            .unwrap_or_else(|_| Err(Death("it stopped answering".into())))
    }

    fn close(&self, session: u32) {
        let mut w = self.stdin.lock().unwrap_or_else(|e| e.into_inner());
        let _ = wire::write_frame(&mut *w, session, wire::CLOSE, &[]);
    }
}

fn pass_on_stderr(stderr: impl Read, said: &Said) {
    let mut r = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        match r.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let _ = std::io::stderr().write_all(&line);
                let mut g = said.lines.lock().unwrap_or_else(|e| e.into_inner());
                if g.0.len() == 8 {
                    g.0.pop_front();
                }
                g.0.push_back(String::from_utf8_lossy(&line).into_owned());
            }
        }
    }
    said.lines.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
    said.closed.notify_all();
}

fn read_reply(r: &mut impl Read, h: &wire::Header, engine: &'static str) -> std::io::Result<Reply> {
    let mut f = Fields::new(r, h.len);
    let reply = match h.op {
        wire::LOADED => Reply::Loaded,
        wire::OUTPUTS => Reply::Outputs(wire::read_tensors(&mut f)?),
        wire::DIMS_ARE => Reply::Dims(wire::read_dims(&mut f)?),
        wire::FAILED => Reply::Failed(wire::read_error(&mut f, engine)?),
        op => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a reply of kind {op}"),
            ))
        }
    };
    f.finish()?;
    Ok(reply)
}

fn read_replies(
    stdout: impl Read,
    mut child: Child,
    engine: &'static str,
    pending: &Mutex<Pending>,
    said: &Said,
) {
    let mut r = BufReader::with_capacity(1 << 16, stdout);
    let broke = loop {
        let h = match wire::read_header(&mut r) {
            Ok(Some(h)) => h,
            Ok(None) => break None,
            Err(e) => break Some(e),
        };
        match read_reply(&mut r, &h, engine) {
            Ok(reply) => {
                let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(tx) = p.waiting.remove(&h.session) {
                    let _ = tx.send(Ok(reply));
                }
            }
            Err(e) => break Some(e),
        }
    };
    if broke.is_some() {
        // It spoke out of turn: what it says can no longer be trusted.
        let _ = child.kill();
    }
    let how = match child.wait() {
        Ok(s) => match (s.signal(), s.code()) {
            (Some(sig), _) => signal_name(sig),
            (None, Some(code)) => format!("exit code {code}"),
            _ => "it ended".into(),
        },
        Err(e) => format!("it could not be waited for ({e})"),
    };
    let how = match broke {
        Some(e) => format!("{how}, after a reply cleave could not read: {e}"),
        None => how,
    };
    let death = Death(match said.last_words() {
        Some(w) => format!("{how}; its last words: {w}"),
        None => how,
    });
    let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
    p.dead = Some(death.clone());
    for (_, tx) in p.waiting.drain() {
        let _ = tx.send(Err(death.clone()));
    }
}

/// The workers started so far, by engine label; a dead one is replaced on next use.
fn workers() -> &'static Mutex<HashMap<String, Arc<Worker>>> {
    static W: OnceLock<Mutex<HashMap<String, Arc<Worker>>>> = OnceLock::new();
    W.get_or_init(Default::default)
}

/// An engine that runs in a worker process.
#[derive(Clone)]
pub struct Isolated {
    pub(super) engine: &'static str,
    /// As `--engine` names it, which the worker parses (`onert:cpu`).
    pub(super) label: String,
    /// The variable naming the engine's library, and the library: the worker need not look
    /// for it again.
    pub(super) library: (&'static str, PathBuf),
    pub(super) launcher: Launcher,
}

impl Isolated {
    fn worker(&self, path: &Path) -> Result<Arc<Worker>, RuntimeError> {
        let mut all = workers().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = all.get(&self.label).filter(|w| !w.is_dead()) {
            return Ok(w.clone());
        }
        let w = Worker::spawn(&self.launcher, self.engine, &self.label, &self.library).map_err(
            |m| RuntimeError::Engine {
                path: path.to_path_buf(),
                engine: self.engine,
                message: format!("its worker process did not start: {m}"),
            },
        )?;
        all.insert(self.label.clone(), w.clone());
        Ok(w)
    }

    /// A session of `path` on this engine's worker. Whether a crash there was this load's or
    /// another session's (or the worker died before), the answer is the same once more on a
    /// new worker: a second crash is this part's.
    fn open(&self, path: &Path, threads: Threads) -> Result<IsolatedSession, RuntimeError> {
        match self.try_open(path, threads)? {
            Ok(s) => Ok(s),
            Err(_) => match self.try_open(path, threads)? {
                Ok(s) => Ok(s),
                Err(d) => Err(crashed(self.engine, path, "loading", &d)),
            },
        }
    }

    /// The session, an engine's refusal, or how its worker died.
    fn try_open(
        &self,
        path: &Path,
        threads: Threads,
    ) -> Result<Result<IsolatedSession, Death>, RuntimeError> {
        let worker = self.worker(path)?;
        let id = worker.session_id();
        let body = worker::load_body(&self.label, path, threads);
        match worker.call(id, wire::LOAD, &[&body.bytes]) {
            Ok(Reply::Loaded) => Ok(Ok(IsolatedSession {
                engine: self.clone(),
                path: path.to_path_buf(),
                threads,
                worker,
                id,
                runs: 0,
            })),
            Ok(Reply::Failed(e)) => Err(e),
            Ok(_) => Err(out_of_turn(self.engine, path)),
            Err(d) => Ok(Err(d)),
        }
    }
}

fn out_of_turn(engine: &'static str, path: &Path) -> RuntimeError {
    RuntimeError::Engine {
        path: path.to_path_buf(),
        engine,
        message: "its worker process answered out of turn".into(),
    }
}

fn crashed(engine: &'static str, path: &Path, doing: &str, d: &Death) -> RuntimeError {
    RuntimeError::Engine {
        path: path.to_path_buf(),
        engine,
        message: format!(
            "the engine crashed {doing} it ({}), in a worker process of its own, so cleave \
             goes on: the file asks for something {engine} does not check",
            d.0
        ),
    }
}

impl Engine for Isolated {
    fn name(&self) -> &'static str {
        self.engine
    }

    fn load_with(&self, model: &Path, opts: LoadOptions) -> Result<Box<dyn Session>, RuntimeError> {
        let threads = opts.threads;
        Ok(Box::new(self.open(model, threads)?))
    }

    fn tensor_dims(
        &self,
        model: &Path,
        inputs: &[HostTensor],
    ) -> Result<Option<Vec<Option<Vec<i64>>>>, RuntimeError> {
        let worker = self.worker(model)?;
        let mut head = wire::Body::default();
        head.str(&self.label).path(model);
        let (tensors, data) = wire::tensors_body(inputs.iter().map(|t| ("", t)));
        let mut parts = vec![head.bytes.as_slice(), tensors.bytes.as_slice()];
        parts.extend(data);
        match worker.call(worker.session_id(), wire::DIMS, &parts) {
            Ok(Reply::Dims(d)) => Ok(d),
            Ok(Reply::Failed(e)) => Err(e),
            Ok(_) => Err(out_of_turn(self.engine, model)),
            Err(d) => Err(crashed(self.engine, model, "running", &d)),
        }
    }
}

/// A session in a worker process.
struct IsolatedSession {
    engine: Isolated,
    path: PathBuf,
    threads: Threads,
    worker: Arc<Worker>,
    id: u32,
    /// Runs made: after the first, a model that keeps state between runs cannot be loaded
    /// again without losing it.
    runs: u64,
}

impl IsolatedSession {
    /// The session again, on a new worker, where nothing it kept is lost by that.
    fn reopen(&mut self, d: &Death) -> Result<(), RuntimeError> {
        let stateful = || {
            cleave_tflite::FlatModel::load(&self.path).is_ok_and(|m| cleave_tflite::keeps_state(&m))
        };
        if self.runs > 0 && stateful() {
            return Err(RuntimeError::Engine {
                path: self.path.clone(),
                engine: self.engine.engine,
                message: format!(
                    "its worker process ended ({}), and the part keeps state from run to run \
                     (variables), which a new worker would not have: load the parts again",
                    d.0
                ),
            });
        }
        let runs = self.runs;
        *self = self.engine.open(&self.path, self.threads)?;
        self.runs = runs;
        Ok(())
    }
}

impl Session for IsolatedSession {
    fn run(
        &mut self,
        inputs: &[(String, HostTensor)],
    ) -> Result<Vec<(String, HostTensor)>, RuntimeError> {
        let (head, data) = wire::tensors_body(inputs.iter().map(|(n, t)| (n.as_str(), t)));
        let mut parts = vec![head.bytes.as_slice()];
        parts.extend(data);
        let mut reply = self.worker.call(self.id, wire::RUN, &parts);
        if let Err(d) = &reply {
            // Whether this run crashed the worker, or another session's did (before or while
            // this one waited), the answer is the same once more on a new worker: a second
            // crash is this part's.
            self.reopen(d)?;
            reply = self.worker.call(self.id, wire::RUN, &parts);
        }
        self.runs += 1;
        match reply {
            Ok(Reply::Outputs(t)) => Ok(t),
            Ok(Reply::Failed(e)) => Err(e),
            Ok(_) => Err(out_of_turn(self.engine.engine, &self.path)),
            Err(d) => Err(crashed(self.engine.engine, &self.path, "running", &d)),
        }
    }
}

impl Drop for IsolatedSession {
    fn drop(&mut self) {
        if !self.worker.is_dead() {
            self.worker.close(self.id);
        }
    }
}
