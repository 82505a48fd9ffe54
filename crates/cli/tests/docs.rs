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
        .find(|l| l.starts_with("pip install . && cleave "))
        .unwrap();
    let args: Vec<String> = first["pip install . && cleave ".len()..]
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
                match l.find(" in ") {
                    Some(i) if l.contains(" ms;") => {
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
    assert_eq!(next.len(), 3, "{next:?}");
    for args in next {
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
