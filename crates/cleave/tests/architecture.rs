//! The invariants ARCHITECTURE.md states, checked: the format-neutral core depends on no format
//! crate, no protobuf and no engine (from `cargo tree`'s resolved graph); `crates/ir`
//! names no format in its code, `crates/runtime` no format and no engine; only `cleave-engines` links an engine; the binary reaches the
//! stages only through the facade, and the Python module through the facade and the command
//! line's library; no crate's modules name each other round a loop.

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

/// Every `.rs` file under `dir`, with the text before its test module.
fn rs_files(dir: &Path) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
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

/// Every `.rs` file under `crates/*/src`, with the text before its test module.
fn library_code() -> Vec<(std::path::PathBuf, String)> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read_dir(&crates)
        .unwrap()
        .map(|e| e.unwrap().path().join("src"))
        .filter(|p| p.is_dir() && !p.starts_with(crates.join("testdata")))
        .flat_map(|src| rs_files(&src))
        .collect()
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
    // The Python package's engine workers are its own interpreter, isolated by its flags
    // (`-I`: no working folder, no user site, no PYTHON* variables; `-S`: no site at all).
    let (_, worker) = code
        .iter()
        .find(|(p, _)| p.ends_with("python/src/isolate.rs"))
        .expect("crates/python/src/isolate.rs");
    assert!(
        worker.contains(r#"["-I", "-S", "-c", PROGRAM]"#),
        "the engine worker's interpreter must start with -I -S"
    );
    assert!(hits.is_empty(), "{}", hits.join("\n"));
}

/// The modules of one crate's `src` by path (`infer::cx`; `mod.rs` and `lib.rs` name their
/// folder), each with the modules its code names through `crate::`, `super::` or `self::`
/// paths (comments left out, test modules cut off).
fn module_graph(src: &Path) -> std::collections::BTreeMap<String, BTreeSet<String>> {
    let mut files = std::collections::BTreeMap::new();
    for (p, text) in rs_files(src) {
        let rel = p.strip_prefix(src).unwrap().with_extension("");
        let mut segs: Vec<String> = rel
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        if matches!(segs.last().map(String::as_str), Some("mod" | "lib")) {
            segs.pop();
        }
        let code: String = text
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        files.insert(segs.join("::"), code);
    }
    let known: BTreeSet<String> = files.keys().cloned().collect();
    // The longest known module a path names (`crate::infer::cx::Cx` → `infer::cx`).
    let resolve = |segs: &[&str]| -> Option<String> {
        (0..=segs.len())
            .rev()
            .map(|k| segs[..k].join("::"))
            .find(|m| known.contains(m))
    };
    let mut edges = std::collections::BTreeMap::new();
    for (module, code) in &files {
        let here: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
        let mut to = BTreeSet::new();
        // Paths, with `use` groups expanded one level: `crate::a::{b, c::D}`.
        let words = code.replace('\n', " ");
        for start in ["crate::", "super::", "self::"] {
            for (at, _) in words.match_indices(start) {
                if words[..at]
                    .chars()
                    .last()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
                {
                    continue;
                }
                let rest = &words[at..];
                let end = rest
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .unwrap_or(rest.len());
                let path = &rest[..end];
                let group = match (path.strip_suffix("::"), rest[end..].strip_prefix('{')) {
                    (Some(_), Some(g)) => {
                        Some(g[..g.find('}').unwrap_or(g.len())].replace(' ', ""))
                    }
                    _ => None,
                };
                let head = path.trim_end_matches(':');
                let mut base: Vec<&str> = Vec::new();
                for (k, s) in head.split("::").enumerate() {
                    match (k, s) {
                        (0, "crate") => {}
                        (0, "self") => base.extend(&here),
                        (_, "super") => {
                            if base.is_empty() && k == 0 {
                                base.extend(&here);
                            }
                            base.pop();
                        }
                        _ => base.push(s),
                    }
                }
                let mut targets = vec![base.clone()];
                if let Some(g) = &group {
                    for item in g.split(',') {
                        let mut t = base.clone();
                        t.extend(item.split("::").filter(|s| !s.is_empty() && *s != "self"));
                        targets.push(t);
                    }
                }
                for t in targets {
                    if let Some(m) = resolve(&t) {
                        if &m != module && !m.is_empty() {
                            to.insert(m);
                        }
                    }
                }
            }
        }
        edges.insert(module.clone(), to);
    }
    edges
}

