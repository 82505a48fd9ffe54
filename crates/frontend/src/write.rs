//! Writing a plan's parts, the half that is the same for every format: the output folder,
//! staging and the all-or-nothing commit, part names, the refusal to overwrite the source,
//! the connection files, removal of an earlier run's parts, a bounded pool of writer threads
//! and the summary. A format only encodes one part ([`PartEncoder`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use cleave_ir::phases::{counted, phase};
use cleave_ir::{Dim, Model, ValueId};
use cleave_partition::ValidatedPlan;
use cleave_workdir::{
    part_file_name, relative_path, ConnDim, ConnFile, ConnModel, Staged, WriteError,
};

use crate::{Emitted, EmittedPart, ExternalData, FrontendError, PartRecord, SharedWeights};

/// One part encoded in its format.
pub enum Encoded {
    /// The part file's bytes, and what the user should know about this part.
    Part {
        bytes: Vec<u8>,
        note: Option<String>,
    },
    /// The part cannot hold its weights inline (a format's size limit, said in `note`): the
    /// writer starts again with every part referencing one shared weights file.
    NeedsSharedWeights { note: String },
}

/// What one attempt at writing stages beside the parts.
#[derive(Default)]
pub struct SideFiles {
    /// A file written at [`Staged::path`] that moves into place with the parts.
    pub staged: Option<String>,
    /// The weights file the parts reference, for the summary.
    pub weights: Option<SharedWeights>,
    /// Files of an earlier run that this one makes stale (the parts are found by name).
    pub remove: Vec<String>,
}

/// What a format implements to write parts.
pub trait PartEncoder: Sync {
    /// Part files' extension, without the dot.
    fn extension(&self) -> &'static str;

    /// The parts' format as the connection file records it, for engines to pick by.
    fn format(&self) -> &'static str {
        self.extension()
    }

    /// Starts an attempt that keeps weights as `external` says: writes, through `staged`,
    /// what the parts will share (`weights_name` in the output folder). Called again with
    /// [`ExternalData::Shared`] after a part asked for it; the earlier attempt's staged files
    /// are gone by then.
    fn begin(
        &mut self,
        plan: &ValidatedPlan,
        external: ExternalData,
        weights_name: &str,
        staged: &Staged,
    ) -> Result<SideFiles, FrontendError> {
        let _ = (plan, external, weights_name, staged);
        Ok(SideFiles::default())
    }

    /// Encodes part `k` of `plan`. Called from several threads at once.
    fn encode(&self, plan: &ValidatedPlan, k: usize) -> Result<Encoded, FrontendError>;

    /// Notes about the whole model the summary should carry (e.g. from its conversion).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Writes every part of `plan` and the connection files into `workdir` (created if
