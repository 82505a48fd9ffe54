//! ONE circle-partitioner's `.part` file: an INI file read the way ONE's crew reader does.
//!
//! - `[section]` lines open sections; `key=value` lines are split at the first `=` only, so node
//!   names such as `onnx::Conv_12` (which hold `:`) are fine as keys;
//! - lines starting with `#` or `;` are comments; blank lines are skipped; keys and values are
//!   trimmed;
//! - `[partition]` holds `backends` (comma-separated), `default` and `comply`;
//! - `[OPCODE]` maps op codes (case-insensitive) to backends, `_` overriding `default`;
//! - `[OPNAME]` maps node names to backends.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum PartError {
    #[error("cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("line {line}: {message}")]
    Syntax {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{message}")]
    Invalid { path: PathBuf, message: String },
}

impl PartError {
    pub fn path(&self) -> &Path {
        match self {
            PartError::Read { path, .. }
            | PartError::Syntax { path, .. }
            | PartError::Invalid { path, .. } => path,
        }
    }
}

/// Which rule sections apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Comply {
    pub opname: bool,
    pub opcode: bool,
}

/// ONE's rules as values rather than text (the Python package's dict): `[partition]`'s keys
/// and the `[OPCODE]` and `[OPNAME]` tables.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleTable {
    pub backends: Vec<String>,
    pub default: Option<String>,
    pub comply: Option<String>,
    pub opcode: Vec<(String, String)>,
    pub opname: Vec<(String, String)>,
}

/// A parsed and validated `.part` file.
#[derive(Clone, Debug)]
pub struct PartFile {
    pub path: PathBuf,
    pub backends: Vec<String>,
    pub default: String,
    pub comply: Comply,
    /// Lower-cased op code → backend.
    pub opcode: BTreeMap<String, String>,
    /// Node name → position in `backends`; a `.part` file may name every node of a large
    /// model, so each rule is a name (inline when short, as node names are) and a number.
    pub opname: rustc_hash::FxHashMap<cleave_ir::Name, u16>,
}

impl PartFile {
    /// The backend an `[OPNAME]` rule puts the node `name` on.
    pub fn backend_of(&self, name: &str) -> Option<&String> {
        let &at = self.opname.get(name)?;
        self.backends.get(usize::from(at))
    }

