//! The first stage of a partition's life: a model loaded by its front-end, its dims fixed and
//! rewritten if asked ([`LoadedModel`]); [`LoadedModel::into_assigned`] gives it devices
//! (`into_staged`, in `stages.rs`, pipeline stages instead).

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use cleave_assign::{assign, AssignOptions, Assignment, Placement, Reason};
use cleave_frontend::{FixedDims, FormatModel, RewriteLevel, RewriteOptions};
use cleave_ir::phases::phase;
use cleave_ir::{Graph, Model, OpSemantics};

use crate::{Arg, AssignRequest, Assigned, Costs, Devices, Error, Message, Objective};

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
    /// Every node given a device by `devices` as `req` asks: the rewrite and the types one run
    /// shows first, when asked; then rules and priority, or predicted latency. Warnings (fused
    /// groups dissolved) are in the assignment for the caller to show.
    pub fn into_assigned(
        self,
        mut devices: Devices,
        req: &AssignRequest,
    ) -> Result<Assigned, Error> {
        devices.ask_openvino(self.path())?;
        let loaded = self.prepared(&devices, req)?;
        let mut assignment = loaded.assign(&devices)?;
        let costs = match &req.costs {
            Some(path) => Some(Costs::read(path)?),
            None => (req.objective == Objective::Latency).then(Costs::default),
        };
        let mut latency = None;
        if let (Objective::Latency, Some(c)) = (req.objective, &costs) {
            let choice = loaded.place_for_latency(&assignment, &devices, c, req.margin)?;
            assignment = choice.assignment.clone();
            latency = Some(choice);
        }
        // The rules have placed every node; a million-node `.part` file holds ~90 MB of names.
        devices.forget_node_rules();
        Ok(Assigned {
            loaded,
            devices,
            assignment,
            costs,
            latency,
            stages: None,
        })
    }

    /// What both next steps do first, as `req` asks: the rewrite for `devices`, the types one
    /// run shows, and the decoder state pairs declared.
    pub(crate) fn prepared(
        self,
        devices: &Devices,
        req: &AssignRequest,
    ) -> Result<LoadedModel, Error> {
        let mut loaded = match req.optimize {
            Some(level) => self.rewrite(level, devices, req.fold_limit)?,
            None => self,
        };
        if req.learn_dims {
            // After the rewrite, which types its model afresh.
            let engine = loaded.learning_engine()?;
            loaded.learn_types(engine, 0)?;
        }
        loaded.declare_state(&req.state)?;
        Ok(loaded)
    }

    /// The engine a `--learn-dims` run uses: the first registered to run whole models of the
    /// model's format.
    fn learning_engine(&self) -> Result<cleave_runtime::EngineKind, Error> {
        let format = self.source.extension();
        let candidates = crate::engine_registry().candidates(format);
        candidates.into_iter().next().ok_or_else(|| {
            Error::request(Message::about_arg(
                Arg::LearnDims,
                format!(": no engine runs {format} models"),
            ))
        })
    }

    pub fn model(&self) -> &Model {
        self.source.model()
    }

    /// Records the decoder state pairs: `declared` (checked) and those the names show.
    pub fn declare_state(&mut self, declared: &[cleave_ir::StatePair]) -> Result<(), Error> {
        let pairs = cleave_ir::state_pairs(self.graph(), declared)
            .map_err(|e| Error::request(Message::about_arg(Arg::State, format!(": {e}"))))?;
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
}
