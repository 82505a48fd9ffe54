//! numpy arrays to and from the runtime's host tensors. A run lends an input array's buffer to
//! the engine (ONNX Runtime reads it in place; the others copy it once); an output's bytes
//! become the numpy array's buffer without a copy (viewed as its dtype and reshaped).

use cleave::ir::ElemType;
use cleave::runtime::{HostTensor, TensorView};
use numpy::{PyArray1, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{raise, Kind};

/// The element type of a numpy dtype (kind character and item size), native byte order.
fn elem_of(kind: u8, size: usize) -> Option<ElemType> {
    Some(match (kind, size) {
        (b'f', 2) => ElemType::F16,
        (b'f', 4) => ElemType::F32,
        (b'f', 8) => ElemType::F64,
        (b'i', 1) => ElemType::I8,
        (b'i', 2) => ElemType::I16,
        (b'i', 4) => ElemType::I32,
        (b'i', 8) => ElemType::I64,
        (b'u', 1) => ElemType::U8,
        (b'u', 2) => ElemType::U16,
        (b'u', 4) => ElemType::U32,
        (b'u', 8) => ElemType::U64,
        (b'b', 1) => ElemType::Bool,
        (b'c', 8) => ElemType::C64,
        (b'c', 16) => ElemType::C128,
        _ => return None,
    })
}

/// numpy's name for an element type, where numpy has one.
pub(crate) fn dtype_name(elem: ElemType) -> Option<&'static str> {
    Some(match elem {
        ElemType::F16 => "float16",
        ElemType::F32 => "float32",
        ElemType::F64 => "float64",
        ElemType::I8 => "int8",
        ElemType::I16 => "int16",
        ElemType::I32 => "int32",
        ElemType::I64 => "int64",
        ElemType::U8 => "uint8",
        ElemType::U16 => "uint16",
        ElemType::U32 => "uint32",
        ElemType::U64 => "uint64",
        ElemType::Bool => "bool",
        ElemType::C64 => "complex64",
        ElemType::C128 => "complex128",
        _ => return None,
    })
}

fn arg(message: String) -> PyErr {
    raise(Kind::Argument, None, &message)
}

/// A C-contiguous numpy array of a numeric dtype in native byte order: its element type,
/// shape and buffer, borrowed for as long as `obj`.
fn array_bytes<'a>(
    name: &str,
    obj: &'a Bound<'_, PyAny>,
) -> PyResult<(ElemType, Vec<usize>, &'a [u8])> {
    let arr = obj.cast::<PyUntypedArray>().map_err(|_| {
        arg(format!(
            "input '{name}': expected a numpy array, got {}",
            obj.get_type()
                .name()
                .map_or_else(|_| "?".into(), |n| n.to_string())
        ))
    })?;
    let dtype = arr.dtype();
    let (kind, size) = (dtype.kind(), dtype.itemsize());
    let elem = elem_of(kind, size)
        .filter(|_| matches!(dtype.byteorder(), b'=' | b'|' | b'<'))
        .ok_or_else(|| {
            arg(format!(
                "input '{name}': numpy dtype '{dtype}' has no tensor type cleave runs (numbers and bools in native byte order: float16/32/64, int8 to int64, uint8 to uint64, bool, complex64/128)"
            ))
        })?;
    if !arr.is_c_contiguous() {
        return Err(arg(format!(
            "input '{name}': the array is not C-contiguous (use numpy.ascontiguousarray)"
        )));
    }
    let shape = arr.shape().to_vec();
    let count = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .and_then(|n| n.checked_mul(size))
        .ok_or_else(|| arg(format!("input '{name}': too large")))?;
    let data: &'a [u8] = if count == 0 {
        &[]
    } else {
        // SAFETY: a C-contiguous array's buffer holds exactly `count` bytes from `data`; the
        // reference `obj` keeps the array, and so its buffer, alive and unmoved for 'a (numpy
        // refuses to resize an array others reference). Another thread writing into it
        // meanwhile is the caller's race, as with any buffer lent to native code.
        unsafe {
            let ptr = (*arr.as_array_ptr()).fields.data as *const u8;
            std::slice::from_raw_parts(ptr, count)
        }
    };
    Ok((elem, shape, data))
}

