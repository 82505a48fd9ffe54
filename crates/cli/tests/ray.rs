//! `cleave serve --ray` on a real two-node Ray cluster: resnet50 (random weights) split into 2
//! and 3 stages and a TFLite face detector in 9 parts (two of them side by side), each part
//! checked to run on the node its backend's resources demand and on its format's engine,
//! outputs and every boundary tensor equal to the whole model on ONNX Runtime or LiteRT, the
//! boundary tensors kept away from the ingress, throughput at 1 and 8
//! requests in flight, a worker node killed mid-run and brought back, and the same through
//! the cleave binary; all of it on the handle chain, then again on the compiled graph. The
//! cluster lives in network and PID namespaces of the script's own
//! with only loopback (scripts/ray_cluster_test.sh), so no packet leaves the machine.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

use cleave_testdata::{light_random, tflite_files, while_tflite_files};
use common::{cleave, ok, os, python, repo};

fn stages(model: &Path, n: &str, devices: &str, out: &Path) -> std::path::PathBuf {
    ok(&cleave(&[
        os("partition"),
        model.as_os_str(),
        os("--stages"),
        os(n),
        os("--devices"),
        os(devices),
        os("-o"),
        out.as_os_str(),
    ]));
    out.join("light_resnet50.conn.json")
}

/// MediaPipe's full-range face detector (TFLite) with its upsampling and output reshapes on
/// the cpu: 9 parts over npu and cpu, the last two side by side (a graph, not a chain).
fn face_detector_in_9_parts(tmp: &Path) -> std::path::PathBuf {
    let model = tflite_files()
        .into_iter()
        .find(|p| p.ends_with("face_detection_full_range.tflite"))
        .expect("the TFLite test data: bash scripts/testdata/fetch-test-data.sh");
    let rules = tmp.join("face.part");
    std::fs::write(
        &rules,
        "[partition]\nbackends=npu,cpu\ndefault=npu\ncomply=opcode\n\n[OPCODE]\nRESIZE_BILINEAR=cpu\nCONCATENATION=cpu\nRESHAPE=cpu\n",
    )
    .unwrap();
    let out = tmp.join("face");
    ok(&cleave(&[
        os("partition"),
        model.as_os_str(),
        os("--rules"),
        rules.as_os_str(),
        os("-o"),
        out.as_os_str(),
    ]));
    out.join("face_detection_full_range.conn.json")
}

/// A Keras GRU (a WHILE loop) converted to circle (`cleave convert`) and cut in two: its parts
/// are served on onert. (onert loads none of the face detectors: it lacks PRELU and refuses
/// their RESHAPEs.)
fn gru_as_circle(tmp: &Path) -> std::path::PathBuf {
    let model = while_tflite_files()
        .into_iter()
        .find(|p| p.ends_with("keras_gru.tflite"))
        .expect("the TFLite test data: bash scripts/testdata/fetch-test-data.sh");
    let circle = tmp.join("gru.circle");
    ok(&cleave(&[
        os("convert"),
        model.as_os_str(),
        circle.as_os_str(),
    ]));
    let rules = tmp.join("gru.part");
    std::fs::write(
        &rules,
        "[partition]\nbackends=npu,cpu\ndefault=npu\ncomply=opcode\n\n[OPCODE]\nFULLY_CONNECTED=cpu\nSTRIDED_SLICE=cpu\n",
    )
    .unwrap();
    let out = tmp.join("gru");
    ok(&cleave(&[
        os("partition"),
        circle.as_os_str(),
        os("--rules"),
        rules.as_os_str(),
        os("-o"),
        out.as_os_str(),
    ]));
    out.join("gru.conn.json")
}

/// A command run with the Python environment that serves: the parts run on cleave's runtime
/// through the installed package's extension, so Ray, its CLIs and the `cleave` package come
/// from `CLEAVE_RAY_VENV` (scripts/test.sh installs Ray beside the wheel there), else from
/// PATH's python3.
fn with_serving_python(mut c: Command) -> Command {
    if let Some(venv) = std::env::var_os("CLEAVE_RAY_VENV") {
        let bin = Path::new(&venv).join("bin");
        let path = std::env::var_os("PATH").unwrap_or_default();
        let joined =
            std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(&path)))
                .unwrap();
        c.env("PATH", joined)
            .env("CLEAVE_PYTHON", bin.join("python3"));
    }
    c
}

