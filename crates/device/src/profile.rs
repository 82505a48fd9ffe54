//! One device's profile: what it runs of each format, its fusion settings and declared costs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cleave_ir::{Graph, Node, OpSemantics};
use serde::Deserialize;

use crate::constraint::Constraint;
use crate::cost::{default_costs, DeclaredCost};
use crate::ops::SupportedOps;
use crate::plugin::PluginAnswer;
use crate::verdict::Verdict;

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("bad profile: {message}")]
    Parse { path: PathBuf, message: String },
}

impl ProfileError {
    pub fn path(&self) -> &Path {
        match self {
            ProfileError::Read { path, .. } | ProfileError::Parse { path, .. } => path,
        }
    }
}

/// Reserved for the fusion pass: which built-in fusion rules apply on this device, and the
/// memory budget above which convolutions and pools are tiled.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FuseSection {
    #[serde(default)]
    pub rules: Vec<String>,
    pub tile_bytes: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    all_ops: bool,
    #[serde(default)]
    defaults: Constraint,
    #[serde(default)]
    ops: BTreeMap<String, Constraint>,
    /// `[formats.KEY]`: a table per op vocabulary.
    #[serde(default)]
    formats: BTreeMap<String, TableFile>,
    #[serde(default)]
    fuse: FuseSection,
    cost: Option<DeclaredCost>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TableFile {
    #[serde(default)]
    all_ops: bool,
    #[serde(default)]
    defaults: Constraint,
    #[serde(default)]
    ops: BTreeMap<String, Constraint>,
}

/// What a device can run.
///
/// Op names differ between formats (ONNX `Conv`, TFLite `CONV_2D`), and a device may run
/// different op sets of each (ONE's CPU backend runs any ONNX model cleave hands it but only
/// its own list of TFLite ops), so a profile holds a general table and optional tables per
/// format key, chosen by what the model's [`OpSemantics::format`] answers.
#[derive(Clone, Debug)]
pub struct Profile {
    pub name: String,
    pub description: String,
    /// The ops of a model whose format has no table in `formats`: in a profile without
    /// `[formats.*]` sections, of every model.
    pub general: SupportedOps,
    /// `[formats.KEY]` tables, each replacing `general` for models whose semantics answer
    /// KEY.
    pub formats: BTreeMap<String, SupportedOps>,
    pub fuse: FuseSection,
    /// Declared latency figures, for placement by cost without measuring.
    pub cost: Option<DeclaredCost>,
    /// The device plugin's own answer for one model, which replaces the supported ops for it.
    pub plugin: Option<PluginAnswer>,
}

impl Profile {
    pub fn parse(text: &str, path: &Path) -> Result<Profile, ProfileError> {
        let f: ProfileFile = toml::from_str(text).map_err(|e| ProfileError::Parse {
            path: path.to_path_buf(),
            message: one_line(&e.to_string()),
        })?;
        if let Some(c) = &f.cost {
            c.check().map_err(|message| ProfileError::Parse {
                path: path.to_path_buf(),
                message,
            })?;
        }
        // The empty key is what semantics without a format answer, and those read the
        // general table: a table under it would never be used.
        if f.formats.contains_key("") {
            return Err(ProfileError::Parse {
                path: path.to_path_buf(),
                message: "[formats.\"\"]: a format key must not be empty".to_string(),
            });
        }
        Ok(Profile {
            name: f.name,
            description: f.description,
            general: SupportedOps::new(f.all_ops, f.defaults, f.ops),
            formats: f
                .formats
                .into_iter()
                .map(|(k, t)| (k, SupportedOps::new(t.all_ops, t.defaults, t.ops)))
                .collect(),
            fuse: f.fuse,
            cost: f.cost,
            plugin: None,
        })
    }

    /// A device whose support is its plugin's answer for one model: every op, as far as the
    /// tables go, and the answer decides node by node.
    pub fn from_plugin(name: &str, description: String, answer: PluginAnswer) -> Profile {
        Profile {
            name: name.to_string(),
            description,
            general: SupportedOps {
                all_ops: true,
                ..SupportedOps::default()
            },
            formats: BTreeMap::new(),
            fuse: FuseSection::default(),
            cost: default_costs().get(name).cloned(),
            plugin: Some(answer),
        }
    }

    /// The table for models whose semantics answer `format`.
    pub fn table(&self, format: &str) -> &SupportedOps {
        self.formats.get(format).unwrap_or(&self.general)
    }

    /// Whether this device runs every op of a model of `format` (subject to its defaults).
    pub fn runs_every_op(&self, format: &str) -> bool {
        // A plugin's answer decides node by node: what it runs is worth reporting.
        self.plugin.is_none() && self.table(format).all_ops
    }

    /// Whether this device runs `node`, by the table of the model's format; `sem` answers
    /// that format and which ops are deterministic (for `const_inputs`).
    pub fn check(&self, g: &Graph, node: &Node, sem: &dyn OpSemantics) -> Verdict {
        match &self.plugin {
            Some(answer) => answer.check(g, node),
            None => self.table(sem.format()).check(g, node, sem),
        }
    }

    /// The same op lists with every checkable condition dropped (notes kept): support by op
    /// type alone, as ONNX Runtime's usability checker judges it.
    pub fn without_constraints(&self) -> Profile {
        Profile {
            general: self.general.without_constraints(),
            formats: self
                .formats
                .iter()
                .map(|(k, t)| (k.clone(), t.without_constraints()))
                .collect(),
            ..self.clone()
        }
    }

    /// Limitations the profile states for this op (in the table of the model's format) but
    /// cannot check.
    pub fn note(&self, node: &Node, sem: &dyn OpSemantics) -> Option<&str> {
        self.table(sem.format())
            .lookup(&node.domain, &node.op_type)
            .and_then(|c| c.note.as_deref())
    }

    /// Why the device runs no op at all of a model of `format`, when that is because its
    /// profile lists ops for other formats only (ONE's ACL backends and ONNX models): said
    /// where a refusal of every node needs explaining.
    pub fn format_note(&self, format: &str) -> Option<String> {
        if !self.table(format).runs_nothing() {
            return None;
        }
        let others: Vec<&str> = self
            .formats
            .iter()
            .filter(|(k, t)| k.as_str() != format && !t.runs_nothing())
            .map(|(k, _)| k.as_str())
            .collect();
        if others.is_empty() {
            return None;
        }
        let what = if format.is_empty() {
            "no op of this model's format".to_string()
        } else {
            format!("no {format} op")
        };
        Some(format!(
            "{} runs {what}: its profile lists ops for {} models only",
            self.name,
            others.join(", ")
        ))
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests;
