//! What the command line does differently when it is the whole process (the `cleave`
//! binary) rather than a call inside another one (the Python package's `cleave` command).

use std::sync::atomic::{AtomicBool, Ordering};

static WHOLE_PROCESS: AtomicBool = AtomicBool::new(false);

/// The hidden first argument with which the binary starts itself as an engine worker.
pub const ENGINE_WORKER: &str = "__engine-worker";

/// Says that the process ends when the command returns, and that engines which parse model
/// files unverified run in copies of this binary started with [`ENGINE_WORKER`].
pub fn set_whole_process() {
    WHOLE_PROCESS.store(true, Ordering::Relaxed);
    // Interrupted, the binary removes its temporary folders first. Without the handler
    // (the system refused a thread) it ends as before, leaving them.
    let _ = cleave::workdir::remove_on_signals();
    // Without its own path (an unusual /proc), the engines run in process, as before.
    if let Ok(program) = std::env::current_exe() {
        cleave::isolate_engines(cleave::Launcher {
            program,
            args: vec![ENGINE_WORKER.into()],
        });
    }
}

/// The binary as an engine worker ([`ENGINE_WORKER`]): runs until its starter lets go.
pub fn engine_worker() -> u8 {
    u8::try_from(cleave::engine_worker_main()).unwrap_or(70)
}

/// Lets go of a loaded model and what was built from it. In the binary, whose exit follows,
/// it is left to the exit: handing a million-node model's millions of small allocations back
/// one by one takes seconds that ending the process takes at once. In process (Python),
/// it is dropped as usual.
pub fn release<T>(value: T) {
    if WHOLE_PROCESS.load(Ordering::Relaxed) {
        std::mem::forget(value);
    } else {
        cleave::ir::phases::phase("freeing memory", || drop(value));
    }
}

/// A value [`release`]d when it goes out of scope, on every return path.
pub struct Released<T>(Option<T>);

impl<T> Released<T> {
    pub fn new(value: T) -> Released<T> {
        Released(Some(value))
    }
}

impl<T> std::ops::Deref for Released<T> {
    type Target = T;

    fn deref(&self) -> &T {
        // Only `drop` empties it.
        self.0.as_ref().unwrap_or_else(|| unreachable!())
    }
}

impl<T> std::ops::DerefMut for Released<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.0.as_mut().unwrap_or_else(|| unreachable!())
    }
}

impl<T> Drop for Released<T> {
    fn drop(&mut self) {
        if let Some(v) = self.0.take() {
            release(v);
        }
    }
}
