//! Latency figures declared for a device that is not here to measure (`[cost]`), and the
//! built-in ones every known device carries (`profiles/costs.toml`).

use std::collections::BTreeMap;

use serde::Deserialize;

// The default cost model of every built-in device and OpenVINO device, each figure sourced.
const DEFAULT_COSTS: &str = include_str!("profiles/costs.toml");

/// Latency figures for a device that is not here to measure (`[cost]`). Predictions made
/// from them are labelled as declared wherever they are shown.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DeclaredCost {
    /// Sustained GFLOP/s, applied to the FLOPs the front-end counts for each node.
    pub gflops: f64,
    /// Overhead of every node, microseconds.
    #[serde(default)]
    pub op_us: f64,
    /// Overhead of one call of a part, microseconds.
    #[serde(default)]
    pub launch_us: f64,
    /// GB/s at which a part's inputs go in and outputs come out.
    pub io_gbps: f64,
    /// Latency of the link to any other device, microseconds.
    #[serde(default)]
    pub link_latency_us: f64,
    /// GB/s of the link to any other device.
    pub link_gbps: f64,
    /// GB/s the device streams a node's inputs and outputs from its memory: with it a node
    /// costs the longer of its FLOPs at `gflops` and its bytes at `mem_gbps` (a roofline), so
    /// an elementwise op is memory-bound and a convolution compute-bound.
    #[serde(default)]
    pub mem_gbps: Option<f64>,
    /// Where each figure comes from (a vendor's figure, a paper, a measurement and its
    /// command), by figure name.
    #[serde(default)]
    pub sources: BTreeMap<String, String>,
    /// The figures are cleave's built-in estimates (`profiles/costs.toml`), not the user's.
    #[serde(skip)]
    pub builtin: bool,
}

impl DeclaredCost {
    pub(crate) fn check(&self) -> Result<(), String> {
        let figures = [
            ("gflops", self.gflops, true),
            ("op_us", self.op_us, false),
            ("launch_us", self.launch_us, false),
            ("io_gbps", self.io_gbps, true),
            ("link_latency_us", self.link_latency_us, false),
            ("link_gbps", self.link_gbps, true),
            ("mem_gbps", self.mem_gbps.unwrap_or(1.0), true),
        ];
        for (name, v, rate) in figures {
            if !v.is_finite() || v < 0.0 || (rate && v == 0.0) {
                let need = if rate { "above zero" } else { "not negative" };
                return Err(format!("[cost] {name} = {v}: must be finite and {need}"));
            }
        }
        if let Some(k) = self
            .sources
            .keys()
            .find(|k| !figures.iter().any(|(name, _, _)| name == k))
        {
            return Err(format!(
                "[cost.sources] {k}: not a figure (gflops, mem_gbps, op_us, launch_us, io_gbps, link_latency_us, link_gbps)"
            ));
        }
        Ok(())
    }

    /// Seconds one node takes: its overhead plus the longer of its compute and its memory
    /// traffic.
    pub fn node_s(&self, flops: u64, bytes: u64) -> f64 {
        let compute = flops as f64 / (self.gflops * 1e9);
        let memory = self.mem_gbps.map_or(0.0, |bw| bytes as f64 / (bw * 1e9));
        self.op_us * 1e-6 + compute.max(memory)
    }
}

/// The built-in cost models, by device name (`profiles/costs.toml`).
pub fn default_costs() -> &'static BTreeMap<String, DeclaredCost> {
    static COSTS: std::sync::OnceLock<BTreeMap<String, DeclaredCost>> = std::sync::OnceLock::new();
    COSTS.get_or_init(|| {
        // Compiled in and covered by tests; a parse failure is a bug.
        let mut map: BTreeMap<String, DeclaredCost> =
            toml::from_str(DEFAULT_COSTS).unwrap_or_else(|e| panic!("built-in costs.toml: {e}"));
        for (name, c) in map.iter_mut() {
            c.check()
                .unwrap_or_else(|e| panic!("built-in costs.toml [{name}]: {e}"));
            c.builtin = true;
        }
        map
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PluginAnswer, Profile, Profiles};

    /// Every built-in device carries a default cost model, and every figure names its source.
    #[test]
    fn every_builtin_device_has_sourced_default_costs() {
        let p = Profiles::builtin();
        let names: Vec<String> = p.names().map(str::to_string).collect();
        assert!(names.len() >= 8, "{names:?}");
        for name in &names {
            let c = p.get(name).and_then(|q| q.cost.as_ref());
            assert!(c.is_some_and(|c| c.builtin), "{name} has no default cost");
        }
        for (name, c) in default_costs() {
            assert!(
                names.contains(name) || name.starts_with("ov-"),
                "costs.toml [{name}] is no built-in device"
            );
            let mut figures = vec![
                "gflops",
                "op_us",
                "launch_us",
                "io_gbps",
                "link_latency_us",
                "link_gbps",
            ];
            if c.mem_gbps.is_some() {
                figures.push("mem_gbps");
            }
            for f in figures {
                let src = c.sources.get(f).map(String::as_str).unwrap_or("");
                assert!(src.len() >= 5, "[{name}] {f} names no source");
            }
        }
        for ov in ["ov-CPU", "ov-GPU", "ov-NPU"] {
            let plugin = Profile::from_plugin(ov, String::new(), PluginAnswer::default());
            assert!(plugin.cost.is_some(), "{ov}");
        }
    }

    /// The roofline: a node costs the longer of its compute and its memory traffic.
    #[test]
    fn roofline_takes_the_longer_of_compute_and_memory() {
        let c = DeclaredCost {
            gflops: 100.0,
            op_us: 1.0,
            launch_us: 0.0,
            io_gbps: 1.0,
            link_latency_us: 0.0,
            link_gbps: 1.0,
            mem_gbps: Some(10.0),
            sources: BTreeMap::new(),
            builtin: false,
        };
        // 1 GFLOP over 1 MB: compute-bound, 10 ms.
        assert!((c.node_s(1_000_000_000, 1_000_000) - 0.010_001).abs() < 1e-9);
        // 1 MFLOP over 100 MB: memory-bound, 10 ms.
        assert!((c.node_s(1_000_000, 100_000_000) - 0.010_001).abs() < 1e-9);
        let bad = toml::from_str::<DeclaredCost>(
            "gflops = 1.0\nio_gbps = 1.0\nlink_gbps = 1.0\nmem_gbps = 0.0\n",
        )
        .unwrap();
        assert!(bad.check().unwrap_err().contains("mem_gbps"));
        let typo = toml::from_str::<DeclaredCost>(
            "gflops = 1.0\nio_gbps = 1.0\nlink_gbps = 1.0\n[sources]\ngflop = \"x\"\n",
        )
        .unwrap();
        assert!(typo.check().unwrap_err().contains("gflop"));
    }
}
