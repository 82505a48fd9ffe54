//! One run's cancellation: a token the caller holds and the engine arms for the run it
//! starts, so that cancelling one request never stops another's run on the same session.

use std::sync::{Arc, Mutex, PoisonError};

/// Stops the one run an engine armed it for, from any thread.
pub trait Interrupt: Send + Sync {
    fn interrupt(&self);
}

#[derive(Default)]
struct State {
    cancelled: bool,
    /// The run in progress, while one is.
    armed: Option<Arc<dyn Interrupt>>,
}

/// A request's cancellation, shared between the thread that runs it and any that gives it up.
/// Cancelled before its run starts, the run never starts; during it, the engine stops it where
/// it can; after it, nothing happens.
#[derive(Default)]
pub struct Cancel {
    state: Mutex<State>,
}

impl Cancel {
    pub fn new() -> Cancel {
        Cancel::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is two plain fields, whole after any panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn cancel(&self) {
        let mut s = self.state();
        s.cancelled = true;
        if let Some(run) = &s.armed {
            run.interrupt();
        }
    }

    pub fn is_cancelled(&self) -> bool {
        self.state().cancelled
    }

    /// Called by an engine as its run starts, with what stops that run: false (and nothing
    /// armed) where the request was already cancelled, so the run must not start.
    pub fn arm(&self, run: Arc<dyn Interrupt>) -> bool {
        let mut s = self.state();
        if s.cancelled {
            return false;
        }
        s.armed = Some(run);
        true
    }

    /// Called by the engine once its run has ended, however it ended.
    pub fn disarm(&self) {
        self.state().armed = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Count(AtomicUsize);
    impl Interrupt for Count {
        fn interrupt(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_cancel_reaches_only_the_armed_run() {
        let run = Arc::new(Count(AtomicUsize::new(0)));
        let c = Cancel::new();
        assert!(c.arm(run.clone()));
        c.cancel();
        assert_eq!(run.0.load(Ordering::SeqCst), 1);
        c.disarm();
        c.cancel();
        assert_eq!(
            run.0.load(Ordering::SeqCst),
            1,
            "a finished run is not interrupted"
        );
        assert!(!c.arm(run.clone()), "a cancelled request starts no run");
        assert_eq!(run.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn another_request_is_left_alone() {
        let run = Arc::new(Count(AtomicUsize::new(0)));
        let (mine, other) = (Cancel::new(), Cancel::new());
        assert!(mine.arm(run.clone()));
        other.cancel();
        assert_eq!(run.0.load(Ordering::SeqCst), 0);
        assert!(!mine.is_cancelled());
    }
}
