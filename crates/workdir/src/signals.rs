//! Temporary folders removed when the process is interrupted. A folder's `Drop` removes it on
//! every return path, but SIGINT, SIGTERM and SIGHUP end a process without running any drop:
//! `verify` of a big model left its 549 MB folder behind on Ctrl-C. Where the program asks
//! for it ([`remove_on_signals`], the `cleave` binary), those signals are taken by one thread
//! that removes every private folder still there, then ends the process by the same signal.
//! SIGKILL and a crash of cleave itself still leave them (docs/running.md says where).

use std::path::PathBuf;
use std::sync::Mutex;

static MADE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Notes a private folder just made; forgets those already removed.
pub(crate) fn made(path: PathBuf) {
    let mut m = MADE.lock().unwrap_or_else(|e| e.into_inner());
    m.retain(|p| p.exists());
    m.push(path);
}

fn remove_all() {
    let m = MADE.lock().unwrap_or_else(|e| e.into_inner());
    // Inner folders (staging inside an output folder) were noted after their parents.
    for p in m.iter().rev() {
        let _ = std::fs::remove_dir_all(p);
    }
}

const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The signals to take: those not ignored (under `nohup`, SIGHUP stays ignored; a blocked
/// ignored signal is never delivered anyway).
fn signal_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a set owned here; sigaction with no
    // new action only reads the current one into `old`.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in SIGNALS {
            let mut old: libc::sigaction = std::mem::zeroed();
            let ignored = libc::sigaction(s, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction == libc::SIG_IGN;
            if !ignored {
                libc::sigaddset(&mut set, s);
            }
        }
        set
    }
}

/// From now on, SIGINT, SIGTERM and SIGHUP remove the private folders still present, then
/// end the process as the signal would have. Call it before starting any thread: the signals
/// are blocked in the calling thread, and so in every thread it starts later, and waited
/// for by one thread of their own.
pub fn remove_on_signals() -> std::io::Result<()> {
    let set = signal_set();
    // SAFETY: blocks the signals in this thread only; `set` is initialised.
    let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if r != 0 {
        return Err(std::io::Error::from_raw_os_error(r));
    }
    std::thread::Builder::new()
        .name("cleave-signals".into())
        .spawn(move || {
            let mut sig: libc::c_int = 0;
            // SAFETY: waits on the blocked set; `sig` is written by sigwait.
            if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
                return;
            }
            remove_all();
            // SAFETY: the default action for the signal, unblocked in this thread alone, then
            // raised at the process: only this thread can take it, and it ends the process.
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
                let mut one: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut one);
                libc::sigaddset(&mut one, sig);
                libc::pthread_sigmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
                libc::kill(libc::getpid(), sig);
            }
            // Not reached where the signal ends the process.
            std::process::exit(128 + sig);
        })?;
    Ok(())
}
