//! The `cleave` binary: the command line of [`cleave_cli`], and the process around it.

use std::process::ExitCode;

fn main() -> ExitCode {
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == cleave_cli::ENGINE_WORKER)
    {
        return ExitCode::from(cleave_cli::engine_worker());
    }
    // Like other command-line tools, stop quietly when the reader of stdout goes away
    // (`cleave query M | head`) instead of panicking on the failed write.
    // SAFETY: restoring the default disposition of a signal before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    cleave_cli::set_whole_process();
    ExitCode::from(cleave_cli::run(std::env::args_os()))
}
