//! Where the test models are. They are fetched from the onnx wheels on PyPI by
//! `scripts/testdata/fetch-test-data.sh` into `$CLEAVE_TEST_DATA` (default `~/.cache/cleave/test-data`);
//! nothing large is committed. A test that needs them fails, loudly, when they are missing.
//! The cases no downloaded model has are built here instead ([`synth`]).

use std::path::{Path, PathBuf};

pub mod mutate;
pub mod synth;

/// The folders of ONNX's backend test data that cleave's tests use.
pub const SUITES: [&str; 5] = [
    "light",
    "pytorch-converted",
    "pytorch-operator",
    "simple",
    "node",
];

pub const LIGHT_MODELS: [&str; 9] = [
    "light_bvlc_alexnet",
    "light_densenet121",
    "light_inception_v1",
    "light_inception_v2",
    "light_resnet50",
    "light_shufflenet",
    "light_squeezenet",
    "light_vgg19",
    "light_zfnet512",
];

/// The test data folder. Panics with the fix when it is absent.
pub fn dir() -> PathBuf {
    let dir = match std::env::var_os("CLEAVE_TEST_DATA") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/cleave/test-data"),
    };
    if !dir.join("light/light_resnet50.onnx").is_file() || !dir.join("node").is_dir() {
        panic!(
            "test data missing in {}: run `bash scripts/testdata/fetch-test-data.sh` (or set CLEAVE_TEST_DATA)",
            dir.display()
        );
    }
    dir
}

pub fn light(name: &str) -> PathBuf {
    dir().join("light").join(format!("{name}.onnx"))
}

/// The seeded randomised copy of a light model (see scripts/testdata/randomize_light.py).
pub fn light_random(name: &str) -> PathBuf {
    let p = dir().join("light-random").join(format!("{name}.onnx"));
    assert!(
        p.is_file(),
        "{} missing: run `bash scripts/testdata/fetch-test-data.sh`",
        p.display()
    );
    p
}

/// Every `.onnx` file of the given suites, sorted. A suite without one fails the test that
/// asked, so a test never passes on models that were never fetched.
pub fn onnx_files(suites: &[&str]) -> Vec<PathBuf> {
    let root = dir();
    let mut out = Vec::new();
    for s in suites {
        let before = out.len();
        collect(&root.join(s), &mut out);
        assert!(
            out.len() > before,
            "no .onnx file in {}: run `bash scripts/testdata/fetch-test-data.sh`",
            root.join(s).display()
        );
    }
    out.sort();
    out
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|x| x == "onnx") {
            out.push(p);
        }
    }
}

/// The TFLite test models `scripts/testdata/tflite_models.py` fetched: MediaPipe's face models and
/// their calibrated uint8/int8 copies, sorted.
pub fn tflite_files() -> Vec<PathBuf> {
    tflite_in(&["tflite", "tflite-quant"], 9)
}

/// The stateful TFLite models (resource variables), from `scripts/testdata/tflite_models.py fetch`.
pub fn stateful_tflite_files() -> Vec<PathBuf> {
    tflite_in(&["tflite-stateful"], 4)
}

/// BirdNET's Keras exports (zero-element constants, RFFT2D, computed shapes), from
/// `scripts/testdata/tflite_models.py fetch`.
pub fn keras_tflite_files() -> Vec<PathBuf> {
    tflite_in(&["tflite-keras"], 2)
}

/// TFLite models with WHILE loops converted by TensorFlow (a Keras GRU stack, an LSTM cell
/// in a loop, a data-dependent `tf.while_loop`), from
/// `scripts/testdata/tf_while_models.py`.
pub fn while_tflite_files() -> Vec<PathBuf> {
    tflite_in(&["tflite-while"], 3)
}

/// Decoder LLMs as exporters write them, `(name, model.onnx)`: Optimum's Llama (grouped-query
/// attention) and GPT-2, and onnxruntime-genai's builder's Llama, random weights, each with a
/// word-level `tokenizer.json`, from `scripts/testdata/export_decoders.py`.
pub fn exported_decoders() -> Vec<(&'static str, PathBuf)> {
    let root = dir().join("decoders-exported");
    ["optimum_llama", "optimum_gpt2", "genai_llama"]
        .into_iter()
        .map(|name| {
            let p = root.join(name).join("model.onnx");
            assert!(
                p.is_file(),
                "{} missing: run `bash scripts/testdata/fetch-test-data.sh`",
                p.display()
            );
            (name, p)
        })
        .collect()
}

/// The `.tflite` files in these folders of the test data, sorted; at least `at_least`.
fn tflite_in(folders: &[&str], at_least: usize) -> Vec<PathBuf> {
    let root = dir();
    let mut files: Vec<PathBuf> = folders
        .iter()
        .filter_map(|d| std::fs::read_dir(root.join(d)).ok())
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "tflite"))
        .collect();
    files.sort();
    assert!(
        files.len() >= at_least,
        "{} TFLite models in {} of {}: run `bash scripts/testdata/fetch-test-data.sh`",
        files.len(),
        folders.join(", "),
        root.display()
    );
    files
}

/// The repository's test oracles, `scripts/oracles/`. Found from the test's crate at run
/// time: a build reused from a checkout elsewhere (cargo shares artifacts across moved
/// workspaces) would otherwise name that checkout's folder.
pub fn oracles() -> PathBuf {
    let here = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    here.ancestors()
        .map(|d| d.join("scripts/oracles"))
        .find(|s| s.join("tflite_oracle.py").is_file())
        .unwrap_or_else(|| here.join("../../scripts/oracles"))
}
