//! The part of LiteRT's C API (`litert/c/litert_*.h`) that the engine calls, resolved at run
//! time from the `libLiteRt.so` of the PyPI wheel `ai-edge-litert==2.3.0`. Signatures, enum
//! values and struct layouts are that release's; the library exports no version to check, so
//! another release is used at the caller's risk (`CLEAVE_LITERT_LIB`).

// The functions keep their C names, so they read and grep as in LiteRT's headers.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_void};

/// `LiteRtStatus`; 0 is success.
pub type Status = c_int;
/// Every LiteRT object is an opaque pointer.
pub type Handle = *mut c_void;
/// `LiteRtParamIndex` (`size_t`).
pub type ParamIndex = usize;

pub const STATUS_OK: Status = 0;
/// `kLiteRtHwAcceleratorCpu`.
pub const HW_ACCELERATOR_CPU: c_int = 1;
/// `kLiteRtRankedTensorType` (`LiteRtTensorTypeId`).
pub const RANKED_TENSOR_TYPE: c_int = 0;
/// `kLiteRtTensorBufferTypeHostMemory`.
pub const BUFFER_HOST_MEMORY: c_int = 1;
/// `kLiteRtTensorBufferLockModeRead` / `...Write`.
pub const LOCK_READ: c_int = 0;
pub const LOCK_WRITE: c_int = 1;
/// `LITERT_TENSOR_MAX_RANK`.
pub const MAX_RANK: usize = 8;

/// `kLiteRtEnvOptionTagAutoRegisterAccelerators`, `kLiteRtEnvOptionTagMinLoggerSeverity`.
pub const ENV_AUTO_REGISTER_ACCELERATORS: c_int = 24;
pub const ENV_MIN_LOGGER_SEVERITY: c_int = 25;
/// `kLiteRtAnyTypeInt`.
pub const ANY_INT: c_int = 2;
/// `kLiteRtLogSeverityError`.
pub const LOG_SEVERITY_ERROR: i64 = 3;

/// The opaque-options identifier the CPU accelerator reads its settings from, a TOML text.
pub const CPU_OPTIONS_ID: &std::ffi::CStr = c"xnnpack";

/// `LiteRtAny`: a type tag and an 8-byte union (only its integer member is used here).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Any {
    pub kind: c_int,
    pub int_value: i64,
}

/// `LiteRtEnvOption`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EnvOption {
    pub tag: c_int,
    pub value: Any,
}

/// `LiteRtLayout`: `rank` (7 bits) and `has_strides` (1 bit) share the first `unsigned int`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Layout {
    bits: c_uint,
    pub dimensions: [i32; MAX_RANK],
    pub strides: [u32; MAX_RANK],
}

impl Layout {
    /// A dense layout of these dimensions; `None` past LiteRT's maximum rank.
    pub fn dense(dims: &[i32]) -> Option<Layout> {
        if dims.len() > MAX_RANK {
            return None;
        }
        let mut dimensions = [0; MAX_RANK];
        dimensions[..dims.len()].copy_from_slice(dims);
        Some(Layout {
            bits: dims.len() as c_uint,
            dimensions,
            strides: [0; MAX_RANK],
        })
    }

    pub fn zeroed() -> Layout {
        Layout {
            bits: 0,
            dimensions: [0; MAX_RANK],
            strides: [0; MAX_RANK],
        }
    }

    /// The dimensions; negative ones are dynamic.
    pub fn dims(&self) -> &[i32] {
        let rank = ((self.bits & 0x7f) as usize).min(MAX_RANK);
        &self.dimensions[..rank]
    }
}

/// `LiteRtRankedTensorType`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RankedTensorType {
    pub element_type: c_int,
    pub layout: Layout,
}

// The sizes the 2.3.0 headers assert for 64-bit targets.
const _: () = assert!(std::mem::size_of::<Layout>() == 68);
const _: () = assert!(std::mem::size_of::<RankedTensorType>() == 72);
const _: () = assert!(std::mem::size_of::<EnvOption>() == 24);

/// The host-memory deallocator and opaque-options destructor callbacks.
pub type Deleter = Option<unsafe extern "C" fn(*mut c_void)>;