    pub fn load(path: &Path) -> Result<PartFile, PartError> {
        let text = std::fs::read_to_string(path).map_err(|source| PartError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        PartFile::parse(&text, path, None, None)
    }

    /// Parses and validates; `backends`/`default` override the file's, as ONE's options do.
    pub fn parse(
        text: &str,
        path: &Path,
        backends: Option<&[String]>,
        default: Option<&str>,
    ) -> Result<PartFile, PartError> {
        let sections = read_ini(text, path)?;
        PartFile::from_sections(&sections, path, backends, default)
    }

    /// The rules `table` holds, checked as a file's are; `name` is what messages call it.
    pub fn from_table(
        table: &RuleTable,
        name: &Path,
        backends: Option<&[String]>,
        default: Option<&str>,
    ) -> Result<PartFile, PartError> {
        let joined = table.backends.join(",");
        let mut partition = Vec::new();
        if !table.backends.is_empty() {
            partition.push(("backends", joined.as_str(), 0));
        }
        if let Some(d) = &table.default {
            partition.push(("default", d.as_str(), 0));
        }
        if let Some(c) = &table.comply {
            partition.push(("comply", c.as_str(), 0));
        }
        fn rows(rules: &[(String, String)]) -> Vec<(&str, &str, usize)> {
            rules
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str(), 0))
                .collect()
        }
        let sections: Sections = [
            ("partition", partition),
            ("OPCODE", rows(&table.opcode)),
            ("OPNAME", rows(&table.opname)),
        ]
        .into_iter()
        .collect();
        // A table has no lines to point at.
        PartFile::from_sections(&sections, name, backends, default).map_err(|e| match e {
            PartError::Syntax { path, message, .. } => PartError::Invalid { path, message },
            e => e,
        })
    }

    fn from_sections(
        sections: &Sections<'_>,
        path: &Path,
        backends: Option<&[String]>,
        default: Option<&str>,
    ) -> Result<PartFile, PartError> {
        let invalid = |message: String| PartError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        let empty = Vec::new();
        let partition = sections.get("partition").unwrap_or(&empty);
        let get = |key: &str| {
            partition
                .iter()
                .rev()
                .find(|(k, _, _)| *k == key)
                .map(|(_, v, _)| *v)
        };
        let backends: Vec<String> = match backends {
            Some(b) => b.to_vec(),
            None => get("backends")
                .unwrap_or("")
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
        };
        if backends.is_empty() {
            return Err(invalid("[partition] backends is empty or missing".into()));
        }
        for b in &backends {
            cleave_workdir::check_backend_name(b)
                .map_err(|e| invalid(format!("[partition] backends: {e}")))?;
        }
        let mut opcode = BTreeMap::new();
        let named = sections.get("OPNAME").unwrap_or(&empty);
        let mut opname =
            rustc_hash::FxHashMap::with_capacity_and_hasher(named.len(), Default::default());
        let mut underscore = None;
        let check = |line: usize, section: &str, key: &str, value: &str| -> Result<(), PartError> {
            if backends.iter().any(|b| b == value) {
                Ok(())
            } else {
                Err(PartError::Syntax {
                    path: path.to_path_buf(),
                    line,
                    message: format!(
                        "[{section}] {key}={value}: unknown backend '{value}' (backends are {})",
                        backends.join(",")
                    ),
                })
            }
        };
        for (k, v, line) in sections.get("OPCODE").unwrap_or(&empty) {
            check(*line, "OPCODE", k, v)?;
            if *k == "_" {
                underscore = Some(v.to_string());
            } else {
                opcode.insert(k.to_lowercase(), v.to_string());
            }
        }
        for (k, v, line) in named {
            check(*line, "OPNAME", k, v)?;
            let Some(at) = backends.iter().position(|b| b == v) else {
                continue; // `check` refused it already
            };
            let at = u16::try_from(at).map_err(|_| invalid("more than 65535 backends".into()))?;
            opname.insert(cleave_ir::Name::from(*k), at);
        }
        let default = default
            .map(String::from)
            .or(underscore)
            .or_else(|| get("default").map(String::from))
            .ok_or_else(|| invalid("[partition] default is missing".into()))?;
        if !backends.contains(&default) {
            return Err(invalid(format!(
                "default '{default}' is not one of the backends ({})",
                backends.join(",")
            )));
        }
        let comply = match get("comply").unwrap_or("opcode") {
            "opcode" => Comply {
                opname: false,
                opcode: true,
            },
            "opname" => Comply {
                opname: true,
                opcode: false,
            },
            "opname,opcode" | "opcode,opname" => Comply {
                opname: true,
                opcode: true,
            },
            other => {
                return Err(invalid(format!(
                    "comply '{other}' is not one of opcode, opname, opname,opcode"
                )))
            }
        };
        Ok(PartFile {
            path: path.to_path_buf(),
            backends,
            default,
            comply,
            opcode,
            opname,
        })
    }
}

/// The text of a `.part` file that places nodes by name (`comply=opname`), in ONE's layout;
/// `PartFile::parse` reads it back. `nodes` pairs each node name with an index into `backends`.
pub fn render_opname<'a>(
    backends: &[String],
    default: &str,
    nodes: impl IntoIterator<Item = (&'a str, u16)>,
) -> String {
    use std::fmt::Write;
    let mut out = format!(
        "[partition]\nbackends={}\ndefault={default}\ncomply=opname\n\n[OPNAME]\n",
        backends.join(",")
    );
    for (name, d) in nodes {
        // Writing to a String cannot fail.
        let _ = writeln!(out, "{name}={}", backends[d as usize]);
    }
    out
}

/// Each section's `key=value` lines with their line numbers, as slices of the file's text.
type Sections<'a> = BTreeMap<&'a str, Vec<(&'a str, &'a str, usize)>>;