/// The whole cluster test on one data plane; its stdout.
fn cluster_test(plane: &str, conns: &[&Path], one: &Path) -> String {
    let out = with_serving_python(Command::new("bash"))
        .arg(repo().join("scripts/ray_cluster_test.sh"))
        .args(conns)
        .env("CLEAVE_BIN", env!("CARGO_BIN_EXE_cleave"))
        .env("CLEAVE_RAY_TEST_BASELINE", one)
        .env("CLEAVE_RAY_TEST_PLANE", plane)
        .env("CLEAVE_RAY_TEST_REQUESTS", "30")
        .env("CLEAVE_RAY_TEST_LIMIT_S", "1200")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The figures (placement, throughput, per-hop overhead, failure timings) for the log.
    println!("== the {plane} data plane\n{stdout}");
    assert!(
        out.status.success(),
        "{plane}: exit {:?}\n{stdout}\n{stderr}",
        out.status.code()
    );
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("ray_cluster_test: ") && l.contains(" passed, "))
        .unwrap_or_default()
        .to_string();
    assert!(
        summary.ends_with(", 0 failed"),
        "{plane}: {summary}\n{stdout}"
    );
    let passed: usize = summary
        .trim_start_matches("ray_cluster_test: ")
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    // The four partitions' checks, the failure test and the binary's own: not a partial run.
    assert!(passed >= 55, "{plane}: {summary}");
    stdout
}

/// One cluster at a time: two would starve each other on two cores.
static ONE_CLUSTER: Mutex<()> = Mutex::new(());

/// Both data planes, one after the other (two clusters at once would starve each other on
/// two cores), each serving ONNX, TFLite and circle partitions: the handle chain, and the
/// compiled graph with a worker node killed and brought back.
#[test]
fn resnet50_in_2_and_3_stages_served_on_a_two_node_ray_cluster() {
    // The namespaces need root; CI runs as root. Elsewhere, skipping must be asked for.
    if std::env::var_os("CLEAVE_SKIP_RAY").is_some() {
        eprintln!("CLEAVE_SKIP_RAY is set: the Ray cluster test did not run");
        return;
    }
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let model = light_random("light_resnet50");
    let two = stages(&model, "2", "cpu,npu", &tmp.path().join("s2"));
    let three = stages(&model, "3", "cpu,npu,cpu2", &tmp.path().join("s3"));
    let one = stages(&model, "1", "cpu", &tmp.path().join("s1"));
    let face = face_detector_in_9_parts(tmp.path());
    let circle = gru_as_circle(tmp.path());
    let conns = [
        two.as_path(),
        three.as_path(),
        face.as_path(),
        circle.as_path(),
    ];
    cluster_test("handles", &conns, &one);
    let compiled = cluster_test("compiled", &conns, &one);
    assert!(
        compiled.contains("PASS node restart: requests succeed again"),
        "{compiled}"
    );
}

