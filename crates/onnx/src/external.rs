//! Tensors whose bytes live in another file (`data_location = EXTERNAL`).

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use bytes::Bytes;
use cleave_ir::{Weight, WeightData};

use crate::data_file::{checked_length, open_regular};
use crate::error::OnnxError;
use crate::proto::{tensor_proto::DataLocation, GraphProto, ModelProto, NodeProto, TensorProto};

/// `location`, `offset` and `length` of an external tensor.
pub(crate) struct ExternalRef {
    pub location: String,
    pub offset: u64,
    pub length: Option<u64>,
}

pub(crate) fn is_external(t: &TensorProto) -> bool {
    t.data_location == Some(DataLocation::External as i32)
}

pub(crate) fn external_ref(t: &TensorProto, model_path: &Path) -> Result<ExternalRef, OnnxError> {
    let bad = |reason: String| OnnxError::External {
        path: model_path.to_path_buf(),
        tensor: t.name().to_string(),
        reason,
    };
    let mut location = None;
    let mut offset = 0;
    let mut length = None;
    for kv in &t.external_data {
        let value = kv.value();
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| bad(format!("has a bad {} '{value}'", kv.key())))
        };
        match kv.key() {
            "location" => location = Some(value.to_string()),
            "offset" => offset = number()?,
            "length" => length = Some(number()?),
            _ => {}
        }
    }
    let location = location.ok_or_else(|| bad("has no location".into()))?;
    check_location(&location).map_err(bad)?;
    Ok(ExternalRef {
        location,
        offset,
        length,
    })
}

/// [`external_ref`] and the file it names under `base`, refused when any part of the location
/// is a symbolic link: onnx refuses such data files, and a link planted beside a model must
/// not make cleave copy another file's bytes into a part.
pub(crate) fn external_path(
    t: &TensorProto,
    model_path: &Path,
    base: &Path,
) -> Result<(ExternalRef, PathBuf), OnnxError> {
    let r = external_ref(t, model_path)?;
    let path = resolve_location(base, &r.location).map_err(|reason| OnnxError::External {
        path: model_path.to_path_buf(),
        tensor: t.name().to_string(),
        reason,
    })?;
    Ok((r, path))
}

/// `base/location`, or why not: a component that is a symbolic link.
pub(crate) fn resolve_location(base: &Path, location: &str) -> Result<PathBuf, String> {
    let mut p = base.to_path_buf();
    for c in Path::new(location).components() {
        if let Component::Normal(n) = c {
            p.push(n);
            if std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(format!(
                    "location '{location}' goes through a symbolic link, {}; onnx refuses data \
                     read through links: put the file itself beside the model",
                    p.display()
                ));
            }
        }
    }
    Ok(p)
}

/// External locations must stay inside the model's folder, as the ONNX checker demands.
fn check_location(location: &str) -> Result<(), String> {
    let p = Path::new(location);
    if location.is_empty()
        || p.is_absolute()
        || p.components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "location '{location}' must be a relative path inside the model's folder"
        ));
    }
    Ok(())
}

/// A weight's bytes: shared for in-memory weights, a slice of a fresh memory map for external
/// ones (so only the pages actually read are touched).
pub fn read_weight(w: &Weight) -> std::io::Result<Bytes> {
    match &w.data {
        WeightData::Bytes(b) => Ok(b.clone()),
        WeightData::External {
            path,
            offset,
            length,
        } => {
            let file = open_regular(path)?;
            let size = file.metadata()?.len();
            let len = checked_length(path, *offset, *length, (w.elem, &w.dims), size)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            if len == 0 {
                return Ok(Bytes::new());
            }
            // SAFETY: read-only map; see `io::map_file`.
            let map = unsafe { memmap2::Mmap::map(&file) }?;
            Ok(Bytes::from_owner(map).slice(*offset as usize..(*offset + len) as usize))
        }
        WeightData::Strings(_) | WeightData::Opaque => Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "this weight is not stored as plain bytes",
        )),
    }
}

/// Every external data location the model refers to.
pub(crate) fn external_locations(
    model: &ModelProto,
    model_path: &Path,
) -> Result<BTreeSet<String>, OnnxError> {
    let mut out = BTreeSet::new();
    let mut err = None;
    let mut visit = |t: &TensorProto| {
        if is_external(t) && err.is_none() {
            match external_ref(t, model_path) {
                Ok(r) => {
                    out.insert(r.location);
                }
                Err(e) => err = Some(e),
            }
        }
    };
    if let Some(g) = &model.graph {
        visit_graph(g, &mut visit);
    }
    for f in &model.functions {
        visit_nodes(&f.node, &mut visit);
    }
    match err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

fn visit_graph(g: &GraphProto, f: &mut impl FnMut(&TensorProto)) {
    g.initializer.iter().for_each(&mut *f);
    for s in &g.sparse_initializer {
        s.values.iter().chain(s.indices.iter()).for_each(&mut *f);
    }
    visit_nodes(&g.node, f);
}

fn visit_nodes(nodes: &[NodeProto], f: &mut impl FnMut(&TensorProto)) {
    for n in nodes {
        for a in &n.attribute {
            a.t.iter().chain(a.tensors.iter()).for_each(&mut *f);
            for g in a.g.iter().chain(a.graphs.iter()) {
                visit_graph(g, f);
            }
        }
    }
}

/// Makes the external files of a model loaded from `src_dir` available beside `out`.
pub(crate) fn carry_external_files(
    model: &ModelProto,
    src_dir: &Path,
    src_path: &Path,
    out: &Path,
) -> Result<(), OnnxError> {
    let locations = external_locations(model, src_path)?;
    if locations.is_empty() {
        return Ok(());
    }
    let out_dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let write_err = |path: &Path, source| OnnxError::Write {
        path: path.to_path_buf(),
        source,
    };
    for loc in locations {
        let src = resolve_location(src_dir, &loc).map_err(|reason| OnnxError::Read {
            path: src_dir.join(&loc),
            source: std::io::Error::other(reason),
        })?;
        let dst = out_dir.join(&loc);
        let src_real = src.canonicalize().map_err(|e| OnnxError::Read {
            path: src.clone(),
            source: e,
        })?;
        if dst.canonicalize().is_ok_and(|d| d == src_real) {
            continue;
        }
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent).map_err(|e| write_err(parent, e))?;
        }
        // A copy (copy_file_range: extents shared where the file system can), not a hard link:
        // onnx refuses data files with more than one link as a possible hard-link attack.
        copy_regular(&src_real, &dst)?;
    }
    Ok(())
}

/// `cleave_workdir::copy_atomic` from a regular file only (see [`open_regular`]); a source
/// that cannot be read is the source's error, not the output's.
pub(crate) fn copy_regular(src: &Path, dst: &Path) -> Result<(), OnnxError> {
    let mut from = open_regular(src).map_err(|e| OnnxError::Read {
        path: src.to_path_buf(),
        source: e,
    })?;
    cleave_workdir::write_with(dst, |f| std::io::copy(&mut from, f).map(|_| ())).map_err(|e| {
        OnnxError::Write {
            path: e.path,
            source: e.source,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::check_location;

    #[test]
    fn locations_must_stay_inside_the_model_folder() {
        assert!(check_location("weights.bin").is_ok());
        assert!(check_location("data/w.bin").is_ok());
        assert!(check_location("../w.bin").is_err());
        assert!(check_location("/etc/passwd").is_err());
        assert!(check_location("").is_err());
    }
}
