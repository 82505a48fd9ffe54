//! `--input NAME=FILE` and `--shape NAME=D,D,...`: the tensors a run starts from.

use std::collections::HashMap;
use std::path::Path;

use cleave::ir::{Dim, Graph};
use cleave::onnx::read_pb;
use cleave::runtime::{read_npy, HostTensor};

use crate::Fail;

/// A dim named for the batch: the one dynamic dim a run may take as 1 unasked.
fn batch_like(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.contains("batch") || matches!(n.as_str(), "n" | "b" | "bs")
}

/// Prints a note on stderr the first time this process gives it (bench gathers inputs twice).
pub(crate) fn note_once(line: String) {
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if !said.contains(&line) {
        eprintln!("{line}");
        said.push(line);
    }
}

fn split<'a>(flag: &str, s: &'a str) -> Result<(&'a str, &'a str), Fail> {
    s.split_once('=')
        .ok_or_else(|| Fail::usage(format!("{flag} '{s}': expected NAME=VALUE")))
}

/// The model's inputs: read from `given` files, or (when `random`) seeded random data of the
/// declared type and shape (fixed beforehand with `--shape`/`--dim` where dynamic). Each is
/// checked against the model's declared type.
pub fn gather(
    g: &Graph,
    given: &[String],
    seed: u64,
    random: bool,
) -> Result<Vec<(String, HostTensor)>, Fail> {
    let names: Vec<&str> = g.inputs.iter().map(|&v| g.value(v).name.as_str()).collect();
    let mut files: HashMap<&str, &str> = HashMap::new();
    for s in given {
        let (name, file) = split("--input", s)?;
        if !names.contains(&name) {
            return Err(Fail::usage(format!(
                "--input {name}: the model has no input '{name}' (its inputs: {})",
                names.join(", ")
            )));
        }
        files.insert(name, file);
    }
    let mut out = Vec::new();
    for (k, &v) in g.inputs.iter().enumerate() {
        let value = g.value(v);
        let t = if let Some(file) = files.get(value.name.as_str()) {
            let path = Path::new(file);
            let t = if path.extension().is_some_and(|e| e == "pb") {
                read_pb(path)
            } else {
                read_npy(path)
            };
            let t = t.map_err(|e| Fail::input(path, e))?;
            t.fits(&value.ty)
                .map_err(|m| Fail::input(path, format!("input '{}': {m}", value.name)))?;
            t
        } else if random {
            let elem = value.ty.elem.ok_or_else(|| {
                Fail::usage(format!(
                    "input '{}' has no known element type; give it with --input",
                    value.name
                ))
            })?;
            let dims = value.ty.shape.as_ref().ok_or_else(|| {
                Fail::usage(format!(
                    "input '{}' has no known shape; give --shape {}=D,D,...",
                    value.name, value.name
                ))
            })?;
            let shape: Vec<usize> = dims
                .iter()
                .map(|d| match d {
                    Dim::Fixed(n) => Ok(*n as usize),
                    Dim::Param(p) if batch_like(p) => {
                        note_once(format!(
                            "note: input '{}' {}: dim '{p}' set to 1 (--shape {}=D,D,... or --dim {p}=N chooses)",
                            value.name, value.ty, value.name
                        ));
                        Ok(1)
                    }
                    _ => Err(Fail::usage(format!(
                        "input '{}' has a dynamic shape {}; give --shape {}=D,D,... or --dim",
                        value.name, value.ty, value.name
                    ))),
                })
                .collect::<Result<_, _>>()?;
            let t = HostTensor::random(elem, &shape, seed.wrapping_add(k as u64))
                .map_err(|m| Fail::usage(format!("input '{}': {m}", value.name)))?;
            t
        } else {
            return Err(Fail::usage(format!(
                "input '{}' not given: use --input {}=FILE.npy (or .pb)",
                value.name, value.name
            )));
        };
        out.push((value.name.to_string(), t));
    }
    Ok(out)
}

/// `--requests N` as copies of `feeds` held at once (pipelined runs keep every request's
/// tensors until it finishes): refused, naming the flag, where they could not fit in memory.
/// Each request is counted at its inputs plus 4 KiB of bookkeeping.
pub fn check_requests(feeds: &[(String, HostTensor)], requests: usize) -> Result<(), Fail> {
    let each = feeds
        .iter()
        .try_fold(4096u64, |n, (_, t)| n.checked_add(t.data.len() as u64));
    let all = each.and_then(|e| e.checked_mul(requests as u64));
    cleave::runtime::memory::check(all)
        .map(|_| ())
        .map_err(|e| {
            Fail::usage(format!(
                "--requests {requests}: that many copies of the inputs are {e}"
            ))
        })
}