/// A C-contiguous numpy array of a numeric dtype in native byte order, as a host tensor.
pub fn to_host(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<HostTensor> {
    let (elem, shape, data) = array_bytes(name, obj)?;
    Ok(HostTensor {
        elem,
        shape,
        data: data.to_vec(),
    })
}

/// A host tensor as a numpy array that owns the tensor's bytes.
pub fn to_numpy<'py>(py: Python<'py>, name: &str, t: HostTensor) -> PyResult<Bound<'py, PyAny>> {
    let dtype = dtype_name(t.elem).ok_or_else(|| {
        raise(
            Kind::Unsupported,
            None,
            &format!(
                "tensor '{name}' is {}, which numpy has no type for",
                t.elem.name()
            ),
        )
    })?;
    let shape = t.shape.clone();
    let bytes = PyArray1::<u8>::from_vec(py, t.data);
    bytes
        .call_method1("view", (dtype,))?
        .call_method1("reshape", (shape,))
}

/// An input's name in a feeds dict.
fn feed_name(k: &Bound<'_, PyAny>) -> PyResult<String> {
    k.extract().map_err(|_| {
        raise(
            Kind::Argument,
            None,
            &format!(
                "feeds: an input's name is a str, not {}",
                k.get_type()
                    .name()
                    .map_or_else(|_| "?".into(), |n| n.to_string())
            ),
        )
    })
}

/// `{name: array}` as host tensors.
pub(crate) fn feeds_of(feeds: &Bound<'_, PyDict>) -> PyResult<Vec<(String, HostTensor)>> {
    feeds
        .iter()
        .map(|(k, v)| {
            let name = feed_name(&k)?;
            let t = to_host(&name, &v)?;
            Ok((name, t))
        })
        .collect()
}

/// Runs `session` once on `feeds`, the GIL released and only Rust under its lock (a failure
/// becomes an exception once the lock is let go), and returns the tensors in `wanted` as
/// arrays; `what` names the session in the message of a poisoned lock. A run given `cancel`
/// stops (or never starts) once it is cancelled.
pub(crate) fn run_session<'py>(
    py: Python<'py>,
    session: &std::sync::Mutex<Box<dyn cleave::runtime::Session>>,
    feeds: &Bound<'py, PyDict>,
    wanted: &[String],
    names: &crate::errors::Names,
    what: &str,
    cancel: Option<&cleave::runtime::Cancel>,
) -> PyResult<Bound<'py, PyDict>> {
    // The arrays are lent to the engine as they are (an engine that cannot read them in
    // place copies them); the dict's items keep them alive while the GIL is let go.
    let items: Vec<(String, Bound<'py, PyAny>)> = feeds
        .iter()
        .map(|(k, v)| Ok((feed_name(&k)?, v)))
        .collect::<PyResult<_>>()?;
    let mut arrays = Vec::with_capacity(items.len());
    for (name, v) in &items {
        arrays.push((name.as_str(), array_bytes(name, v)?));
    }
    let views: Vec<(&str, TensorView<'_>)> = arrays
        .iter()
        .map(|(n, (elem, shape, data))| {
            (
                *n,
                TensorView {
                    elem: *elem,
                    shape,
                    data,
                },
            )
        })
        .collect();
    let got = py
        .detach(|| -> Result<_, cleave::Error> {
            let mut session = session.lock().map_err(|_| {
                cleave::Error::usage(format!("an earlier run of this {what} panicked"))
            })?;
            Ok(session.run_views(&views, cancel)?)
        })
        .map_err(|e| crate::errors::from_engine_in(e, names))?;
    let out = PyDict::new(py);
    for (name, t) in got {
        if wanted.contains(&name) {
            let arr = to_numpy(py, &name, t)?;
            out.set_item(name, arr)?;
        }
    }
    Ok(out)
}
