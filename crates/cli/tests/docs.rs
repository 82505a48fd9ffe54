//! The README stays a quick start and the manual's links lead somewhere.

mod common;

use std::path::Path;

use common::repo;

#[test]
fn the_readme_is_a_quick_start_of_at_most_150_lines() {
    let text = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let n = text.lines().count();
    assert!(n <= 150, "README.md has {n} lines: move detail into docs/");
    // Exactly two set-up commands: one runs the bundled example, one runs every test.
    let setup = &text[text.find("## Set up").unwrap()..];
    let block = &setup[setup.find("```sh").unwrap() + 5..];
    let block = &block[..block.find("```").unwrap()];
    let commands: Vec<&str> = block
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(commands.len(), 2, "{commands:?}");
    assert!(
        commands[0].contains("examples/tiny_cnn.onnx"),
        "{commands:?}"
    );
    assert_eq!(commands[1], "bash scripts/test.sh");
}

/// Relative Markdown links, `[text](target)`, without their `#anchor`.
fn relative_links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = rest[..end].split('#').next().unwrap_or("");
        if !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
            out.push(target.to_string());
        }
    }
    out
}

#[test]
fn every_link_of_the_readme_and_the_manual_resolves() {
    let root = repo();
    let mut pages = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            pages.push(p);
        }
    }
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let dir = page.parent().unwrap_or(Path::new("."));
        for link in relative_links(&text) {
            if !dir.join(&link).exists() {
                broken.push(format!("{}: {link}", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links: {broken:#?}");
    // Every page of docs/ is reachable from its index.
    let index = std::fs::read_to_string(root.join("docs/README.md")).unwrap();
    for page in &pages {
        let name = page.file_name().unwrap().to_string_lossy();
        if page.parent() == Some(&root.join("docs")) && name != "README.md" {
            assert!(
                index.contains(&format!("]({name})")),
                "docs/README.md does not link {name}"
            );
        }
    }
}

/// The commands in `` `cleave ...` `` spans of `text`, split into arguments.
fn inline_commands(text: &str) -> Vec<Vec<String>> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|span| span.strip_prefix("cleave "))
        .map(|rest| rest.split_whitespace().map(String::from).collect())
        .collect()
}

#[test]
fn the_readme_example_and_its_next_steps_run_as_shown() {
    let text = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let section = &text[text.find("## What a partition looks like").unwrap()..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let shown = &section[section.find("```text").unwrap() + 7..];
    let shown = &shown[..shown.find("```").unwrap()];
    // Run where the README's paths hold: a folder with examples/ in it.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("examples")).unwrap();
    for f in ["tiny_cnn.onnx", "tiny_cnn.part"] {
        std::fs::copy(common::example(f), tmp.path().join("examples").join(f)).unwrap();
    }
    let run = |args: &[String]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_cleave"))
            .args(args)
            .current_dir(tmp.path())
            .output()
            .unwrap();
        common::ok(&o)
    };
    let setup = &text[text.find("## Set up").unwrap()..];
    let first = setup
        .lines()
        .find(|l| l.starts_with("pip install -v . && cleave "))
        .unwrap();
    let args: Vec<String> = first["pip install -v . && cleave ".len()..]
        .split_whitespace()
        .map(String::from)
        .collect();
    let out = run(&args);
    // The output shown is the output printed, but for the time it took.
    let keep = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let l = l.trim_end();
                match l.find(", cut in ") {
                    Some(i) => {
                        let j = l[i..].find(';').map_or(l.len(), |j| i + j);
                        format!("{}{}", &l[..i], &l[j..])
                    }
                    _ => l.to_string(),
                }
            })
            .collect()
    };
    assert_eq!(
        keep(&out),
        keep(shown),
        "README shows:\n{shown}\ncleave printed:\n{out}"
    );
    let next = inline_commands(section);
    let names: Vec<&str> = next.iter().map(|a| a[0].as_str()).collect();
    assert_eq!(names, ["check", "verify", "run", "bench", "report"]);
    for args in next {
        // The example's batch dim and its missing --input are defaults, said on stderr.
        run(&args);
    }
    assert!(tmp
        .path()
        .join("out/tiny_cnn/tiny_cnn.report.html")
        .is_file());
}

