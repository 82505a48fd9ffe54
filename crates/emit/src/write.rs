use std::path::{Component, Path, PathBuf};

use cleave_ir::Model;
use cleave_onnx::proto::ModelProto;
use cleave_onnx::{
    encode_model, encoded_len, write_atomic, write_weights_file, OnnxError, OnnxModel, WeightsFile,
    MIN_EXTERNAL_BYTES,
};
use cleave_partition::Plan;

use crate::conn::{ConnFile, ConnModel};
use crate::onnx_part::{part_model_with, SourceIndex};

/// How parts hold their weights.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExternalData {
    /// Each part holds the bytes of the weights it uses, the source's external ones read in;
    /// a part that protobuf could not hold (2 GB) switches the partition to `Shared`.
    #[default]
    Inline,
    /// Every part references one file, `WORKDIR/stem.weights`, by offset and length: a hard
    /// link to the source's data file where possible, else one streamed copy.
    Shared,
}

/// Protobuf refuses to encode a message of 2 GiB or more.
const PROTOBUF_LIMIT: usize = i32::MAX as usize;

#[derive(Debug, thiserror::Error)]
pub enum EmitError {
    #[error("cannot write: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("part {part}: boundary tensor '{tensor}' has no complete type ({ty}); declare it in the model's value_info")]
    Untyped {
        part: usize,
        tensor: String,
        ty: String,
    },
    #[error("{0}")]
    Source(String),
}

impl EmitError {
    /// The file the error concerns, where there is one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            EmitError::Write { path, .. } => Some(path),
            _ => None,
        }
    }
}

impl From<OnnxError> for EmitError {
    fn from(e: OnnxError) -> Self {
        match e {
            OnnxError::Write { path, source } => EmitError::Write { path, source },
            other => EmitError::Source(format!("{}: {other}", other.path().display())),
        }
    }
}

/// What was written, for the summary.
#[derive(Clone, Debug)]
pub struct EmittedPart {
    pub file: String,
    pub backend: String,
    pub nodes: usize,
    pub constant_nodes: usize,
    /// Boundary tensors with their bytes where the shape is static.
    pub inputs: Vec<(String, Option<u64>)>,
    pub outputs: Vec<(String, Option<u64>)>,
}

#[derive(Clone, Debug)]
pub struct Emitted {
    pub conn_json: PathBuf,
    pub conn_ini: PathBuf,
    pub conn: ConnFile,
    pub parts: Vec<EmittedPart>,
    /// The weights file the parts share, when they do.
    pub weights: Option<WeightsFile>,
    /// What the user should know, e.g. why inline weights became shared.
    pub notes: Vec<String>,
}

/// `stem.00001_<backend>.onnx`
pub fn part_file_name(stem: &str, k: usize, backend: &str) -> String {
    format!("{stem}.{:05}_{backend}.onnx", k + 1)
}

/// Writes every part and the connection files into `workdir` (created if missing). Earlier
/// part files of the same stem that this plan does not produce are removed; nothing else in
/// `workdir`, and never the source model, is touched. Weights are inline.
pub fn emit(
    source: &OnnxModel,
    model: &Model,
    plan: &Plan,
    workdir: &Path,
) -> Result<Emitted, EmitError> {
    emit_with(source, model, plan, workdir, ExternalData::Inline)
}

