//! Where a command's time and memory go: each step of a command runs inside a named
//! [`phase`], which records its wall time and the process's resident memory when it ended.
//!
//! Recording is always on (two reads of `/proc/self/status` per phase, a few microseconds), so
//! `--timings` and `bench --partition --json` report the same run the user waited for, not a
//! separate instrumented one. Phases nest; records keep the order in which phases started.

use std::cell::Cell;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One finished phase.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseRecord {
    pub name: &'static str,
    /// 0 for a top-level phase, 1 inside one, and so on.
    pub depth: usize,
    pub wall: Duration,
    /// How many items the phase handled, where it counts them (parts written, say).
    pub items: Option<usize>,
    /// Resident memory when the phase ended (Linux; `None` elsewhere).
    pub rss_bytes: Option<u64>,
    /// The process's peak resident memory so far when the phase ended: a phase that raised
    /// the peak shows it here first.
    pub peak_bytes: Option<u64>,
}

static RECORDS: Mutex<Vec<PhaseRecord>> = Mutex::new(Vec::new());

/// Records kept before a new top-level phase starts the list afresh: a process that calls the
/// library again and again (Python, a server) and never takes them must not grow without end.
const MAX_RECORDS: usize = 4096;

thread_local! {
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// Runs `f` as the phase `name` and records it.
pub fn phase<T>(name: &'static str, f: impl FnOnce() -> T) -> T {
    counted(name, None, f)
}

/// [`phase`] over `items` things (files, parts), so that a report can give the time per item.
pub fn counted<T>(name: &'static str, items: Option<usize>, f: impl FnOnce() -> T) -> T {
    let depth = DEPTH.with(|d| {
        let depth = d.get();
        d.set(depth + 1);
        depth
    });
    let slot = with_records(|r| {
        if depth == 0 && r.len() >= MAX_RECORDS {
            r.clear();
        }
        r.push(PhaseRecord {
            name,
            depth,
            wall: Duration::ZERO,
            items,
            rss_bytes: None,
            peak_bytes: None,
        });
        r.len() - 1
    });
    let start = Instant::now();
    let out = f();
    let wall = start.elapsed();
    let (rss_bytes, peak_bytes) = memory();
    DEPTH.with(|d| d.set(depth));
    with_records(|r| {
        if let Some(rec) = r.get_mut(slot) {
            rec.wall = wall;
            rec.rss_bytes = rss_bytes;
            rec.peak_bytes = peak_bytes;
        }
    });
    out
}

/// The phases recorded so far, in the order they started; the record is emptied.
pub fn take() -> Vec<PhaseRecord> {
    with_records(std::mem::take)
}

/// The phases recorded so far, left in place.
pub fn recorded() -> Vec<PhaseRecord> {
    with_records(|r| r.clone())
}

/// The process's resident memory now and its peak so far, in bytes (Linux's
/// `/proc/self/status` VmRSS and VmHWM; `None` where there is no such file).
pub fn memory() -> (Option<u64>, Option<u64>) {
    let Ok(text) = std::fs::read_to_string("/proc/self/status") else {
        return (None, None);
    };
    (status_field(&text, "VmRSS:"), status_field(&text, "VmHWM:"))
}

fn status_field(text: &str, field: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kb.checked_mul(1024)
}

fn with_records<T>(f: impl FnOnce(&mut Vec<PhaseRecord>) -> T) -> T {
    // A panic inside a phase elsewhere poisons the lock; the records are still sound.
    let mut guard = RECORDS.lock().unwrap_or_else(|p| p.into_inner());
    f(&mut guard)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The record is the process's: tests that read it take turns.
    static TURN: Mutex<()> = Mutex::new(());

    #[test]
    fn nested_phases_keep_start_order_and_depth() {
        let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
        take();
        let v = phase("outer", || {
            phase("inner", || std::thread::sleep(Duration::from_millis(2)));
            counted("items", Some(3), || 7)
        });
        assert_eq!(v, 7);
        let r = take();
        let names: Vec<_> = r.iter().map(|p| (p.name, p.depth, p.items)).collect();
        assert_eq!(
            names,
            [
                ("outer", 0, None),
                ("inner", 1, None),
                ("items", 1, Some(3))
            ]
        );
        assert!(r[0].wall >= r[1].wall && r[1].wall >= Duration::from_millis(2));
        if cfg!(target_os = "linux") {
            let (rss, peak) = (r[0].rss_bytes.unwrap(), r[0].peak_bytes.unwrap());
            assert!(rss > 0 && peak >= rss);
        }
        assert!(take().is_empty());
    }

    #[test]
    fn records_never_pile_up_past_their_bound() {
        let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
        for _ in 0..MAX_RECORDS + 10 {
            phase("again", || ());
        }
        let r = take();
        assert!(!r.is_empty() && r.len() <= MAX_RECORDS, "{}", r.len());
    }
}
