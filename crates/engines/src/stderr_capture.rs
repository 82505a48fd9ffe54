//! What a C library prints on standard error during one call, kept as its error message.
//! onert 0.1.0 exports no error-text function: its loader and compiler print why they refuse
//! a model (`Fail to load model: Unsupported tensor type: RESOURCE`) and return a bare status.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Mutex;

/// File descriptor 2 is one per process: one capture at a time, and calls that print nothing
/// worth keeping (runs) are never captured, so pipelined runs do not wait on this.
static STDERR: Mutex<()> = Mutex::new(());

/// Puts fd 2 back however the call ends.
struct Restore {
    saved: OwnedFd,
}

impl Drop for Restore {
    fn drop(&mut self) {
        // SAFETY: `saved` is a duplicate of the original fd 2, open until this drop.
        unsafe { libc::dup2(self.saved.as_raw_fd(), 2) };
    }
}

/// Runs `f` with fd 2 sent to an anonymous file; returns its result and what was printed.
/// Where the capture cannot be set up, `f` runs with standard error as it is.
pub fn captured<R>(f: impl FnOnce() -> R) -> (R, String) {
    let _one = STDERR.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: plain system calls on descriptors this function owns; a failure leaves fd 2 as
    // it was.
    let file = unsafe { libc::memfd_create(c"cleave-stderr".as_ptr(), libc::MFD_CLOEXEC) };
    if file < 0 {
        return (f(), String::new());
    }
    // SAFETY: `file` was just opened and is owned here alone.
    let mut file = unsafe { File::from_raw_fd(file) };
    // SAFETY: duplicating fd 2 makes a new descriptor owned by `Restore`.
    let saved = unsafe { libc::dup(2) };
    if saved < 0 {
        return (f(), String::new());
    }
    let _ = std::io::stderr().flush();
    let restore = Restore {
        // SAFETY: `saved` is a new descriptor owned by nothing else.
        saved: unsafe { OwnedFd::from_raw_fd(saved) },
    };
    // SAFETY: `file` is open; fd 2 is restored by `restore`'s drop.
    if unsafe { libc::dup2(file.as_raw_fd(), 2) } < 0 {
        drop(restore);
        return (f(), String::new());
    }
    let result = f();
    drop(restore);
    let mut bytes = Vec::new();
    let _ = file
        .seek(SeekFrom::Start(0))
        .and_then(|_| file.read_to_end(&mut bytes));
    (result, String::from_utf8_lossy(&bytes).into_owned())
}

/// The lines of a capture that are a library's words: without terminal control sequences
/// (another thread's progress bar drawing meanwhile), trimmed, joined on one line.
pub fn message(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.contains('\u{1b}') && !l.contains('\r'))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_call_prints_on_fd_2_is_returned_and_fd_2_restored() {
        let (r, text) = captured(|| {
            // SAFETY: writes a static buffer to fd 2.
            unsafe { libc::write(2, b"Fail to load model: NYI\n".as_ptr().cast(), 24) };
            7
        });
        assert_eq!(r, 7);
        assert_eq!(message(&text), "Fail to load model: NYI");
        // fd 2 is the original again: a second capture sees only its own text.
        // SAFETY: as above.
        let (_, text) = captured(|| unsafe { libc::write(2, b"second\n".as_ptr().cast(), 7) });
        assert_eq!(message(&text), "second");
    }

    #[test]
    fn progress_bar_lines_are_not_the_message() {
        let text = "\r\u{1b}[2K⠁ loading\nError during model prepare : NYI for 'PReLU'\n\n";
        assert_eq!(
            message(text),
            "Error during model prepare : NYI for 'PReLU'"
        );
    }
}
