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
    Litert,
}

impl EngineKind {
    pub fn parse(s: &str) -> Option<EngineKind> {
        match s {
            "tract" => Some(EngineKind::Tract),
            "ort" | "onnxruntime" => Some(EngineKind::Ort),
            "litert" | "tflite" => Some(EngineKind::Litert),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Tract => "tract",
            EngineKind::Ort => "ort",
            EngineKind::Litert => "litert",
        }
    }

    /// The engine that runs a whole model unless told otherwise: LiteRT for a `.tflite` file,
    /// else tract.
    pub fn default_for(file: &Path) -> EngineKind {
        if is_tflite(file) {
            EngineKind::Litert
        } else {
            EngineKind::Tract
        }
    }

    /// The engines that run a model file, the preferred first: LiteRT for a `.tflite` file,
    /// else ONNX Runtime, then tract.
    pub fn candidates(file: &Path) -> &'static [EngineKind] {
        if is_tflite(file) {
            &[EngineKind::Litert]
        } else {
            &[EngineKind::Ort, EngineKind::Tract]
        }
    }
}

fn is_tflite(file: &Path) -> bool {
    file.extension().is_some_and(|e| e == "tflite")
}

/// Makes the engine of a kind (supplied by the crate that links the engines).
pub type EngineFactory<'a> = &'a dyn Fn(EngineKind) -> Result<Box<dyn Engine>, RuntimeError>;

/// Which engine runs each backend (`--engine npu=tract,cpu=ort`). By default a `.tflite` part
/// runs on LiteRT, a backend named `ort` on ONNX Runtime and every other backend on tract.
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
                format!("--engine '{p}': unknown engine '{e}' (engines: tract, ort, litert)")
            })?;
            map.insert(b.trim().to_string(), kind);
        }
        Ok(EngineMap { map })
    }

    /// The engine for a part file: `--engine`'s choice for its backend, else LiteRT for a
    /// `.tflite` file, else [`EngineMap::for_backend`]'s default.
    pub fn for_part(&self, backend: &str, file: &Path) -> EngineKind {
        match self.map.get(backend) {
            Some(&kind) => kind,
            None if is_tflite(file) => EngineKind::Litert,
            None => self.for_backend(backend),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tflite_parts_default_to_litert_unless_engine_says_otherwise() {
        let m = EngineMap::default();
        let tflite = Path::new("m.00001_cpu.tflite");
        let onnx = Path::new("m.00001_ort.onnx");
        assert_eq!(m.for_part("cpu", tflite), EngineKind::Litert);
        assert_eq!(m.for_part("ort", tflite), EngineKind::Litert);
        assert_eq!(m.for_part("ort", onnx), EngineKind::Ort);
        assert_eq!(m.for_part("cpu", onnx), EngineKind::Tract);
        let m = EngineMap::parse(&["cpu=tract".into(), "npu=tflite".into()]).unwrap();
        assert_eq!(m.for_part("cpu", tflite), EngineKind::Tract);
        assert_eq!(m.for_part("npu", onnx), EngineKind::Litert);
        assert_eq!(EngineKind::parse("litert"), Some(EngineKind::Litert));
        assert_eq!(EngineKind::default_for(tflite), EngineKind::Litert);
        assert_eq!(EngineKind::default_for(onnx), EngineKind::Tract);
        assert_eq!(EngineKind::candidates(tflite), [EngineKind::Litert]);
        assert_eq!(
            EngineKind::candidates(onnx),
            [EngineKind::Ort, EngineKind::Tract]
        );
    }
}
