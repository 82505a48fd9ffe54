//! tract, in process.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cleave_ir::ElemType;
use tract_onnx::prelude::*;

use cleave_runtime::HostTensor;
use cleave_runtime::RuntimeError;
use cleave_runtime::{Engine, LoadOptions, Session};

pub struct Tract;

type Plan = Arc<TypedRunnableModel>;

/// tract optimises a model for concrete input shapes, so the plan is built on first run and
/// rebuilt only when the input shapes change.
struct TractSession {
    path: PathBuf,
    model: InferenceModel,
    input_names: Vec<String>,
    output_names: Vec<String>,
    plans: HashMap<Vec<(DatumType, Vec<usize>)>, Plan>,
}

fn one_line(e: impl std::fmt::Display) -> String {
    // tract chains causes over several lines.
    format!("{e:#}")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn err(path: &Path, e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::Engine {
        path: path.to_path_buf(),
        engine: "tract",
        message: one_line(e),
    }
}

/// Loading, analysing and optimising: failures here mean tract lacks something.
fn unsupported(path: &Path, e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::Unsupported {
        path: path.to_path_buf(),
        engine: "tract",
        message: one_line(e),
    }
}

fn datum(e: ElemType) -> Option<DatumType> {
    Some(match e {
        ElemType::F32 => DatumType::F32,
        ElemType::F64 => DatumType::F64,
        ElemType::F16 => DatumType::F16,
        ElemType::I64 => DatumType::I64,
        ElemType::I32 => DatumType::I32,
        ElemType::I16 => DatumType::I16,
        ElemType::I8 => DatumType::I8,
        ElemType::U8 => DatumType::U8,
        ElemType::U16 => DatumType::U16,
        ElemType::U32 => DatumType::U32,
        ElemType::U64 => DatumType::U64,
        ElemType::Bool => DatumType::Bool,
        _ => return None,
    })
}

fn elem(d: DatumType) -> Option<ElemType> {
    Some(match d {
        DatumType::F32 => ElemType::F32,
        DatumType::F64 => ElemType::F64,
        DatumType::F16 => ElemType::F16,
        DatumType::I64 => ElemType::I64,
        DatumType::I32 => ElemType::I32,
        DatumType::I16 => ElemType::I16,
        DatumType::I8 => ElemType::I8,
        DatumType::U8 => ElemType::U8,
        DatumType::U16 => ElemType::U16,
        DatumType::U32 => ElemType::U32,
        DatumType::U64 => ElemType::U64,
        DatumType::Bool => ElemType::Bool,
        _ => return None,
    })
}

impl Engine for Tract {
    fn name(&self) -> &'static str {
        "tract"
    }

    /// tract runs a model on the calling thread: `threads` has nothing to limit.
    fn load_with(&self, path: &Path, _opts: LoadOptions) -> Result<Box<dyn Session>, RuntimeError> {
        // tract runs single-threaded unless built with its multithread feature, which cleave
        // does not enable: every tract worker already keeps to one core.
        let model = tract_onnx::onnx()
            .model_for_path(path)
            .map_err(|e| unsupported(path, e))?;
        let names = |outlets: &[OutletId]| -> Vec<String> {
            outlets
                .iter()
                .map(|o| model.node(o.node).name.clone())
                .collect()
        };
        let input_names = names(model.input_outlets().map_err(|e| err(path, e))?);
        let output_names: Vec<String> = model
            .output_outlets()
            .map_err(|e| err(path, e))?
            .iter()
            .map(|&o| {
                model
                    .outlet_label(o)
                    .map(String::from)
                    .unwrap_or_else(|| model.node(o.node).name.clone())
            })
            .collect();
        Ok(Box::new(TractSession {
            path: path.to_path_buf(),
            model,
            input_names,
            output_names,
            plans: HashMap::new(),
        }))
    }
}

impl TractSession {
    fn plan(&mut self, key: Vec<(DatumType, Vec<usize>)>) -> Result<Plan, RuntimeError> {
        if let Some(p) = self.plans.get(&key) {
            return Ok(p.clone());
        }
        let mut model = self.model.clone();
        for (i, (dt, shape)) in key.iter().enumerate() {
            model
                .set_input_fact(i, InferenceFact::dt_shape(*dt, shape.clone()))
                .map_err(|e| unsupported(&self.path, e))?;
        }
        let plan = model
            .into_optimized()
            .and_then(|m| m.into_runnable())
            .map_err(|e| unsupported(&self.path, e))?;
        self.plans.insert(key, plan.clone());
        Ok(plan)
    }
}

impl Session for TractSession {
    fn precheck(&mut self) -> Result<(), RuntimeError> {
        // Typing the model as declared finds an operator tract has no kernel for, or an output
        // of a type it cannot give, without waiting for inputs; the plans stay per shape.
        self.model
            .clone()
            .into_typed()
            .map(|_| ())
            .map_err(|e| unsupported(&self.path, e))
    }

    fn run(
        &mut self,
        inputs: &[(String, HostTensor)],
    ) -> Result<Vec<(String, HostTensor)>, RuntimeError> {
        let mut ordered = Vec::with_capacity(self.input_names.len());
        let mut key = Vec::with_capacity(self.input_names.len());
        for name in &self.input_names {
            let t = RuntimeError::given(inputs, name, &self.path)?;
            let dt = datum(t.elem).ok_or_else(|| {
                unsupported(&self.path, format!("input '{name}': {} tensors", t.elem))
            })?;
            // A bool is one byte, 0 or 1; any other byte would be undefined behaviour in Rust.
            if dt == DatumType::Bool && t.data.iter().any(|&b| b > 1) {
                return Err(RuntimeError::Input {
                    path: self.path.clone(),
                    name: name.clone(),
                    message: "a bool tensor holds a byte other than 0 or 1".into(),
                });
            }
            // SAFETY: the byte length is checked against the shape and type by tract, and bool
            // bytes are 0 or 1 (above).
            let tensor = unsafe { Tensor::from_raw_dt(dt, &t.shape, &t.data) }
                .map_err(|e| err(&self.path, e))?;
            key.push((dt, t.shape.clone()));
            ordered.push(tensor.into_tvalue());
        }
        let plan = self.plan(key)?;
        let outputs = plan
            .run(ordered.into_iter().collect())
            .map_err(|e| err(&self.path, e))?;
        let mut out = Vec::with_capacity(outputs.len());
        for (name, v) in self.output_names.iter().zip(outputs) {
            let t = v.into_tensor();
            let e = elem(t.datum_type()).ok_or_else(|| {
                unsupported(
                    &self.path,
                    format!("output '{name}' of type {:?}", t.datum_type()),
                )
            })?;
            out.push((
                name.clone(),
                HostTensor {
                    elem: e,
                    shape: t.shape().to_vec(),
                    data: t.as_bytes().to_vec(),
                },
            ));
        }
        Ok(out)
    }
}
