//! One data file holding the bytes of many tensors, which models (the parts of a partition, a
//! converted model) reference by `location`, `offset` and `length`.
//!
//! Bytes go from file to file (`std::io::copy` between `File`s, which the kernel does with
//! `copy_file_range` where it can), never through the source's memory map: mapped pages that
//! are read count toward the process's resident memory, and a model's weights can be larger
//! than the memory there is.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;

use cleave_ir::ElemType;

use crate::data_file::{checked_length, open_regular, regular_metadata};
use crate::dtype::elem_from_code;
use crate::error::OnnxError;
#[cfg(test)]
use crate::external::external_ref;
use crate::external::{copy_regular, external_path, is_external};
use crate::io::OnnxModel;
use crate::proto::{tensor_proto::DataLocation, StringStringEntryProto, TensorProto};

/// Tensors smaller than this stay inside the model, as onnx's own converter leaves them.
pub const MIN_EXTERNAL_BYTES: u64 = 1024;

/// Each tensor starts at a multiple of this, so an engine may map it page-aligned.
const ALIGN: u64 = 4096;

/// How the data file came to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightsSource {
    /// A copy of the source's one external data file, offsets kept. Not a hard link: onnx
    /// (1.23) refuses a data file with several links as a possible hard-link attack, so a
    /// link would break the parts and the source alike for onnx's loader and checker.
    /// `std::fs::copy` uses `copy_file_range`, which shares extents where the file system can.
    WholeFile,
    /// The source's data file itself (the output folder is the source's).
    Existing,
    /// Streamed into a new file, tensor by tensor.
    Copied,
}

/// A written data file and where each tensor lies in it.
#[derive(Clone, Debug)]
pub struct WeightsFile {
    pub path: PathBuf,
    /// The file name, as models beside it reference it.
    pub location: String,
    pub source: WeightsSource,
    /// Bytes of tensor data the file holds for the models that reference it.
    pub tensor_bytes: u64,
    at: HashMap<String, (u64, u64)>,
}

impl WeightsFile {
    /// `t` reading its bytes from this file, or `None` when `t` stays inside the model.
    pub fn reference(&self, t: &TensorProto) -> Option<TensorProto> {
        let &(offset, length) = self.at.get(t.name())?;
        let kv = |k: &str, v: String| StringStringEntryProto {
            key: Some(k.into()),
            value: Some(v),
        };
        let mut out = t.clone();
        out.raw_data = None;
        out.data_location = Some(DataLocation::External as i32);
        out.external_data = vec![
            kv("location", self.location.clone()),
            kv("offset", offset.to_string()),
            kv("length", length.to_string()),
        ];
        Some(out)
    }

    pub fn tensors(&self) -> usize {
        self.at.len()
    }
}

/// Where a tensor's bytes are now.
enum Origin {
    /// `length` bytes at `offset` of a file: an external data file, or the model file itself.
    File {
        path: PathBuf,
        offset: u64,
        length: u64,
    },
    /// Bytes of a model that was not loaded from a file.
    Memory(Bytes),
}

/// Writes the bytes of `tensors` (initializers of `source`; each name once) into one file at
/// `out`, atomically, and says where each went. Tensors held in the model with fewer than
/// `min_bytes` bytes stay there ([`MIN_EXTERNAL_BYTES`] is what onnx's converter uses). When
/// every other tensor already lies in one external data file of the source, `out` is a copy of
/// that file with the same offsets (see [`WeightsSource::WholeFile`]).
/// `None` when no tensor is large enough to leave the model: no file is written.
pub fn write_weights_file(
    source: &OnnxModel,
    tensors: &[&TensorProto],
    out: &Path,
    min_bytes: u64,
) -> Result<Option<WeightsFile>, OnnxError> {
    write_weights_file_to(source, tensors, out, out, min_bytes)
}

