//! NumPy `.npy` files (format versions 1–3, little-endian, C order).

use std::path::Path;

use cleave_ir::ElemType;

use crate::error::RuntimeError;
use crate::tensor::HostTensor;

const MAGIC: &[u8] = b"\x93NUMPY";

fn descr(e: ElemType) -> Option<&'static str> {
    Some(match e {
        ElemType::F32 => "<f4",
        ElemType::F64 => "<f8",
        ElemType::F16 => "<f2",
        ElemType::I64 => "<i8",
        ElemType::I32 => "<i4",
        ElemType::I16 => "<i2",
        ElemType::I8 => "|i1",
        ElemType::U8 => "|u1",
        ElemType::U16 => "<u2",
        ElemType::U32 => "<u4",
        ElemType::U64 => "<u8",
        ElemType::Bool => "|b1",
        _ => return None,
    })
}

fn elem_of(d: &str) -> Option<ElemType> {
    let d = d.replace('=', "<");
    [
        ElemType::F32,
        ElemType::F64,
        ElemType::F16,
        ElemType::I64,
        ElemType::I32,
        ElemType::I16,
        ElemType::I8,
        ElemType::U8,
        ElemType::U16,
        ElemType::U32,
        ElemType::U64,
        ElemType::Bool,
    ]
    .into_iter()
    .find(|&e| {
        descr(e) == Some(d.as_str()) || descr(e).map(|x| x.replace('|', "<")) == Some(d.clone())
    })
}

pub fn read_npy(path: &Path) -> Result<HostTensor, RuntimeError> {
    let bytes = std::fs::read(path).map_err(|source| RuntimeError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    npy_from_bytes(&bytes).map_err(|message| RuntimeError::BadTensor {
        path: path.to_path_buf(),
        message: format!("not a valid .npy file: {message}"),
    })
}

/// A tensor from the bytes of a `.npy` file, or why they are not one.
pub fn npy_from_bytes(b: &[u8]) -> Result<HostTensor, String> {
    if b.len() < 10 || &b[..6] != MAGIC {
        return Err("missing the \\x93NUMPY magic".into());
    }
    let (header_len, start) = match b[6] {
        1 => (usize::from(u16::from_le_bytes([b[8], b[9]])), 10),
        2 | 3 if b.len() >= 12 => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
        v => return Err(format!("unsupported format version {v}")),
    };
    let header = b.get(start..start + header_len).ok_or("truncated header")?;
    let header = std::str::from_utf8(header).map_err(|_| "header is not text")?;
    let field = |key: &str| -> Result<&str, String> {
        let at = header
            .find(&format!("'{key}'"))
            .ok_or(format!("header has no '{key}'"))?;
        let rest = &header[at + key.len() + 2..];
        let rest = rest
            .trim_start()
            .strip_prefix(':')
            .ok_or("bad header")?
            .trim_start();
        Ok(rest)
    };
    let d = field("descr")?;
    let d = d
        .strip_prefix('\'')
        .and_then(|r| r.split('\'').next())
        .ok_or("bad descr")?;
    if d.starts_with('>') {
        return Err(format!("big-endian data ('{d}') is not supported"));
    }
    let elem = elem_of(d).ok_or(format!("element type '{d}' is not supported"))?;
    if field("fortran_order")?.starts_with("True") {
        return Err(
            "Fortran-ordered arrays are not supported; save with np.ascontiguousarray".into(),
        );
    }
    let shape_text = field("shape")?;
    let shape_text = shape_text
        .strip_prefix('(')
        .and_then(|r| r.split(')').next())
        .ok_or("bad shape")?;
    let shape: Vec<usize> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|_| format!("bad dimension '{s}'"))
        })
        .collect::<Result<_, _>>()?;
    let count = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or("shape overflows")?;
    let size = descr(elem)
        .and_then(|x| x[2..].parse::<usize>().ok())
        .unwrap_or(1);
    let need = count.checked_mul(size).ok_or("shape overflows")?;
    let data = &b[start + header_len..];
    if data.len() != need {
        return Err(format!(
            "holds {} data bytes, its header ({d}, {shape:?}) says {need}",
            data.len()
        ));
    }
    Ok(HostTensor {
        elem,
        shape,
        data: data.to_vec(),
    })
}

/// A tensor as the bytes of a .npy file (format 1.0).
pub fn npy_bytes(t: &HostTensor) -> Result<Vec<u8>, String> {
    let d = descr(t.elem).ok_or_else(|| format!("{} tensors cannot be written as .npy", t.elem))?;
    let shape = match t.shape.len() {
        0 => "()".to_string(),
        1 => format!("({},)", t.shape[0]),
        _ => format!(
            "({})",
            t.shape
                .iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{d}', 'fortran_order': False, 'shape': {shape}, }}");
    // Data starts on a 64-byte boundary; the header ends with a newline.
    let pad = 64 - (10 + header.len() + 1) % 64;
    header.push_str(&" ".repeat(pad % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + t.data.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&t.data);
    Ok(out)
}

pub fn write_npy(path: &Path, t: &HostTensor) -> Result<(), RuntimeError> {
    let out = npy_bytes(t).map_err(|message| RuntimeError::BadTensor {
        path: path.to_path_buf(),
        message,
    })?;
    cleave_workdir::write_atomic(path, &out).map_err(|e| RuntimeError::Write {
        path: e.path,
        source: e.source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.npy");
        let t = HostTensor {
            elem: ElemType::F32,
            shape: vec![2, 3],
            data: (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect(),
        };
        write_npy(&p, &t).unwrap();
        assert_eq!(read_npy(&p).unwrap(), t);
        let raw = std::fs::read(&p).unwrap();
        assert_eq!(
            (raw.len() - t.data.len()) % 64,
            0,
            "data must start 64-byte aligned"
        );
        std::fs::write(&p, &raw[..raw.len() - 3]).unwrap();
        assert!(read_npy(&p).unwrap_err().to_string().contains("data bytes"));
        std::fs::write(&p, b"garbage").unwrap();
        assert!(read_npy(&p).unwrap_err().to_string().contains("magic"));
        let s = HostTensor {
            elem: ElemType::I64,
            shape: vec![],
            data: 7i64.to_le_bytes().to_vec(),
        };
        write_npy(&p, &s).unwrap();
        assert_eq!(read_npy(&p).unwrap(), s);
    }
}
