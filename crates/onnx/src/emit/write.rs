use std::path::{Path, PathBuf};

use cleave_files::{part_file_name, relative_path, ConnFile, ConnModel, Staged, WriteError};
use cleave_frontend::{Emitted, EmittedPart, ExternalData, SharedWeights};
use cleave_ir::phases::{counted, phase};
use cleave_ir::Model;
use cleave_partition::{Plan, ValidatedPlan};

use super::part::{part_model_with, SourceIndex};
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
    emit_limited(source, model, plan, workdir, external, PROTOBUF_LIMIT)
}

/// [`emit_with`] where an inline part may be at most `limit` bytes (protobuf's limit in
/// use; smaller in tests, which cannot afford 2 GB parts).
#[doc(hidden)]
pub fn emit_limited(
    source: &OnnxModel,
    model: &Model,
    plan: &ValidatedPlan,
    workdir: &Path,
    external: ExternalData,
    limit: usize,
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
            ..Default::default()
        },
        parts: Vec::new(),
    };
    let files: Vec<String> = plan
        .parts
        .iter()
        .enumerate()
        .map(|(k, part)| part_file_name(&stem, k, plan.device_name(part), "onnx"))
        .collect::<Result<_, _>>()
        .map_err(EmitError::Source)?;
    // Renaming a part into place replaces the directory entry of that name: only a source
    // model of that very name in this very folder would be lost.
    if source_real.parent() == Some(work_real.as_path()) {
        let source_name = source_real.file_name().map(|n| n.to_string_lossy());
        if let Some(file) = files
            .iter()
            .find(|f| Some(f.as_str()) == source_name.as_deref())
        {
            return Err(EmitError::Source(format!(
                "{file} would overwrite the source model; choose another WORKDIR"
            )));
        }
    }
    let weights_name = format!("{stem}.weights");
    let weights_path = workdir.join(&weights_name);
    let index = phase("source index", || SourceIndex::new(source))?;
    let mut notes = Vec::new();
    let mut weights = None;
    let mut inline = external == ExternalData::Inline;
    loop {
        if !inline {
            weights = phase("weights file", || {
                shared_weights_file(
                    source,
                    model,
                    plan,
                    &weights_path,
                    &staged.path(&weights_name),
                )
            })?;
        }
        let limit = inline.then_some(limit);
        let written = counted("build, encode and write parts", Some(files.len()), || {
            write_parts(
                &index,
                model,
                plan,
                weights.as_ref(),
                &staged,
                &files,
                limit,
            )
        })?;
        let Some((k, n)) = written else {
            break;
        };
        // A part too big for protobuf: start again with every part referencing one
        // weights file; what was staged goes with the old staging folder.
        notes.push(format!(
            "part {} would be {:.2} GB, more than protobuf's 2 GB limit: every part references {} instead (as with --external-data shared)",
            k + 1,
            n as f64 / 1e9,
            weights_path.display()
        ));
        staged.restart().map_err(from_write)?;
        inline = false;
    }
    let mut also_remove = Vec::new();
    match &weights {
        Some(w) if w.source != WeightsSource::Existing => staged.add(&weights_name),
        Some(_) => {}
        None if stale_weights(source, &weights_path, &source_real) => {
            also_remove.push(weights_name)
        }
        None => {}
    }
    for f in &files {
        staged.add(f);
    }

    let names = |vs: &[cleave_ir::ValueId]| vs.iter().map(|&v| g.value(v).name.clone()).collect();
    let mut summary = Vec::with_capacity(files.len());
    for (part, file) in plan.parts.iter().zip(files) {
        let backend = plan.device_name(part).to_string();
        conn.parts.push(ConnModel {
            file: file.clone(),
            inputs: names(&part.inputs),
            outputs: names(&part.outputs),
            engine: cleave_files::engine_of_backend(&backend),
            backend: Some(backend.clone()),
            ..Default::default()
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
    let files = phase("commit: rename into place, conn files", || {
        staged.commit_partition(&stem, "onnx", &conn, &source_real, &also_remove)
    })
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

/// Most threads that build and write parts at once.
const MAX_WRITERS: usize = 4;

/// Builds, encodes and stages every part as `files[k]`, on a few threads, each holding one
/// part at a time: memory stays that of a few parts, however many there are. With `limit`,
/// stops at a part whose encoding would be larger and returns it with its size.
fn write_parts(
    index: &SourceIndex,
    model: &Model,
    plan: &Plan,
    shared: Option<&WeightsFile>,
    staged: &Staged,
    files: &[String],
    limit: Option<usize>,
) -> Result<Option<(usize, usize)>, EmitError> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let one = |k: usize| -> Result<Option<(usize, usize)>, EmitError> {
        let proto = part_model_with(index, model, plan, k, shared)?;
        let n = encoded_len(&proto);
        if limit.is_some_and(|l| n > l) {
            return Ok(Some((k, n)));
        }
        staged
            .write_file(&files[k], &encode_model(&proto))
            .map_err(from_write)?;
        Ok(None)
    };
    // Each worker takes the next part until all are done or one has stopped them all; the
    // lowest part that stopped is the one reported, so the outcome never depends on timing.
    let work = || -> Result<Option<(usize, usize)>, (usize, EmitError)> {
        let mut found = None;
        while !stop.load(Ordering::Relaxed) {
            let k = next.fetch_add(1, Ordering::Relaxed);
            if k >= files.len() {
                break;
            }
            match one(k) {
                Ok(None) => {}
                Ok(Some(big)) => {
                    stop.store(true, Ordering::Relaxed);
                    found = Some(big);
                }
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    return Err((k, e));
                }
            }
        }
        Ok(found)
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_WRITERS)
        .min(files.len().max(1));
    let results: Vec<_> = std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
        let mut results = vec![work()];
        for h in helpers {
            results.push(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        results
    });
    let mut first_err: Option<(usize, EmitError)> = None;
    let mut big: Option<(usize, usize)> = None;
    for r in results {
        match r {
            Ok(Some(b)) if big.is_none_or(|c| b.0 < c.0) => big = Some(b),
            Ok(_) => {}
            Err(e) if first_err.as_ref().is_none_or(|f| e.0 < f.0) => first_err = Some(e),
            Err(_) => {}
        }
    }
    match first_err {
        Some((_, e)) => Err(e),
        None => Ok(big),
    }
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

/// The weights file every part references: the source's initializers that some part reads.
fn shared_weights_file(
    source: &OnnxModel,
    model: &Model,
    plan: &Plan,
    weights_path: &Path,
    write_to: &Path,
) -> Result<Option<WeightsFile>, EmitError> {
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
    Ok(write_weights_file_to(
        source,
        &tensors,
        weights_path,
        write_to,
        MIN_EXTERNAL_BYTES,
    )?)
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