/// [`write_weights_file`] for a file that will be at `out` but is written at `write_to` (a
/// staging folder): `out` names the file in the parts and decides whether the source already
/// reads it. Nothing is written at `write_to` when the result's source is
/// [`WeightsSource::Existing`].
pub fn write_weights_file_to(
    source: &OnnxModel,
    tensors: &[&TensorProto],
    out: &Path,
    write_to: &Path,
    min_bytes: u64,
) -> Result<Option<WeightsFile>, OnnxError> {
    let base = source.base_dir();
    let mut plan: Vec<(&str, Origin)> = Vec::new();
    for t in tensors {
        if is_external(t) {
            let (r, path) = external_path(t, &source.path, &base)?;
            let size = regular_metadata(&path)
                .map_err(|e| OnnxError::Read {
                    path: path.clone(),
                    source: e,
                })?
                .len();
            let elem = elem_from_code(t.data_type()).unwrap_or(ElemType::Other(0));
            let length = checked_length(&path, r.offset, r.length, (elem, &t.dims), size).map_err(
                |reason| OnnxError::External {
                    path: source.path.clone(),
                    tensor: t.name().to_string(),
                    reason,
                },
            )?;
            plan.push((
                t.name(),
                Origin::File {
                    path,
                    offset: r.offset,
                    length,
                },
            ));
        } else if let Some(raw) = t
            .raw_data
            .as_ref()
            .filter(|r| r.len() as u64 >= min_bytes.max(1))
        {
            match source.file_offset(raw) {
                Some(offset) => plan.push((
                    t.name(),
                    Origin::File {
                        path: source.path.clone(),
                        offset,
                        length: raw.len() as u64,
                    },
                )),
                None => plan.push((t.name(), Origin::Memory(raw.clone()))),
            }
        }
    }
    if plan.is_empty() {
        return Ok(None);
    }
    let location = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| OnnxError::Write {
            path: out.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"),
        })?;
    let tensor_bytes = plan
        .iter()
        .map(|(_, f)| match f {
            Origin::File { length, .. } => *length,
            Origin::Memory(b) => b.len() as u64,
        })
        .sum();

    // The files the source reads; `out` may only be one of them when it is left as it is.
    let mut inputs: Vec<PathBuf> = plan
        .iter()
        .filter_map(|(_, f)| {
            if let Origin::File { path, .. } = f {
                Some(path.clone())
            } else {
                None
            }
        })
        .collect();
    inputs.sort();
    inputs.dedup();
    let real = |p: &Path| p.canonicalize().ok();
    let out_real = real(out);

    if let ([only], true) = (
        inputs.as_slice(),
        plan.iter().all(|(_, f)| matches!(f, Origin::File { .. })),
    ) {
        if *only != source.path {
            let at = plan
                .iter()
                .filter_map(|(name, f)| {
                    if let Origin::File { offset, length, .. } = f {
                        Some((name.to_string(), (*offset, *length)))
                    } else {
                        None
                    }
                })
                .collect();
            let done = |how| WeightsFile {
                path: out.to_path_buf(),
                location: location.clone(),
                source: how,
                tensor_bytes,
                at,
            };
            let only_real = only.canonicalize().map_err(|e| OnnxError::Read {
                path: only.clone(),
                source: e,
            })?;
            if out_real.as_ref() == Some(&only_real) {
                return Ok(Some(done(WeightsSource::Existing)));
            }
            if copy_regular(&only_real, write_to).is_ok() {
                return Ok(Some(done(WeightsSource::WholeFile)));
            }
        }
    }
    if let Some(o) = &out_real {
        if inputs.iter().any(|p| real(p).as_ref() == Some(o)) {
            return Err(OnnxError::Write {
                path: out.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "the source model reads this file; choose another output folder",
                ),
            });
        }
    }
    let at = stream(&plan, write_to)?;
    Ok(Some(WeightsFile {
        path: out.to_path_buf(),
        location,
        source: WeightsSource::Copied,
        tensor_bytes,
        at,
    }))
}

