//! The latency model: what a placement of units on devices is predicted to cost.

use cleave_partition::{partition_default, Options, Partition, UnitGraph};

/// Figures of one device that do not depend on the node.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeviceCosts {
    /// Seconds one call of a part costs beyond its nodes' own time.
    pub launch_s: f64,
    /// Bytes per second a part's inputs go in and its outputs come out at.
    pub io_bytes_per_s: f64,
}

/// Moving a tensor from one device to another.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Link {
    pub latency_s: f64,
    pub bytes_per_s: f64,
}

impl Link {
    /// Same memory, nothing to move.
    pub const FREE: Link = Link {
        latency_s: 0.0,
        bytes_per_s: f64::INFINITY,
    };

    pub fn seconds(&self, bytes: u64) -> f64 {
        self.latency_s + bytes as f64 / self.bytes_per_s
    }
}

/// A tensor that may cross a part boundary.
#[derive(Clone, Debug, PartialEq)]
pub struct Flow {
    /// The unit that makes it; `None` for a model input.
    pub producer: Option<u32>,
    pub bytes: u64,
    /// Units that read it (deduplicated).
    pub readers: Vec<u32>,
    /// Whether it is a model output.
    pub output: bool,
}

/// Everything the search needs: units and their edges, per-unit device costs, the tensors
/// between units, and the devices' call, copy and link figures.
#[derive(Clone, Debug)]
pub struct Problem {
    /// `units.device` is a starting placement; evaluation overwrites it.
    pub units: UnitGraph,
    pub devices: Vec<DeviceCosts>,
    /// `links[a * devices + b]`: from device `a` to device `b`.
    pub links: Vec<Link>,
    /// `cost[u * devices + d]`: seconds unit `u` takes on device `d`, `INFINITY` where `d`
    /// may not run it.
    pub cost: Vec<f64>,
    pub flows: Vec<Flow>,
}

/// One part of a predicted placement.
#[derive(Clone, Debug, PartialEq)]
pub struct PartEstimate {
    pub device: u16,
    pub units: usize,
    /// The units' own time.
    pub compute_s: f64,
    pub launch_s: f64,
    /// Inputs in and outputs out of the engine.
    pub io_s: f64,
    /// Tensors arriving from other devices.
    pub link_s: f64,
}

impl PartEstimate {
    pub fn total_s(&self) -> f64 {
        self.compute_s + self.launch_s + self.io_s + self.link_s
    }
}

/// A placement's prediction: its parts (by the default partitioner), run one after another
/// in dependency order, so the total is their sum: devices do not overlap in this model.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    pub total_s: f64,
    pub partition: Partition,
    pub parts: Vec<PartEstimate>,
}

impl Problem {
    pub fn device_count(&self) -> usize {
        self.devices.len()
    }

    pub fn unit_cost(&self, u: usize, d: u16) -> f64 {
        self.cost[u * self.devices.len() + d as usize]
    }

    pub fn allows(&self, u: usize, d: u16) -> bool {
        self.unit_cost(u, d).is_finite()
    }

    /// The placement with every unit on `d`, if `d` may run them all.
    pub fn single(&self, d: u16) -> Option<Vec<u16>> {
        (0..self.units.len())
            .all(|u| self.allows(u, d))
            .then(|| vec![d; self.units.len()])
    }

    fn link(&self, a: u16, b: u16) -> Link {
        self.links[a as usize * self.devices.len() + b as usize]
    }

    /// The total alone, reusing `scratch` for the partitioner's graph.
    pub fn total(&self, scratch: &mut UnitGraph, device: &[u16]) -> f64 {
        self.estimate_with(scratch, device).total_s
    }

    pub fn estimate(&self, device: &[u16]) -> Estimate {
        self.estimate_with(&mut self.units.clone(), device)
    }

    /// Cuts `device` into parts as `partition` would and prices them. A unit placed where
    /// it may not run makes the total infinite.
    pub fn estimate_with(&self, scratch: &mut UnitGraph, device: &[u16]) -> Estimate {
        scratch.device.clear();
        scratch.device.extend_from_slice(device);
        let partition = partition_default(scratch, Options::default());
        self.price(device, partition)
    }

    /// Prices a given partition of `device`.
    pub fn price(&self, device: &[u16], partition: Partition) -> Estimate {
        let mut parts: Vec<PartEstimate> = (0..partition.count)
            .map(|_| PartEstimate {
                device: 0,
                units: 0,
                compute_s: 0.0,
                launch_s: 0.0,
                io_s: 0.0,
                link_s: 0.0,
            })
            .collect();
        for (u, &d) in device.iter().enumerate() {
            let p = &mut parts[partition.part_of[u] as usize];
            p.device = d;
            p.units += 1;
            p.compute_s += self.unit_cost(u, d);
        }
        for p in &mut parts {
            p.launch_s = self.devices[p.device as usize].launch_s;
        }
        let mut readers: Vec<u32> = Vec::new();
        for f in &self.flows {
            let from = f.producer.map(|u| partition.part_of[u as usize]);
            readers.clear();
            readers.extend(
                f.readers
                    .iter()
                    .map(|&r| partition.part_of[r as usize])
                    .filter(|&q| Some(q) != from),
            );
            readers.sort_unstable();
            readers.dedup();
            for &q in &readers {
                let qd = parts[q as usize].device;
                let dev = self.devices[qd as usize];
                parts[q as usize].io_s += f.bytes as f64 / dev.io_bytes_per_s;
                if let Some(p) = from {
                    let pd = parts[p as usize].device;
                    if pd != qd {
                        parts[q as usize].link_s += self.link(pd, qd).seconds(f.bytes);
                    }
                }
            }
            if let Some(p) = from {
                if f.output || !readers.is_empty() {
                    let dev = self.devices[parts[p as usize].device as usize];
                    parts[p as usize].io_s += f.bytes as f64 / dev.io_bytes_per_s;
                }
            }
        }
        Estimate {
            total_s: parts.iter().map(PartEstimate::total_s).sum(),
            partition,
            parts,
        }
    }
}
