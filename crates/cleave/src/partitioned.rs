//! The third stage of a partition's life: a proven plan of single-device, connected,
//! acyclic parts ([`Partitioned`]); [`Partitioned::write`], the one write, saves the parts and
//! ONE's connection files in one all-or-nothing commit.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cleave_frontend::ExternalData;
use cleave_ir::phases::phase;
use cleave_partition::{References, ValidatedPlan};
use cleave_workdir::ConnModel;

use crate::{Assigned, Error, Face, Prediction, Stages, Written};

/// A validated partition, ready to write.
pub struct Partitioned {
    pub assigned: Assigned,
    pub plan: ValidatedPlan,
    /// Part counts of the references, when rules (not stages) made the partition.
    pub references: Option<References>,
    /// Time the cutting algorithm took.
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

impl Partitioned {
    /// The stages, when they made the plan.
    pub fn stages(&self) -> Option<&Stages> {
        self.assigned.stages.as_ref()
    }

    /// Writes the parts and the connection files into `workdir`, all or nothing: the
    /// connection file records each part's engine and, for stages, what each holds. A
    /// rewritten model is saved first as `workdir/stem.optimized/stem.<ext>`, which the
    /// connection file then names as the source (so `check` and `verify` compare the parts
    /// against it).
    pub fn write(&mut self, workdir: &Path, external: ExternalData) -> Result<Written, Error> {
        let memory = self.assigned.stage_memory();
        let record = |k: usize, backend: &str, m: &mut ConnModel| {
            record_engine(k, backend, m);
            if let Some(&(weights, activations)) = memory.get(k) {
                m.weights_bytes = Some(weights);
                m.activation_peak_bytes = Some(activations);
            }
        };
        let loaded = &mut self.assigned.loaded;
        if loaded.rewritten.is_some() {
            let stem = loaded
                .path()
                .file_stem()
                .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
            let dir = workdir.join(format!("{stem}.optimized"));
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, "cannot create", e))?;
            let out: PathBuf = dir.join(format!("{stem}.{}", loaded.source.extension()));
            loaded.source.save_as(&out)?;
        }
        let learned = self.learn_for_parts();
        let plan = &self.plan;
        let source = &self.assigned.loaded.source;
        let mut emitted = phase("emission", || {
            source.write_parts(plan, workdir, external, &record)
        })?;
        if let Some(note) = learned {
            emitted.notes.insert(0, note);
        }
        Ok(Written::from(emitted))
    }

    /// Where a part would receive a tensor whose dims the file leaves open and the format finds
    /// them by a run (TFLite), that run, unless `--learn-dims` made one; what it did, as a note.
    fn learn_for_parts(&mut self) -> Option<String> {
        let loaded = &mut self.assigned.loaded;
        if loaded.learned.is_some() || !loaded.source.learns_dims_by_default() {
            return None;
        }
        let g = loaded.graph();
        let open = self
            .plan
            .parts
            .iter()
            .flat_map(|p| &p.inputs)
            .any(|&v| !g.inputs.contains(&v) && g.value(v).ty.static_dims().is_none());
        if !open {
            return None;
        }
        loaded.learn_dims_unasked();
        loaded
            .learned
            .as_ref()
            .and_then(crate::Learned::unasked_note)
    }

    /// The predicted latency, when the latency objective or a cost file gave figures.
    pub fn prediction(&self) -> Result<Option<Prediction>, Error> {
        self.assigned.predict(self.plan.plan())
    }

    /// The stage table as `face` words it (empty unless stages made the plan).
    pub fn stage_table(&self, face: Face) -> Vec<String> {
        self.stages().map_or_else(Vec::new, |s| s.table(face))
    }
}
