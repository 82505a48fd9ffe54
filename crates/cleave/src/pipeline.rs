//! load → (rewrite) → assign → partition → validate → write, on any front-end's model.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cleave_assign::{assign, AssignOptions, Assignment, Placement, Reason};
use cleave_frontend::{
    Emitted, ExternalData, FixedDims, FormatModel, RewriteLevel, RewriteOptions,
};
use cleave_ir::phases::phase;
use cleave_ir::{Graph, Model, OpSemantics};
use cleave_partition::{
    openvino, partition_default, reference_counts, validate, OpenVinoOptions, Options, Partition,
    Plan, References, UnitGraph, ValidatedPlan,
};

use crate::{Devices, Error};
use cleave_workdir::ConnModel;

/// A model loaded by its front-end, with the nodes that compute constants marked.
pub struct LoadedModel {
    pub source: Box<dyn FormatModel>,
    /// `constant[i]`: node `i` computes a constant from constants alone (copied where read).
    pub constant: Vec<bool>,
    /// Set when [`LoadedModel::rewrite`] changed the model.
    pub rewritten: Option<RewriteSummary>,
    /// Set when [`LoadedModel::learn_types`] ran the model.
    pub learned: Option<crate::Learned>,
}

impl Clone for LoadedModel {
    fn clone(&self) -> Self {
        LoadedModel {
            source: self.source.clone_boxed(),
            constant: self.constant.clone(),
            rewritten: self.rewritten.clone(),
            learned: self.learned.clone(),
        }
    }
}

/// What a rewrite did.
#[derive(Clone, Debug)]
pub struct RewriteSummary {
    pub applied: BTreeMap<&'static str, usize>,
    pub nodes_before: usize,
    pub origins: std::collections::HashMap<String, Vec<String>>,
    pub notes: Vec<String>,
}

/// How to cut the assigned graph.
#[derive(Clone, Copy, Debug)]
pub enum Algorithm {
    /// Fewest connected parts (never more than ONE's rule or the epoch greedy).
    Default { allow_disconnected: bool },
    /// OpenVINO's hetero subgraph selection as its design page states it.
    OpenVino { budget: Duration },
}

/// A partition of the unit graph, before it is mapped back to nodes.
pub struct UnitPartition {
    pub units: UnitGraph,
    pub partition: Partition,
    /// Part counts of the references (none for pipeline stages).
    pub references: Option<References>,
    /// Time the algorithm took.
    pub elapsed: Duration,
}

/// The engine the connection file records for a backend's parts: the device of a registered
/// engine the backend's name calls for (`openvino:GPU` for `ov-GPU`).
pub(crate) fn conn_engine(backend: &str) -> Option<String> {
    cleave_engines::registry()
        .by_device_prefix(backend)
        .map(|k| k.label())
}

/// Records each part's engine ([`conn_engine`]).
pub(crate) fn record_engine(_: usize, backend: &str, m: &mut ConnModel) {
    m.engine = conn_engine(backend);
}

/// Loads, checks and types a model with the front-end that reads it.
pub fn load_model(path: impl AsRef<Path>) -> Result<LoadedModel, Error> {
    let source = crate::load(path.as_ref())?;
    let constant = phase("constant nodes", || {
        source.semantics().constant_nodes(&source.model().graph)
    });
    Ok(LoadedModel {
        source,
        constant,
        rewritten: None,
        learned: None,
    })
}

impl LoadedModel {
    pub fn model(&self) -> &Model {
        self.source.model()
    }

    /// Records the decoder state pairs: `declared` (checked) and those the names show.
    pub fn declare_state(&mut self, declared: &[cleave_ir::StatePair]) -> Result<(), Error> {
        let pairs = cleave_ir::state_pairs(self.graph(), declared)
            .map_err(|e| Error::usage(format!("--state: {e}")))?;
        self.source.model_mut().state = pairs;
        Ok(())
    }

    pub fn graph(&self) -> &Graph {
        &self.source.model().graph
    }

    pub fn semantics(&self) -> &dyn OpSemantics {
        self.source.semantics()
    }

    pub fn path(&self) -> &Path {
        self.source.path()
    }

