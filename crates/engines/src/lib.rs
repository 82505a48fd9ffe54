//! The engines behind `cleave_runtime::Engine`: [`Tract`] runs ONNX in process,
//! [`OnnxRuntime`] loads ONNX Runtime's shared library at run time, [`Litert`] loads LiteRT's
//! (for `.tflite` models), [`OpenVino`] loads OpenVINO's C library (ONNX and TFLite, on
//! any OpenVINO device), [`Onert`] loads Samsung ONE's runtime (circle and TFLite, on its
//! backends), listed in one [`registry`] by name and the formats they run.
//!
//! Architecture invariant: only this crate links an inference engine.

mod dylib;
mod guard;
mod isolate;
mod litert_dims;
mod litert_engine;
mod litert_ffi;
mod onert_engine;
mod onert_ffi;
mod openvino_engine;
mod ort_engine;
mod python_pkg;
mod stderr_capture;
mod tract_engine;

use std::sync::OnceLock;

use cleave_runtime::{Devices, Engine, EngineEntry, EngineKind, Registry, RuntimeError};

pub use isolate::{set_launcher, worker_main, Launcher, ISOLATE_VARIABLE};
pub use litert_engine::{litert_library_path, Litert};
pub use onert_engine::Onert;
use onert_engine::ONERT_DEFAULT_BACKENDS;
pub use openvino_engine::{openvino_library_path, openvino_version, OpenVino, OPENVINO_WHEEL};
pub use ort_engine::{ort_library_path, OnnxRuntime};
pub use python_pkg::{isolated as isolated_python, python, run_code as python_code};
pub use tract_engine::Tract;

/// Backends named `ov-DEVICE` (`--devices ov:CPU`) are OpenVINO's devices.
pub const OPENVINO_PREFIX: &str = "ov-";

/// Backends named `onert-BACKEND` run on that backend of onert.
pub const ONERT_PREFIX: &str = "onert-";

/// The OpenVINO device of a backend named `ov-DEVICE`.
pub fn openvino_device(backend: &str) -> Option<&str> {
    backend
        .strip_prefix(OPENVINO_PREFIX)
        .filter(|d| !d.is_empty())
}

/// Every engine this crate links, in the order they are tried to run a whole model of a
/// format: ONNX Runtime, then tract, for ONNX; LiteRT for TFLite. A part runs on tract
/// (ONNX), LiteRT (TFLite) or onert (circle) unless its backend or `--engine` says otherwise;
/// OpenVINO runs the parts of a backend named `ov-DEVICE` on that device, onert those of a
/// backend named `onert-BACKEND`.
pub fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut r = Registry::default();
        let plain = |name, aliases, formats, default_for, make| EngineEntry {
            name,
            aliases,
            formats,
            default_for,
            whole_model: true,
            devices: None,
            library: None,
            make,
        };
        r.register(EngineEntry {
            library: Some(&ort_engine::LIBRARY),
            ..plain("ort", &["onnxruntime"], &["onnx"], &[], |_| {
                guarded(OnnxRuntime::new())
            })
        });
        r.register(plain("tract", &[], &["onnx"], &["onnx"], |_| {
            guarded(Ok(Tract))
        }));
        // LiteRT and onert read flatbuffers they do not verify: each runs in a worker process
        // where the program can start one (`isolate`).
        r.register(EngineEntry {
            library: Some(&litert_engine::LIBRARY),
            ..plain("litert", &["tflite"], &["tflite"], &["tflite"], |_| {
                let library = &litert_engine::LIBRARY;
                isolate::or_in_process("litert", "LiteRT", "litert".into(), library, || {
                    guarded(Litert::new())
                })
            })
        });
        r.register(EngineEntry {
            whole_model: false,
            library: Some(&openvino_engine::LIBRARY),
            devices: Some(Devices {
                default: "CPU",
                backend_prefix: OPENVINO_PREFIX,
                what: "DEVICE",
            }),
            ..plain("openvino", &["ov"], &["onnx", "tflite"], &[], |device| {
                guarded(OpenVino::new(device.unwrap_or("CPU")))
            })
        });
        // Not tried for whole models (constant folding): which ops it runs depends on the
        // backends, and a circle model has no other engine to fall back on.
        r.register(EngineEntry {
            whole_model: false,
            library: Some(&onert_engine::LIBRARY),
            devices: Some(Devices {
                default: ONERT_DEFAULT_BACKENDS,
                backend_prefix: ONERT_PREFIX,
                what: "BACKENDS",
            }),
            ..plain(
                "onert",
                &["nnfw"],
                &["circle", "tflite"],
                &["circle"],
                |backends| {
                    let backends = backends.unwrap_or(ONERT_DEFAULT_BACKENDS);
                    onert_engine::check_backends(backends).map_err(|message| {
                        RuntimeError::Unavailable {
                            engine: "onert",
                            message,
                        }
                    })?;
                    let label = format!("onert:{backends}");
                    let library = &onert_engine::LIBRARY;
                    isolate::or_in_process("onert", "onert", label, library, || {
                        guarded(Onert::new(backends))
                    })
                },
            )
        });
        r
    })
}