/// [`emit`] with the weights held as `external` says.
pub fn emit_with(
    source: &OnnxModel,
    model: &Model,
    plan: &Plan,
    workdir: &Path,
    external: ExternalData,
) -> Result<Emitted, EmitError> {
    let write_err = |path: &Path, source| EmitError::Write {
        path: path.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(workdir).map_err(|e| write_err(workdir, e))?;
    let work_real = workdir.canonicalize().map_err(|e| write_err(workdir, e))?;
    let source_real = source
        .path
        .canonicalize()
        .map_err(|e| EmitError::Source(format!("{}: {e}", source.path.display())))?;
    let stem = source
        .path
        .file_stem()
        .map_or_else(|| "model".to_string(), |s| s.to_string_lossy().into_owned());
    let g = &model.graph;
    let bytes = |v: cleave_ir::ValueId| (g.value(v).name.clone(), g.value(v).ty.byte_size());

    let mut conn = ConnFile {
        source: ConnModel {
            file: relative(&work_real, &source_real),
            inputs: g.inputs.iter().map(|&v| g.value(v).name.clone()).collect(),
            outputs: g.outputs.iter().map(|&v| g.value(v).name.clone()).collect(),
            backend: None,
        },
        parts: Vec::new(),
    };
    for (k, part) in plan.parts.iter().enumerate() {
        let file = part_file_name(&stem, k, plan.device_name(part));
        if workdir
            .join(&file)
            .canonicalize()
            .is_ok_and(|p| p == source_real)
        {
            return Err(EmitError::Source(format!(
                "{file} would overwrite the source model; choose another WORKDIR"
            )));
        }
    }
    let weights_path = workdir.join(format!("{stem}.weights"));
    let (protos, weights, notes) = part_models(source, model, plan, external, &weights_path)?;
    if weights.is_none() {
        remove_stale_weights(source, &weights_path, &source_real);
    }

    let mut written = Vec::new();
    let mut summary = Vec::new();
    for ((k, part), proto) in plan.parts.iter().enumerate().zip(protos) {
        let backend = plan.device_name(part).to_string();
        let file = part_file_name(&stem, k, &backend);
        let path = workdir.join(&file);
        write_atomic(&path, &encode_model(&proto))?;
        written.push(file.clone());
        conn.parts.push(ConnModel {
            file: file.clone(),
            inputs: part
                .inputs
                .iter()
                .map(|&v| g.value(v).name.clone())
                .collect(),
            outputs: part
                .outputs
                .iter()
                .map(|&v| g.value(v).name.clone())
                .collect(),
            backend: Some(backend.clone()),
        });
        summary.push(EmittedPart {
            file,
            backend,
            nodes: part.nodes.len(),
            constant_nodes: part.constant_nodes.len(),
            inputs: part.inputs.iter().map(|&v| bytes(v)).collect(),
            outputs: part.outputs.iter().map(|&v| bytes(v)).collect(),
        });
    }
    let conn_json = workdir.join(format!("{stem}.conn.json"));
    let conn_ini = workdir.join(format!("{stem}.conn.ini"));
    write_atomic(&conn_json, conn.to_json().as_bytes())?;
    write_atomic(&conn_ini, conn.to_ini().as_bytes())?;
    remove_stale_parts(workdir, &stem, &written, &source_real);
    Ok(Emitted {
        conn_json,
        conn_ini,
        conn,
        parts: summary,
        weights,
        notes,
    })
}

type PartModels = (Vec<ModelProto>, Option<WeightsFile>, Vec<String>);

/// Every part's model, and the weights file they share if they share one. Part models hold
/// slices of the source, not copies, so building them all before writing costs little.
fn part_models(
    source: &OnnxModel,
    model: &Model,
    plan: &Plan,
    external: ExternalData,
    weights_path: &Path,
) -> Result<PartModels, EmitError> {
    let index = SourceIndex::new(source)?;
    let build = |shared: Option<&WeightsFile>| {
        (0..plan.parts.len())
            .map(|k| part_model_with(&index, model, plan, k, shared))
            .collect::<Result<Vec<_>, _>>()
    };
    let mut notes = Vec::new();
    if external == ExternalData::Inline {
        let protos = build(None)?;
        let too_big = protos
            .iter()
            .enumerate()
            .map(|(k, p)| (k, encoded_len(p)))
            .find(|&(_, n)| n > PROTOBUF_LIMIT);
        let Some((k, n)) = too_big else {
            return Ok((protos, None, notes));
        };
        notes.push(format!(
            "part {} would be {:.2} GB, more than protobuf's 2 GB limit: every part references {} instead (as with --external-data shared)",
            k + 1,
            n as f64 / 1e9,
            weights_path.display()
        ));
    }
    let g = &model.graph;
    let used: std::collections::HashSet<&str> = plan
        .parts
        .iter()
        .flat_map(|p| p.weights.iter().map(|&w| g.value(w).name.as_str()))
        .collect();
    let sg = source
        .proto
        .graph
        .as_ref()
        .ok_or_else(|| EmitError::Source("the source model has no graph".into()))?;
    let tensors: Vec<_> = sg
        .initializer
        .iter()
        .filter(|t| used.contains(t.name()))
        .collect();
    let weights = write_weights_file(source, &tensors, weights_path, MIN_EXTERNAL_BYTES)?;
    Ok((build(weights.as_ref())?, weights, notes))
}

/// A weights file of an earlier shared run that the new inline parts no longer read (unless
/// the source itself reads it).
fn remove_stale_weights(source: &OnnxModel, weights_path: &Path, source_real: &Path) {
    let Ok(real) = weights_path.canonicalize() else {
        return;
    };
    let source_reads = real == source_real
        || source
            .data_files()
            .iter()
            .any(|f| f.canonicalize().is_ok_and(|f| f == real));
    if !source_reads {
        let _ = std::fs::remove_file(weights_path);
    }
}

/// Part files of an earlier run (same stem, more parts or other backends) would contradict
/// the new connection files.
fn remove_stale_parts(workdir: &Path, stem: &str, keep: &[String], source: &Path) {
    let Ok(entries) = std::fs::read_dir(workdir) else {
        return;
    };
    let keep: std::collections::HashSet<&str> = keep.iter().map(String::as_str).collect();
    let prefix = format!("{stem}.");
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(&prefix) else {
            continue;
        };
        let is_part = rest.len() > 6
            && rest.as_bytes()[..5].iter().all(u8::is_ascii_digit)
            && rest.as_bytes()[5] == b'_'
            && rest.ends_with(".onnx");
        if is_part
            && !keep.contains(name.as_str())
            && !e.path().canonicalize().is_ok_and(|p| p == source)
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// `to` relative to the folder `from` (both absolute), with `../` as needed.
fn relative(from: &Path, to: &Path) -> String {
    let a: Vec<Component> = from.components().collect();
    let b: Vec<Component> = to.components().collect();
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut out = PathBuf::new();
    for _ in common..a.len() {
        out.push("..");
    }
    for c in &b[common..] {
        out.push(c.as_os_str());
    }
    out.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::relative;
    use std::path::Path;

    #[test]
    fn relative_paths_climb_with_dot_dot() {
        assert_eq!(
            relative(Path::new("/a/b/work"), Path::new("/a/b/m.onnx")),
            "../m.onnx"
        );
        assert_eq!(
            relative(Path::new("/a/b"), Path::new("/a/b/m.onnx")),
            "m.onnx"
        );
        assert_eq!(
            relative(Path::new("/x/y"), Path::new("/a/m.onnx")),
            "../../a/m.onnx"
        );
    }
}
