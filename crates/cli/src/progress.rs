//! Progress on stderr for steps that can take more than a second: a spinner with the step's
//! name and elapsed time, or a bar where the work has a known count. Hidden when stderr is
//! not a terminal (pipes, CI, tests) or with `--quiet`.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

static QUIET: AtomicBool = AtomicBool::new(false);

pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

fn visible() -> bool {
    !QUIET.load(Ordering::Relaxed) && std::io::stderr().is_terminal()
}

/// A spinner for a step of unknown length; change its message as the step moves on, and
/// `finish_and_clear` it when done (dropping it also stops it).
pub fn spinner(step: &str) -> ProgressBar {
    if !visible() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_draw_target(ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} {elapsed}") {
        bar.set_style(style);
    }
    bar.set_message(step.to_string());
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

/// A bar over `len` items (runs, parts, tensors).
pub fn bar(step: &str, len: u64) -> ProgressBar {
    if !visible() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} {elapsed}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(step.to_string());
    bar
}