/// Loads and runs of an engine are guarded: a panic inside it is an error naming the model,
/// never the end of the process.
fn guarded<E: Engine + 'static>(
    engine: Result<E, RuntimeError>,
) -> Result<Box<dyn Engine>, RuntimeError> {
    Ok(Box::new(guard::Guarded(Box::new(engine?))))
}

/// A TFLite or circle file, verified, and checked against what an engine with `needs`
/// believes of it without checking (`cleave_tflite::trust`).
fn trusted(
    path: &std::path::Path,
    needs: cleave_tflite::EngineNeeds,
    engine: &'static str,
) -> Result<cleave_tflite::FlatModel, RuntimeError> {
    // A file that cannot be read is said as such, not as a bad model.
    std::fs::File::open(path).map_err(|source| RuntimeError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let model = cleave_tflite::FlatModel::load(path).map_err(|e| RuntimeError::Model {
        path: path.to_path_buf(),
        message: e.message.to_string(),
    })?;
    cleave_tflite::check_for_engine(&model, needs).map_err(|m| RuntimeError::Model {
        path: path.to_path_buf(),
        message: format!("{engine} would trust the file where it is wrong: {m}"),
    })?;
    Ok(model)
}

/// The engine of a kind.
pub fn engine(kind: EngineKind) -> Result<Box<dyn Engine>, RuntimeError> {
    registry().make(&kind)
}

#[cfg(test)]
mod tests {
    use super::registry;
    use std::path::Path;

    fn pair(backend: &str, engine: &str) -> (String, String) {
        (backend.to_string(), engine.to_string())
    }

    fn kind(s: &str) -> cleave_runtime::EngineKind {
        registry().parse(s).unwrap()
    }

    #[test]
    fn parts_run_on_their_formats_default_unless_backend_or_engine_says_otherwise() {
        let r = registry();
        let m = r.map();
        assert_eq!(m.for_part("cpu", "tflite"), Ok(kind("litert")));
        assert_eq!(m.for_part("ort", "tflite"), Ok(kind("litert")));
        assert_eq!(m.for_part("ort", "onnx"), Ok(kind("ort")));
        assert_eq!(m.for_part("cpu", "onnx"), Ok(kind("tract")));
        assert_eq!(m.for_part("cpu", "circle"), Ok(kind("onert")));
        assert_eq!(m.for_part("acl_cl", "circle"), Ok(kind("onert:cpu")));
        assert_eq!(m.for_part("onert-ruy", "tflite"), Ok(kind("onert:ruy")));
        assert_eq!(kind("onert:ruy;cpu").label(), "onert:ruy;cpu");
        assert_eq!(r.default_for("circle"), Some(kind("onert:cpu")));
        assert!(r.candidates("circle").is_empty());
        let m = r
            .parse_map(&[pair("cpu", "tract"), pair("npu", "tflite")])
            .unwrap();
        assert_eq!(m.for_part("cpu", "tflite"), Ok(kind("tract")));
        assert_eq!(m.for_part("npu", "onnx"), Ok(kind("litert")));
        assert_eq!(kind("onnxruntime"), kind("ort"));
        assert_eq!(r.default_for("tflite"), Some(kind("litert")));
        assert_eq!(r.default_for("onnx"), Some(kind("tract")));
        assert_eq!(r.candidates("tflite"), [kind("litert")]);
        assert_eq!(r.candidates("onnx"), [kind("ort"), kind("tract")]);
    }

    #[test]
    fn openvino_devices_run_on_openvino_unless_engine_says_otherwise() {
        let r = registry();
        assert_eq!(kind("openvino").label(), "openvino:CPU");
        assert_eq!(kind("ov:GPU.1").label(), "openvino:GPU.1");
        assert_eq!(r.parse("openvino:"), None);
        let m = r.map();
        assert_eq!(m.for_part("ov-GPU", "onnx"), Ok(kind("openvino:GPU")));
        assert_eq!(m.for_part("ov-NPU", "tflite"), Ok(kind("openvino:NPU")));
        assert_eq!(m.for_part("ov-", "onnx"), Ok(kind("tract")));
        let m = r
            .parse_map(&[pair("ov-GPU", "ort"), pair("npu", "openvino:NPU")])
            .unwrap();
        assert_eq!(m.for_part("ov-GPU", "onnx"), Ok(kind("ort")));
        assert_eq!(m.for_part("npu", "onnx"), Ok(kind("openvino:NPU")));
        let (_, e) = r.parse_map(&[pair("npu", "openvin")]).unwrap_err();
        assert!(e.contains("openvino[:DEVICE]"), "{e}");
        // The recorded engine of a part applies unless --engine names its backend.
        let p = Path::new("m.00001_ov-CPU.onnx");
        let m = r.map();
        assert_eq!(
            m.for_conn_part("ov-CPU", p, "onnx", Some("openvino:CPU")),
            Ok(kind("openvino:CPU"))
        );
    }
}
