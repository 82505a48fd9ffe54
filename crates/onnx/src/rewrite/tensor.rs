//! Weight bytes for rewrites: read (wherever they live), slice, concatenate, rescale.

use crate::proto::TensorProto;
use bytes::Bytes;
use cleave_ir::{ElemType, Weight};

/// The raw little-endian bytes of a weight, read from an external file if need be.
pub(crate) fn bytes_of(w: &Weight) -> Option<Bytes> {
    let b = crate::read_weight(w).ok()?;
    (Some(b.len() as u64)
        == w.elem
            .bits()
            .map(|bits| w.element_count() * u64::from(bits) / 8))
    .then_some(b)
}

pub(crate) fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub(crate) fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Rows `start..end` of dimension 0.
pub(crate) fn slice_dim0(b: &[u8], dims: &[i64], start: i64, end: i64) -> Vec<u8> {
    let row = b.len() / dims.first().copied().unwrap_or(1).max(1) as usize;
    b[start as usize * row..end as usize * row].to_vec()
}

/// Indices `start..end` of dimension 1, for every index of dimension 0.
pub(crate) fn slice_dim1(b: &[u8], dims: &[i64], start: i64, end: i64) -> Vec<u8> {
    let outer = dims.first().copied().unwrap_or(1).max(1) as usize;
    let row = b.len() / outer;
    let inner = row / dims.get(1).copied().unwrap_or(1).max(1) as usize;
    let (a, z) = (start as usize * inner, end as usize * inner);
    b.chunks_exact(row.max(1))
        .flat_map(|r| &r[a..z])
        .copied()
        .collect()
}

/// Matrices `[K, N_i]` side by side: `[K, ΣN_i]`.
pub(crate) fn concat_columns(parts: &[(Bytes, Vec<i64>)], elem_bytes: usize) -> Vec<u8> {
    let rows = parts.first().map_or(0, |(_, d)| d[0]) as usize;
    let mut out = Vec::with_capacity(parts.iter().map(|(b, _)| b.len()).sum());
    for r in 0..rows {
        for (b, d) in parts {
            let w = d[1] as usize * elem_bytes;
            out.extend_from_slice(&b[r * w..(r + 1) * w]);
        }
    }
    out
}

pub(crate) fn tensor(name: &str, elem: ElemType, dims: &[i64], raw: Vec<u8>) -> TensorProto {
    TensorProto {
        name: Some(name.to_string()),
        dims: dims.to_vec(),
        data_type: Some(crate::elem_to_code(elem)),
        raw_data: Some(Bytes::from(raw)),
        ..Default::default()
    }
}

pub(crate) fn i64_tensor(name: &str, v: &[i64]) -> TensorProto {
    tensor(
        name,
        ElemType::I64,
        &[v.len() as i64],
        v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    )
}