fn read_ini<'a>(text: &'a str, path: &Path) -> Result<Sections<'a>, PartError> {
    let mut out: Sections = BTreeMap::new();
    let mut current: Option<&str> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        let n = i + 1;
        let syntax = |message: String| PartError::Syntax {
            path: path.to_path_buf(),
            line: n,
            message,
        };
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(rest) = line.strip_prefix('[') {
            let name = rest
                .strip_suffix(']')
                .ok_or_else(|| syntax(format!("section header '{line}' has no closing ']'")))?
                .trim();
            if name.is_empty() {
                return Err(syntax("empty section name".into()));
            }
            current = Some(name);
            out.entry(name).or_default();
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .ok_or_else(|| syntax(format!("'{line}' is neither a [section] nor key=value")))?;
        let section =
            current.ok_or_else(|| syntax(format!("'{line}' comes before any [section]")))?;
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() {
            return Err(syntax(format!("'{line}' has an empty key")));
        }
        out.entry(section).or_default().push((k, v, n));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<PartFile, PartError> {
        PartFile::parse(text, Path::new("t.part"), None, None)
    }

    #[test]
    fn reads_one_example_with_comments_and_colons() {
        let p = parse(
            "# comment\n; another\n[partition]\nbackends=cpu, acl_cl\ndefault=cpu\ncomply=opname,opcode\n\n[OPCODE]\nDIV=acl_cl\n_=acl_cl\n[OPNAME]\nonnx::Conv_12 = cpu\na=b=cpu_is_not_a_backend_but_the_key_is_a\n",
        );
        // `a=b=...` splits at the first '=': key `a`, value `b=cpu...`, an unknown backend.
        let e = p.unwrap_err();
        assert!(matches!(&e, PartError::Syntax { line: 13, .. }), "{e}");
        let p = parse("[partition]\nbackends=cpu,acl_cl\ndefault=cpu\ncomply=opname,opcode\n[OPCODE]\nDiv=acl_cl\n_=acl_cl\n[OPNAME]\nonnx::Conv_12=cpu\n").unwrap();
        assert_eq!(p.backends, ["cpu", "acl_cl"]);
        assert_eq!(p.default, "acl_cl", "`_` overrides default");
        assert_eq!(p.opcode.get("div").map(String::as_str), Some("acl_cl"));
        assert_eq!(
            p.backend_of("onnx::Conv_12").map(String::as_str),
            Some("cpu")
        );
        assert_eq!(
            p.comply,
            Comply {
                opname: true,
                opcode: true
            }
        );
    }

    #[test]
    fn validates_as_one_does() {
        let e = parse("[partition]\nbackends=cpu\ndefault=npu\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("default 'npu' is not one of the backends"),
            "{e}"
        );
        let e = parse("[partition]\nbackends=\ndefault=cpu\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("backends is empty"), "{e}");
        let e = parse("[partition]\nbackends=cpu\ndefault=cpu\n[OPCODE]\nADD=gpu\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 5") && e.contains("unknown backend 'gpu'"),
            "{e}"
        );
        let e = parse("[partition\nbackends=cpu\n").unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("no closing"), "{e}");
        let e = parse("backends=cpu\n").unwrap_err().to_string();
        assert!(e.contains("before any [section]"), "{e}");
        let e = parse("[partition]\nbackends=cpu\ndefault=cpu\ncomply=sequence\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("comply 'sequence'"), "{e}");
    }

    #[test]
    fn command_line_overrides_the_file() {
        let text = "[partition]\nbackends=cpu,acl_cl\ndefault=cpu\n";
        let b = vec!["npu".to_string(), "cpu".to_string()];
        let p = PartFile::parse(text, Path::new("t.part"), Some(&b), Some("npu")).unwrap();
        assert_eq!(p.backends, b);
        assert_eq!(p.default, "npu");
    }

    #[test]
    fn rendered_opname_rules_read_back() {
        let backends = vec!["cpu".to_string(), "npu".to_string()];
        let text = render_opname(&backends, "cpu", [("n0", 1), ("onnx::Conv_1", 0)]);
        let p = parse(&text).unwrap();
        assert_eq!(
            p.comply,
            Comply {
                opname: true,
                opcode: false
            }
        );
        assert_eq!(p.backend_of("n0").map(String::as_str), Some("npu"));
        assert_eq!(
            p.backend_of("onnx::Conv_1").map(String::as_str),
            Some("cpu")
        );
        assert_eq!(p.backends, backends);
    }
}
