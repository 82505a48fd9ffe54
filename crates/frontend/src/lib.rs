//! What a model format implements to plug into cleave.
//!
//! A [`Frontend`] recognises its files and loads one into a [`FormatModel`]: the typed
//! [`cleave_ir::Model`] with a [`cleave_ir::SourceRef`] on every node back to its record in the
//! file, the operator semantics the neutral stages ask ([`cleave_ir::OpSemantics`]), the
//! format's own rewrites, and writing the parts of a [`ValidatedPlan`] in the same format.
//! Everything between loading and writing (assignment, fusion groups, partitioning,
//! validation, views, the runner) works on the IR alone.
//!
//! Architecture invariant: this crate, like every crate it depends on, knows no model format.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

pub use cleave_ir::words::Message;

use cleave_device::Profiles;
use cleave_ir::{ElemType, Model, OpSemantics, TensorType, ValueId};
use cleave_partition::ValidatedPlan;
use cleave_workdir::{ConnFile, ConnModel};

mod write;

pub use write::{write_partition, Encoded, PartEncoder, SideFiles};

/// What kind of failure a [`FrontendError`] is; the facade keeps it, so a library or Python
/// caller can tell a bad file from an unsupported feature from an I/O failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The file is not a valid model of its format.
    InvalidModel,
    /// A valid model asking for what this front-end does not do (yet).
    Unsupported,
    /// A file could not be read or written.
    Io,
}

/// The node an error is about: its label and operator type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRef {
    pub name: String,
    pub op: String,
}

/// A failure in a format's code: the file it concerns, its kind, the node at fault where
/// there is one, and the cause on one line.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct FrontendError {
    pub path: PathBuf,
    pub kind: ErrorKind,
    pub node: Option<NodeRef>,
    /// The cause; it names a request's arguments by kind ([`Message`]).
    pub message: Message,
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl FrontendError {
    /// The model at `path` is invalid.
    pub fn new(path: impl Into<PathBuf>, message: impl ToString) -> FrontendError {
        FrontendError {
            path: path.into(),
            kind: ErrorKind::InvalidModel,
            node: None,
            message: Message::text(message.to_string()),
            source: None,
        }
    }

    /// The model at `path` does not take what the request asks (a `--shape` it cannot have),
    /// in words that name the request's arguments by kind.
    pub fn asked(path: impl Into<PathBuf>, message: Message) -> FrontendError {
        FrontendError {
            path: path.into(),
            kind: ErrorKind::InvalidModel,
            node: None,
            message,
            source: None,
        }
    }

    /// The model at `path` asks for what this front-end does not do.
    pub fn unsupported(path: impl Into<PathBuf>, message: impl ToString) -> FrontendError {
        FrontendError {
            kind: ErrorKind::Unsupported,
            ..FrontendError::new(path, message)
        }
    }

    /// Reading or writing `path` failed with `source`; `message` is the whole cause.
    pub fn io(
        path: impl Into<PathBuf>,
        message: impl ToString,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> FrontendError {
        FrontendError {
            kind: ErrorKind::Io,
            source: Some(Box::new(source)),
            ..FrontendError::new(path, message)
        }
    }

    /// The same error, about node `name` of type `op`.
    pub fn at_node(self, name: impl Into<String>, op: impl Into<String>) -> FrontendError {
        FrontendError {
            node: Some(NodeRef {
                name: name.into(),
                op: op.into(),
            }),
            ..self
        }
    }
}

/// A model format.
pub trait Frontend: Sync {
    /// The format's name, e.g. `onnx`.
    fn name(&self) -> &'static str;

    /// Whether this front-end reads `path` (by extension or by its first bytes).
    fn accepts(&self, path: &Path) -> bool;

    /// Loads, checks and types a model.
    fn load(&self, path: &Path) -> Result<Box<dyn FormatModel>, FrontendError>;
}

/// How hard to rewrite a model before partitioning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RewriteLevel {
    /// Device-independent clean-ups, as onnxruntime's basic level: constant folding, no-op
    /// removal, normalisation folded into the preceding convolution.
    Basic,
    /// Basic, plus the rewrites the devices' profiles enable (`[fuse] rules`).
    Device,
}

