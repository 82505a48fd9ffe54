//! The worker's side: a process that loads and runs one engine's sessions for the cleave that
//! started it, each session on a thread of its own, so that a crash inside the engine ends
//! this process and not cleave.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::FromRawFd;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};

use cleave_runtime::{Engine, HostTensor, LoadOptions, RuntimeError, Threads};

use super::wire::{self, Body, Fields};

type Out = Arc<Mutex<File>>;

/// Runs the worker on standard input and output until cleave closes its end; the exit code.
/// Standard output is kept for replies alone: whatever an engine prints there goes to
/// standard error.
pub fn main() -> i32 {
    super::IN_WORKER.store(true, std::sync::atomic::Ordering::Relaxed);
    // SAFETY: plain descriptor calls; the duplicate is owned by the `File` made from it.
    let replies = unsafe { libc::dup(1) };
    if replies < 0 || unsafe { libc::dup2(2, 1) } < 0 {
        eprintln!("cleave engine worker: cannot set up its output");
        return 70;
    }
    // SAFETY: `replies` is a new descriptor owned by nothing else.
    let out = Arc::new(Mutex::new(unsafe { File::from_raw_fd(replies) }));
    match serve(io::stdin().lock(), &out) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("cleave engine worker: {e}");
            70
        }
    }
}

fn reply(out: &Out, session: u32, op: u8, parts: &[&[u8]]) {
    let mut w = out.lock().unwrap_or_else(|e| e.into_inner());
    // cleave gone: the next read of standard input ends the worker.
    let _ = wire::write_frame(&mut *w, session, op, parts);
}

fn fail(out: &Out, session: u32, e: &RuntimeError) {
    reply(out, session, wire::FAILED, &[&wire::error_body(e).bytes]);
}

fn make(label: &str, path: &Path) -> Result<Box<dyn Engine>, RuntimeError> {
    let registry = crate::registry();
    let kind = registry.parse(label).ok_or_else(|| RuntimeError::Engine {
        path: path.to_path_buf(),
        engine: "worker",
        message: format!("no engine '{label}' in this build"),
    })?;
    registry.make(&kind)
}

fn serve(mut input: impl Read, out: &Out) -> io::Result<()> {
    let mut sessions: HashMap<u32, Sender<Vec<(String, HostTensor)>>> = HashMap::new();
    while let Some(h) = wire::read_header(&mut input)? {
        let mut f = Fields::new(&mut input, h.len);
        match h.op {
            wire::LOAD => {
                let (label, path, threads) = (
                    f.str()?,
                    f.path()?,
                    Threads::count(usize::try_from(f.u64()?).unwrap_or(usize::MAX)),
                );
                f.finish()?;
                let (tx, rx) = mpsc::channel::<Vec<(String, HostTensor)>>();
                sessions.insert(h.session, tx);
                let out = out.clone();
                std::thread::spawn(move || {
                    let loaded = make(&label, &path).and_then(|e| {
                        e.load_with(
                            &path,
                            LoadOptions {
                                threads,
                                optimize: false,
                                gpu: None,
                            },
                        )
                    });
                    let mut session = match loaded {
                        Ok(s) => s,
                        Err(e) => return fail(&out, h.session, &e),
                    };
                    reply(&out, h.session, wire::LOADED, &[]);
                    // Ends when cleave closes the session (its sender is dropped).
                    for inputs in rx {
                        match session.run(&inputs) {
                            Ok(outputs) => {
                                let named = outputs.iter().map(|(n, t)| (n.as_str(), t));
                                let (head, data) = wire::tensors_body(named);
                                let mut parts = vec![head.bytes.as_slice()];
                                parts.extend(data);
                                reply(&out, h.session, wire::OUTPUTS, &parts);
                            }
                            Err(e) => fail(&out, h.session, &e),
                        }
                    }
                });
            }
            wire::RUN => {
                let inputs = wire::read_tensors(&mut f)?;
                f.finish()?;
                let sent = sessions.get(&h.session).map(|tx| tx.send(inputs));
                if !matches!(sent, Some(Ok(()))) {
                    let e = RuntimeError::Engine {
                        path: PathBuf::new(),
                        engine: "worker",
                        message: format!("session {} is not open", h.session),
                    };
                    fail(out, h.session, &e);
                }
            }
            wire::DIMS => {
                let (label, path) = (f.str()?, f.path()?);
                let inputs = wire::read_tensors(&mut f)?;
                f.finish()?;
                let out = out.clone();
                std::thread::spawn(move || {
                    let plain: Vec<HostTensor> = inputs.into_iter().map(|(_, t)| t).collect();
                    match make(&label, &path).and_then(|e| e.tensor_dims(&path, &plain)) {
                        Ok(d) => reply(
                            &out,
                            h.session,
                            wire::DIMS_ARE,
                            &[&wire::dims_body(&d).bytes],
                        ),
                        Err(e) => fail(&out, h.session, &e),
                    }
                });
            }
            wire::CLOSE => {
                f.finish()?;
                sessions.remove(&h.session);
            }
            op => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("operation {op}"),
                ))
            }
        }
    }
    Ok(())
}

/// A request as cleave sends it.
pub fn load_body(label: &str, path: &Path, threads: Threads) -> Body {
    let mut b = Body::default();
    b.str(label).path(path).u64(u64::from(threads.get()));
    b
}