    /// The model with `fixed` dims set (`--shape`, `--dim`) and typed again; nothing is done
    /// when `fixed` is empty. Parts cut from it declare the fixed dims.
    pub fn fix_dims(self, fixed: &FixedDims) -> Result<LoadedModel, Error> {
        if fixed.is_empty() {
            return Ok(self);
        }
        let source = self.source.fix_dims(fixed)?;
        let constant = source.semantics().constant_nodes(&source.model().graph);
        Ok(LoadedModel {
            source,
            constant,
            rewritten: self.rewritten,
            learned: self.learned,
        })
    }

    /// The front-end's rewrites for `devices` at `level`; the source file is untouched.
    /// Constants are folded on the linked engines, adding at most `fold_limit` bytes
    /// ([`cleave_frontend::DEFAULT_FOLD_LIMIT`] is a sensible one).
    pub fn rewrite(
        self,
        level: RewriteLevel,
        devices: &Devices,
        fold_limit: u64,
    ) -> Result<LoadedModel, Error> {
        let r = self.source.rewrite(&RewriteOptions {
            level,
            devices: devices.order(),
            profiles: &devices.profiles,
            evaluator: Some(&crate::EngineEvaluator::new()),
            fold_limit,
        })?;
        let constant = r.source.semantics().constant_nodes(&r.source.model().graph);
        Ok(LoadedModel {
            rewritten: Some(RewriteSummary {
                applied: r.applied,
                nodes_before: self.graph().nodes.len(),
                origins: r.origins,
                notes: r.notes,
            }),
            source: r.source,
            constant,
            learned: None,
        })
    }

    /// A device for every node: rules, then the default, then the priority list; fused
    /// groups whole; inseparable pairs together. Warnings (dissolved groups) are in the
    /// assignment.
    pub fn assign(&self, devices: &Devices) -> Result<Assignment, Error> {
        if devices.needs_openvino() {
            let mut asked = devices.clone();
            asked.ask_openvino(self.path())?;
            return self.assign(&asked);
        }
        let opts = AssignOptions {
            devices: devices.list.clone(),
            default: devices.default.clone(),
            part: devices.part.as_ref(),
        };
        phase("assignment", || {
            assign(
                self.graph(),
                &devices.profiles,
                &opts,
                &self.constant,
                self.semantics(),
            )
            .map_err(|e| Error::assignment(self.path(), e))
        })
    }

    /// The graph the partitioners see: placed nodes, with inseparable pairs and fused
    /// groups contracted. `partition` and `bench --partition` both cut this one.
    pub fn unit_graph(&self, a: &Assignment) -> UnitGraph {
        let g = self.graph();
        phase("unit graph", || {
            UnitGraph::from_assignment(g, a, &a.glue(g, self.semantics()))
        })
    }

    /// Cuts the assigned graph with `algorithm`.
    pub fn partition(&self, a: &Assignment, algorithm: Algorithm) -> Result<UnitPartition, Error> {
        self.partition_traced(a, algorithm, &mut Vec::new())
    }

    /// [`LoadedModel::partition`], with the OpenVINO algorithm's steps in its design page's words
    /// appended to `trace` (also when it gives up).
    pub fn partition_traced(
        &self,
        a: &Assignment,
        algorithm: Algorithm,
        trace: &mut Vec<String>,
    ) -> Result<UnitPartition, Error> {
        let g = self.graph();
        let units = self.unit_graph(a);
        let start = Instant::now();
        let partition = phase("partition", || -> Result<Partition, Error> {
            Ok(match algorithm {
                Algorithm::Default { allow_disconnected } => {
                    partition_default(&units, Options { allow_disconnected })
                }
                Algorithm::OpenVino { budget } => {
                    let labels: Vec<String> = units
                        .unit_nodes()
                        .map(|ns| {
                            ns.iter()
                                .map(|&n| g.node_label(n))
                                .collect::<Vec<_>>()
                                .join("+")
                        })
                        .collect();
                    let ov = OpenVinoOptions {
                        time_budget: budget,
                        ..Default::default()
                    };
                    openvino(&units, &labels, &a.devices, &ov, trace).map_err(Error::usage)?
                }
            })
        })?;
        let elapsed = start.elapsed();
        let references = Some(phase("reference counts", || reference_counts(&units)));
        Ok(UnitPartition {
            units,
            partition,
            references,
            elapsed,
        })
    }

