//! The engine fuzzer: mutants of valid TFLite and circle models (`cleave_testdata::mutate`),
//! each through `cleave verify MUTANT --devices cpu`, which loads it, splits it and runs the
//! whole model and its part on LiteRT (TFLite) or onert (circle). Every outcome must be an
//! answer: 0 (the parts match), 1 (they differ), or 2 with one line naming the file. A signal,
//! a panic or a hang of cleave is a crash.
//!
//! `cargo test` replays the mutants kept in `tests/data/engine_mutants.txt` (each crashed an
//! engine or cleave once). With `CLEAVE_MUTATE_SECS=N` it also draws new mutants for N seconds
//! per format (`scripts/fuzz.sh` runs it in CI) and prints how each ended; a new crash fails
//! the test and its line is written to `CLEAVE_MUTATE_FOUND` (default
//! `$CARGO_TARGET_TMPDIR/engine_mutants.found`) to be kept. `CLEAVE_MUTATE_BIN` runs another
//! build of cleave (an older one, to count what it did), and `CLEAVE_ISOLATE=0` keeps the
//! engines in process, to count what the checks alone stop.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cleave::ir::XorShift64;
use cleave_testdata::mutate::{self, Mutation};
use cleave_testdata::synth;

/// How long one mutant may take before it counts as a hang.
const HANG: Duration = Duration::from_secs(60);

fn cleave_bin() -> PathBuf {
    std::env::var_os("CLEAVE_MUTATE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cleave")))
}

/// The seed models by file name: the synthesized ones, each TFLite one also as circle, and
/// the small fetched TFLite models where the test data is there.
fn seeds(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for (name, bytes) in synth::all() {
        out.insert(name.to_string(), bytes);
    }
    let data = cleave_testdata::dir();
    for sub in ["tflite", "tflite-quant"] {
        let Ok(entries) = std::fs::read_dir(data.join(sub)) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let small = p.metadata().is_ok_and(|m| m.len() < 512 * 1024);
            if small && p.extension().is_some_and(|x| x == "tflite") {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                out.insert(name, std::fs::read(&p).unwrap());
            }
        }
    }
    let tflites: Vec<String> = out
        .keys()
        .filter(|n| n.ends_with(".tflite"))
        .cloned()
        .collect();
    for name in tflites {
        let src = dir.join(&name);
        std::fs::write(&src, &out[&name]).unwrap();
        let circle = name.replace(".tflite", ".circle");
        let dst = dir.join(&circle);
        let made = Command::new(env!("CARGO_BIN_EXE_cleave"))
            .args([
                std::ffi::OsStr::new("convert"),
                src.as_os_str(),
                dst.as_os_str(),
            ])
            .output()
            .unwrap();
        if made.status.success() {
            out.insert(circle, std::fs::read(&dst).unwrap());
        }
    }
    out
}

fn apply(name: &str, seed: &[u8], m: &[Mutation]) -> Result<Vec<u8>, String> {
    if name.ends_with(".circle") {
        mutate::circle::apply(seed, m)
    } else {
        mutate::tflite::apply(seed, m)
    }
}

/// How one mutant ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    /// Exit 0 or 1: it ran and was compared.
    Ran,
    /// Exit 2, one line: refused before an engine ran it.
    Refused,
    /// Exit 2, one line: an engine crashed in its worker and cleave said so.
    EngineCrashContained,
    /// Anything else: a signal, a panic, several lines, another code.
    Crash,
    Hang,
}

fn run(file: &Path) -> (Outcome, String) {
    let mut child = Command::new(cleave_bin())
        .args([std::ffi::OsStr::new("verify"), file.as_os_str()])
        .args(["--devices", "cpu"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > HANG {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut err);
    }
    let Some(status) = status else {
        return (Outcome::Hang, "no answer in 60 s".into());
    };
    let errors: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("cleave: error:"))
        .collect();
    let outcome = match status.code() {
        Some(0 | 1) => Outcome::Ran,
        Some(2) if errors.len() == 1 && !err.contains("panicked") => {
            if errors[0].contains("crashed") {
                Outcome::EngineCrashContained
            } else {
                Outcome::Refused
            }
        }
        _ => Outcome::Crash,
    };
    let said = errors.first().map_or_else(
        || format!("{status}: {}", err.lines().last().unwrap_or("")),
        |l| l.to_string(),
    );
    (outcome, said)
}

/// `NAME MUTATION; MUTATION... [# contained]` lines, `#` comments. A line marked `contained`
/// still crashes its engine (in the worker); every other must be refused by cleave's checks
/// before an engine sees it, or run.
fn kept() -> Vec<(String, Vec<Mutation>, bool)> {
    let text = include_str!("data/engine_mutants.txt");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (l, note) = l.split_once('#').unwrap_or((l, ""));
            let (name, rest) = l.trim().split_once(' ').unwrap();
            let m = rest.split(';').map(|m| m.trim().parse().unwrap()).collect();
            (name.to_string(), m, note.trim() == "contained")
        })
        .collect()
}

