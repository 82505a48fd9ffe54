use std::fmt;
use std::path::{Path, PathBuf};

use cleave::Error;

/// A failure as the user sees it: the file it concerns and the cause, on one line.
#[derive(Debug)]
pub struct Fail {
    file: Option<PathBuf>,
    cause: String,
    code: u8,
}

impl Fail {
    /// Bad input: exit code 2.
    pub fn input(file: &Path, cause: impl fmt::Display) -> Fail {
        Fail {
            file: Some(file.to_path_buf()),
            cause: one_line(cause),
            code: 2,
        }
    }

    /// Bad flags or a request that cannot be met, not tied to one file: exit code 2.
    pub fn usage(cause: impl fmt::Display) -> Fail {
        Fail {
            file: None,
            cause: one_line(cause),
            code: 2,
        }
    }

    /// A child process that printed its own reason ended with `code`: exit with it, silently.
    pub fn exit(code: i32) -> Fail {
        Fail {
            file: None,
            cause: String::new(),
            code: u8::try_from(code).ok().filter(|&c| c != 0).unwrap_or(1),
        }
    }

    /// Nothing left to print (see [`Fail::exit`]).
    pub fn is_silent(&self) -> bool {
        self.file.is_none() && self.cause.is_empty()
    }

    pub fn code(&self) -> u8 {
        self.code
    }
}

/// Causes may embed newlines (nested errors); the report stays on one line.
fn one_line(cause: impl fmt::Display) -> String {
    cause
        .to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

impl fmt::Display for Fail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.file {
            Some(p) => write!(f, "{}: {}", p.display(), self.cause),
            None => f.write_str(&self.cause),
        }
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        match e.path() {
            Some(p) => Fail::input(p, &e),
            None => Fail::usage(&e),
        }
    }
}
