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

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EngineKind {
    Tract,
    Ort,
    Litert,
    /// OpenVINO on one of its devices (`CPU`, `GPU`, `NPU`, `GPU.1`).
    OpenVino(String),
}

/// The engine names `--engine` and `--reference` accept.
pub const ENGINE_NAMES: &str = "tract, ort, litert, openvino[:DEVICE]";

// Devices named `ov-DEVICE` (`--devices ov:CPU`) are OpenVINO's own: their parts run on
// OpenVINO on that device unless `--engine` says otherwise.
pub use cleave_files::{openvino_device, OPENVINO_PREFIX};

impl EngineKind {
    /// `tract`, `ort` (or `onnxruntime`), `litert` (or `tflite`), `openvino` (on its CPU) or
    /// `openvino:DEVICE`.
    pub fn parse(s: &str) -> Option<EngineKind> {
        match s {
            "tract" => Some(EngineKind::Tract),
            "ort" | "onnxruntime" => Some(EngineKind::Ort),
            "litert" | "tflite" => Some(EngineKind::Litert),
            "openvino" | "ov" => Some(EngineKind::OpenVino("CPU".into())),
            _ => match s.split_once(':') {
                Some(("openvino" | "ov", d)) if valid_ov_device(d) => {
                    Some(EngineKind::OpenVino(d.to_string()))
                }
                _ => None,
            },
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            EngineKind::Tract => "tract",
            EngineKind::Ort => "ort",
            EngineKind::Litert => "litert",
            EngineKind::OpenVino(_) => "openvino",
        }
    }

    /// The name with the device where there is one: `openvino:GPU`.
    pub fn label(&self) -> String {
        match self {
            EngineKind::OpenVino(d) => format!("openvino:{d}"),
            other => other.name().to_string(),
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

/// OpenVINO device names: `CPU`, `GPU.1`, `HETERO:GPU,CPU` are letters, digits and `.:,_-`.
fn valid_ov_device(d: &str) -> bool {
    !d.is_empty()
        && d.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | ',' | '_' | '-'))
}

fn is_tflite(file: &Path) -> bool {
    file.extension().is_some_and(|e| e == "tflite")
}

/// Makes the engine of a kind (supplied by the crate that links the engines).
pub type EngineFactory<'a> = &'a dyn Fn(EngineKind) -> Result<Box<dyn Engine>, RuntimeError>;

/// Which engine runs each backend (`--engine npu=tract,cpu=ort`). By default a `.tflite` part
/// runs on LiteRT, a backend named `ort` on ONNX Runtime, a backend `ov-DEVICE` on OpenVINO's
/// DEVICE and every other backend on tract.
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
                format!("--engine '{p}': unknown engine '{e}' (engines: {ENGINE_NAMES})")
            })?;
            map.insert(b.trim().to_string(), kind);
        }
        Ok(EngineMap { map })
    }

    /// The engine for a part file: `--engine`'s choice for its backend, else LiteRT for a
    /// `.tflite` file, else [`EngineMap::for_backend`]'s default.
    pub fn for_part(&self, backend: &str, file: &Path) -> EngineKind {
        match self.map.get(backend) {
            Some(kind) => kind.clone(),
            None if openvino_device(backend).is_some() => self.for_backend(backend),
            None if is_tflite(file) => EngineKind::Litert,
            None => self.for_backend(backend),
        }
    }

    /// The engine for a part of a connection file: `--engine`'s choice for its backend, else
    /// the engine the file records for the part, else [`EngineMap::for_part`]'s default.
    pub fn for_conn_part(
        &self,
        backend: &str,
        file: &Path,
        recorded: Option<&str>,
    ) -> Result<EngineKind, String> {
        if let Some(kind) = self.map.get(backend) {
            return Ok(kind.clone());
        }
        match recorded {
            Some(e) => EngineKind::parse(e).ok_or_else(|| {
                format!(
                    "part {}: unknown engine '{e}' (engines: {ENGINE_NAMES})",
                    file.display()
                )
            }),
            None => Ok(self.for_part(backend, file)),
        }
    }

    pub fn for_backend(&self, backend: &str) -> EngineKind {
        if let Some(kind) = self.map.get(backend) {
            return kind.clone();
        }
        if let Some(d) = openvino_device(backend) {
            return EngineKind::OpenVino(d.to_string());
        }
        if backend == "ort" {
            EngineKind::Ort
        } else {
            EngineKind::Tract
        }
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

    #[test]
    fn openvino_devices_run_on_openvino_unless_engine_says_otherwise() {
        let ov = |d: &str| EngineKind::OpenVino(d.to_string());
        assert_eq!(EngineKind::parse("openvino"), Some(ov("CPU")));
        assert_eq!(EngineKind::parse("openvino:GPU.1"), Some(ov("GPU.1")));
        assert_eq!(EngineKind::parse("openvino:"), None);
        assert_eq!(EngineKind::parse("openvino:a b"), None);
        assert_eq!(ov("NPU").label(), "openvino:NPU");
        let m = EngineMap::default();
        let onnx = Path::new("m.00001_ov-GPU.onnx");
        assert_eq!(m.for_part("ov-GPU", onnx), ov("GPU"));
        assert_eq!(m.for_part("ov-NPU", Path::new("m.tflite")), ov("NPU"));
        assert_eq!(m.for_part("ov-", onnx), EngineKind::Tract);
        let m = EngineMap::parse(&["ov-GPU=ort".into(), "npu=openvino:NPU".into()]).unwrap();
        assert_eq!(m.for_part("ov-GPU", onnx), EngineKind::Ort);
        assert_eq!(m.for_part("npu", onnx), ov("NPU"));
        let e = EngineMap::parse(&["npu=openvin".into()]).unwrap_err();
        assert!(e.contains("openvino[:DEVICE]"), "{e}");
    }
}