/// The groups of modules that import each other round a loop (Tarjan's algorithm).
fn loops(edges: &std::collections::BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a std::collections::BTreeMap<String, BTreeSet<String>>,
        index: std::collections::HashMap<&'a str, (usize, usize)>,
        stack: Vec<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, (n, n));
        s.stack.push(v);
        for w in &s.edges[v] {
            let w = w.as_str();
            match s.index.get(w).copied() {
                None => {
                    visit(s, w);
                    let low = s.index[w].1.min(s.index[v].1);
                    s.index.get_mut(v).unwrap().1 = low;
                }
                Some((i, _)) if s.stack.contains(&w) => {
                    let low = i.min(s.index[v].1);
                    s.index.get_mut(v).unwrap().1 = low;
                }
                Some(_) => {}
            }
        }
        if s.index[v].0 == s.index[v].1 {
            let mut group = Vec::new();
            while let Some(w) = s.stack.pop() {
                group.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                s.out.push(group);
            }
        }
    }
    let mut s = State {
        edges,
        index: Default::default(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[test]
fn no_crate_has_an_import_loop_between_its_modules() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // The IR's types are recursive: a node's attribute holds a graph. That loop is the
    // data's, not the code's (the name index is a child of graph).
    let allowed: Vec<Vec<String>> = vec![vec!["attr".into(), "graph".into()]];
    let mut found = Vec::new();
    let mut scanned = 0;
    for e in std::fs::read_dir(&crates).unwrap() {
        let src = e.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        scanned += 1;
        let name = src
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        for group in loops(&module_graph(&src)) {
            if !(name == "ir" && allowed.contains(&group)) {
                found.push(format!("crates/{name}: {}", group.join(", ")));
            }
        }
    }
    assert!(scanned > 15, "scanned only {scanned} crates");
    assert!(
        found.is_empty(),
        "modules importing each other:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_loop_scan_sees_a_loop() {
    let dir = std::env::temp_dir().join(format!("cleave-loop-scan-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("b")).unwrap();
    std::fs::write(dir.join("lib.rs"), "mod a;\nmod b;\n").unwrap();
    std::fs::write(dir.join("a.rs"), "use crate::b::{c::X, Y};\n").unwrap();
    std::fs::write(
        dir.join("b/mod.rs"),
        "pub mod c;\n// crate::a is only named here\n",
    )
    .unwrap();
    std::fs::write(dir.join("b/c.rs"), "pub struct X(super::super::a::Z);\n").unwrap();
    let graph = module_graph(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        graph["a"],
        BTreeSet::from(["b".to_string(), "b::c".to_string()])
    );
    assert!(
        graph["b"].is_empty(),
        "a comment is not an import: {graph:?}"
    );
    assert_eq!(
        loops(&graph),
        vec![vec!["a".to_string(), "b::c".to_string()]]
    );
}

/// A partition's life is four types (tract's typed stages): each is declared in the file
/// named for it, alone there, and owns its next step; `Partitioned::write` is the only write
/// of parts in the facade, and no other file declares a stage's type or step.
#[test]
fn each_stage_of_a_partition_lives_in_its_own_file_and_owns_its_next_step() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let stages = [
        ("loaded.rs", "LoadedModel", "fn into_assigned("),
        ("assigned.rs", "Assigned", "fn into_partitioned("),
        (
            "partitioned.rs",
            "Partitioned",
            "fn write(&mut self, workdir",
        ),
        ("written.rs", "Written", "fn load(&self, engines"),
    ];
    let files = rs_files(&src);
    let named = |name: &str| {
        files
            .iter()
            .filter(|(p, _)| p.file_name().is_some_and(|f| f == name))
            .map(|(_, code)| code.as_str())
            .collect::<Vec<_>>()
    };
    for (file, ty, next) in stages {
        let here = named(file);
        assert_eq!(here.len(), 1, "crates/cleave/src/{file} is missing");
        let code = here[0];
        let declares = |t: &str| code.contains(&format!("pub struct {t} "));
        assert!(declares(ty), "{file} does not declare {ty}");
        assert!(code.contains(next), "{file}: {ty} does not own `{next}`");
        for (other, t, _) in stages.iter().filter(|(f, ..)| *f != file) {
            assert!(
                !declares(t),
                "{file} declares {t}, which belongs in {other}"
            );
        }
        for (p, code) in &files {
            if p.file_name().is_some_and(|f| f != file) {
                assert!(
                    !code.contains(&format!("pub struct {ty} ")) && !code.contains(next),
                    "{} declares {ty} or its step `{next}`: it belongs in {file}",
                    p.display()
                );
            }
        }
    }
    // Parts are written by `Partitioned::write` (and `measure`'s one-unit probes, which are
    // no partition), nowhere else in the facade.
    let writers: Vec<String> = files
        .iter()
        .filter(|(_, code)| code.contains("write_parts("))
        .filter_map(|(p, _)| p.file_name().map(|f| f.to_string_lossy().into_owned()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(writers, ["measure.rs", "partitioned.rs"], "{writers:?}");
}
