//! Every tensor's dims after one run of a TFLite or circle model, from LiteRT's Python
//! interpreter (the wheel this engine's library comes from), which keeps them all.

use std::io::Write;
use std::path::Path;
use std::process::Stdio;

use cleave_runtime::{npy_bytes, HostTensor, RuntimeError};

use crate::python_pkg::{python, run_code};

/// Reads the inputs (.npy, one after another on stdin) before anything can fail, resizes the
/// model to them, runs it once and prints each main-graph tensor's dims, one line per tensor
/// in index order (`-` for one the interpreter does not list).
const PROGRAM: &str = r#"
import io, sys
stream = io.BytesIO(sys.stdin.buffer.read())
import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType
data = bytearray(open(sys.argv[1], "rb").read())
if data[4:8] == b"CIR0":
    data[4:8] = b"TFL3"
it = Interpreter(model_content=bytes(data),
                 experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
details = it.get_input_details()
values = [np.lib.format.read_array(stream) for _ in details]
for d, v in zip(details, values):
    it.resize_tensor_input(d["index"], list(v.shape))
it.allocate_tensors()
for d, v in zip(details, values):
    it.set_tensor(d["index"], v)
it.invoke()
dims = {d["index"]: d["shape"].tolist() for d in it.get_tensor_details()}
for i in range(max(dims, default=-1) + 1):
    print(",".join(map(str, dims.get(i, []))) if i in dims else "-")
"#;

fn failed(model: &Path, message: String) -> RuntimeError {
    RuntimeError::Engine {
        path: model.to_path_buf(),
        engine: "litert",
        message,
    }
}

pub fn tensor_dims(
    model: &Path,
    inputs: &[HostTensor],
) -> Result<Vec<Option<Vec<i64>>>, RuntimeError> {
    let mut stdin = Vec::new();
    for t in inputs {
        stdin.extend(npy_bytes(t).map_err(|m| failed(model, m))?);
    }
    let python = python();
    let mut child = run_code(&python, PROGRAM)
        .arg(model)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            failed(
                model,
                format!("cannot run {python} for LiteRT's interpreter: {e}"),
            )
        })?;
    // The program reads all of stdin first, so this cannot block on its output. A program
    // that died before reading says why on stderr, read below, so a broken pipe is not the
    // error to report.
    let fed = child.stdin.take().map(|mut pipe| pipe.write_all(&stdin));
    let out = child
        .wait_with_output()
        .map_err(|e| failed(model, format!("waiting for LiteRT's interpreter: {e}")))?;
    if out.status.success() {
        if let Some(Err(e)) = fed {
            return Err(failed(model, format!("feeding LiteRT's interpreter: {e}")));
        }
    }
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(failed(
            model,
            format!("LiteRT's interpreter ({python}, ai_edge_litert) could not run it: {last}"),
        ));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| match line {
            "-" => Ok(None),
            // A scalar.
            "" => Ok(Some(Vec::new())),
            _ => line
                .split(',')
                .map(|d| d.parse::<i64>())
                .collect::<Result<Vec<_>, _>>()
                .map(Some)
                .map_err(|_| failed(model, format!("LiteRT's interpreter printed '{line}'"))),
        })
        .collect()
}