/// A decoder (tiny Llama, random weights) served as stages on the two-node cluster, each
/// stage keeping its sequences' KV caches (scripts/ray_decoder_test.py): 4 stages, then 2 over
/// both nodes with each node's memory resource below the model's weights; tokens streamed over
/// /v1/completions and the handle equal to onnxruntime's whole-model decode; 8 sequences at
/// once; a stage's actor killed, then the worker node, mid-stream, with the same tokens.
#[test]
fn decoder_stages_stream_on_a_two_node_ray_cluster() {
    if std::env::var_os("CLEAVE_SKIP_RAY").is_some() {
        eprintln!("CLEAVE_SKIP_RAY is set: the Ray decoder test did not run");
        return;
    }
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    python("testdata/make_decoder_models.py", &[tmp.path()]);
    let model = tmp.path().join("tiny_llama.onnx");
    let cut = |n: &str, devices: Option<&str>, dir: &str| {
        let out = tmp.path().join(dir);
        let mut args = vec![
            os("partition"),
            model.as_os_str(),
            os("--stages"),
            os(n),
            os("-o"),
            out.as_os_str(),
        ];
        if let Some(d) = devices {
            args.extend([os("--devices"), os(d)]);
        }
        ok(&cleave(&args));
        out.join("tiny_llama.conn.json")
    };
    let four = cut("4", None, "s4");
    let two = cut("2", Some("cpu2,npu"), "nodes2");
    let conn: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&two).unwrap()).unwrap();
    let weights: Vec<u64> = conn["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["weights_bytes"].as_u64().unwrap())
        .collect();
    // Below the whole model's weights, above either stage's.
    let memory = weights.iter().sum::<u64>() * 85 / 100;
    assert!(weights.iter().all(|&w| w < memory), "{weights:?}");
    let memory = memory.to_string();
    let out = with_serving_python(Command::new("bash"))
        .arg(repo().join("scripts/ray_cluster_test.sh"))
        .args([&four, &two])
        .env("CLEAVE_RAY_DRIVER", "decoder")
        .env("CLEAVE_BIN", env!("CARGO_BIN_EXE_cleave"))
        .env("CLEAVE_RAY_NODE_MEMORY", &memory)
        .env("CLEAVE_RAY_TEST_LIMIT_S", "600")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "PASS dec2 (2 stages, tiny_llama.conn.json): stage 2 (npu) on its backend's node",
        "PASS the model's weights exceed each node's memory resource",
        "PASS 8 sequences at once",
        "PASS dec2: stage 1's actor killed: the stream goes on with the same tokens",
        "PASS dec2: the worker node killed: the stream goes on with the same tokens",
        "PASS cleave serve: the decoder streams the whole model's tokens",
        "PASS cleave serve --max-context: a longer request is answered 413",
        "PASS cleave serve --max-sequences: a stage's refusal reaches the client as 429",
        "ray_cluster_test: 25 passed, 0 failed",
    ] {
        assert!(stdout.contains(want), "missing {want:?}\n{stdout}");
    }
}

/// Clusters started after a token file exists (Ray 2.60's `ray start` then asks every client
/// for it), with no `RAY_AUTH_*` variable set: `cleave serve` and an exported app send the
/// token where the cluster asks for it, send none where it does not, and say where to put
/// one that is missing (scripts/ray_token_test.sh).
#[test]
fn serve_sends_rays_token_where_the_cluster_asks_for_it() {
    if std::env::var_os("CLEAVE_SKIP_RAY").is_some() {
        eprintln!("CLEAVE_SKIP_RAY is set: the Ray token test did not run");
        return;
    }
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let model = repo().join("examples/tiny_cnn.onnx");
    let out = tmp.path().join("p");
    ok(&cleave(&[
        os("partition"),
        model.as_os_str(),
        os("--rules"),
        repo().join("examples/tiny_cnn.part").as_os_str(),
        os("-o"),
        out.as_os_str(),
    ]));
    let inputs = tmp.path().join("in.npz");
    let made = Command::new("python3")
        .args([
            "-c",
            "import sys, numpy as np; np.savez(sys.argv[1], input=np.random.rand(2, 3, 16, 16).astype('float32'))",
        ])
        .arg(&inputs)
        .status()
        .unwrap();
    assert!(made.success());
    let run = with_serving_python(Command::new("bash"))
        .arg(repo().join("scripts/ray_token_test.sh"))
        .arg(env!("CARGO_BIN_EXE_cleave"))
        .arg(out.join("tiny_cnn.conn.json"))
        .arg(&inputs)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    println!("{stdout}");
    assert!(
        run.status.success() && stdout.contains("ray_token_test: 9 passed, 0 failed"),
        "exit {:?}\n{stdout}\n{}",
        run.status.code(),
        String::from_utf8_lossy(&run.stderr)
    );
}