/// missing), all or nothing (see [`Staged`]). The parts of an earlier partition of the same
/// stem that this one does not produce are removed; nothing else in `workdir`, and never the
/// source model at `source`, is touched. `record` fills in what the connection file says of
/// each part beyond its file, tensors, format and backend.
pub fn write_partition(
    encoder: &mut dyn PartEncoder,
    source: &Path,
    model: &Model,
    plan: &ValidatedPlan,
    workdir: &Path,
    external: ExternalData,
    record: PartRecord<'_>,
) -> Result<Emitted, FrontendError> {
    let mut staged = Staged::new(workdir).map_err(FrontendError::from)?;
    let work_real = workdir
        .canonicalize()
        .map_err(|e| FrontendError::io(workdir, format!("cannot write: {e}"), e))?;
    let source_real = source
        .canonicalize()
        .map_err(|e| FrontendError::io(source, format!("cannot read: {e}"), e))?;
    let stem = source
        .file_stem()
        .map_or_else(|| "model".to_string(), |s| s.to_string_lossy().into_owned());
    let ext = encoder.extension();
    let files: Vec<String> = plan
        .parts
        .iter()
        .enumerate()
        .map(|(k, part)| part_file_name(&stem, k, plan.device_name(part), ext))
        .collect::<Result<_, _>>()
        .map_err(|e| FrontendError::new(source, e))?;
    // Renaming a part into place replaces the directory entry of that name: only a source
    // model of that very name in this very folder would be lost.
    if source_real.parent() == Some(work_real.as_path()) {
        let source_name = source_real.file_name().map(|n| n.to_string_lossy());
        if let Some(file) = files
            .iter()
            .find(|f| Some(f.as_str()) == source_name.as_deref())
        {
            return Err(FrontendError::new(
                source,
                format!("{file} would overwrite the source model; choose another WORKDIR"),
            ));
        }
    }

    let weights_name = format!("{stem}.weights");
    let mut notes = encoder.notes();
    let mut external = external;
    let (side, part_notes) = loop {
        let side = encoder.begin(plan, external, &weights_name, &staged)?;
        let written = counted("build, encode and write parts", Some(files.len()), || {
            write_all(&*encoder, plan, &staged, &files)
        })?;
        match written {
            Written::All(part_notes) => break (side, part_notes),
            Written::NeedsSharedWeights(note) if external == ExternalData::Inline => {
                // What was staged goes with the old staging folder.
                notes.push(format!(
                    "{note}: every part references {} instead (as with --external-data shared)",
                    workdir.join(&weights_name).display()
                ));
                staged.restart().map_err(FrontendError::from)?;
                external = ExternalData::Shared;
            }
            Written::NeedsSharedWeights(note) => {
                return Err(FrontendError::new(source, note));
            }
        }
    };
    notes.extend(part_notes);
    if let Some(name) = &side.staged {
        staged.add(name);
    }
    for f in &files {
        staged.add(f);
    }

    let g = &model.graph;
    let names = |vs: &[ValueId]| vs.iter().map(|&v| g.value(v).name.to_string()).collect();
    let bytes = |v: &ValueId| (g.value(*v).name.to_string(), g.value(*v).ty.byte_size());
    let mut conn = ConnFile {
        source: ConnModel {
            file: relative_path(&work_real, &source_real),
            inputs: names(&g.inputs),
            outputs: names(&g.outputs),
            shapes: Some(input_shapes(model)),
            state: state_map(model.state.iter()),
            ..Default::default()
        },
        parts: Vec::with_capacity(files.len()),
    };
    let mut summary = Vec::with_capacity(files.len());
    for (k, (part, file)) in plan.parts.iter().zip(files).enumerate() {
        let backend = plan.device_name(part).to_string();
        let mut m = ConnModel {
            file: file.clone(),
            inputs: names(&part.inputs),
            outputs: names(&part.outputs),
            format: Some(encoder.format().to_string()),
            backend: Some(backend.clone()),
            ..Default::default()
        };
        m.state = state_map(
            model
                .state
                .iter()
                .filter(|p| m.inputs.contains(&p.input) && m.outputs.contains(&p.output)),
        );
        record(k, &backend, &mut m);
        conn.parts.push(m);
        summary.push(EmittedPart {
            file,
            backend,
            nodes: part.nodes.len(),
            constant_nodes: part.constant_nodes.len(),
            inputs: part.inputs.iter().map(bytes).collect(),
            outputs: part.outputs.iter().map(bytes).collect(),
        });
    }
    for pair in &model.state {
        let held = |p: &ConnModel| {
            p.state
                .as_ref()
                .is_some_and(|s| s.contains_key(&pair.input))
        };
        if !conn.parts.iter().any(held) {
            let at = |name: &str, f: fn(&ConnModel) -> &Vec<String>| {
                conn.parts
                    .iter()
                    .find(|p| f(p).iter().any(|t| t == name))
                    .map_or("no part", |p| p.file.as_str())
                    .to_string()
            };
            notes.push(format!(
                "state {}={} is split: {} reads the input and {} gives the output, so this cache crosses a hop on every step",
                pair.input,
                pair.output,
                at(&pair.input, |p| &p.inputs),
                at(&pair.output, |p| &p.outputs)
            ));
        }
    }
    let conn_files = phase("commit: rename into place, conn files", || {
        staged.commit_partition(&stem, ext, &conn, &source_real, &side.remove)
    })
    .map_err(FrontendError::from)?;
    Ok(Emitted {
        conn_json: conn_files.json,
        conn_ini: conn_files.ini,
        conn,
        parts: summary,
        weights: side.weights,
        notes,
    })
}

