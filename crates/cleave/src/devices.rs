//! Where nodes may run: a priority list, ONE's `.part` rules, device profiles.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use cleave_assign::{PartFile, RuleTable};
use cleave_device::Profiles;

use crate::{Arg, Error, Message};

/// The devices a model is split across and what each runs.
#[derive(Clone, Debug)]
pub struct Devices {
    /// Priority list (OpenVINO's `HETERO:A,B`); with a `.part` file, overrides its backends.
    pub list: Vec<String>,
    /// ONE's rule file, already parsed with `list` and `default` applied.
    pub part: Option<PartFile>,
    /// Device for nodes no rule places (overrides the `.part` file's).
    pub default: Option<String>,
    /// Built-in profiles plus any loaded ones.
    pub profiles: Profiles,
}

/// What a caller asks for, as the command line spells it.
#[derive(Clone, Debug, Default)]
pub struct DeviceRequest {
    /// Device names in priority order; an entry ending in `.toml` is a profile file whose
    /// device is used; `ov:DEVICE` (or `ov-DEVICE`) is an OpenVINO device, which runs what
    /// OpenVINO's `query_model` says it runs of the model.
    pub devices: Vec<String>,
    /// ONE's rules (`.part`), from a file or as text.
    pub part: Option<Rules>,
    pub default: Option<String>,
    /// Extra profile files (override built-ins of the same name).
    pub profiles: Vec<PathBuf>,
    /// Judge support by op type alone.
    pub no_constraints: bool,
}

/// ONE's `.part` rules, read from a file or given as values (the Python package's dict).
#[derive(Clone, Debug)]
pub enum Rules {
    File(PathBuf),
    /// The rules as values, and what messages call them (e.g. `<rules dict>`).
    Table {
        table: RuleTable,
        name: PathBuf,
    },
}

impl Rules {
    /// What messages call the rules.
    pub fn name(&self) -> &Path {
        match self {
            Rules::File(p) => p,
            Rules::Table { name, .. } => name,
        }
    }

    /// The rules checked, `backends` and `default` overriding theirs.
    fn read(&self, backends: Option<&[String]>, default: Option<&str>) -> Result<PartFile, Error> {
        let parsed = match self {
            Rules::File(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| Error::argument(path, format!("cannot read: {e}")))?;
                PartFile::parse(&text, path, backends, default)
            }
            Rules::Table { table, name } => PartFile::from_table(table, name, backends, default),
        };
        parsed.map_err(|e| Error::argument(e.path(), &e))
    }
}

impl From<PathBuf> for Rules {
    fn from(p: PathBuf) -> Rules {
        Rules::File(p)
    }
}

impl Devices {
    /// A priority list over the built-in profiles.
    pub fn priority(list: &[&str]) -> Devices {
        Devices {
            list: list.iter().map(|s| s.to_string()).collect(),
            part: None,
            default: None,
            profiles: Profiles::builtin(),
        }
    }

    /// ONE's rule file over the built-in profiles.
    pub fn part_file(path: impl AsRef<Path>) -> Result<Devices, Error> {
        Devices::resolve(&DeviceRequest {
            part: Some(Rules::File(path.as_ref().to_path_buf())),
            ..DeviceRequest::default()
        })
    }

    /// Loads the profiles and the `.part` file a request names and checks the list.
    pub fn resolve(req: &DeviceRequest) -> Result<Devices, Error> {
        let (profiles, list) = profiles(req)?;
        let part = match &req.part {
            Some(rules) => {
                let backends = (!list.is_empty()).then_some(list.as_slice());
                Some(rules.read(backends, req.default.as_deref())?)
            }
            None => None,
        };
        if part.is_none() && list.is_empty() {
            return Err(Error::request(
                cleave_assign::AssignError::NoDevices.message(),
            ));
        }
        Ok(Devices {
            list,
            part,
            default: req.default.clone(),
            profiles,
        })
    }

    /// Frees the `.part` file's rules by node name once they have placed the nodes; its
    /// backends, default and op-code rules stay. Assigning again afterwards would place the
    /// nodes those rules named by the other rules.
    pub fn forget_node_rules(&mut self) {
        if let Some(p) = self.part.as_mut() {
            p.opname = Default::default();
        }
    }

    /// The devices in priority order: the `.part` file's backends, else the list.
    pub fn order(&self) -> Vec<String> {
        self.part
            .as_ref()
            .map_or_else(|| self.list.clone(), |p| p.backends.clone())
    }
}

/// The built-in profiles plus the request's files; the device list with `.toml` entries
/// replaced by the names their files define.
fn profiles(req: &DeviceRequest) -> Result<(Profiles, Vec<String>), Error> {
    let mut profiles = Profiles::builtin();
    for p in &req.profiles {
        profiles
            .load(p)
            .map_err(|e| Error::argument(e.path(), &e))?;
    }
    let mut devices = Vec::with_capacity(req.devices.len());
    for d in &req.devices {
        if d.ends_with(".toml") {
            let name = profiles
                .load(Path::new(d))
                .map_err(|e| Error::argument(e.path(), &e))?;
            devices.push(name);
        } else if let Some(ov) = d.strip_prefix("ov:") {
            // `ov:GPU.1` is OpenVINO's device GPU.1; a ':' has no place in a part's file name.
            if ov.is_empty() {
                return Err(Error::request(Message::about(
                    Arg::Devices,
                    "ov:",
                    " names no OpenVINO device (e.g. ov:CPU, ov:GPU.1)",
                )));
            }
            devices.push(format!("{}{ov}", cleave_engines::OPENVINO_PREFIX));
        } else {
            devices.push(d.clone());
        }
    }
    if req.no_constraints {
        profiles = profiles.without_constraints();
    }
    let mut seen = HashSet::new();
    for d in &devices {
        cleave_workdir::check_backend_name(d)
            .map_err(|e| Error::request(Message::about_arg(Arg::Devices, format!(": {e}"))))?;
        if !seen.insert(d) {
            return Err(Error::request(Message::about_arg(
                Arg::Devices,
                format!(": '{d}' is empty or listed twice"),
            )));
        }
    }
    Ok((profiles, devices))
}
