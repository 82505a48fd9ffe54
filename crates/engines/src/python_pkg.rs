//! Engines that ship in Python wheels (ONNX Runtime in `onnxruntime`, LiteRT in
//! `ai_edge_litert`): the folder of such a package, as the user's Python sees it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The Python cleave asks: `$CLEAVE_PYTHON` (the Python package sets it to its own
/// interpreter), else `python3`.
pub fn python() -> String {
    std::env::var("CLEAVE_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// The folder of `package` as `python` would import it, found without importing it (an
/// engine package's `__init__` pulls in numpy and more).
pub fn package_dir(python: &str, package: &str) -> Result<String, String> {
    let probe = format!(
        "import importlib.util as u; s = u.find_spec('{package}'); \
         print(s.submodule_search_locations[0] if s and s.submodule_search_locations else '')"
    );
    let out = Command::new(python)
        .args(["-c", &probe])
        .output()
        .map_err(|e| format!("cannot run {python} to find {package} ({e})"))?;
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || dir.is_empty() {
        return Err(format!("{python} has no {package} package"));
    }
    Ok(dir)
}

/// The first file, by name, in `dir` whose name starts with `prefix` (a versioned library:
/// `libonnxruntime.so.1.31.1`, `libopenvino_c.so.2641`).
pub fn first_with_prefix(dir: &Path, prefix: &str) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .collect();
    found.sort();
    found.into_iter().next()
}