/// Copies each tensor's bytes to the next aligned offset of a new file; returns the offsets.
fn stream(plan: &[(&str, Origin)], out: &Path) -> Result<HashMap<String, (u64, u64)>, OnnxError> {
    let mut at = HashMap::with_capacity(plan.len());
    let mut sources: HashMap<&Path, File> = HashMap::new();
    // A source file that cannot be read is the source's error, not the output's.
    let mut read_error = None;
    let written = cleave_workdir::write_with(out, |dst| {
        let mut pos = 0u64;
        for (name, from) in plan {
            pos = pos.div_ceil(ALIGN) * ALIGN;
            // Seeking past the end leaves a hole that reads as zeros: the padding.
            dst.seek(SeekFrom::Start(pos))?;
            let length = match from {
                Origin::Memory(b) => {
                    dst.write_all(b)?;
                    b.len() as u64
                }
                Origin::File {
                    path,
                    offset,
                    length,
                } => {
                    let mut read_err = |e| {
                        read_error = Some(OnnxError::Read {
                            path: path.clone(),
                            source: e,
                        });
                        std::io::Error::other("reading the source failed")
                    };
                    let src = match sources.entry(path.as_path()) {
                        std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                        std::collections::hash_map::Entry::Vacant(v) => {
                            v.insert(open_regular(path).map_err(&mut read_err)?)
                        }
                    };
                    src.seek(SeekFrom::Start(*offset)).map_err(&mut read_err)?;
                    let copied = std::io::copy(&mut Read::take(&*src, *length), dst)?;
                    if copied != *length {
                        return Err(read_err(std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            format!("tensor '{name}': file ended after {copied} of {length} bytes"),
                        )));
                    }
                    *length
                }
            };
            at.insert(name.to_string(), (pos, length));
            pos += length;
        }
        dst.set_len(pos)
    });
    match (written, read_error) {
        (Ok(()), _) => Ok(at),
        (Err(_), Some(e)) => Err(e),
        (Err(e), None) => Err(OnnxError::Write {
            path: e.path,
            source: e.source,
        }),
    }
}

/// Writing a whole model with its weights in one data file, or all inside it (`convert`).
impl OnnxModel {
    /// This model with its main graph's initializers of `min_bytes` or more moved into `data`
    /// (see [`write_weights_file`]); save it in `data`'s folder.
    pub fn externalized(
        &self,
        data: &Path,
        min_bytes: u64,
    ) -> Result<(OnnxModel, Option<WeightsFile>), OnnxError> {
        let mut proto = self.proto()?.into_owned();
        let Some(g) = &proto.graph else {
            return Ok((self.derived(proto), None));
        };
        let tensors: Vec<&TensorProto> = g.initializer.iter().collect();
        let weights = write_weights_file(self, &tensors, data, min_bytes)?;
        if let (Some(w), Some(g)) = (&weights, proto.graph.as_mut()) {
            for t in &mut g.initializer {
                if let Some(r) = w.reference(t) {
                    *t = r;
                }
            }
        }
        Ok((self.derived(proto), weights))
    }

    /// This model with the bytes of its main graph's external initializers read in. Fails
    /// when the result would be too large for protobuf (2 GB).
    pub fn internalized(&self) -> Result<OnnxModel, OnnxError> {
        let mut proto = self.proto()?.into_owned();
        if let Some(g) = proto.graph.as_mut() {
            for t in &mut g.initializer {
                if !is_external(t) {
                    continue;
                }
                let w = crate::to_ir::to_ir_weight(t, self)?;
                let bytes = crate::external::read_weight(&w).map_err(|e| OnnxError::External {
                    path: self.path.clone(),
                    tensor: t.name().to_string(),
                    reason: e.to_string(),
                })?;
                t.data_location = None;
                t.external_data.clear();
                t.raw_data = Some(bytes);
            }
        }
        let n = crate::io::encoded_len(&proto);
        if n > i32::MAX as usize {
            return Err(OnnxError::TooLarge {
                path: self.path.clone(),
                bytes: n as u64,
            });
        }
        Ok(self.derived(proto))
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::path::{Path, PathBuf};

    use prost::Message;

    use super::*;
    use crate::proto::{GraphProto, ModelProto};

    fn tiny_cnn() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/tiny_cnn.onnx")
    }

    /// Every initializer's bytes, by name, as an engine would read them.
    fn weights(path: &Path) -> Vec<(String, Vec<u8>)> {
        let m = OnnxModel::load(path).unwrap();
        let g = m.without_nodes().graph.as_ref().unwrap();
        g.initializer
            .iter()
            .map(|t| {
                (
                    t.name().to_string(),
                    crate::read_weight(&crate::to_ir_weight(t, &m).unwrap())
                        .unwrap()
                        .to_vec(),
                )
            })
            .collect()
    }

    fn save(m: &OnnxModel, out: &Path) {
        crate::write_atomic(out, &crate::encode_model(&m.proto().unwrap())).unwrap();
    }

