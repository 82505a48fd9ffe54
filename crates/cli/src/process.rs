//! What the command line does differently when it is the whole process (the `cleave`
//! binary) rather than a call inside another one (the Python package's `cleave` command).

use std::sync::atomic::{AtomicBool, Ordering};

static WHOLE_PROCESS: AtomicBool = AtomicBool::new(false);

/// Says that the process ends when the command returns.
pub fn set_whole_process() {
    WHOLE_PROCESS.store(true, Ordering::Relaxed);
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
