//! Part names in a working folder: `stem.00001_<backend>.<ext>`, as ONE's partitioner names
//! its parts, and the source's path as the connection file records it.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

/// The longest backend name accepted.
const MAX_BACKEND_LEN: usize = 64;

/// Checks a backend (device) name against the one rule for them: a letter or digit, then
/// letters, digits, `_`, `.` or `-`, at most 64 characters. A backend name becomes part of file
/// names, connection files and Ray deployment names, so a rule file must not be able to choose
/// where cleave writes (`../x`, `a/b`).
pub fn check_backend_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if first_ok && rest_ok && name.len() <= MAX_BACKEND_LEN {
        Ok(())
    } else {
        Err(format!(
            "backend name '{name}' is not allowed: it must be a letter or digit followed by letters, \
             digits, '_', '.' or '-', at most {MAX_BACKEND_LEN} characters (it becomes part of file names)"
        ))
    }
}

/// The file of part `k` (0-based): `stem.00001_<backend>.<ext>`; refused unless the backend
/// follows [`check_backend_name`] and the result is one plain file name.
pub fn part_file_name(stem: &str, k: usize, backend: &str, ext: &str) -> Result<String, String> {
    check_backend_name(backend)?;
    let name = format!("{stem}.{:05}_{backend}.{ext}", k + 1);
    let mut components = Path::new(&name).components();
    match (components.next(), components.next()) {
        (Some(Component::Normal(_)), None) => Ok(name),
        _ => Err(format!("part file name '{name}' is not a plain file name")),
    }
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

/// Part files of an earlier run (same stem, more parts or other backends), which would
/// contradict the new connection files: never one in `keep`, never `source`.
pub fn stale_parts(
    workdir: &Path,
    stem: &str,
    ext: &str,
    keep: &[String],
    source: &Path,
) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(workdir) else {
        return Vec::new();
    };
    let keep: HashSet<&str> = keep.iter().map(String::as_str).collect();
    let mut stale: Vec<String> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let is_stale = is_part_file(&name, stem, ext)
                && !keep.contains(name.as_str())
                && e.file_type().is_ok_and(|t| !t.is_dir())
                && !e.path().canonicalize().is_ok_and(|p| p == source);
            is_stale.then_some(name)
        })
        .collect();
    stale.sort();
    stale
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
        let f = part_file_name("net", 0, "acl_cl", "circle").unwrap();
        assert_eq!(f, "net.00001_acl_cl.circle");
        assert_eq!(backend_of(&f, None), "acl_cl");
        assert_eq!(backend_of("net.00002_npu.onnx", None), "npu");
        assert_eq!(backend_of("net.00002_npu.onnx", Some("cpu")), "cpu");
        assert!(is_part_file("net.00002_npu.onnx", "net", "onnx"));
        assert!(!is_part_file("net.00002_npu.onnx", "net", "tflite"));
        assert!(!is_part_file("net.0002_npu.onnx", "net", "onnx"));
        assert!(!is_part_file("netx.00002_npu.onnx", "net", "onnx"));
    }

    #[test]
    fn backend_names_cannot_leave_the_folder() {
        for ok in ["cpu", "acl_cl", "gpu0", "npu.1", "x-y", "0"] {
            assert!(check_backend_name(ok).is_ok(), "{ok}");
        }
        let long = "a".repeat(65);
        for bad in [
            "",
            "../../evil",
            "a/b",
            "..",
            ".hidden",
            "-x",
            "a\\b",
            "é",
            "a b",
            &long,
        ] {
            let e = check_backend_name(bad).unwrap_err();
            assert!(e.contains(&format!("'{bad}'")), "{e}");
        }
        assert_eq!(
            part_file_name("m", 0, "cpu", "onnx").unwrap(),
            "m.00001_cpu.onnx"
        );
        assert!(part_file_name("m", 0, "../x", "onnx").is_err());
    }
}