    pub(crate) fn on_one_device(&self, device: &str) -> Assignment {
        self.on_one_device_copying(device, &self.constant)
    }

    /// Every node on `device`, but those `copies` marks, which each part that reads them
    /// copies (unless they give a model output).
    pub(crate) fn on_one_device_copying(&self, device: &str, copies: &[bool]) -> Assignment {
        let g = self.graph();
        let outputs: HashSet<_> = g.outputs.iter().copied().collect();
        let placement = g
            .nodes
            .iter()
            .zip(copies)
            .map(|(node, &c)| {
                if c && !node.outputs.iter().flatten().any(|v| outputs.contains(v)) {
                    Placement::Constant
                } else {
                    Placement::Device(0, Reason::Default)
                }
            })
            .collect();
        Assignment {
            devices: vec![device.to_string()],
            placement,
            groups: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// Maps a cut back onto the graph's nodes and proves it: the only way to a
    /// [`ValidatedPlan`].
    pub fn plan(&self, a: &Assignment, cut: &UnitPartition) -> Result<ValidatedPlan, Error> {
        let g = self.graph();
        let plan = phase("plan build", || {
            Plan::build(g, a, &cut.units, &cut.partition)
        })
        .map_err(|e| Error::internal(self.path(), e))?;
        phase("plan validation", || validate(g, a, plan))
            .map_err(|e| Error::internal(self.path(), format!("the partition is invalid: {e}")))
    }

    /// Writes the parts and connection files into `workdir`. A rewritten model is saved
    /// first as `workdir/stem.optimized/stem.<ext>`, which the connection file then names
    /// as the source (so `check` and `verify` compare the parts against it).
    pub fn write(
        &mut self,
        plan: &ValidatedPlan,
        workdir: &Path,
        external: ExternalData,
    ) -> Result<Emitted, Error> {
        self.write_stages(plan, workdir, external, &[])
    }

    /// [`LoadedModel::write`], the connection file also saying what each pipeline stage
    /// holds: `memory[k]` is part `k`'s (weights, activation peak) in bytes.
    pub(crate) fn write_stages(
        &mut self,
        plan: &ValidatedPlan,
        workdir: &Path,
        external: ExternalData,
        memory: &[(u64, u64)],
    ) -> Result<Emitted, Error> {
        let record = |k: usize, backend: &str, m: &mut ConnModel| {
            record_engine(k, backend, m);
            if let Some(&(weights, activations)) = memory.get(k) {
                m.weights_bytes = Some(weights);
                m.activation_peak_bytes = Some(activations);
            }
        };
        if self.rewritten.is_some() {
            let stem = self
                .path()
                .file_stem()
                .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
            let dir = workdir.join(format!("{stem}.optimized"));
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, "cannot create", e))?;
            let out: PathBuf = dir.join(format!("{stem}.{}", self.source.extension()));
            self.source.save_as(&out)?;
        }
        let learned = self.learn_for_parts(plan);
        let mut emitted = phase("emission", || {
            self.source.write_parts(plan, workdir, external, &record)
        })?;
        if let Some(note) = learned {
            emitted.notes.insert(0, note);
        }
        Ok(emitted)
    }

    /// Where a part would receive a tensor whose dims the file leaves open and the format finds
    /// them by a run (TFLite), that run, unless `--learn-dims` made one; what it did, as a note.
    fn learn_for_parts(&mut self, plan: &ValidatedPlan) -> Option<String> {
        if self.learned.is_some() || !self.source.learns_dims_by_default() {
            return None;
        }
        let g = self.graph();
        let open = plan
            .parts
            .iter()
            .flat_map(|p| &p.inputs)
            .any(|&v| !g.inputs.contains(&v) && g.value(v).ty.static_dims().is_none());
        if !open {
            return None;
        }
        self.learn_dims_unasked();
        self.learned.as_ref().and_then(crate::Learned::unasked_note)
    }
}
