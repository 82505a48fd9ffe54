//! The Rust examples run as a user runs them (`cargo run --example NAME`): `cargo test` has
//! built them beside this test's own binary.

use std::path::PathBuf;
use std::process::Command;

fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/examples-HASH → target/<profile>/examples/NAME
    let dir = exe.parent().and_then(|d| d.parent()).unwrap();
    let path = dir.join("examples").join(name);
    assert!(
        path.is_file(),
        "{} is missing: `cargo test` builds the examples",
        path.display()
    );
    path
}

#[test]
fn partition_and_run_reproduces_the_whole_model_on_the_bundled_example() {
    let o = Command::new(example("partition_and_run")).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let parts: Vec<&str> = out.lines().filter(|l| l.contains(" nodes on ")).collect();
    assert_eq!(parts.len(), 4, "{out}");
    assert!(parts[0].starts_with("tiny_cnn.00001_npu.onnx"), "{out}");
    let compared: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("max |parts - whole|"))
        .collect();
    assert!(
        !compared.is_empty() && compared.iter().all(|l| l.ends_with("(0 beyond tolerance)")),
        "{out}"
    );
}

#[test]
fn partition_and_run_refuses_a_missing_model_with_its_name() {
    let o = Command::new(example("partition_and_run"))
        .args(["/nonexistent/m.onnx", "/nonexistent/m.part"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("cannot read"), "{err}");
}