pub struct RewriteOptions<'a> {
    pub level: RewriteLevel,
    /// Devices in priority order: a device rewrite applies to a node when the first device
    /// that runs the node enables the rule.
    pub devices: Vec<String>,
    pub profiles: &'a Profiles,
    /// The engine that computes constant subgraphs at the basic level. Without one, only
    /// what the front-end evaluates itself (Constant, layout ops on weights) is folded.
    pub evaluator: Option<&'a dyn Evaluator>,
    /// The most bytes of folded tensors one rewrite may add; a constant whose value would pass
    /// it stays a node, so folding never holds more than this in memory.
    pub fold_limit: u64,
}

/// The default [`RewriteOptions::fold_limit`]: 2 GiB, past the largest weight of common
/// vision models (vgg19's 411 MB fc6) while bounded on a small machine.
pub const DEFAULT_FOLD_LIMIT: u64 = 2 << 30;

/// Runs a model that has no inputs on a real inference engine. Front-ends fold constants
/// with it, so a folded value is what an engine computes, not a second implementation of
/// every operator; the facade supplies one from the engines it links.
pub trait Evaluator: Sync {
    /// Runs `model`, a file in the source's format with no graph inputs, once and returns
    /// every graph output; `Err` is one line saying why it could not.
    fn evaluate(&self, model: &Path) -> Result<Vec<Computed>, String>;
}

/// One tensor an [`Evaluator`] computed: little-endian element bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Computed {
    pub name: String,
    pub elem: ElemType,
    pub dims: Vec<usize>,
    pub data: Vec<u8>,
}

/// A model rewritten by its front-end.
pub struct Rewritten {
    pub source: Box<dyn FormatModel>,
    /// How many times each rewrite applied, by name.
    pub applied: BTreeMap<&'static str, usize>,
    /// For each node label of the new model that differs from the source, the source node
    /// labels it stands for (OpenVINO's `originalLayersNames`).
    pub origins: HashMap<String, Vec<String>>,
    /// Matches a rewrite declined, and why.
    pub notes: Vec<String>,
}

/// Dims to fix before anything else looks at the model, as ONNX Runtime's
/// `make_dynamic_shape_fixed` does: a whole input shape by input name, or every dim of a
/// symbolic name. Fixed dims reach inference, the devices' static-shape checks and the parts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FixedDims {
    /// `--shape NAME=d1,d2,...`: an input's whole shape.
    pub shapes: Vec<(String, Vec<i64>)>,
    /// `--dim PARAM=value`: every dim named PARAM, wherever it is declared.
    pub dims: Vec<(String, i64)>,
}

impl FixedDims {
    pub fn is_empty(&self) -> bool {
        self.shapes.is_empty() && self.dims.is_empty()
    }
}

/// How parts hold their weights.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExternalData {
    /// Each part holds the bytes of the weights it uses; a format may switch to `Shared` when
    /// a part would pass its size limit (and says so in a note).
    #[default]
    Inline,
    /// Every part references one file, `WORKDIR/stem.weights`, by offset and length.
    Shared,
}

/// What the connection file records of part `k` on `backend` that a front-end does not know,
/// filled in by the caller before the commit: the engine the backend's name calls for
/// (`openvino:GPU` for `ov-GPU`, from the engine registry) and, for pipeline stages, the
/// memory each stage holds.
pub type PartRecord<'a> = &'a dyn Fn(usize, &str, &mut ConnModel);

/// Records nothing: each part's engine is then chosen from its backend and format when it
/// runs.
pub const NO_RECORD: PartRecord<'static> = &|_, _, _| {};

/// One written part, for the summary.
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

/// The weights file parts share.
#[derive(Clone, Debug)]
pub struct SharedWeights {
    pub path: PathBuf,
    pub tensors: usize,
    pub bytes: u64,
    /// How the file came to be, for the summary.
    pub how: &'static str,
}

/// What writing a partition produced.
#[derive(Clone, Debug)]
pub struct Emitted {
    pub conn_json: PathBuf,
    pub conn_ini: PathBuf,
    pub conn: ConnFile,
    pub parts: Vec<EmittedPart>,
    pub weights: Option<SharedWeights>,
    /// What the user should know, e.g. why inline weights became shared.
    pub notes: Vec<String>,
}

/// What type inference left open, for `inspect`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TypeReport {
    /// Top-level tensors whose element type or rank is unknown.
    pub untyped: Vec<String>,
    /// Op types without an inference rule that left tensors untyped.
    pub unknown_ops: Vec<String>,
}

/// A loaded model in its format.
pub trait FormatModel: Send + Sync {
    /// The file it was loaded from (or last saved to).
    fn path(&self) -> &Path;

    /// Part files' extension, without the dot.
    fn extension(&self) -> &'static str;

