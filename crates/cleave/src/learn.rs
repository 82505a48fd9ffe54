//! `--learn-dims`: where inference cannot tell a tensor's type (an op it has no rule for), the
//! type one run of the model shows, on inputs of the shapes the user fixed. Opt-in, since a
//! run on one input says nothing of others: the learned dims hold for those input shapes.

use cleave_ir::{TensorType, ValueId};
use cleave_runtime::{EngineKind, HostTensor};

use crate::{Error, LoadedModel};

/// What a run taught: the engine, and each tensor's type as it ran.
#[derive(Clone, Debug)]
pub struct Learned {
    pub engine: String,
    pub tensors: Vec<(String, TensorType)>,
}

impl LoadedModel {
    /// Runs the model once on `engine` (seeded random inputs of the inputs' declared, fixed
    /// shapes) with every tensor the format cannot type made an output, and
    /// gives the model what the run showed of them (also kept in [`LoadedModel::learned`]).
    pub fn learn_types(&mut self, engine: EngineKind, seed: u64) -> Result<Learned, Error> {
        let path = self.source.path().to_path_buf();
        let g = self.graph();
        let unknown: Vec<ValueId> = self.source.to_learn();
        let label = engine.label();
        if unknown.is_empty() {
            let learned = Learned {
                engine: label,
                tensors: Vec::new(),
            };
            self.learned = Some(learned.clone());
            return Ok(learned);
        }
        let mut feeds = Vec::new();
        for (k, &v) in g.inputs.iter().enumerate() {
            let value = g.value(v);
            let dims = value.ty.static_dims().ok_or_else(|| {
                Error::usage(format!(
                    "--learn-dims runs the model, so input '{}' ({}) needs a fixed shape: give --shape {}=D,D,...",
                    value.name, value.ty, value.name
                ))
            })?;
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
        };
        self.learned = Some(learned.clone());
        Ok(learned)
    }
}
