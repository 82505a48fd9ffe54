use std::path::{Path, PathBuf};

use cleave_files::{part_file_name, relative_path, ConnFile, ConnModel, Staged, WriteError};
use cleave_frontend::{Emitted, EmittedPart, ExternalData, SharedWeights};
use cleave_ir::Model;
use cleave_partition::{Plan, ValidatedPlan};

use super::part::{part_model_with, SourceIndex};
use crate::proto::ModelProto;
use crate::{
    encode_model, encoded_len, write_weights_file_to, OnnxError, OnnxModel, WeightsFile,
    WeightsSource, MIN_EXTERNAL_BYTES,
};

/// Protobuf refuses to encode a message of 2 GiB or more.
const PROTOBUF_LIMIT: usize = i32::MAX as usize;

#[derive(Debug, thiserror::Error)]
pub enum EmitError {
    #[error("cannot write: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("part {part}: boundary tensor '{tensor}' has no element type or rank ({ty}): {origin}; declare it in the model's value_info")]
    Untyped {
        part: usize,
        tensor: String,
        ty: String,
        /// Where the unknown starts: the first node upstream whose inputs are all typed.
        origin: String,
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

/// Writes every part and the connection files into `workdir` (created if missing), all or
/// nothing (see [`Staged`]). Earlier part files of the same stem that this plan does not
/// produce are removed; nothing else in `workdir`, and never the source model, is touched.
/// Weights are inline.
pub fn emit(
    source: &OnnxModel,
    model: &Model,
    plan: &ValidatedPlan,
    workdir: &Path,
) -> Result<Emitted, EmitError> {
    emit_with(source, model, plan, workdir, ExternalData::Inline)
}

/// [`emit`] with the weights held as `external` says.
pub fn emit_with(
    source: &OnnxModel,
    model: &Model,
    plan: &ValidatedPlan,
    workdir: &Path,
    external: ExternalData,
) -> Result<Emitted, EmitError> {
    let write_err = |path: &Path, source| EmitError::Write {
        path: path.to_path_buf(),
        source,
    };
    let mut staged = Staged::new(workdir).map_err(from_write)?;
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
            file: relative_path(&work_real, &source_real),
            inputs: g.inputs.iter().map(|&v| g.value(v).name.clone()).collect(),
            outputs: g.outputs.iter().map(|&v| g.value(v).name.clone()).collect(),
            backend: None,
            engine: None,
        },
        parts: Vec::new(),
    };
    for (k, part) in plan.parts.iter().enumerate() {
        let file =
            part_file_name(&stem, k, plan.device_name(part), "onnx").map_err(EmitError::Source)?;
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
    let weights_name = format!("{stem}.weights");
    let weights_path = workdir.join(&weights_name);
    let (protos, weights, notes) = part_models(
        source,
        model,
        plan,
        external,
        (&weights_path, &staged.path(&weights_name)),
    )?;
    let mut also_remove = Vec::new();
    match &weights {
        Some(w) if w.source != WeightsSource::Existing => staged.add(&weights_name),
        Some(_) => {}
        None if stale_weights(source, &weights_path, &source_real) => {
            also_remove.push(weights_name)
        }
        None => {}
    }

    let mut summary = Vec::new();
    for ((k, part), proto) in plan.parts.iter().enumerate().zip(protos) {
        let backend = plan.device_name(part).to_string();
        let file = part_file_name(&stem, k, &backend, "onnx").map_err(EmitError::Source)?;
        staged
            .write(&file, &encode_model(&proto))
            .map_err(from_write)?;
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
            engine: cleave_files::engine_of_backend(&backend),
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
    let files = staged
        .commit_partition(&stem, "onnx", &conn, &source_real, &also_remove)
        .map_err(from_write)?;
    Ok(Emitted {
        conn_json: files.json,
        conn_ini: files.ini,
        conn,
        parts: summary,
        weights: weights.map(|w| shared_weights(&w)),
        notes,
    })
}

fn from_write(e: WriteError) -> EmitError {
    EmitError::Write {
        path: e.path,
        source: e.source,
    }
}

fn shared_weights(w: &WeightsFile) -> SharedWeights {
    SharedWeights {
        path: w.path.clone(),
        tensors: w.tensors(),
        bytes: w.tensor_bytes,
        how: match w.source {
            WeightsSource::WholeFile => "a copy of the source's data file, offsets kept",
            WeightsSource::Existing => "the source's own data file",
            WeightsSource::Copied => "streamed from the source",
        },
    }
}

type PartModels = (Vec<ModelProto>, Option<WeightsFile>, Vec<String>);

/// Every part's model, and the weights file they share if they share one. Part models hold
/// slices of the source, not copies, so building them all before writing costs little.
fn part_models(
    source: &OnnxModel,
    model: &Model,
    plan: &Plan,
    external: ExternalData,
    (weights_path, write_to): (&Path, &Path),
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
    let weights =
        write_weights_file_to(source, &tensors, weights_path, write_to, MIN_EXTERNAL_BYTES)?;
    Ok((build(weights.as_ref())?, weights, notes))
}

/// Whether the weights file of an earlier shared run is there and the new inline parts no
/// longer read it (nor does the source itself).
fn stale_weights(source: &OnnxModel, weights_path: &Path, source_real: &Path) -> bool {
    let Ok(real) = weights_path.canonicalize() else {
        return false;
    };
    let source_reads = real == source_real
        || source
            .data_files()
            .iter()
            .any(|f| f.canonicalize().is_ok_and(|f| f == real));
    !source_reads && real.is_file()
}