fn line(name: &str, m: &[Mutation]) -> String {
    let ms: Vec<String> = m.iter().map(ToString::to_string).collect();
    format!("{name} {}", ms.join("; "))
}

#[test]
fn mutants_of_valid_models_get_an_answer_never_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let seeds = seeds(dir.path());
    let mut crashes = Vec::new();
    // The kept mutants: every one answered, most refused by name.
    for (i, (name, m, contained)) in kept().iter().enumerate() {
        let seed = seeds
            .get(name)
            .unwrap_or_else(|| panic!("no seed model {name}"));
        let bytes = apply(name, seed, m).unwrap();
        let file = dir
            .path()
            .join(format!("kept{i}.{}", name.rsplit('.').next().unwrap()));
        std::fs::write(&file, bytes).unwrap();
        let (outcome, said) = run(&file);
        eprintln!("kept {:?}: {} -> {said}", outcome, line(name, m));
        let allowed = if *contained {
            Outcome::EngineCrashContained
        } else {
            Outcome::Refused
        };
        if outcome > allowed {
            crashes.push(format!("{} # {outcome:?}: {said}", line(name, m)));
        }
    }
    let secs: u64 = std::env::var("CLEAVE_MUTATE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if secs > 0 {
        for format in ["tflite", "circle"] {
            crashes.extend(draw(dir.path(), &seeds, format, Duration::from_secs(secs)));
        }
        let found = std::env::var_os("CLEAVE_MUTATE_FOUND").map_or_else(
            || PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("engine_mutants.found"),
            PathBuf::from,
        );
        std::fs::write(&found, crashes.join("\n") + "\n").unwrap();
        eprintln!("crashes written to {}", found.display());
    }
    assert!(crashes.is_empty(), "crashes:\n{}", crashes.join("\n"));
}

/// New mutants of one format's seeds for `time`; the crash lines.
fn draw(
    dir: &Path,
    seeds: &BTreeMap<String, Vec<u8>>,
    format: &str,
    time: Duration,
) -> Vec<String> {
    let names: Vec<&String> = seeds.keys().filter(|n| n.ends_with(format)).collect();
    let seed: u64 = std::env::var("CLEAVE_MUTATE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let mut rng = XorShift64::raw(seed);
    let mut counts: BTreeMap<Outcome, usize> = BTreeMap::new();
    let mut crashes = Vec::new();
    let start = Instant::now();
    let mut n = 0usize;
    while start.elapsed() < time {
        let name = names[(rng.next_u64() % names.len() as u64) as usize];
        let bytes = &seeds[name];
        let shape = if format == "circle" {
            mutate::circle::shape_of(bytes)
        } else {
            mutate::tflite::shape_of(bytes)
        }
        .unwrap();
        let k = 1 + (rng.next_u64() % 2) as usize;
        let m: Vec<Mutation> = (0..k).map(|_| mutate::random(&shape, &mut rng)).collect();
        let Ok(mutant) = apply(name, bytes, &m) else {
            continue;
        };
        n += 1;
        let file = dir.join(format!("mutant.{format}"));
        std::fs::write(&file, mutant).unwrap();
        let (outcome, said) = run(&file);
        *counts.entry(outcome).or_default() += 1;
        if outcome >= Outcome::EngineCrashContained {
            // A contained crash is no failure, but a lie the checks could have caught.
            eprintln!("{outcome:?}: {} # {said}", line(name, &m));
        }
        if outcome >= Outcome::Crash {
            crashes.push(format!("{} # {said}", line(name, &m)));
        }
    }
    eprintln!(
        "engine mutants, {format}: {n} in {:.0} s (seed {seed}): {counts:?}",
        start.elapsed().as_secs_f64()
    );
    crashes
}

/// Writes one mutant for a closer look: `CLEAVE_MUTATE_LINE='synth_int8.tflite zero_point 0 1 0
/// 5' CLEAVE_MUTATE_OUT=m.tflite cargo test -p cleave-cli --test engine_mutants -- --ignored`.
#[test]
#[ignore]
fn write_one_mutant() {
    let (Ok(l), Some(out)) = (
        std::env::var("CLEAVE_MUTATE_LINE"),
        std::env::var_os("CLEAVE_MUTATE_OUT"),
    ) else {
        panic!("set CLEAVE_MUTATE_LINE and CLEAVE_MUTATE_OUT");
    };
    let dir = tempfile::tempdir().unwrap();
    let seeds = seeds(dir.path());
    let (name, rest) = l.split_once(' ').unwrap();
    let m: Vec<Mutation> = rest.split(';').map(|m| m.trim().parse().unwrap()).collect();
    std::fs::write(out, apply(name, &seeds[name], &m).unwrap()).unwrap();
}