    #[test]
    fn embedded_weights_are_found_in_the_file_they_were_mapped_from() {
        let m = OnnxModel::load(tiny_cnn()).unwrap();
        let file = std::fs::read(tiny_cnn()).unwrap();
        for t in &m.without_nodes().graph.as_ref().unwrap().initializer {
            let raw = t.raw_data.as_ref().unwrap();
            let at = m.file_offset(raw).unwrap() as usize;
            assert_eq!(&file[at..at + raw.len()], &raw[..], "{}", t.name());
        }
        let in_memory = OnnxModel::from_bytes(file.into(), tiny_cnn()).unwrap();
        let t = &in_memory
            .without_nodes()
            .graph
            .as_ref()
            .unwrap()
            .initializer[0];
        assert_eq!(
            in_memory.file_offset(t.raw_data.as_ref().unwrap()),
            None,
            "not loaded from the file: no offset in it"
        );
    }

    #[test]
    fn externalized_then_internalized_round_trips_every_weight() {
        let tmp = tempfile::tempdir().unwrap();
        let want = weights(&tiny_cnn());
        let src = OnnxModel::load(tiny_cnn()).unwrap();
        let (ext, w) = src.externalized(&tmp.path().join("t.weights"), 0).unwrap();
        let w = w.unwrap();
        assert_eq!((w.source, w.tensors()), (WeightsSource::Copied, want.len()));
        let out = tmp.path().join("t.onnx");
        save(&ext, &out);
        let back = OnnxModel::load(&out).unwrap();
        for t in &back.without_nodes().graph.as_ref().unwrap().initializer {
            assert!(
                is_external(t) && t.raw_data.is_none(),
                "{} still inside",
                t.name()
            );
            let r = external_ref(t, &out).unwrap();
            assert_eq!((r.location.as_str(), r.offset % ALIGN), ("t.weights", 0));
        }
        assert_eq!(weights(&out), want);

        let inl = back.internalized().unwrap();
        assert!(inl
            .without_nodes()
            .graph
            .as_ref()
            .unwrap()
            .initializer
            .iter()
            .all(|t| !is_external(t)));
        let out2 = tmp.path().join("inline/t.onnx");
        std::fs::create_dir_all(out2.parent().unwrap()).unwrap();
        save(&inl, &out2);
        assert_eq!(weights(&out2), want);
        // Same tensors as the source, byte for byte, once the weights are back inside.
        assert_eq!(
            std::fs::read(&out2).unwrap(),
            std::fs::read(tiny_cnn()).unwrap()
        );
    }

    #[test]
    fn small_tensors_stay_inside_the_model() {
        let tmp = tempfile::tempdir().unwrap();
        let src = OnnxModel::load(tiny_cnn()).unwrap();
        let (ext, w) = src
            .externalized(&tmp.path().join("t.weights"), MIN_EXTERNAL_BYTES)
            .unwrap();
        let external: Vec<&str> = ext
            .without_nodes()
            .graph
            .as_ref()
            .unwrap()
            .initializer
            .iter()
            .filter(|t| is_external(t))
            .map(|t| t.name())
            .collect();
        assert_eq!(external, ["conv2.w"], "only conv2.w has 1 KiB or more");
        assert_eq!(w.unwrap().tensor_bytes, 2304);
    }

    /// A model reading `w0` and `w1` from external files `files[0]` and `files[1]` in `dir`.
    fn two_tensor_model(dir: &Path, files: [&str; 2]) -> (PathBuf, Vec<Vec<u8>>) {
        let kv = |k: &str, v: String| StringStringEntryProto {
            key: Some(k.into()),
            value: Some(v),
        };
        let mut blobs: Vec<(String, Vec<u8>)> = Vec::new();
        let mut tensors = Vec::new();
        let mut data = Vec::new();
        for (i, f) in files.iter().enumerate() {
            let bytes: Vec<u8> = (0..64u32)
                .flat_map(|k| ((k + 100 * i as u32) as f32).to_le_bytes())
                .collect();
            let offset = match blobs.iter_mut().find(|(n, _)| n == f) {
                Some((_, b)) => {
                    b.extend_from_slice(&[7; 3]); // unaligned on purpose
                    let o = b.len();
                    b.extend_from_slice(&bytes);
                    o
                }
                None => {
                    blobs.push((f.to_string(), bytes.clone()));
                    0
                }
            };
            tensors.push(TensorProto {
                name: Some(format!("w{i}")),
                dims: vec![64],
                data_type: Some(1),
                data_location: Some(DataLocation::External as i32),
                external_data: vec![
                    kv("location", f.to_string()),
                    kv("offset", offset.to_string()),
                    kv("length", "256".into()),
                ],
                ..Default::default()
            });
            data.push(bytes);
        }
        for (f, b) in &blobs {
            std::fs::write(dir.join(f), b).unwrap();
        }
        let m = ModelProto {
            ir_version: Some(8),
            graph: Some(GraphProto {
                name: Some("g".into()),
                initializer: tensors,
                ..Default::default()
            }),
            ..Default::default()
        };
        let p = dir.join("m.onnx");
        std::fs::write(&p, m.encode_to_vec()).unwrap();
        (p, data)
    }

