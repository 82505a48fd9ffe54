use std::path::PathBuf;

use bytes::Bytes;

use crate::types::{ElemType, TensorType};

/// A constant tensor: an initializer, or the value of a tensor attribute.
#[derive(Clone, Debug, PartialEq)]
pub struct Weight {
    pub elem: ElemType,
    pub dims: Vec<i64>,
    pub data: WeightData,
}

/// Where a weight's bytes are. None of these variants owns a copy of a file's raw bytes.
#[derive(Clone, Debug, PartialEq)]
pub enum WeightData {
    /// Little-endian element bytes. When the source stored raw bytes this is a slice of the
    /// loaded (memory-mapped) file, shared, not copied.
    Bytes(Bytes),
    /// One byte string per element (string tensors).
    Strings(Vec<Bytes>),
    /// Bytes in another file, read on demand. `path` is resolved against the model's folder.
    External {
        path: PathBuf,
        offset: u64,
        length: Option<u64>,
    },
    /// The source format holds this weight in a form the IR does not decode (it stays there).
    Opaque,
}

impl Weight {
    pub fn ty(&self) -> TensorType {
        TensorType::fixed(self.elem, &self.dims)
    }

    pub fn element_count(&self) -> u64 {
        self.dims
            .iter()
            .fold(1u64, |acc, &d| acc.saturating_mul(d.max(0) as u64))
    }

    /// Bytes this weight occupies in memory or on disk.
    pub fn byte_len(&self) -> u64 {
        match &self.data {
            WeightData::Bytes(b) => b.len() as u64,
            WeightData::Strings(s) => s.iter().map(|b| b.len() as u64).sum(),
            WeightData::External {
                length: Some(n), ..
            } => *n,
            WeightData::External { length: None, .. } | WeightData::Opaque => {
                self.ty().byte_size().unwrap_or(0)
            }
        }
    }

    /// The elements as i64, for small integer tensors held in memory (shapes, axes, indices).
    pub fn to_i64s(&self) -> Option<Vec<i64>> {
        let WeightData::Bytes(b) = &self.data else {
            return None;
        };
        let v = match self.elem {
            ElemType::I64 => b
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
            ElemType::I32 => b
                .chunks_exact(4)
                .map(|c| i64::from(i32::from_le_bytes(c.try_into().unwrap_or([0; 4]))))
                .collect(),
            ElemType::U8 | ElemType::Bool => b.iter().map(|&x| i64::from(x)).collect(),
            ElemType::I8 => b.iter().map(|&x| i64::from(x as i8)).collect(),
            _ => return None,
        };
        let v: Vec<i64> = v;
        (v.len() as u64 == self.element_count()).then_some(v)
    }

    /// The elements as f64, for small float tensors held in memory (attribute values).
    pub fn to_f64s(&self) -> Option<Vec<f64>> {
        let WeightData::Bytes(b) = &self.data else {
            return None;
        };
        let v: Vec<f64> = match self.elem {
            ElemType::F32 => b
                .chunks_exact(4)
                .map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap_or([0; 4]))))
                .collect(),
            ElemType::F64 => b
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
            _ => {
                return self
                    .to_i64s()
                    .map(|v| v.into_iter().map(|x| x as f64).collect())
            }
        };
        (v.len() as u64 == self.element_count()).then_some(v)
    }
}
