use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cleave_ir::{Graph, Node};
use serde::Deserialize;

use crate::constraint::Constraint;

const CPU: &str = include_str!("profiles/cpu.toml");
const MYRIAD: &str = include_str!("profiles/myriad.toml");

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("cannot read: {source}")]
    Read { path: PathBuf, source: std::io::Error },
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
    #[serde(default)]
    fuse: FuseSection,
}

/// What a device can run.
#[derive(Clone, Debug)]
pub struct Profile {
    pub name: String,
    pub description: String,
    /// Runs every op (subject to `defaults`).
    pub all_ops: bool,
    /// Conditions for every op, unless an op's own entry sets the same field.
    pub defaults: Constraint,
    /// Supported ops by (domain, op type); the default domain is "".
    pub ops: BTreeMap<(String, String), Constraint>,
    pub fuse: FuseSection,
}

/// A profile's answer for one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Supported,
    /// The op type is not in the profile.
    UnsupportedOp,
    /// The op is listed, but this node breaks a constraint.
    Constraint(String),
}

impl Profile {
    pub fn parse(text: &str, path: &Path) -> Result<Profile, ProfileError> {
        let f: ProfileFile = toml::from_str(text).map_err(|e| ProfileError::Parse { path: path.to_path_buf(), message: one_line(&e.to_string()) })?;
        let mut ops = BTreeMap::new();
        for (key, c) in f.ops {
            let (domain, op) = match key.rsplit_once("::") {
                Some((d, o)) => (normalise_domain(d), o.to_string()),
                None => (String::new(), key),
            };
            ops.insert((domain, op), c);
        }
        Ok(Profile { name: f.name, description: f.description, all_ops: f.all_ops, defaults: f.defaults, ops, fuse: f.fuse })
    }

    pub fn check(&self, g: &Graph, node: &Node) -> Verdict {
        let key = (normalise_domain(&node.domain), node.op_type.clone());
        let own = self.ops.get(&key);
        if own.is_none() && !self.all_ops {
            return Verdict::UnsupportedOp;
        }
        let merged = merge(&self.defaults, own);
        match merged.violation(g, node) {
            None => Verdict::Supported,
            Some(reason) => Verdict::Constraint(reason),
        }
    }

    /// Limitations the profile states for this op but cannot check.
    pub fn note(&self, node: &Node) -> Option<&str> {
        self.ops.get(&(normalise_domain(&node.domain), node.op_type.clone())).and_then(|c| c.note.as_deref())
    }
}

fn normalise_domain(d: &str) -> String {
    if d == "ai.onnx" { String::new() } else { d.to_string() }
}

fn merge(defaults: &Constraint, own: Option<&Constraint>) -> Constraint {
    let Some(own) = own else { return defaults.clone() };
    Constraint {
        dtypes: own.dtypes.clone().or_else(|| defaults.dtypes.clone()),
        ranks: own.ranks.clone().or_else(|| defaults.ranks.clone()),
        attrs: defaults.attrs.iter().chain(&own.attrs).map(|(k, v)| (k.clone(), v.clone())).collect(),
        static_shape: defaults.static_shape || own.static_shape,
        note: own.note.clone(),
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The profiles known to a run: the built-ins plus any loaded from files (which may
/// override a built-in of the same name).
#[derive(Clone, Debug)]
pub struct Profiles {
    map: BTreeMap<String, Profile>,
}

impl Profiles {
    pub fn builtin() -> Profiles {
        let mut map = BTreeMap::new();
        for (text, file) in [(CPU, "profiles/cpu.toml"), (MYRIAD, "profiles/myriad.toml")] {
            // The built-ins are compiled in and covered by tests; a parse failure is a bug.
            let p = Profile::parse(text, Path::new(file)).unwrap_or_else(|e| panic!("built-in {file}: {e}"));
            map.insert(p.name.clone(), p);
        }
        Profiles { map }
    }

    /// Loads a profile file; returns the name it defines.
    pub fn load(&mut self, path: &Path) -> Result<String, ProfileError> {
        let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Read { path: path.to_path_buf(), source })?;
        let p = Profile::parse(&text, path)?;
        let name = p.name.clone();
        self.map.insert(name.clone(), p);
        Ok(name)
    }

    /// Adds a profile built in code (overrides one of the same name).
    pub fn insert(&mut self, p: Profile) {
        self.map.insert(p.name.clone(), p);
    }

    pub fn get(&self, device: &str) -> Option<&Profile> {
        self.map.get(device)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.map.keys().map(String::as_str)
    }

    /// A device with no profile runs every op, as in ONE.
    pub fn check(&self, device: &str, g: &Graph, node: &Node) -> Verdict {
        match self.get(device) {
            Some(p) => p.check(g, node),
            None => Verdict::Supported,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cleave_ir::{ElemType, GraphBuilder, NodeSpec, TensorType};

    fn graph(op: &str, dims: &[i64], attrs: Vec<cleave_ir::Attribute>) -> Graph {
        let mut b = GraphBuilder::new("g");
        b.input("x", TensorType::fixed(ElemType::F32, dims));
        b.node(NodeSpec { name: "n".into(), op_type: op.into(), inputs: vec!["x".into()], outputs: vec!["y".into()], attrs, ..Default::default() });
        b.value_type("y", TensorType::fixed(ElemType::F32, dims));
        b.output("y");
        b.finish(false).unwrap()
    }

    #[test]
    fn builtins_parse_and_cpu_runs_everything() {
        let p = Profiles::builtin();
        let g = graph("SomethingExotic", &[1, 2], vec![]);
        assert_eq!(p.check("cpu", &g, &g.nodes[0]), Verdict::Supported);
        assert_eq!(p.check("npu_without_profile", &g, &g.nodes[0]), Verdict::Supported);
        assert_eq!(p.check("myriad", &g, &g.nodes[0]), Verdict::UnsupportedOp);
    }

    #[test]
    fn myriad_pads_only_4d_tensors() {
        let p = Profiles::builtin();
        let g4 = graph("Pad", &[1, 3, 8, 8], vec![]);
        assert_eq!(p.check("myriad", &g4, &g4.nodes[0]), Verdict::Supported);
        let g3 = graph("Pad", &[3, 8, 8], vec![]);
        assert!(matches!(p.check("myriad", &g3, &g3.nodes[0]), Verdict::Constraint(r) if r.contains("rank 3")));
    }

    #[test]
    fn constraints_check_types_attributes_and_static_shapes() {
        let text = r#"
            name = "npu"
            [defaults]
            dtypes = ["float16"]
            [ops]
            Relu = { dtypes = ["float32"] }
            Resize = { attrs = { mode = ["nearest"] } }
            "com.example::Gelu" = { static_shape = true }
        "#;
        let p = Profile::parse(text, Path::new("npu.toml")).unwrap();
        let g = graph("Relu", &[2], vec![]);
        assert_eq!(p.check(&g, &g.nodes[0]), Verdict::Supported);
        let linear = cleave_ir::Attribute { name: "mode".into(), value: cleave_ir::AttrValue::String("linear".into()) };
        let g = graph("Resize", &[2], vec![linear]);
        // float32 breaks the default dtype list before the attribute is looked at.
        assert!(matches!(p.check(&g, &g.nodes[0]), Verdict::Constraint(r) if r.contains("float32")));
        let e = Profile::parse("name = \"x\"\nbogus = 1\n", Path::new("x.toml")).unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
    }
}
