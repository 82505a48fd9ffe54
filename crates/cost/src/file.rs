//! The cost file `cleave measure` writes and `--costs` reads (JSON, documented in docs/placement-by-cost.md).

use std::collections::BTreeMap;

use cleave_ir::Graph;
use serde::{Deserialize, Serialize};

/// The `format` every cost file carries.
pub const FORMAT: &str = "cleave-costs/1";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostFile {
    pub format: String,
    pub model: ModelStamp,
    /// Per device: its engine and its call and copy figures.
    pub devices: BTreeMap<String, DeviceEntry>,
    /// Moving tensors between devices (absent pairs: the faster of the two devices' copies).
    #[serde(default)]
    pub links: Vec<LinkEntry>,
    /// One entry per profiled unit: a node, or nodes that never part (a quantize and its
    /// dequantize), named by their labels.
    pub units: Vec<UnitEntry>,
    pub profiling: Profiling,
}

/// Which graph the figures belong to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelStamp {
    pub file: String,
    pub nodes: usize,
    /// [`fingerprint`] of the graph the units were cut from (after `--shape` and `--optimize`).
    pub fingerprint: String,
    /// The `--shape`/`--dim` flags and rewrite level it was profiled with, to say what to repeat.
    #[serde(default)]
    pub flags: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceEntry {
    pub engine: String,
    /// Seconds one call of a part costs beyond its nodes.
    pub launch_s: f64,
    /// Bytes per second a part's inputs go in and outputs come out at.
    pub io_bytes_per_s: f64,
    /// The whole model's measured time on this engine over the sum of its units' times
    /// (an engine runs a graph faster or slower than its nodes alone); unit figures are
    /// multiplied by it. 1 when the engine could not run every unit or the whole model.
    #[serde(default = "one")]
    pub scale: f64,
}

fn one() -> f64 {
    1.0
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkEntry {
    pub from: String,
    pub to: String,
    pub latency_s: f64,
    pub bytes_per_s: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnitEntry {
    pub nodes: Vec<String>,
    pub op: String,
    /// Median seconds per device, the call and copy costs taken out.
    pub latency_s: BTreeMap<String, f64>,
    /// Devices whose engine refused the unit, with the engine's reason.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub refused: BTreeMap<String, String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profiling {
    pub warmup: u32,
    pub repeats: u32,
    /// Wall time of the whole profile.
    pub seconds: f64,
    /// Whether `--budget` cut the repeats short.
    pub budget_hit: bool,
    /// Whether each engine ran on one thread (then so must the runs it predicts).
    #[serde(default = "yes")]
    pub single_thread: bool,
}

fn yes() -> bool {
    true
}

impl CostFile {
    /// Parses and checks every figure: finite, not negative, bandwidths above zero.
    pub fn parse(text: &str) -> Result<CostFile, String> {
        let f: CostFile =
            serde_json::from_str(text).map_err(|e| format!("not a cost file: {e}"))?;
        if f.format != FORMAT {
            return Err(format!(
                "format '{}' is not {FORMAT} (write it again with cleave measure)",
                f.format
            ));
        }
        for (name, d) in &f.devices {
            seconds(&format!("device '{name}': launch_s"), d.launch_s)?;
            rate(
                &format!("device '{name}': io_bytes_per_s"),
                d.io_bytes_per_s,
            )?;
            rate(&format!("device '{name}': scale"), d.scale)?;
        }
        for l in &f.links {
            let what = format!("link {} -> {}", l.from, l.to);
            seconds(&format!("{what}: latency_s"), l.latency_s)?;
            rate(&format!("{what}: bytes_per_s"), l.bytes_per_s)?;
            for end in [&l.from, &l.to] {
                if !f.devices.contains_key(end) {
                    return Err(format!("{what}: device '{end}' is not in \"devices\""));
                }
            }
        }
        for u in &f.units {
            let Some(first) = u.nodes.first() else {
                return Err("a unit with no nodes".into());
            };
            for (device, &s) in &u.latency_s {
                seconds(&format!("unit '{first}' on '{device}'"), s)?;
                if !f.devices.contains_key(device) {
                    return Err(format!(
                        "unit '{first}': device '{device}' is not in \"devices\""
                    ));
                }
            }
        }
        Ok(f)
    }

    pub fn to_json(&self) -> String {
        // Plain data: serialising cannot fail, but say so rather than panic if it ever did.
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}

fn seconds(what: &str, v: f64) -> Result<(), String> {
    if !v.is_finite() || v < 0.0 {
        return Err(format!(
            "{what} is {v}: figures must be finite and not negative"
        ));
    }
    Ok(())
}

fn rate(what: &str, v: f64) -> Result<(), String> {
    if v.is_nan() || v <= 0.0 {
        return Err(format!("{what} is {v}: a rate must be above zero"));
    }
    Ok(())
}

/// A digest of what the figures depend on: every node's op and label and every value's type,
/// in order (FNV-1a, 64 bits, as hex).
pub fn fingerprint(g: &Graph) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |s: &str| {
        for b in s.bytes().chain([0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for (i, node) in g.nodes.iter().enumerate() {
        eat(&node.op_type);
        eat(g.node_label(cleave_ir::NodeId(i as u32)));
        for v in node.outputs.iter().flatten() {
            eat(&g.value(*v).ty.to_string());
        }
    }
    for &v in &g.inputs {
        eat(&g.value(v).ty.to_string());
    }
    format!("{h:016x}")
}
