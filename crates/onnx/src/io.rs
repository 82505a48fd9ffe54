use std::fs::File;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use cleave_ir::phases::phase;
use prost::Message;

use crate::error::OnnxError;
use crate::external;
use crate::proto::ModelProto;

/// A decoded ONNX file. Its `bytes` fields (weights above all) are slices of the file's
/// memory map, not copies.
#[derive(Debug)]
pub struct OnnxModel {
    pub path: PathBuf,
    pub proto: ModelProto,
    /// The memory map of `path` that `proto`'s bytes fields slice, when it came from there:
    /// a weight's position in it is its position in the file, so it can be streamed from disk.
    file: Option<Bytes>,
}

impl OnnxModel {
    pub fn load(path: impl AsRef<Path>) -> Result<OnnxModel, OnnxError> {
        let path = path.as_ref().to_path_buf();
        let bytes = phase("read", || map_file(&path))?;
        let mut model = phase("decode", || OnnxModel::from_bytes(bytes.clone(), path))?;
        model.file = Some(bytes);
        Ok(model)
    }

    /// Decodes a model held in memory; `path` names it in errors and anchors external data.
    pub fn from_bytes(bytes: Bytes, path: PathBuf) -> Result<OnnxModel, OnnxError> {
        if bytes.is_empty() {
            return Err(OnnxError::Empty { path });
        }
        let proto = decode_model(bytes).map_err(|source| OnnxError::Decode {
            path: path.clone(),
            source,
        })?;
        if proto.graph.is_none() {
            return Err(OnnxError::NoGraph { path });
        }
        Ok(OnnxModel {
            path,
            proto,
            file: None,
        })
    }

    /// Another model made from this one (extra outputs, say): same path and external data,
    /// so [`OnnxModel::save`] carries its data files along.
    pub fn derived(&self, proto: ModelProto) -> OnnxModel {
        OnnxModel {
            path: self.path.clone(),
            proto,
            file: self.file.clone(),
        }
    }

    /// The external data files the model reads (they may not exist).
    pub fn data_files(&self) -> Vec<PathBuf> {
        let base = self.base_dir();
        external::external_locations(&self.proto, &self.path)
            .map(|ls| ls.into_iter().map(|l| base.join(l)).collect())
            .unwrap_or_default()
    }

    /// Where `bytes` (a field of `proto`) lies in the model's file, when it is a slice of it.
    pub fn file_offset(&self, bytes: &Bytes) -> Option<u64> {
        let file = self.file.as_ref()?;
        let start = (bytes.as_ptr() as usize).checked_sub(file.as_ptr() as usize)?;
        (start + bytes.len() <= file.len()).then_some(start as u64)
    }

    /// The folder external data locations are relative to.
    pub fn base_dir(&self) -> PathBuf {
        match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    /// Writes the model to `out` atomically. External data files it references are placed
    /// beside `out` under the same relative locations (copied: onnx refuses hard-linked data), so the
    /// written model stays valid and its data stays external.
    pub fn save(&self, out: impl AsRef<Path>) -> Result<(), OnnxError> {
        let out = out.as_ref();
        external::carry_external_files(&self.proto, &self.base_dir(), &self.path, out)?;
        write_atomic(out, &encode_model(&self.proto))
    }
}

/// Decodes a model from a buffer. With a `Bytes` buffer the weights are sliced, not copied.
pub fn decode_model(bytes: Bytes) -> Result<ModelProto, prost::DecodeError> {
    ModelProto::decode(bytes)
}

pub fn encode_model(model: &ModelProto) -> Vec<u8> {
    model.encode_to_vec()
}

/// Bytes [`encode_model`] would give, computed without encoding.
pub fn encoded_len(model: &ModelProto) -> usize {
    model.encoded_len()
}

/// The file's contents as shared bytes backed by a read-only memory map.
pub(crate) fn map_file(path: &Path) -> Result<Bytes, OnnxError> {
    let read_err = |source| OnnxError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(read_err)?;
    let meta = file.metadata().map_err(read_err)?;
    if meta.is_dir() {
        return Err(read_err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "is a directory",
        )));
    }
    if meta.len() == 0 {
        return Ok(Bytes::new());
    }
    // SAFETY: the map is read-only. Another process truncating the file while it is mapped
    // would fault, which is the accepted risk of every memory-mapping model loader.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(read_err)?;
    Ok(Bytes::from_owner(map))
}

/// [`cleave_files::write_atomic`], with this crate's error.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<(), OnnxError> {
    cleave_files::write_atomic(path, data).map_err(|e| OnnxError::Write {
        path: e.path,
        source: e.source,
    })
}
