//! The vendored schemas are the ones the checked-in code was generated from: a schema edited
//! without running `scripts/gen/gen-flatbuffers.sh` fails here (CI has no flatc).

use std::path::Path;

fn sha256_hex(data: &[u8]) -> String {
    // Hashing is done by the system's sha256sum, as the generator does, so the test needs no
    // hashing crate of its own.
    let mut child = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sha256sum runs");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

#[test]
fn vendored_schemas_match_their_recorded_hashes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema");
    let sums = std::fs::read_to_string(dir.join("SHA256SUMS")).unwrap();
    let mut checked = 0;
    for line in sums
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (hash, file) = line.split_once("  ").unwrap();
        let data = std::fs::read(dir.join(file)).unwrap();
        assert_eq!(
            sha256_hex(&data),
            hash,
            "{file} changed: run scripts/gen/gen-flatbuffers.sh"
        );
        checked += 1;
    }
    assert_eq!(checked, 2, "{sums}");
    // The generated code says which schema it came from.
    let generated = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/generated");
    for (file, ident) in [
        ("tflite_schema_generated.rs", "\"TFL3\""),
        ("circle_schema_generated.rs", "\"CIR0\""),
    ] {
        let code = std::fs::read_to_string(generated.join(file)).unwrap();
        assert!(
            code.contains(&format!("pub const MODEL_IDENTIFIER: &str = {ident};")),
            "{file}"
        );
    }
}
