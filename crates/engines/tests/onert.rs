//! The onert engine against LiteRT on the synthesized TFLite models (the same file on both),
//! and on broken input. Where onert is not installed the tests say so and pass, unless
//! CLEAVE_REQUIRE_ONERT is set (the test script installs it and sets it, so there they run).

use std::path::{Path, PathBuf};

use cleave_engines::{Litert, Onert};
use cleave_ir::ElemType;
use cleave_runtime::{Engine, HostTensor, RuntimeError, Session};
use cleave_testdata::synth;

/// onert on its cpu backend, or `None` (with a note) where it is not installed and not
/// required.
fn onert() -> Option<Onert> {
    match Onert::new("cpu") {
        Ok(e) => Some(e),
        Err(e) if std::env::var_os("CLEAVE_REQUIRE_ONERT").is_none() => {
            eprintln!("skipped: {e} (set CLEAVE_REQUIRE_ONERT=1 to make this a failure)");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// An input's name, type and shape.
type Input = (&'static str, ElemType, Vec<usize>);

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn run(s: &mut Box<dyn Session>, feeds: &[(String, HostTensor)]) -> Vec<(String, HostTensor)> {
    s.run(feeds).unwrap_or_else(|e| panic!("{e}"))
}

fn assert_close(got: &[(String, HostTensor)], want: &[(String, HostTensor)], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (name, w) in want {
        let (_, g) = got
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("{what}: no output '{name}' from onert"));
        assert_eq!(g.shape, w.shape, "{what}: {name}");
        let d = g.diff(w, 1e-5, 1e-5);
        assert_eq!(d.beyond, 0, "{what}: {name}: {d:?}");
    }
}

#[test]
fn onert_matches_litert_on_the_synthesized_float_models() {
    let Some(onert) = onert() else { return };
    let litert = Litert::new().expect("LiteRT (scripts/install/requirements-tflite.txt)");
    let tmp = tempfile::tempdir().unwrap();
    let cases: [(&str, Vec<u8>, Vec<Input>); 2] = [
        (
            "names.tflite",
            synth::names_and_shared(),
            vec![("x", ElemType::F32, vec![1, 8])],
        ),
        (
            "control.tflite",
            synth::control_flow(),
            vec![
                ("x", ElemType::F32, vec![1, 4]),
                ("flag", ElemType::Bool, vec![1]),
            ],
        ),
    ];
    for (name, bytes, inputs) in cases {
        let path = write(tmp.path(), name, &bytes);
        let mut a = onert.load(&path, false).unwrap_or_else(|e| panic!("{e}"));
        let mut b = litert.load(&path, false).unwrap();
        // Several inputs on the same sessions: IF takes both branches over the seeds.
        let mut outputs = Vec::new();
        for seed in 1..=4u64 {
            let feeds: Vec<(String, HostTensor)> = inputs
                .iter()
                .map(|(n, e, s)| (n.to_string(), HostTensor::random(*e, s, seed).unwrap()))
                .collect();
            let got = run(&mut a, &feeds);
            assert_close(&got, &run(&mut b, &feeds), &format!("{name} seed {seed}"));
            outputs.push(got[0].1.data.clone());
        }
        outputs.dedup();
        assert!(outputs.len() > 1, "{name}: every seed gave the same output");
    }
}

#[test]
fn inputs_are_fed_by_name_whatever_their_order() {
    // IF's inputs are (condition, data): given in the other order, by name, the result is
    // LiteRT's; fed by position it could not be (a float is no bool).
    let Some(onert) = onert() else { return };
    let litert = Litert::new().expect("LiteRT");
    let tmp = tempfile::tempdir().unwrap();
    let path = write(tmp.path(), "computed_if.tflite", &synth::computed_if());
    let mut a = onert.load(&path, false).unwrap();
    let mut b = litert.load(&path, false).unwrap();
    let x = HostTensor::random(ElemType::F32, &[1, 4], 5).unwrap();
    for level in [-1.0f32, 1.0] {
        let level = HostTensor {
            elem: ElemType::F32,
            shape: vec![1, 1],
            data: level.to_le_bytes().to_vec(),
        };
        let feeds = vec![("x".to_string(), x.clone()), ("level".to_string(), level)];
        let got = run(&mut a, &feeds);
        assert_close(&got, &run(&mut b, &feeds), "computed_if");
        let mut swapped = feeds.clone();
        swapped.reverse();
        assert_close(&run(&mut a, &swapped), &got, "computed_if, inputs reversed");
    }
    // A feed under the wrong name is refused, naming the input.
    let e = a
        .run(&[("x".to_string(), x.clone()), ("lvl".to_string(), x)])
        .unwrap_err();
    assert!(e.to_string().contains("input 'level': not given"), "{e}");
}

#[test]
fn a_dynamic_batch_is_compiled_for_the_first_shape_and_resized_after() {
    let Some(onert) = onert() else { return };
    let litert = Litert::new().expect("LiteRT");
    let tmp = tempfile::tempdir().unwrap();
    let path = write(tmp.path(), "dynamic.tflite", &synth::dynamic_batch());
    let mut a = onert.load(&path, false).unwrap();
    let mut b = litert.load(&path, false).unwrap();
    // LiteRT's engine takes this file at batch 1 only; the rows are independent, so each row
    // of a batch is compared with LiteRT's run of that row alone.
    for (batch, seed) in [(3, 1), (3, 2), (5, 3), (1, 4)] {
        let x = HostTensor::random(ElemType::F32, &[batch, 8], seed).unwrap();
        let got = run(&mut a, &[("x".to_string(), x.clone())]);
        assert_eq!(got[0].1.shape, [batch, 6], "batch {batch}");
        for (r, row) in x.data.chunks(8 * 4).enumerate() {
            let row = HostTensor {
                elem: ElemType::F32,
                shape: vec![1, 8],
                data: row.to_vec(),
            };
            let want = run(&mut b, &[("x".to_string(), row)]);
            let got_row = HostTensor {
                elem: ElemType::F32,
                shape: vec![1, 6],
                data: got[0].1.data[r * 6 * 4..][..6 * 4].to_vec(),
            };
            let got_row = vec![(got[0].0.clone(), got_row)];
            assert_close(&got_row, &want, &format!("batch {batch} row {r}"));
        }
    }
    // A fixed dim that does not match is refused before onert sees it.
    let bad = vec![(
        "x".to_string(),
        HostTensor::random(ElemType::F32, &[2, 7], 1).unwrap(),
    )];
    let e = a.run(&bad).unwrap_err();
    assert!(e.to_string().contains("the model wants [-1, 8]"), "{e}");
}

#[test]
fn broken_and_refused_models_are_errors_in_one_line_not_crashes() {
    let Some(onert) = onert() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let bytes = synth::instance_norm_circle();
    // Truncated: onert 0.1.0 reads an unverified file and crashes on this one.
    let cut = write(tmp.path(), "cut.circle", &bytes[..bytes.len() / 2]);
    let e = onert
        .load(&cut, false)
        .err()
        .expect("a truncated file loads");
    assert!(matches!(e, RuntimeError::Model { .. }), "{e:?}");
    assert!(e.to_string().contains("truncated"), "{e}");
    // A circle file named .tflite: onert would read it with the wrong reader.
    let misnamed = write(tmp.path(), "norm.tflite", &bytes);
    let e = onert
        .load(&misnamed, false)
        .err()
        .expect("a misnamed file loads");
    assert!(
        e.to_string().contains("only from a file named .circle"),
        "{e}"
    );
    // An op onert's backends lack is refused at load, in onert's words.
    let norm = write(tmp.path(), "norm.circle", &bytes);
    let ruy = Onert::new("ruy").unwrap();
    match ruy.load(&norm, false) {
        Err(RuntimeError::Unsupported { message, .. }) => {
            assert!(!message.contains('\n'), "{message}");
            assert!(
                message.contains("NYI") || message.contains("backend"),
                "{message}"
            );
        }
        Err(e) => panic!("not an unsupported-op error: {e:?}"),
        Ok(_) => panic!("ruy alone runs MEAN and POW"),
    }
    // Buffers kept after the flatbuffer (as converters write models past 2 GiB): onert 0.1.0
    // reads weights from the wrong place and crashes, so cleave refuses them first.
    let offsets = write(tmp.path(), "offsets.tflite", &synth::names_offsets());
    let e = onert.load(&offsets, false).err().expect("offsets load");
    assert!(matches!(e, RuntimeError::Unsupported { .. }), "{e:?}");
    assert!(e.to_string().contains("after the flatbuffer"), "{e}");
    let e = Onert::new("../cpu").err().expect("a path as a backend");
    assert!(e.to_string().contains("e.g. cpu or ruy;cpu"), "{e}");
}
