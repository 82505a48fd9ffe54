use std::path::{Component, Path, PathBuf};

use cleave_ir::Model;
use cleave_onnx::{encode_model, write_atomic, OnnxModel, OnnxError};
use cleave_partition::Plan;

use crate::conn::{ConnFile, ConnModel};
use crate::onnx_part::part_model;

#[derive(Debug, thiserror::Error)]
pub enum EmitError {
    #[error("cannot write: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("part {part}: boundary tensor '{tensor}' has no complete type ({ty}); declare it in the model's value_info")]
    Untyped { part: usize, tensor: String, ty: String },
    #[error("{0}")]
    Source(String),
}

impl EmitError {
    /// The file the error concerns, where there is one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            EmitError::Write { path, .. } => Some(path),
            _ => None,
        }
    }
}

impl From<OnnxError> for EmitError {
    fn from(e: OnnxError) -> Self {
        match e {
            OnnxError::Write { path, source } => EmitError::Write { path, source },
            other => EmitError::Source(format!("{}: {other}", other.path().display())),
        }
    }
}

/// What was written, for the summary.
#[derive(Clone, Debug)]
pub struct EmittedPart {
    pub file: String,
    pub backend: String,
    pub nodes: usize,
    pub constant_nodes: usize,
    /// Boundary tensors with their bytes where the shape is static.
    pub inputs: Vec<(String, Option<u64>)>,
    pub outputs: Vec<(String, Option<u64>)>,
}

#[derive(Clone, Debug)]
pub struct Emitted {
    pub conn_json: PathBuf,
    pub conn_ini: PathBuf,
    pub conn: ConnFile,
    pub parts: Vec<EmittedPart>,
}

/// `stem.00001_<backend>.onnx`
pub fn part_file_name(stem: &str, k: usize, backend: &str) -> String {
    format!("{stem}.{:05}_{backend}.onnx", k + 1)
}

/// Writes every part and the connection files into `workdir` (created if missing). Earlier
/// part files of the same stem that this plan does not produce are removed; nothing else in
/// `workdir`, and never the source model, is touched.
pub fn emit(source: &OnnxModel, model: &Model, plan: &Plan, workdir: &Path) -> Result<Emitted, EmitError> {
    let write_err = |path: &Path, source| EmitError::Write { path: path.to_path_buf(), source };
    std::fs::create_dir_all(workdir).map_err(|e| write_err(workdir, e))?;
    let work_real = workdir.canonicalize().map_err(|e| write_err(workdir, e))?;
    let source_real = source.path.canonicalize().map_err(|e| EmitError::Source(format!("{}: {e}", source.path.display())))?;
    let stem = source.path.file_stem().map_or_else(|| "model".to_string(), |s| s.to_string_lossy().into_owned());
    let g = &model.graph;
    let bytes = |v: cleave_ir::ValueId| (g.value(v).name.clone(), g.value(v).ty.byte_size());

    let mut conn = ConnFile {
        source: ConnModel {
            file: relative(&work_real, &source_real),
            inputs: g.inputs.iter().map(|&v| g.value(v).name.clone()).collect(),
            outputs: g.outputs.iter().map(|&v| g.value(v).name.clone()).collect(),
            backend: None,
        },
        parts: Vec::new(),
    };
    let mut written = Vec::new();
    let mut summary = Vec::new();
    for (k, part) in plan.parts.iter().enumerate() {
        let backend = plan.device_name(part).to_string();
        let file = part_file_name(&stem, k, &backend);
        let path = workdir.join(&file);
        if path.canonicalize().is_ok_and(|p| p == source_real) {
            return Err(EmitError::Source(format!("{file} would overwrite the source model; choose another WORKDIR")));
        }
        let proto = part_model(source, model, plan, k)?;
        write_atomic(&path, &encode_model(&proto))?;
        written.push(file.clone());
        conn.parts.push(ConnModel {
            file: file.clone(),
            inputs: part.inputs.iter().map(|&v| g.value(v).name.clone()).collect(),
            outputs: part.outputs.iter().map(|&v| g.value(v).name.clone()).collect(),
            backend: Some(backend.clone()),
        });
        summary.push(EmittedPart {
            file,
            backend,
            nodes: part.nodes.len(),
            constant_nodes: part.constant_nodes.len(),
            inputs: part.inputs.iter().map(|&v| bytes(v)).collect(),
            outputs: part.outputs.iter().map(|&v| bytes(v)).collect(),
        });
    }
    let conn_json = workdir.join(format!("{stem}.conn.json"));
    let conn_ini = workdir.join(format!("{stem}.conn.ini"));
    write_atomic(&conn_json, conn.to_json().as_bytes())?;
    write_atomic(&conn_ini, conn.to_ini().as_bytes())?;
    remove_stale_parts(workdir, &stem, &written, &source_real);
    Ok(Emitted { conn_json, conn_ini, conn, parts: summary })
}

/// Part files of an earlier run (same stem, more parts or other backends) would contradict
/// the new connection files.
fn remove_stale_parts(workdir: &Path, stem: &str, keep: &[String], source: &Path) {
    let Ok(entries) = std::fs::read_dir(workdir) else { return };
    let prefix = format!("{stem}.");
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(&prefix) else { continue };
        let is_part = rest.len() > 6 && rest.as_bytes()[..5].iter().all(u8::is_ascii_digit) && rest.as_bytes()[5] == b'_' && rest.ends_with(".onnx");
        if is_part && !keep.contains(&name) && !e.path().canonicalize().is_ok_and(|p| p == source) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// `to` relative to the folder `from` (both absolute), with `../` as needed.
fn relative(from: &Path, to: &Path) -> String {
    let a: Vec<Component> = from.components().collect();
    let b: Vec<Component> = to.components().collect();
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut out = PathBuf::new();
    for _ in common..a.len() {
        out.push("..");
    }
    for c in &b[common..] {
        out.push(c.as_os_str());
    }
    out.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::relative;
    use std::path::Path;

    #[test]
    fn relative_paths_climb_with_dot_dot() {
        assert_eq!(relative(Path::new("/a/b/work"), Path::new("/a/b/m.onnx")), "../m.onnx");
        assert_eq!(relative(Path::new("/a/b"), Path::new("/a/b/m.onnx")), "m.onnx");
        assert_eq!(relative(Path::new("/x/y"), Path::new("/a/m.onnx")), "../../a/m.onnx");
    }
}