    /// The typed IR; every node's `source` is set.
    fn model(&self) -> &Model;

    /// The typed IR, to record what the user declares of it (its state pairs).
    fn model_mut(&mut self) -> &mut Model;

    /// The operator semantics of this format.
    fn semantics(&self) -> &dyn OpSemantics;

    /// What the model's types leave open. By default the untyped top-level tensors alone: a
    /// format that types every tensor in the file has no inference to report on.
    fn type_report(&self) -> TypeReport {
        let g = &self.model().graph;
        TypeReport {
            untyped: g
                .values
                .iter()
                .filter(|v| !v.ty.is_complete())
                .map(|v| v.name.to_string())
                .collect(),
            unknown_ops: Vec::new(),
        }
    }

    /// A copy to change apart from this one (weights are shared, not copied).
    fn clone_boxed(&self) -> Box<dyn FormatModel>;

    /// The format's rewrites at `opts.level`; the source itself is not changed.
    fn rewrite(&self, opts: &RewriteOptions) -> Result<Rewritten, FrontendError>;

    /// The model with `fixed` dims set in its inputs (and wherever their symbols are
    /// declared), typed again; the source itself is not changed.
    fn fix_dims(&self, fixed: &FixedDims) -> Result<Box<dyn FormatModel>, FrontendError>;

    /// Writes the model to `path` and makes that its path from then on.
    fn save_as(&mut self, path: &Path) -> Result<(), FrontendError>;

    /// Writes every part of `plan` and the connection files into `workdir`; `record` fills in
    /// what the connection file says of each part beyond its files and tensors.
    fn write_parts(
        &self,
        plan: &ValidatedPlan,
        workdir: &Path,
        external: ExternalData,
        record: PartRecord<'_>,
    ) -> Result<Emitted, FrontendError>;

    /// Writes a copy of the model to `path` whose outputs also include `extra` (to compare
    /// boundary tensors against the whole model).
    fn write_with_outputs(&self, extra: &[ValueId], path: &Path) -> Result<(), FrontendError>;

    /// Writes, in this format, a model whose one node passes a tensor of `elem` and `dims`
    /// through unchanged: what a profiler times to learn an engine's per-call and copy costs.
    fn write_probe(&self, elem: ElemType, dims: &[i64], path: &Path) -> Result<(), FrontendError>;

    /// What Google's Model Explorer draws in the main graph for each node record when it opens
    /// the source file: `ids[i]` for `SourceRef(i)`, the (id, op) of each node it draws for that
    /// record (ids key its node-data overlays). Empty when this format's ids are not known.
    fn explorer_ids(&self) -> Vec<Vec<(String, String)>> {
        Vec::new()
    }

    /// The tensors a `--learn-dims` run shows: by default those computed by a node whose
    /// element type or rank is unknown.
    fn to_learn(&self) -> Vec<ValueId> {
        let g = &self.model().graph;
        (0..g.values.len())
            .map(|i| ValueId(i as u32))
            .filter(|&v| {
                let value = g.value(v);
                matches!(value.def, cleave_ir::ValueDef::Node(..)) && !value.ty.is_complete()
            })
            .collect()
    }

    /// The shape a run gives input `v` where the model leaves its dims open: the placeholder
    /// a format writes beside a dynamic dim (TFLite's `shape`), if it has one.
    fn placeholder_shape(&self, v: ValueId) -> Option<Vec<i64>> {
        let _ = v;
        None
    }

    /// Whether the dims this format leaves open are found by one run of the model unasked,
    /// where cleave has no shape inference of its own for them (TFLite).
    fn learns_dims_by_default(&self) -> bool {
        false
    }

    /// The tensors of [`FormatModel::to_learn`] typed with the dims an engine showed for
    /// every tensor, in the file's tensor order (`Engine::tensor_dims`); empty for a format
    /// whose tensors have no such order.
    fn types_from_tensor_dims(&self, dims: &[Option<Vec<i64>>]) -> Vec<(ValueId, TensorType)> {
        let _ = dims;
        Vec::new()
    }

    /// Fills in what the model leaves unknown of these tensors' types with what a run of it
    /// showed (`--learn-dims`); a type the file or inference gives is kept.
    fn learn_types(&mut self, learned: &[(ValueId, TensorType)]) -> Result<(), FrontendError> {
        let _ = learned;
        Err(FrontendError::unsupported(
            self.path(),
            "learning tensor types from a run is for ONNX models; a TFLite file types every tensor",
        ))
    }
}
