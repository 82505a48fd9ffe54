//! The invariants ARCHITECTURE.md states, checked: the format-neutral core depends on no format
//! crate, no protobuf and no engine (from `cargo tree`'s resolved graph); `crates/ir`
//! names no format in its code, `crates/runtime` no format and no engine; only `cleave-engines` links an engine; the binary reaches the
//! stages only through the facade, and the Python module through the facade and the command
//! line's library.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// The crates between loading and writing: they must work on any format.
const NEUTRAL: [&str; 10] = [
    "cleave-ir",
    "cleave-workdir",
    "cleave-device",
    "cleave-fuse",
    "cleave-assign",
    "cleave-partition",
    "cleave-cost",
    "cleave-view",
    "cleave-runtime",
    "cleave-frontend",
];

/// What a neutral crate may never reach, however indirectly.
const FORMAT_OR_ENGINE: [&str; 11] = [
    "cleave-onnx",
    "cleave-tflite",
    "cleave-engines",
    "cleave",
    "prost",
    "prost-build",
    "protox",
    "tract-onnx",
    "ort",
    "flatbuffers",
    "libloading",
];

/// `cargo tree` over the host's resolved graph (offline: the test build has fetched it all),
/// one package name per line.
fn tree(args: &[&str]) -> BTreeSet<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "--locked",
            "--prefix",
            "none",
            "-f",
            "{p}",
        ])
        .args(args)
        .current_dir(&root)
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect()
}

#[test]
fn the_neutral_core_reaches_no_format_protobuf_or_engine() {
    let mut report = Vec::new();
    for krate in NEUTRAL {
        // Normal, build and dev dependencies, transitively: not even a test may need a format.
        let reach = tree(&["-p", krate, "-e", "normal,build,dev"]);
        assert!(reach.contains(krate), "{krate}: {reach:?}");
        let bad: Vec<&str> = FORMAT_OR_ENGINE
            .iter()
            .copied()
            .filter(|f| reach.contains(*f))
            .collect();
        println!(
            "{krate}: {} packages reached, none of {FORMAT_OR_ENGINE:?}",
            reach.len()
        );
        if !bad.is_empty() {
            report.push(format!("{krate} reaches {bad:?}"));
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}

#[test]
fn only_the_engines_crate_links_an_engine() {
    for engine in ["tract-onnx", "ort"] {
        let mut users = tree(&["--workspace", "-e", "normal", "-i", engine, "--depth", "1"]);
        users.remove(engine);
        assert_eq!(
            users.into_iter().collect::<Vec<_>>(),
            ["cleave-engines"],
            "{engine}"
        );
    }
}

#[test]
fn the_binary_reaches_the_stages_only_through_the_facade() {
    let deps = tree(&["-p", "cleave-cli", "-e", "normal", "--depth", "1"]);
    let ours: Vec<&String> = deps
        .iter()
        .filter(|d| d.starts_with("cleave") && *d != "cleave-cli")
        .collect();
    assert_eq!(ours, ["cleave", "cleave-workspace-hack"]);
}

#[test]
fn the_python_module_is_the_facade_and_the_command_line_only() {
    let deps = tree(&["-p", "cleave-py", "-e", "normal", "--depth", "1"]);
    let ours: Vec<&String> = deps
        .iter()
        .filter(|d| d.starts_with("cleave") && *d != "cleave-py")
        .collect();
    assert_eq!(ours, ["cleave", "cleave-cli", "cleave-workspace-hack"]);
}

/// Words that name a model format, a serialisation or an engine.
const FORMAT_WORDS: [&str; 8] = [
    "onnx", "tflite", "circle", "protobuf", "prost", "protox", "tract", "ort",
];

/// Where a crate's code (not its comments) names one of `words`: `file:line: text`.
fn naming(krate: &str, words: &[&str]) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(krate)
        .join("src");
    let mut hits = Vec::new();
    let mut files = 0;
    for entry in std::fs::read_dir(&src).expect("a crate's src folder") {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        files += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        for (i, line) in text.lines().enumerate() {
            // Comments may say what the crate does not know; code and strings may not.
            let code = line.split("//").next().unwrap_or("").to_lowercase();
            let named = code
                .split(|c: char| !c.is_ascii_alphanumeric())
                .any(|word| words.contains(&word));
            if named {
                hits.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        files >= 5,
        "found only {files} source files in {}",
        src.display()
    );
    hits
}

#[test]
fn the_ir_crate_names_no_format_in_its_code() {
    let hits = naming("ir", &FORMAT_WORDS);
    assert!(
        hits.is_empty(),
        "crates/ir names a format:\n{}",
        hits.join("\n")
    );
}

/// The engines cleave links, by every name they go by.
const ENGINE_WORDS: [&str; 5] = ["litert", "openvino", "ov", "onnxruntime", "tensorflow"];

#[test]
fn the_runtime_core_names_no_engine_or_format() {
    let words: Vec<&str> = FORMAT_WORDS.iter().chain(&ENGINE_WORDS).copied().collect();
    let hits = naming("runtime", &words);
    assert!(
        hits.is_empty(),
        "crates/runtime names an engine or a format (register it in cleave-engines):\n{}",
        hits.join("\n")
    );
}

#[test]
fn the_workdir_crate_names_no_engine() {
    let words: Vec<&str> = ENGINE_WORDS
        .iter()
        .chain(&["tract", "ort"])
        .copied()
        .collect();
    let hits = naming("workdir", &words);
    assert!(
        hits.is_empty(),
        "crates/workdir names an engine (the engine registry answers for backends):\n{}",
        hits.join("\n")
    );
}

/// Every `.rs` file under `crates/*/src`, with the text before its test module.
fn library_code() -> Vec<(std::path::PathBuf, String)> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = Vec::new();
    let mut dirs: Vec<std::path::PathBuf> = std::fs::read_dir(&crates)
        .unwrap()
        .map(|e| e.unwrap().path().join("src"))
        .filter(|p| p.is_dir() && !p.starts_with(crates.join("testdata")))
        .collect();
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                // A `#[cfg(test)]` import is not the test module: split at the module.
                let code = text
                    .split("#[cfg(test)]\nmod ")
                    .next()
                    .unwrap_or("")
                    .to_string();
                out.push((p, code));
            }
        }
    }
    out
}

#[test]
fn pythons_start_isolated_and_temporary_folders_are_private() {
    let code = library_code();
    assert!(code.len() > 100, "found only {} source files", code.len());
    let mut hits = Vec::new();
    for (path, text) in &code {
        let name = path.display().to_string();
        // A Python run from the working folder imports what is planted there: only
        // cleave-engines' python_pkg starts one (isolated).
        let python = [
            "Command::new(python",
            "Command::new(&python",
            "Command::new(\"python",
        ];
        if !name.ends_with("engines/src/python_pkg.rs") && python.iter().any(|p| text.contains(p)) {
            hits.push(format!(
                "{name}: starts a Python (use cleave_engines::python_code)"
            ));
        }
        // tempfile's folders follow the umask (0755): private_tempdir makes them 0700.
        let tempdir = [
            "tempfile::tempdir(",
            "tempfile::tempdir_in(",
            "TempDir::new(",
            ".tempdir()",
            ".tempdir_in(",
        ];
        if !name.ends_with("workdir/src/private.rs") && tempdir.iter().any(|p| text.contains(p)) {
            hits.push(format!(
                "{name}: makes a temporary folder (use workdir::private_tempdir)"
            ));
        }
    }
    assert!(hits.is_empty(), "{}", hits.join("\n"));
}