#[test]
fn help_lists_each_command_on_one_short_line_and_names_no_repository_file() {
    let o = common::cleave(&[common::os("--help")]);
    let text = common::ok(&o);
    let commands = &text[text.find("Commands:").unwrap()..text.find("Options:").unwrap()];
    for line in commands.lines().skip(1).filter(|l| !l.trim().is_empty()) {
        assert!(line.len() <= 100, "too long for a summary: {line}");
    }
    let names: Vec<&str> = commands
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .filter(|&n| n != "help")
        .collect();
    assert!(names.len() >= 10, "{names:?}");
    for name in names {
        let o = common::cleave(&[common::os(name), common::os("--help")]);
        let help = common::ok(&o);
        for file in ["README", "scripts/", "docs/", "requirements"] {
            assert!(
                !help.contains(file),
                "`cleave {name} --help` names {file}:\n{help}"
            );
        }
    }
}

/// The lines of every ```sh block of the manual, with the page they are on.
fn manual_blocks() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for page in std::fs::read_dir(repo().join("docs")).unwrap() {
        let page = page.unwrap().path();
        if page.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let text = std::fs::read_to_string(&page).unwrap();
        let name = page.file_name().unwrap().to_string_lossy().into_owned();
        for block in text.split("```sh\n").skip(1) {
            let block = &block[..block.find("```").unwrap()];
            for line in block.lines() {
                let line = line.split(" #").next().unwrap().trim();
                if !line.is_empty() && !line.starts_with('#') {
                    out.push((name.clone(), line.to_string()));
                }
            }
        }
    }
    // Pages in name order; lines in page order (a block may use what its earlier lines wrote).
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// What `cleave CMD --help` says, per command, asked once.
fn helps() -> std::collections::HashMap<String, String> {
    let top = common::ok(&common::cleave(&[common::os("--help")]));
    let commands = &top[top.find("Commands:").unwrap()..top.find("Options:").unwrap()];
    commands
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .filter(|&n| n != "help")
        .map(|n| {
            let help = common::ok(&common::cleave(&[common::os(n), common::os("--help")]));
            (n.to_string(), help)
        })
        .collect()
}

/// Every `cleave CMD ...` written in the README and the manual, synopsis or example, names a
/// command that exists and only flags that command (or the global options) takes.
#[test]
fn every_command_written_in_the_docs_names_real_flags() {
    let helps = helps();
    let mut pages = vec![repo().join("README.md")];
    for page in std::fs::read_dir(repo().join("docs")).unwrap() {
        let page = page.unwrap().path();
        if page.extension().is_some_and(|e| e == "md") {
            pages.push(page);
        }
    }
    let mut commands: Vec<(String, Vec<String>)> = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for args in inline_commands(&text) {
            commands.push((page.display().to_string(), args));
        }
    }
    for (page, line) in manual_blocks() {
        if let Some(rest) = line.strip_prefix("cleave ") {
            commands.push((page, rest.split_whitespace().map(String::from).collect()));
        }
    }
    assert!(commands.len() >= 40, "{} commands", commands.len());
    for (page, args) in &commands {
        if args.first().is_some_and(|c| c == "...") {
            continue; // `cleave ...`: any command
        }
        check_flags(&helps, page, args);
    }
}

/// `cleave ARGS` names a command, and its help lists every `--flag` of ARGS.
fn check_flags(helps: &std::collections::HashMap<String, String>, page: &str, args: &[String]) {
    let Some(help) = args.first().and_then(|c| helps.get(c)) else {
        panic!("{page}: `cleave {}` names no command", args.join(" "));
    };
    for flag in args.iter().filter(|a| a.starts_with("--")) {
        let flag = flag.split('=').next().unwrap();
        let flag = flag.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
        assert!(
            help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n")),
            "{page}: `cleave {}`: {} --help has no {flag}",
            args.join(" "),
            args[0]
        );
    }
}

/// Each command's `--help` ends with examples, and they use only flags the command takes.
#[test]
fn every_commands_help_ends_with_examples_of_real_flags() {
    let helps = helps();
    for (name, help) in &helps {
        let at = help
            .find("\nExamples:\n")
            .unwrap_or_else(|| panic!("`cleave {name} --help` has no examples:\n{help}"));
        let examples: Vec<Vec<String>> = help[at..]
            .lines()
            .filter_map(|l| l.trim().strip_prefix("cleave "))
            .map(|l| l.split_whitespace().map(String::from).collect())
            .collect();
        assert!(!examples.is_empty(), "{name}");
        for args in &examples {
            assert_eq!(&args[0], name, "an example of {name} runs another command");
            check_flags(&helps, &format!("cleave {name} --help"), args);
        }
    }
}