/// State pairs as the connection file lists them; none for a model without state.
fn state_map<'a>(
    pairs: impl Iterator<Item = &'a cleave_ir::StatePair>,
) -> Option<BTreeMap<String, String>> {
    let map: BTreeMap<String, String> =
        pairs.map(|p| (p.input.clone(), p.output.clone())).collect();
    (!map.is_empty()).then_some(map)
}

/// Each input's shape as the parts were cut for it, for the commands that run them later.
fn input_shapes(model: &Model) -> BTreeMap<String, Vec<ConnDim>> {
    let g = &model.graph;
    g.inputs
        .iter()
        .filter_map(|&v| {
            let value = g.value(v);
            let dims = value.ty.shape.as_ref()?;
            let dims = dims
                .iter()
                .map(|d| match d {
                    Dim::Fixed(n) => ConnDim::Fixed(*n),
                    Dim::Param(p) => ConnDim::Named(p.to_string()),
                    Dim::Unknown => ConnDim::Unknown,
                })
                .collect();
            Some((value.name.to_string(), dims))
        })
        .collect()
}

enum Written {
    /// Every part is staged; the notes of the parts that had one, in part order.
    All(Vec<String>),
    NeedsSharedWeights(String),
}

/// Most threads that encode and write parts at once.
const MAX_WRITERS: usize = 4;

/// Encodes and stages every part as `files[k]` on a few threads, each holding one part at a
/// time: memory stays that of a few parts, however many there are. The first part (lowest
/// index) that fails or asks for shared weights stops them all and is the one reported, so
/// the outcome never depends on timing.
fn write_all(
    encoder: &dyn PartEncoder,
    plan: &ValidatedPlan,
    staged: &Staged,
    files: &[String],
) -> Result<Written, FrontendError> {
    enum Stop {
        Shared(String),
        Failed(Box<FrontendError>),
    }
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let one = |k: usize| -> Result<Option<String>, Stop> {
        match encoder
            .encode(plan, k)
            .map_err(|e| Stop::Failed(Box::new(e)))?
        {
            Encoded::Part { bytes, note } => {
                staged
                    .write_file(&files[k], &bytes)
                    .map_err(|e| Stop::Failed(Box::new(e.into())))?;
                Ok(note.map(|n| format!("{}: {n}", files[k])))
            }
            Encoded::NeedsSharedWeights { note } => Err(Stop::Shared(note)),
        }
    };
    let work = || {
        let mut notes = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let k = next.fetch_add(1, Ordering::Relaxed);
            if k >= files.len() {
                break;
            }
            match one(k) {
                Ok(note) => notes.extend(note.map(|n| (k, n))),
                Err(s) => {
                    stop.store(true, Ordering::Relaxed);
                    return Err((k, s));
                }
            }
        }
        Ok(notes)
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
    let mut notes = Vec::new();
    let mut first: Option<(usize, Stop)> = None;
    for r in results {
        match r {
            Ok(n) => notes.extend(n),
            Err(s) if first.as_ref().is_none_or(|f| s.0 < f.0) => first = Some(s),
            Err(_) => {}
        }
    }
    match first {
        Some((_, Stop::Failed(e))) => Err(*e),
        Some((_, Stop::Shared(note))) => Ok(Written::NeedsSharedWeights(note)),
        None => {
            notes.sort_by_key(|(k, _)| *k);
            Ok(Written::All(notes.into_iter().map(|(_, n)| n).collect()))
        }
    }
}

impl From<WriteError> for FrontendError {
    fn from(e: WriteError) -> FrontendError {
        let message = e.to_string();
        FrontendError::io(e.path, message, e.source)
    }
}
