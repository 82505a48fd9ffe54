//! ONNX behind cleave's front-end interface.

use std::path::Path;

use cleave_frontend::{
    Emitted, ExternalData, FixedDims, FormatModel, Frontend, FrontendError, PartRecord,
    RewriteOptions, Rewritten,
};
use cleave_ir::phases::phase;
use cleave_ir::{ElemType, Model, OpSemantics, ValueId};
use cleave_partition::ValidatedPlan;

use crate::emit::{emit_limited, from_emit, with_outputs, PROTOBUF_LIMIT};
use crate::rewrite::{optimize, OptimizeError};
use crate::{infer_types, to_ir, OnnxError, OnnxModel, OnnxSemantics};

/// Reads `.onnx` files.
#[derive(Clone, Copy, Debug, Default)]
pub struct OnnxFrontend;

/// A loaded ONNX model: the protobuf as read (written back byte for byte) and its typed IR.
#[derive(Clone)]
pub struct OnnxSource {
    pub onnx: OnnxModel,
    pub model: Model,
}

impl OnnxSource {
    /// Loads, checks and types a model.
    pub fn load(path: &Path) -> Result<OnnxSource, OnnxError> {
        let onnx = OnnxModel::load(path)?;
        let mut model = phase("IR build and check", || crate::to_checked_ir(&onnx))?;
        onnx.release_pages();
        phase("type inference", || infer_types(&mut model));
        phase("type check", || crate::check_typed(&onnx.path, &model))?;
        Ok(OnnxSource { onnx, model })
    }
}

impl Frontend for OnnxFrontend {
    fn name(&self) -> &'static str {
        "onnx"
    }

    fn accepts(&self, path: &Path) -> bool {
        path.extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
    }

    fn load(&self, path: &Path) -> Result<Box<dyn FormatModel>, FrontendError> {
        Ok(Box::new(OnnxSource::load(path).map_err(from_onnx)?))
    }
}

impl FormatModel for OnnxSource {
    fn path(&self) -> &Path {
        &self.onnx.path
    }

    fn extension(&self) -> &'static str {
        "onnx"
    }

    fn model(&self) -> &Model {
        &self.model
    }

    fn model_mut(&mut self) -> &mut Model {
        &mut self.model
    }

    fn semantics(&self) -> &dyn OpSemantics {
        &OnnxSemantics
    }

    fn type_report(&self) -> cleave_frontend::TypeReport {
        let r = crate::type_report(&self.model);
        cleave_frontend::TypeReport {
            untyped: r.untyped,
            unknown_ops: r.unknown_ops,
        }
    }

    fn explorer_ids(&self) -> Vec<Vec<(String, String)>> {
        crate::explorer_ids::explorer_ids(&self.model.graph)
    }

    fn rewrite(&self, opts: &RewriteOptions) -> Result<Rewritten, FrontendError> {
        let o = optimize(&self.onnx, opts).map_err(|e| match e {
            OptimizeError::Onnx(e) => from_onnx(e),
            other => FrontendError::new(&self.onnx.path, other),
        })?;
        Ok(Rewritten {
            source: Box::new(OnnxSource {
                onnx: o.model,
                model: o.ir,
            }),
            applied: o.applied,
            origins: o.origins,
            notes: o.notes,
        })
    }

    fn clone_boxed(&self) -> Box<dyn FormatModel> {
        Box::new(self.clone())
    }

    fn fix_dims(&self, fixed: &FixedDims) -> Result<Box<dyn FormatModel>, FrontendError> {
        let mut proto = self.onnx.proto().map_err(from_onnx)?.into_owned();
        crate::fix_dims::fix_dims(&mut proto, fixed)
            .map_err(|m| FrontendError::asked(&self.onnx.path, m))?;
        let onnx = self.onnx.derived(proto);
        let mut model = to_ir(&onnx).map_err(from_onnx)?;
        infer_types(&mut model);
        Ok(Box::new(OnnxSource { onnx, model }))
    }

    fn learn_types(
        &mut self,
        learned: &[(cleave_ir::ValueId, cleave_ir::TensorType)],
    ) -> Result<(), FrontendError> {
        for (v, t) in learned {
            let ty = &mut self.model.graph.value_mut(*v).ty;
            if ty.elem.is_none() {
                ty.elem = t.elem;
            }
            match (&mut ty.shape, &t.shape) {
                (None, s) => ty.shape = s.clone(),
                (Some(have), Some(seen)) if have.len() == seen.len() => {
                    for (h, s) in have.iter_mut().zip(seen) {
                        if h.fixed().is_none() {
                            *h = s.clone();
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn save_as(&mut self, path: &Path) -> Result<(), FrontendError> {
        self.onnx.save(path).map_err(from_onnx)?;
        self.onnx.path = path.to_path_buf();
        Ok(())
    }

    fn write_parts(
        &self,
        plan: &ValidatedPlan,
        workdir: &Path,
        external: ExternalData,
        record: PartRecord<'_>,
    ) -> Result<Emitted, FrontendError> {
        emit_limited(
            &self.onnx,
            &self.model,
            plan,
            workdir,
            external,
            PROTOBUF_LIMIT,
            record,
        )
    }

    fn write_with_outputs(&self, extra: &[ValueId], path: &Path) -> Result<(), FrontendError> {
        let proto = with_outputs(&self.onnx, &self.model, extra)
            .map_err(|e| from_emit(e, &self.onnx.path))?;
        // Saved as a model derived from the source, so its external data files come along
        // and resolve beside the copy.
        self.onnx.derived(proto).save(path).map_err(from_onnx)
    }

    fn write_probe(&self, elem: ElemType, dims: &[i64], path: &Path) -> Result<(), FrontendError> {
        let model = crate::probe::identity_model(elem, dims);
        crate::io::write_atomic(path, &crate::io::encode_model(&model)).map_err(from_onnx)
    }
}

impl From<OnnxError> for FrontendError {
    fn from(e: OnnxError) -> FrontendError {
        from_onnx(e)
    }
}

fn from_onnx(e: OnnxError) -> FrontendError {
    use crate::validate::Subject;
    use cleave_ir::GraphError;
    let path = e.path().to_path_buf();
    let message = e.to_string();
    match e {
        OnnxError::Read { source, .. } | OnnxError::Write { source, .. } => {
            FrontendError::io(path, message, source)
        }
        OnnxError::Invalid {
            what: Subject::Node { label, op },
            ..
        } => FrontendError::new(path, message).at_node(label, op),
        OnnxError::Graph { source, .. } | OnnxError::Function { source, .. } => match *source {
            GraphError::UndefinedTensor { node, op, .. } => {
                FrontendError::new(path, message).at_node(node, op)
            }
            other => FrontendError {
                source: Some(Box::new(other)),
                ..FrontendError::new(path, message)
            },
        },
        other => FrontendError {
            source: Some(Box::new(other)),
            ..FrontendError::new(path, message)
        },
    }
}