/// Every command of the manual's ```sh blocks runs, in a folder holding what the pages name:
/// the bundled example (`examples/`) and a real TFLite model with rules (`model.tflite`,
/// `model.part`). Blocks run top to bottom, so a page may use what an earlier line wrote.
#[test]
fn the_manuals_command_blocks_run() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("examples")).unwrap();
    for f in ["tiny_cnn.onnx", "tiny_cnn.part"] {
        std::fs::copy(common::example(f), tmp.path().join("examples").join(f)).unwrap();
    }
    let face = cleave_testdata::tflite_files()
        .into_iter()
        .find(|p| p.ends_with("face_detection_full_range.tflite"))
        .unwrap();
    std::fs::copy(face, tmp.path().join("model.tflite")).unwrap();
    std::fs::write(
        tmp.path().join("model.part"),
        "[partition]\nbackends=acl_cl,cpu\ndefault=acl_cl\ncomply=opcode\n\n[OPCODE]\nRESHAPE=cpu\n",
    )
    .unwrap();
    let mut ran = 0;
    for (page, line) in manual_blocks() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let mut cmd = match words[0] {
            "cleave" => std::process::Command::new(env!("CARGO_BIN_EXE_cleave")),
            "python3" => std::process::Command::new("python3"),
            // The fuzzing commands run for minutes; CI runs `bash scripts/fuzz.sh 60` itself.
            "bash" if words.get(1) == Some(&"scripts/fuzz.sh") => continue,
            other => panic!("{page}: `{line}`: no rule to run a `{other}` command"),
        };
        for w in &words[1..] {
            if w.starts_with("scripts/") {
                cmd.arg(repo().join(w));
            } else {
                cmd.arg(w);
            }
        }
        let o = cmd.current_dir(tmp.path()).output().unwrap();
        assert!(
            o.status.success(),
            "{page}: `{line}` failed ({:?}):\n{}{}",
            o.status.code(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        ran += 1;
    }
    assert!(ran >= 8, "{ran} commands ran");
}

/// The environment variables the code reads (`CLEAVE_*`, `ORT_DYLIB_PATH`, `OPENVINO_LIB` in
/// the library crates and the Python package, test-only ones aside).
fn variables_read() -> std::collections::BTreeSet<String> {
    let root = repo();
    let mut files = Vec::new();
    let mut dirs = vec![root.join("python/cleave")];
    for e in std::fs::read_dir(root.join("crates")).unwrap() {
        let p = e.unwrap().path();
        if !p.ends_with("testdata") {
            dirs.push(p.join("src"));
        }
    }
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs" || x == "py") {
                files.push(p);
            }
        }
    }
    let mut found = std::collections::BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for prefix in ["CLEAVE_", "ORT_DYLIB_PATH", "OPENVINO_LIB"] {
            let mut rest = text.as_str();
            while let Some(i) = rest.find(prefix) {
                // A whole name: not the tail of another identifier.
                let before = rest[..i].chars().last();
                rest = &rest[i..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit()))
                    .unwrap_or(rest.len());
                let name = &rest[..end];
                rest = &rest[end..];
                if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                    continue;
                }
                if name.len() > prefix.len() || !prefix.ends_with('_') {
                    found.insert(name.to_string());
                }
            }
        }
    }
    found
}

#[test]
fn every_environment_variable_read_is_in_the_docs_and_help() {
    let read = variables_read();
    // The scan finds what it must: it cannot pass by finding nothing.
    for known in [
        "CLEAVE_PYTHON",
        "ORT_DYLIB_PATH",
        "OPENVINO_LIB",
        "CLEAVE_MAX_BODY_BYTES",
    ] {
        assert!(read.contains(known), "{known} not found in {read:?}");
    }
    let docs = std::fs::read_to_string(repo().join("docs/commands.md")).unwrap();
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_cleave"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let table = &docs[docs.find("## Environment variables").expect("no section")..];
    for v in &read {
        assert!(
            table.contains(&format!("`{v}`")),
            "{v} is read but not in docs/commands.md's environment variables"
        );
        assert!(
            help.contains(v.as_str()),
            "{v} is read but `cleave --help` does not name it"
        );
    }
}
