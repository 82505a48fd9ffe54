//! `cleave conformance DIR`: the ONNX backend node tests through cleave (each model
//! partitioned as one part, then run) on one engine.

use std::path::{Path, PathBuf};

use cleave::onnx::conformance::{run_case, Outcome, ATOL, RTOL};
use cleave::runtime::runner::read_conn;
use serde::Serialize;

use crate::setup::DeviceArgs;
use crate::Fail;

#[derive(Serialize, Default)]
struct Counts {
    engine: &'static str,
    total: usize,
    passed: usize,
    failed: usize,
    unsupported: usize,
    rtol: f64,
    atol: f64,
    passing: Vec<String>,
    failures: Vec<(String, String)>,
    unsupported_cases: Vec<(String, String)>,
}

fn cases(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("model.onnx").is_file())
        .collect();
    v.sort();
    v
}

pub fn run(dir: &Path, engine: &str, json: bool) -> Result<(), Fail> {
    let kind = cleave::parse_engine("--engine", engine)?;
    let eng = cleave::engine(kind.clone())?;
    let list = cases(dir);
    if list.is_empty() {
        return Err(Fail::input(
            dir,
            "no test cases (folders with model.onnx) here; run scripts/testdata/fetch-test-data.sh",
        ));
    }
    let tmp = cleave::workdir::private_tempdir("cleave-")
        .map_err(|e| Fail::usage(format!("cannot make a temporary folder: {e}")))?;
    let devices = DeviceArgs {
        devices: vec!["cpu".into()],
        rules: None,
        default: None,
        profile: Vec::new(),
        optimize: None,
        fold_limit: cleave::frontend::DEFAULT_FOLD_LIMIT >> 20,
        no_constraints: false,
        shape: Vec::new(),
        dim: Vec::new(),
        learn_dims: false,
        state: Vec::new(),
        objective: cleave::Objective::Fewest,
        costs: None,
        margin: cleave::DEFAULT_MARGIN,
    };
    let mut c = Counts {
        engine: kind.name(),
        total: list.len(),
        rtol: RTOL,
        atol: ATOL,
        ..Default::default()
    };
    for (i, case) in list.iter().enumerate() {
        let name = case
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let work = tmp.path().join(format!("{i}"));
        let outcome = match crate::partition_cmd::partition_into(
            &case.join("model.onnx"),
            &devices,
            &work,
            true,
        ) {
            Err(e) => Outcome::Unsupported(format!("cleave: {e}")),
            Ok(conn_path) => match read_conn(&conn_path) {
                Ok(conn) if conn.parts.len() == 1 => {
                    let p = &conn.parts[0];
                    run_case(
                        eng.as_ref(),
                        &work.join(&p.file),
                        case,
                        &p.inputs,
                        &p.outputs,
                    )
                }
                Ok(conn) => {
                    Outcome::Unsupported(format!("{} parts, expected one", conn.parts.len()))
                }
                Err(e) => Outcome::Unsupported(e.to_string()),
            },
        };
        let _ = std::fs::remove_dir_all(&work);
        match outcome {
            Outcome::Pass => {
                c.passed += 1;
                c.passing.push(name);
            }
            Outcome::Fail(why) => {
                c.failed += 1;
                c.failures.push((name, why));
            }
            Outcome::Unsupported(why) => {
                c.unsupported += 1;
                c.unsupported_cases.push((name, why));
            }
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&c).map_err(Fail::usage)?);
    } else {
        for (n, why) in c.failures.iter().take(20) {
            println!("FAIL {n}: {why}");
        }
        println!("{}: {} passed, {} failed, {} unsupported, of {} node tests (rtol {RTOL:e}, atol {ATOL:e})", c.engine, c.passed, c.failed, c.unsupported, c.total);
    }
    Ok(())
}

// `cleave conformance`'s flags, declared here alone; `lib.rs` dispatches them.
#[derive(clap::Args)]
pub struct Args {
    /// The folder of test cases, e.g. ~/.cache/cleave/test-data/node.
    pub dir: std::path::PathBuf,
    /// tract or ort.
    #[arg(long, default_value = "tract")]
    pub engine: String,
    #[arg(long)]
    pub json: bool,
}

pub fn main(a: Args) -> Result<(), Fail> {
    run(&a.dir, &a.engine, a.json)
}
