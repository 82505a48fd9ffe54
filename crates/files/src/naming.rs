//! Part names in a working folder: `stem.00001_<backend>.<ext>`, as ONE's partitioner names
//! its parts, and the source's path as the connection file records it.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

/// The file of part `k` (0-based): `stem.00001_<backend>.<ext>`.
pub fn part_file_name(stem: &str, k: usize, backend: &str, ext: &str) -> String {
    format!("{stem}.{:05}_{backend}.{ext}", k + 1)
}

/// Model extensions a part file may carry; `backend_of` strips them before reading the suffix.
const MODEL_EXTENSIONS: [&str; 3] = [".onnx", ".tflite", ".circle"];

/// The backend of a part: its `backend` key, else the `_backend` suffix of its file name.
pub fn backend_of(file: &str, key: Option<&str>) -> String {
    if let Some(b) = key {
        return b.to_string();
    }
    let stem = MODEL_EXTENSIONS
        .iter()
        .find_map(|e| file.strip_suffix(e))
        .unwrap_or(file);
    stem.rsplit_once('.')
        .and_then(|(_, tail)| tail.split_once('_'))
        .map_or_else(|| "?".to_string(), |(_, b)| b.to_string())
}

/// Whether `name` is a part file of `stem` with extension `ext` (five digits, `_`, anything).
pub fn is_part_file(name: &str, stem: &str, ext: &str) -> bool {
    let Some(rest) = name
        .strip_prefix(stem)
        .and_then(|r| r.strip_prefix('.'))
        .and_then(|r| r.strip_suffix(ext))
        .and_then(|r| r.strip_suffix('.'))
    else {
        return false;
    };
    let b = rest.as_bytes();
    b.len() >= 6 && b[..5].iter().all(u8::is_ascii_digit) && b[5] == b'_'
}

/// Removes part files of an earlier run (same stem, more parts or other backends), which
/// would contradict the new connection files; never one in `keep`, never `source`.
pub fn remove_stale_parts(workdir: &Path, stem: &str, ext: &str, keep: &[String], source: &Path) {
    let Ok(entries) = std::fs::read_dir(workdir) else {
        return;
    };
    let keep: HashSet<&str> = keep.iter().map(String::as_str).collect();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if is_part_file(&name, stem, ext)
            && !keep.contains(name.as_str())
            && !e.path().canonicalize().is_ok_and(|p| p == source)
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// `to` relative to the folder `from` (both absolute), with `../` as needed.
pub fn relative_path(from: &Path, to: &Path) -> String {
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
    use super::*;

    #[test]
    fn relative_paths_climb_with_dot_dot() {
        assert_eq!(
            relative_path(Path::new("/a/b/work"), Path::new("/a/b/m.onnx")),
            "../m.onnx"
        );
        assert_eq!(
            relative_path(Path::new("/a/b"), Path::new("/a/b/m.onnx")),
            "m.onnx"
        );
        assert_eq!(
            relative_path(Path::new("/x/y"), Path::new("/a/m.onnx")),
            "../../a/m.onnx"
        );
    }

    #[test]
    fn part_names_round_trip_their_backend() {
        let f = part_file_name("net", 0, "acl_cl", "circle");
        assert_eq!(f, "net.00001_acl_cl.circle");
        assert_eq!(backend_of(&f, None), "acl_cl");
        assert_eq!(backend_of("net.00002_npu.onnx", None), "npu");
        assert_eq!(backend_of("net.00002_npu.onnx", Some("cpu")), "cpu");
        assert!(is_part_file("net.00002_npu.onnx", "net", "onnx"));
        assert!(!is_part_file("net.00002_npu.onnx", "net", "tflite"));
        assert!(!is_part_file("net.0002_npu.onnx", "net", "onnx"));
        assert!(!is_part_file("netx.00002_npu.onnx", "net", "onnx"));
    }
}
