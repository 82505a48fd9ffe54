use std::path::Path;

use cleave_frontend::{
    write_partition, Emitted, Encoded, ExternalData, FrontendError, PartEncoder, PartRecord,
    SharedWeights, SideFiles,
};
use cleave_ir::phases::phase;
use cleave_ir::Model;
use cleave_partition::{Plan, ValidatedPlan};
use cleave_workdir::Staged;

use super::error::EmitError;
use super::part::{part_model_with, SourceIndex};
use crate::{write_weights_file_to, OnnxModel, WeightsFile, WeightsSource, MIN_EXTERNAL_BYTES};

/// Protobuf refuses to encode a message of 2 GiB or more.
pub(crate) const PROTOBUF_LIMIT: usize = i32::MAX as usize;

/// Writes every part and the connection files into `workdir` (see
/// [`cleave_frontend::write_partition`]) with the weights held as `external` says, where an
/// inline part may be at most `limit` bytes (protobuf's limit in use; smaller in tests, which
/// cannot afford 2 GB parts), with what `record` fills in of each part (the facade records the engine registry's
/// answer, as `openvino:GPU` for `ov-GPU`, and each pipeline stage's memory).
#[doc(hidden)]
pub fn emit_limited(
    source: &OnnxModel,
    model: &Model,
    plan: &ValidatedPlan,
    workdir: &Path,
    external: ExternalData,
    limit: usize,
    record: PartRecord<'_>,
) -> Result<Emitted, FrontendError> {
    let index = phase("source index", || SourceIndex::new(source))
        .map_err(|e| from_emit(e, &source.path))?;
    let mut encoder = OnnxParts {
        source,
        model,
        index,
        weights: None,
        limit: Some(limit),
    };
    write_partition(
        &mut encoder,
        &source.path,
        model,
        plan,
        workdir,
        external,
        record,
    )
}

/// Encodes ONNX parts: each a standalone model built from the source's own records.
struct OnnxParts<'a> {
    source: &'a OnnxModel,
    model: &'a Model,
    index: SourceIndex<'a>,
    /// The weights file every part references, in a shared attempt.
    weights: Option<WeightsFile>,
    /// The largest inline part, in an inline attempt.
    limit: Option<usize>,
}

impl PartEncoder for OnnxParts<'_> {
    fn extension(&self) -> &'static str {
        "onnx"
    }

    fn begin(
        &mut self,
        plan: &ValidatedPlan,
        external: ExternalData,
        weights_name: &str,
        staged: &Staged,
    ) -> Result<SideFiles, FrontendError> {
        let weights_path = staged.workdir().join(weights_name);
        if external == ExternalData::Inline {
            self.weights = None;
            let remove = stale_weights(self.source, &weights_path)
                .then(|| weights_name.to_string())
                .into_iter()
                .collect();
            return Ok(SideFiles {
                remove,
                ..Default::default()
            });
        }
        self.limit = None;
        let weights = phase("weights file", || {
            shared_weights_file(
                self.source,
                self.model,
                plan,
                &weights_path,
                &staged.path(weights_name),
            )
        })
        .map_err(|e| from_emit(e, &self.source.path))?;
        let side = SideFiles {
            staged: weights
                .as_ref()
                .is_some_and(|w| w.source != WeightsSource::Existing)
                .then(|| weights_name.to_string()),
            weights: weights.as_ref().map(shared_weights),
            remove: Vec::new(),
        };
        self.weights = weights;
        Ok(side)
    }

    fn encode(&self, plan: &ValidatedPlan, k: usize) -> Result<Encoded, FrontendError> {
        let part = part_model_with(&self.index, self.model, plan, k, self.weights.as_ref())
            .map_err(|e| from_emit(e, &self.source.path))?;
        let n = part.encoded_len();
        if self.limit.is_some_and(|l| n > l) {
            return Ok(Encoded::NeedsSharedWeights {
                note: format!(
                    "part {} would be {:.2} GB, more than protobuf's 2 GB limit",
                    k + 1,
                    n as f64 / 1e9,
                ),
            });
        }
        Ok(Encoded::Part {
            bytes: part.encode(),
            note: None,
        })
    }
}

/// An ONNX writing error as a front-end's: about its own file, or else the source `model`.
pub(crate) fn from_emit(e: EmitError, model: &Path) -> FrontendError {
    let path = e.path().unwrap_or(model).to_path_buf();
    FrontendError::new(path, e)
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
        .without_nodes()
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
fn stale_weights(source: &OnnxModel, weights_path: &Path) -> bool {
    let Ok(real) = weights_path.canonicalize() else {
        return false;
    };
    let source_real = source.path.canonicalize().ok();
    let source_reads = Some(&real) == source_real.as_ref()
        || source
            .data_files()
            .iter()
            .any(|f| f.canonicalize().is_ok_and(|f| f == real));
    !source_reads && real.is_file()
}
