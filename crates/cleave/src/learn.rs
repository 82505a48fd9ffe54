//! `--learn-dims`: where inference cannot tell a tensor's type (an op it has no rule for), the
//! type one run of the model shows, on inputs of the shapes the user fixed. Opt-in, since a
//! run on one input says nothing of others: the learned dims hold for those input shapes.

use cleave_ir::{TensorType, ValueId};
use cleave_runtime::{EngineKind, HostTensor};

use crate::{Arg, Error, LoadedModel, Message};

/// What a run taught: the engine, and each tensor's type as it ran.
#[derive(Clone, Debug)]
pub struct Learned {
    pub engine: String,
    pub tensors: Vec<(String, TensorType)>,
    /// Set when the run was not asked for (`--learn-dims`) but made because the format has no
    /// shape inference of its own.
    pub unasked: Option<Box<Unasked>>,
}

/// An unasked run: each input's shape in it (placeholders included), or why it could not be
/// made or failed (the model then keeps the file's dims).
#[derive(Clone, Debug)]
pub struct Unasked {
    pub inputs: Vec<(String, Vec<i64>)>,
    pub failed: Option<String>,
}

impl Learned {
    /// What an unasked run did, for the partition's notes; `None` for a `--learn-dims` run.
    pub fn unasked_note(&self) -> Option<String> {
        let Unasked { inputs, failed } = self.unasked.as_deref()?;
        if let Some(why) = failed {
            return Some(format!(
                "the dims the file leaves dynamic could not be computed by a run on {}, so parts keep the file's: {why}",
                self.engine
            ));
        }
        let join = |d: &[i64]| d.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
        let at: Vec<String> = inputs
            .iter()
            .map(|(n, d)| format!("{n}={}", join(d)))
            .collect();
        Some(format!(
            "{} tensor{} whose dims only a run computes took the dims one run of the model on {} showed, at {} (they hold for those input shapes), so every part prepares before its first run",
            self.tensors.len(),
            if self.tensors.len() == 1 { "" } else { "s" },
            self.engine,
            at.join(" ")
        ))
    }
}

impl LoadedModel {
    /// For a format whose open dims only a run finds (TFLite), the run, made unasked where
    /// every input has a shape (fixed, or the file's placeholder) and the format's engine is
    /// at hand. A failure is kept in [`LoadedModel::learned`] to be said, not returned: the
    /// file's own dims still make parts an engine that resizes can run.
    pub fn learn_dims_unasked(&mut self) {
        if !self.source.learns_dims_by_default() || self.source.to_learn().is_empty() {
            return;
        }
        let engine = match crate::engine_registry()
            .candidates(self.source.extension())
            .into_iter()
            .next()
        {
            Some(e) => e,
            None => return,
        };
        if let Err(e) = self.run_for_types(engine.clone(), 0, true) {
            self.learned = Some(Learned {
                engine: engine.label(),
                tensors: Vec::new(),
                unasked: Some(Box::new(Unasked {
                    inputs: Vec::new(),
                    failed: Some(e.to_string()),
                })),
            });
        }
    }
}

impl LoadedModel {
    /// Runs the model once on `engine` (seeded random inputs of the inputs' declared, fixed
    /// shapes) with every tensor the format cannot type made an output, and
    /// gives the model what the run showed of them (also kept in [`LoadedModel::learned`]).
    pub fn learn_types(&mut self, engine: EngineKind, seed: u64) -> Result<Learned, Error> {
        self.run_for_types(engine, seed, false)
    }

    /// [`LoadedModel::learn_types`]; with `placeholders`, an input whose dims are open runs at
    /// the file's placeholder shape, and the result is marked unasked.
    fn run_for_types(
        &mut self,
        engine: EngineKind,
        seed: u64,
        placeholders: bool,
    ) -> Result<Learned, Error> {
        let path = self.source.path().to_path_buf();
        let g = self.graph();
        let unknown: Vec<ValueId> = self.source.to_learn();
        let label = engine.label();
        if unknown.is_empty() {
            let learned = Learned {
                engine: label,
                tensors: Vec::new(),
                unasked: None,
            };
            self.learned = Some(learned.clone());
            return Ok(learned);
        }
        let mut feeds = Vec::new();
        let mut run_shapes = Vec::new();
        for (k, &v) in g.inputs.iter().enumerate() {
            let value = g.value(v);
            let dims = value
                .ty
                .static_dims()
                .or_else(|| placeholders.then(|| self.source.placeholder_shape(v)).flatten())
                .ok_or_else(|| {
                    let why = if placeholders {
                        Message::text(format!(
                            "input '{}' ({}) has no shape to run the model at, not even a placeholder in the file: give ",
                            value.name, value.ty
                        ))
                    } else {
                        Message::about_arg(
                            Arg::LearnDims,
                            format!(
                                " runs the model, so input '{}' ({}) needs a fixed shape: give ",
                                value.name, value.ty
                            ),
                        )
                    };
                    Error::request(why.given(Arg::Shape, format!("{}=D,D,...", value.name)))
                })?;
            run_shapes.push((value.name.to_string(), dims.clone()));
            let elem = value.ty.elem.ok_or_else(|| {
                Error::usage(format!("input '{}' has no element type", value.name))
            })?;
            let shape: Vec<usize> = dims
                .iter()
                .map(|&d| usize::try_from(d).unwrap_or(0))
                .collect();
            let x = HostTensor::random(elem, &shape, seed.wrapping_add(k as u64))
                .map_err(|m| Error::model(&path, m))?;
            feeds.push((value.name.to_string(), x));
        }
        let runner = crate::engine(engine)?;
        let values: Vec<HostTensor> = feeds.iter().map(|(_, t)| t.clone()).collect();
        let learned: Vec<(ValueId, TensorType)> = match runner.tensor_dims(&path, &values)? {
            Some(dims) => self.source.types_from_tensor_dims(&dims),
            None => {
                let tmp = cleave_workdir::private_tempdir("cleave-")
                    .map_err(|e| Error::usage(format!("cannot make a temporary folder: {e}")))?;
                let probe = tmp
                    .path()
                    .join(format!("learn.{}", self.source.extension()));
                self.source.write_with_outputs(&unknown, &probe)?;
                let outputs = runner.load(&probe, false)?.run(&feeds)?;
                let g = self.graph();
                unknown
                    .iter()
                    .filter_map(|&v| {
                        let name = &g.value(v).name;
                        let (_, t) = outputs.iter().find(|(n, _)| n == name)?;
                        Some((v, t.ty()))
                    })
                    .collect()
            }
        };
        let g = self.graph();
        let tensors = learned
            .iter()
            .map(|(v, t)| (g.value(*v).name.to_string(), t.clone()))
            .collect();
        self.source.learn_types(&learned)?;
        let learned = Learned {
            engine: label,
            tensors,
            unasked: placeholders.then(|| {
                Box::new(Unasked {
                    inputs: run_shapes,
                    failed: None,
                })
            }),
        };
        self.learned = Some(learned.clone());
        Ok(learned)
    }
}
