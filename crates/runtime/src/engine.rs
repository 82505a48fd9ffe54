//! Engines behind one trait; the engines themselves live in `cleave-engines`.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::RuntimeError;
use crate::tensor::HostTensor;

/// A loaded model, ready to run. Inputs and outputs are by tensor name.
pub trait Session: Send {
    fn run(
        &mut self,
        inputs: &[(String, HostTensor)],
    ) -> Result<Vec<(String, HostTensor)>, RuntimeError>;
}

pub trait Engine: Send + Sync {
    fn name(&self) -> &'static str;
    /// Loads a model. `single_thread` keeps the engine on one core (pipelined workers).
    fn load(&self, model: &Path, single_thread: bool) -> Result<Box<dyn Session>, RuntimeError>;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EngineKind {
    Tract,
    Ort,
}

impl EngineKind {
    pub fn parse(s: &str) -> Option<EngineKind> {
        match s {
            "tract" => Some(EngineKind::Tract),
            "ort" | "onnxruntime" => Some(EngineKind::Ort),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Tract => "tract",
            EngineKind::Ort => "ort",
        }
    }
}

/// Makes the engine of a kind (supplied by the crate that links the engines).
pub type EngineFactory<'a> = &'a dyn Fn(EngineKind) -> Result<Box<dyn Engine>, RuntimeError>;

/// Which engine runs each backend (`--engine npu=tract,cpu=ort`). By default a backend named
/// `ort` runs on ONNX Runtime and every other backend on tract.
#[derive(Clone, Debug, Default)]
pub struct EngineMap {
    map: BTreeMap<String, EngineKind>,
}

impl EngineMap {
    /// Parses `backend=engine` pairs.
    pub fn parse(pairs: &[String]) -> Result<EngineMap, String> {
        let mut map = BTreeMap::new();
        for p in pairs {
            let (b, e) = p.split_once('=').ok_or_else(|| {
                format!("--engine '{p}': expected BACKEND=ENGINE, e.g. npu=tract")
            })?;
            let kind = EngineKind::parse(e.trim()).ok_or_else(|| {
                format!("--engine '{p}': unknown engine '{e}' (engines: tract, ort)")
            })?;
            map.insert(b.trim().to_string(), kind);
        }
        Ok(EngineMap { map })
    }

    pub fn for_backend(&self, backend: &str) -> EngineKind {
        self.map
            .get(backend)
            .copied()
            .unwrap_or(if backend == "ort" {
                EngineKind::Ort
            } else {
                EngineKind::Tract
            })
    }
}
