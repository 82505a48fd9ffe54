//! Devices whose profile is OpenVINO's own answer: `--devices ov:NPU,ov:CPU` names OpenVINO
//! devices (kept as `ov-NPU`, `ov-CPU`, names that fit in file names), and what each runs of
//! the model is what the installed OpenVINO's `Core.query_model` says, node by node, as its
//! HETERO plugin asks it. The C API has no `query_model`, so the question goes through the
//! `openvino` Python package (the script is `python/cleave/openvino_query.py`, carried in
//! the binary); answers are cached by model digest, device and OpenVINO version.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use cleave_device::{PluginAnswer, Profile};
use cleave_engines::openvino_device;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::{Arg, Devices, Error, Message};

/// The question, as Python code; run with the model and device as arguments.
pub const QUERY_SCRIPT: &str = include_str!("../../../python/cleave/openvino_query.py");

#[derive(Deserialize)]
struct Answer {
    openvino: String,
    device: String,
    /// Why OpenVINO could not read the whole model, when each node was asked alone.
    #[serde(default)]
    whole_model: Option<String>,
    /// For each named tensor, the OpenVINO operation types that compute it and that the
    /// device lacks (empty: it runs them all).
    tensors: HashMap<String, Vec<String>>,
}

impl Devices {
    /// Asks OpenVINO about `model` for every `ov-DEVICE` in the list that has no answer yet.
    pub fn ask_openvino(&mut self, model: &Path) -> Result<(), Error> {
        for name in self.order() {
            let Some(device) = openvino_device(&name) else {
                continue;
            };
            if self.profiles.get(&name).is_some_and(|p| p.plugin.is_some()) {
                continue;
            }
            let (answer, whole_model) = query(model, device)?;
            let description = match whole_model {
                None => format!(
                    "{} as OpenVINO's query_model answers for {}",
                    answer.answered_by,
                    model.display()
                ),
                Some(why) => format!(
                    "{} as OpenVINO's query_model answers for each node of {} alone (it cannot read the whole model: {why})",
                    answer.answered_by,
                    model.display()
                ),
            };
            let mut profile = Profile::from_plugin(&name, description, answer);
            // The user's own [cost] for this device beats the built-in estimate.
            if let Some(c) = self.profiles.get(&name).and_then(|p| p.cost.clone()) {
                profile.cost = Some(c);
            }
            self.profiles.insert(profile);
        }
        Ok(())
    }

    /// Whether some listed device still waits for OpenVINO's answer.
    pub fn needs_openvino(&self) -> bool {
        self.order().iter().any(|d| {
            openvino_device(d).is_some() && self.profiles.get(d).is_none_or(|p| p.plugin.is_none())
        })
    }
}

/// OpenVINO's answer for `model` on `device`, from the cache when this model, device and
/// OpenVINO version were asked before; with why OpenVINO could not read the whole model when
/// it answered node by node.
pub fn query(model: &Path, device: &str) -> Result<(PluginAnswer, Option<String>), Error> {
    let version = cleave_engines::openvino_version()
        .map_err(|e| Error::request(ov_device(device, format!(": {e}"))))?;
    let digest = digest(model)?;
    let cache = cache_dir().map(|d| {
        d.join(format!(
            "{digest}-{}-{}.json",
            file_safe(device),
            file_safe(&version)
        ))
    });
    let cached = cache
        .as_ref()
        .and_then(|c| std::fs::read(c).ok())
        .and_then(|bytes| serde_json::from_slice::<Answer>(&bytes).ok())
        .filter(|a| a.device == device && a.openvino == version);
    let answer = match cached {
        Some(a) => a,
        None => {
            let bytes = ask(model, device)?;
            let a: Answer = serde_json::from_slice(&bytes).map_err(|e| {
                Error::engine(
                    model,
                    format!("OpenVINO's answer for {device} is not JSON: {e}"),
                )
            })?;
            // Only an answer from the OpenVINO cleave runs on, for the device asked, is kept:
            // a run that answered for something else must not place later runs' nodes.
            let trusted = a.device == device && a.openvino == version;
            // The cache only saves time: a folder that cannot be written is no error.
            if let Some(c) = cache.as_ref().filter(|_| trusted) {
                if let Some(dir) = c.parent() {
                    let _ = std::fs::create_dir_all(dir);
                }
                let _ = cleave_workdir::write_atomic(c, &bytes);
            }
            a
        }
    };
    let short = answer
        .openvino
        .split('-')
        .next()
        .unwrap_or(&answer.openvino);
    let plugin = PluginAnswer {
        answered_by: format!("OpenVINO {short} {}", answer.device),
        tensors: answer
            .tensors
            .into_iter()
            .map(|(t, lacks)| (t, (!lacks.is_empty()).then(|| lacks.join(", "))))
            .collect(),
        whole_model: answer.whole_model.is_none(),
    };
    Ok((plugin, answer.whole_model))
}

/// Runs the query script on the user's Python.
fn ask(model: &Path, device: &str) -> Result<Vec<u8>, Error> {
    let python = cleave_engines::python();
    let out = cleave_engines::python_code(&python, QUERY_SCRIPT)
        .arg(model)
        .arg(device)
        .output()
        .map_err(|e| {
            Error::request(ov_device(
                device,
                format!(": cannot run {python} to ask OpenVINO ({e})"),
            ))
        })?;
    if out.status.success() {
        return Ok(out.stdout);
    }
    let why = String::from_utf8_lossy(&out.stderr);
    let why = why.lines().last().unwrap_or("").trim();
    // Exit 3: no openvino package; anything else is OpenVINO refusing the model or device.
    if out.status.code() == Some(3) {
        return Err(Error::request(ov_device(
            device,
            format!(
                ": {why}; pip install {} into {python}",
                cleave_engines::OPENVINO_WHEEL
            ),
        )));
    }
    Err(Error::engine(
        model,
        format!("OpenVINO cannot answer for device {device}: {why}"),
    ))
}

fn digest(model: &Path) -> Result<String, Error> {
    let mut f = std::fs::File::open(model).map_err(|e| Error::io(model, "cannot read", e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| Error::io(model, "cannot read", e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// `$CLEAVE_CACHE/openvino`, else `~/.cache/cleave/openvino`.
fn cache_dir() -> Option<PathBuf> {
    let base = match std::env::var_os("CLEAVE_CACHE") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/cleave"),
    };
    Some(base.join("openvino"))
}

fn file_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A message about the device list's entry `ov:DEVICE`.
fn ov_device(device: &str, rest: String) -> Message {
    Message::about(Arg::Devices, format!("ov:{device}"), rest)
}