crate::dylib::api! {
    "the LiteRT 2.3.0 runtime";
    LiteRtCreateEnvironment: fn(c_int, *const EnvOption, *mut Handle) -> Status;
    LiteRtDestroyEnvironment: fn(Handle);

    LiteRtCreateModelFromBuffer: fn(Handle, *const c_void, usize, *mut Handle) -> Status;
    LiteRtDestroyModel: fn(Handle);
    LiteRtGetNumModelSignatures: fn(Handle, *mut ParamIndex) -> Status;
    LiteRtGetModelSignature: fn(Handle, ParamIndex, *mut Handle) -> Status;
    LiteRtGetNumSignatureInputs: fn(Handle, *mut ParamIndex) -> Status;
    LiteRtGetSignatureInputName: fn(Handle, ParamIndex, *mut *const c_char) -> Status;
    LiteRtGetSignatureInputTensorByIndex: fn(Handle, ParamIndex, *mut Handle) -> Status;
    LiteRtGetNumSignatureOutputs: fn(Handle, *mut ParamIndex) -> Status;
    LiteRtGetSignatureOutputName: fn(Handle, ParamIndex, *mut *const c_char) -> Status;
    LiteRtGetSignatureOutputTensorByIndex: fn(Handle, ParamIndex, *mut Handle) -> Status;
    LiteRtGetTensorName: fn(Handle, *mut *const c_char) -> Status;
    LiteRtGetTensorTypeId: fn(Handle, *mut c_int) -> Status;
    LiteRtGetRankedTensorType: fn(Handle, *mut RankedTensorType) -> Status;

    LiteRtCreateOptions: fn(*mut Handle) -> Status;
    LiteRtDestroyOptions: fn(Handle);
    LiteRtSetOptionsHardwareAccelerators: fn(Handle, c_int) -> Status;
    LiteRtCreateOpaqueOptions: fn(*const c_char, *mut c_void, Deleter, *mut Handle) -> Status;
    LiteRtDestroyOpaqueOptions: fn(Handle);
    LiteRtAddOpaqueOptions: fn(Handle, Handle) -> Status;

    LiteRtCreateCompiledModel: fn(Handle, Handle, Handle, *mut Handle) -> Status;
    LiteRtDestroyCompiledModel: fn(Handle);
    LiteRtGetCompiledModelInputTensorLayout: fn(Handle, ParamIndex, ParamIndex, *mut Layout)
        -> Status;
    LiteRtGetCompiledModelOutputTensorLayouts:
        fn(Handle, ParamIndex, usize, *mut Layout, bool) -> Status;
    LiteRtCompiledModelResizeInputTensor:
        fn(Handle, ParamIndex, ParamIndex, *const c_int, usize) -> Status;
    LiteRtRunCompiledModel: fn(Handle, ParamIndex, usize, *mut Handle, usize, *mut Handle)
        -> Status;

    LiteRtCreateManagedTensorBuffer:
        fn(Handle, c_int, *const RankedTensorType, usize, *mut Handle) -> Status;
    LiteRtDestroyTensorBuffer: fn(Handle);
    LiteRtGetTensorBufferTensorType: fn(Handle, *mut RankedTensorType) -> Status;
    LiteRtGetTensorBufferPackedSize: fn(Handle, *mut usize) -> Status;
    LiteRtLockTensorBuffer: fn(Handle, *mut *mut c_void, c_int) -> Status;
    LiteRtUnlockTensorBuffer: fn(Handle) -> Status;
}

/// What a status means (`litert_common.h`); the library exports no status-to-text function.
pub fn status_text(s: Status) -> String {
    let text = match s {
        1 => "invalid argument",
        2 => "memory allocation failure",
        3 => "runtime failure",
        4 => "missing input tensor",
        5 => "unsupported",
        6 => "not found",
        7 => "timeout expired",
        8 => "wrong version",
        9 => "unknown error",
        10 => "already exists",
        100 => "cancelled",
        500 => "file I/O error",
        501 => "invalid flatbuffer",
        502 => "dynamic loading failed",
        503 => "serialization failed",
        504 => "compilation failed",
        1000 => "index out of bounds",
        1001 => "invalid IR type",
        1002 => "invalid graph invariant",
        1003 => "graph modification failed",
        4000 => "unsupported runtime version",
        4001 => "unsupported compiler version",
        4002 => "incompatible byte code version",
        5000 => "no shape inference for an op",
        5001 => "shape inference failed",
        _ => return format!("status {s}"),
    };
    format!("{text} (status {s})")
}