    #[test]
    fn one_source_data_file_is_copied_whole_with_its_offsets() {
        let tmp = tempfile::tempdir().unwrap();
        let (p, data) = two_tensor_model(tmp.path(), ["d.bin", "d.bin"]);
        let m = OnnxModel::load(&p).unwrap();
        let work = tmp.path().join("work");
        std::fs::create_dir(&work).unwrap();
        let (ext, w) = m.externalized(&work.join("s.weights"), 0).unwrap();
        assert_eq!(w.unwrap().source, WeightsSource::WholeFile);
        // A copy, not a hard link: onnx refuses data files with more than one link.
        assert_eq!(
            std::fs::metadata(tmp.path().join("d.bin")).unwrap().nlink(),
            1
        );
        assert_eq!(
            std::fs::read(work.join("s.weights")).unwrap(),
            std::fs::read(tmp.path().join("d.bin")).unwrap()
        );
        let offsets: Vec<u64> = ext
            .without_nodes()
            .graph
            .as_ref()
            .unwrap()
            .initializer
            .iter()
            .map(|t| external_ref(t, &p).unwrap().offset)
            .collect();
        assert_eq!(
            offsets,
            [0, 259],
            "the source's offsets, unaligned as they were"
        );
        save(&ext, &work.join("s.onnx"));
        assert_eq!(
            weights(&work.join("s.onnx"))
                .into_iter()
                .map(|(_, b)| b)
                .collect::<Vec<_>>(),
            data
        );

        // Into the source's own folder under the data file's own name: left as it is.
        let (_, w) = m.externalized(&tmp.path().join("d.bin"), 0).unwrap();
        assert_eq!(w.unwrap().source, WeightsSource::Existing);
    }

    #[test]
    fn several_source_files_are_streamed_into_one_and_never_overwritten() {
        let tmp = tempfile::tempdir().unwrap();
        let (p, data) = two_tensor_model(tmp.path(), ["a.bin", "b.bin"]);
        let m = OnnxModel::load(&p).unwrap();
        let out = tmp.path().join("w/s.weights");
        std::fs::create_dir(out.parent().unwrap()).unwrap();
        let (ext, w) = m.externalized(&out, 0).unwrap();
        let w = w.unwrap();
        assert_eq!((w.source, w.tensor_bytes), (WeightsSource::Copied, 512));
        assert_eq!(std::fs::metadata(&out).unwrap().len(), ALIGN + 256);
        save(&ext, &tmp.path().join("w/s.onnx"));
        assert_eq!(
            weights(&tmp.path().join("w/s.onnx"))
                .into_iter()
                .map(|(_, b)| b)
                .collect::<Vec<_>>(),
            data
        );

        // Writing over a file the source reads would break the source: refused, file intact.
        let before = std::fs::read(tmp.path().join("a.bin")).unwrap();
        let e = m.externalized(&tmp.path().join("a.bin"), 0).unwrap_err();
        assert!(
            e.to_string().contains("the source model reads this file"),
            "{e}"
        );
        assert_eq!(std::fs::read(tmp.path().join("a.bin")).unwrap(), before);
    }

    #[test]
    fn a_range_beyond_the_data_file_is_an_error_naming_the_tensor() {
        let tmp = tempfile::tempdir().unwrap();
        let (p, _) = two_tensor_model(tmp.path(), ["a.bin", "b.bin"]);
        std::fs::write(tmp.path().join("b.bin"), [0u8; 10]).unwrap();
        let m = OnnxModel::load(&p).unwrap();
        let e = m
            .externalized(&tmp.path().join("s.weights"), 0)
            .unwrap_err();
        assert!(
            matches!(&e, OnnxError::External { tensor, .. } if tensor == "w1"),
            "{e}"
        );
        assert!(!tmp.path().join("s.weights").exists());
    }
}
