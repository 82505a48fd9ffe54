//! The part of onert's nnfw C API (`runtime/onert/api/nnfw/include/nnfw.h` in Samsung ONE)
//! that the engine calls, resolved at run time from the `libonert.so` of the PyPI wheel
//! `onert==0.1.0` (runtime 1.30.0). The calls used here have kept their signatures since
//! runtime 1.7, so the version is not checked.

// The functions keep their C names, so they read and grep as in nnfw.h.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

/// `NNFW_STATUS`; 0 is success.
pub type Status = c_int;
/// `nnfw_session *`, opaque.
pub type Session = *mut c_void;

pub const STATUS_OK: Status = 0;
/// `NNFW_STATUS_INSUFFICIENT_OUTPUT_SIZE`: an output's shape was only known once it ran.
pub const INSUFFICIENT_OUTPUT_SIZE: Status = 5;
/// `NNFW_MAX_RANK`.
pub const MAX_RANK: usize = 6;
/// The longest path `nnfw_load_model_from_file` takes, its terminating NUL included.
pub const MAX_PATH: usize = 1024;

/// `nnfw_tensorinfo`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct nnfw_tensorinfo {
    pub dtype: c_int,
    pub rank: i32,
    pub dims: [i32; MAX_RANK],
}

impl nnfw_tensorinfo {
    /// The dimensions, as many as the rank says (at most `MAX_RANK`).
    pub fn dims(&self) -> &[i32] {
        let rank = usize::try_from(self.rank).unwrap_or(0).min(MAX_RANK);
        &self.dims[..rank]
    }
}

const _: () = assert!(std::mem::size_of::<nnfw_tensorinfo>() == 32);

crate::dylib::api! {
    "onert's libonert.so (nnfw C API)";
    nnfw_create_session: fn(*mut Session) -> Status;
    nnfw_close_session: fn(Session) -> Status;
    nnfw_load_model_from_file: fn(Session, *const c_char) -> Status;
    nnfw_set_available_backends: fn(Session, *const c_char) -> Status;
    nnfw_input_size: fn(Session, *mut u32) -> Status;
    nnfw_output_size: fn(Session, *mut u32) -> Status;
    nnfw_input_tensorinfo: fn(Session, u32, *mut nnfw_tensorinfo) -> Status;
    nnfw_output_tensorinfo: fn(Session, u32, *mut nnfw_tensorinfo) -> Status;
    nnfw_set_input_tensorinfo: fn(Session, u32, *const nnfw_tensorinfo) -> Status;
    nnfw_prepare: fn(Session) -> Status;
    nnfw_set_input: fn(Session, u32, c_int, *const c_void, usize) -> Status;
    nnfw_set_output: fn(Session, u32, c_int, *mut c_void, usize) -> Status;
    nnfw_run: fn(Session) -> Status;
}

/// What a status means (`NNFW_STATUS`).
pub fn status_text(s: Status) -> String {
    let text = match s {
        1 => "error",
        2 => "unexpected null",
        3 => "invalid state",
        4 => "out of memory",
        5 => "insufficient output size",
        6 => "deprecated API",
        _ => return format!("status {s}"),
    };
    format!("{text} (status {s})")
}
