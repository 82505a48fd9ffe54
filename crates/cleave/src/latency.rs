//! `--objective latency`: each unit's device chosen by a cost model, among the devices that
//! may run it (capability, rules and pins stay hard constraints).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cleave_assign::{Assignment, Placement, Reason};
use cleave_cost::{fingerprint, CostFile, DeviceCosts, Estimate, Flow, Link, Method, Problem};
use cleave_device::Verdict;
use cleave_ir::{NodeId, ValueDef};
use cleave_partition::{Partition, Plan};

use crate::{Arg, Devices, Error, LoadedModel, Message};

/// Where latency figures come from: a cost file `cleave measure` wrote, and the `[cost]`
/// figures device profiles declare.
#[derive(Clone, Debug, Default)]
pub struct Costs {
    pub file: Option<(PathBuf, CostFile)>,
}

impl Costs {
    /// Reads and checks a cost file (one line naming the file and the cause on error).
    pub fn read(path: &Path) -> Result<Costs, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::argument(path, format!("cannot read: {e}")))?;
        let file = CostFile::parse(&text).map_err(|e| Error::argument(path, e))?;
        Ok(Costs {
            file: Some((path.to_path_buf(), file)),
        })
    }
}

/// Per node and device, what the model says it costs; and per device, its call, copy and
/// link figures.
pub struct CostTable {
    /// `node[n * devices + d]`: seconds, `INFINITY` where `d` may not run node `n`.
    pub(crate) node: Vec<f64>,
    pub devices: Vec<DeviceCosts>,
    pub links: Vec<Link>,
    /// Devices whose figures are declared by their profile, not measured.
    pub declared: Vec<String>,
    /// Of those, the devices whose figures are cleave's built-in estimates.
    pub estimated: Vec<String>,
}

/// One placement the choice was compared with.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// `capability`, or `all on DEVICE`.
    pub name: String,
    pub total_s: f64,
    pub parts: usize,
}

/// A unit the latency objective put elsewhere than capability would.
#[derive(Clone, Debug)]
pub struct Moved {
    pub label: String,
    pub op: String,
    pub from: String,
    pub to: String,
    /// The unit's own time on each device.
    pub from_s: f64,
    pub to_s: f64,
}

/// What `--objective latency` decided, and why.
#[derive(Clone, Debug)]
pub struct LatencyChoice {
    pub assignment: Assignment,
    pub method: Method,
    /// Time to build the model and search (no profiling).
    pub planning: Duration,
    /// Predicted total of the chosen placement, as searched.
    pub total_s: f64,
    /// The best split's predicted total, when it was declined for a single device because
    /// it was not faster by more than the margin.
    pub split_declined: Option<f64>,
    /// The search's placement (predicted total, parts), when it was declined for the
    /// capability split, which has fewer parts and is within the margin.
    pub more_parts_declined: Option<(f64, usize)>,
    pub candidates: Vec<Candidate>,
    pub moved: Vec<Moved>,
    /// Devices whose figures are declared, not measured.
    pub declared: Vec<String>,
    /// Of those, the devices whose figures are cleave's built-in estimates.
    pub estimated: Vec<String>,
}

/// A written plan's predicted latency, per part and in total.
#[derive(Clone, Debug)]
pub struct Prediction {
    pub estimate: Estimate,
    pub declared: Vec<String>,
    pub estimated: Vec<String>,
}

/// A split must be predicted this much faster than the best single device to be chosen.
pub const DEFAULT_MARGIN: f64 = 0.10;

/// Time the search may take beyond the exact limit.
pub const SEARCH_BUDGET: Duration = Duration::from_millis(500);

impl LoadedModel {
    /// The latency model's figures for this graph on `devices` (a's device list).
    pub fn cost_table(
        &self,
        names: &[String],
        devices: &Devices,
        costs: &Costs,
    ) -> Result<CostTable, Error> {
        let g = self.graph();
        let sem = self.semantics();
        let d = names.len();
        let file = costs.file.as_ref();
        let mut measured = vec![None; d];
        let mut declared = Vec::new();
        let mut estimated = Vec::new();
        let mut device_costs = Vec::with_capacity(d);
        for (k, name) in names.iter().enumerate() {
            if let Some((_, f)) = file {
                if let Some(e) = f.devices.get(name) {
                    measured[k] = Some(e);
                    device_costs.push(DeviceCosts {
                        launch_s: e.launch_s,
                        io_bytes_per_s: e.io_bytes_per_s,
                    });
                    continue;
                }
            }
            match devices.profiles.get(name).and_then(|p| p.cost.as_ref()) {
                Some(c) => {
                    declared.push(name.clone());
                    if c.builtin {
                        estimated.push(name.clone());
                    }
                    device_costs.push(DeviceCosts {
                        launch_s: c.launch_us * 1e-6,
                        io_bytes_per_s: c.io_gbps * 1e9,
                    });
                }
                None => {
                    let (path, has) = match file {
                        Some((p, f)) => (
                            p.clone(),
                            f.devices.keys().cloned().collect::<Vec<_>>().join(", "),
                        ),
                        None => (self.path().to_path_buf(), String::new()),
                    };
                    let msg = if file.is_some() {
                        Message::text(format!("device '{name}' has no figures here (it has: {has}), and its profile declares no [cost]: measure it with cleave measure --devices {name}"))
                    } else {
                        Message::text(format!("device '{name}' has no latency figures (its profile declares no [cost], and cleave has no estimate for it): give "))
                            .given(Arg::Costs, "FILE")
                            .then(" (from cleave measure) or declare [cost] in its profile")
                    };
                    return Err(Error::argument_file(path, msg));
                }
            }
        }
        let mut node = vec![f64::INFINITY; g.nodes.len() * d];
        if let Some((path, f)) = file.filter(|_| measured.iter().any(Option::is_some)) {
            let here = fingerprint(g);
            if f.model.fingerprint != here {
                // The command to repeat, flags and all: a command stays one in Python's messages.
                let again = std::iter::once("cleave measure MODEL".to_string())
                    .chain(f.model.flags.iter().cloned())
                    .collect::<Vec<_>>()
                    .join(" ");
                return Err(Error::argument(
                    path,
                    format!(
                        "the costs were measured on another graph ({} of {} nodes, fingerprint {}; this is {} nodes, {here}): measure this model with the flags that file was measured with: {again} ...",
                        f.model.file, f.model.nodes, f.model.fingerprint, g.nodes.len()
                    ),
                ));
            }
            let by_label: HashMap<&str, NodeId> = (0..g.nodes.len())
                .map(|i| (g.node_label(NodeId(i as u32)), NodeId(i as u32)))
                .collect();
            for u in &f.units {
                let ids = u
                    .nodes
                    .iter()
                    .map(|l| {
                        by_label.get(l.as_str()).copied().ok_or_else(|| {
                            Error::argument(
                                path,
                                format!("unit '{l}' is not a node of {}", self.path().display()),
                            )
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                for (k, m) in measured.iter().enumerate() {
                    if m.is_none() {
                        continue;
                    }
                    let Some(&s) = u.latency_s.get(&names[k]) else {
                        continue;
                    };
                    let scale = m.map_or(1.0, |e| e.scale);
                    for (i, id) in ids.iter().enumerate() {
                        node[id.index() * d + k] = if i == 0 { s * scale } else { 0.0 };
                    }
                }
            }
        }
        for (k, name) in names.iter().enumerate() {
            let declared_cost = if measured[k].is_none() {
                devices.profiles.get(name).and_then(|p| p.cost.as_ref())
            } else {
                None
            };
            for (i, n) in g.nodes.iter().enumerate() {
                let slot = &mut node[i * d + k];
                if let Some(c) = declared_cost {
                    *slot = c.node_s(sem.flops(g, NodeId(i as u32)), node_bytes(g, n));
                }
                if devices.profiles.check(name, g, n, sem) != Verdict::Supported {
                    *slot = f64::INFINITY;
                }
            }
        }
        let mut links = vec![Link::FREE; d * d];
        for a in 0..d {
            for b in (0..d).filter(|&b| b != a) {
                let profile_link = |k: usize| {
                    devices
                        .profiles
                        .get(&names[k])
                        .and_then(|p| p.cost.as_ref())
                        .filter(|_| measured[k].is_none())
                        .map(|c| Link {
                            latency_s: c.link_latency_us * 1e-6,
                            bytes_per_s: c.link_gbps * 1e9,
                        })
                };
                let from_file = file.and_then(|(_, f)| {
                    f.links
                        .iter()
                        .find(|l| l.from == names[a] && l.to == names[b])
                        .map(|l| Link {
                            latency_s: l.latency_s,
                            bytes_per_s: l.bytes_per_s,
                        })
                });
                links[a * d + b] = match (profile_link(a), profile_link(b), from_file) {
                    (Some(x), Some(y), _) => Link {
                        latency_s: x.latency_s.max(y.latency_s),
                        bytes_per_s: x.bytes_per_s.min(y.bytes_per_s),
                    },
                    (Some(x), None, _) | (None, Some(x), _) => x,
                    (None, None, Some(l)) => l,
                    (None, None, None) => Link {
                        latency_s: 0.0,
                        bytes_per_s: device_costs[a]
                            .io_bytes_per_s
                            .min(device_costs[b].io_bytes_per_s),
                    },
                };
            }
        }
        Ok(CostTable {
            node,
            devices: device_costs,
            links,
            declared,
            estimated,
        })
    }

    /// The search problem over `a`'s units: each may go to any device that runs all its
    /// nodes, unless a rule, a pin or a constant output fixes it.
    pub fn cost_problem(&self, a: &Assignment, table: &CostTable) -> Result<Problem, Error> {
        let g = self.graph();
        let d = a.devices.len();
        let units = self.unit_graph(a);
        let mut unit_of = vec![u32::MAX; g.nodes.len()];
        let mut cost = vec![0.0; units.len() * d];
        for (u, ns) in units.unit_nodes().enumerate() {
            for &n in ns {
                unit_of[n.index()] = u as u32;
                let fixed = match a.placement[n.index()] {
                    Placement::Device(
                        e,
                        Reason::OpName | Reason::OpCode | Reason::ConstantOutput,
                    ) => Some(e),
                    _ => None,
                };
                for k in 0..d {
                    let c = &mut cost[u * d + k];
                    *c += table.node[n.index() * d + k];
                    if fixed.is_some_and(|e| e as usize != k) {
                        *c = f64::INFINITY;
                    }
                }
            }
        }
        for u in 0..units.len() {
            if (0..d).all(|k| !cost[u * d + k].is_finite()) {
                let n = units.nodes_of(u)[0];
                return Err(Error::argument(
                    self.path(),
                    format!(
                        "node '{}' ({}) has latency figures on none of the devices that may run it ({}); profile it there",
                        g.node_label(n),
                        g.node(n).op_type,
                        a.devices.join(", ")
                    ),
                ));
            }
        }
        let outputs: std::collections::HashSet<_> = g.outputs.iter().copied().collect();
        let mut flows = Vec::new();
        for (i, v) in g.values.iter().enumerate() {
            let producer = match v.def {
                ValueDef::Input => None,
                ValueDef::Node(p, _) if unit_of[p.index()] != u32::MAX => Some(unit_of[p.index()]),
                _ => continue,
            };
            let mut readers: Vec<u32> = g
                .consumers(cleave_ir::ValueId(i as u32))
                .iter()
                .map(|c| unit_of[c.index()])
                .filter(|&r| r != u32::MAX && Some(r) != producer)
                .collect();
            readers.sort_unstable();
            readers.dedup();
            let output = outputs.contains(&cleave_ir::ValueId(i as u32));
            if readers.is_empty() && !output {
                continue;
            }
            flows.push(Flow {
                producer,
                bytes: v.ty.byte_size().unwrap_or(0),
                readers,
                output,
            });
        }
        Ok(Problem {
            units,
            devices: table.devices.clone(),
            links: table.links.clone(),
            cost,
            flows,
        })
    }

    /// Chooses each unit's device to minimise the predicted latency, starting from the
    /// capability assignment `a`; never worse under the model than `a` or any single device.
    ///
    /// A split must be predicted faster than the best single device that runs the whole
    /// model by more than `margin` (a fraction) to be chosen: the model's error on a split
    /// is larger than on one part, so a small predicted gain is not worth the risk.
    pub fn place_for_latency(
        &self,
        a: &Assignment,
        devices: &Devices,
        costs: &Costs,
        margin: f64,
    ) -> Result<LatencyChoice, Error> {
        check_margin(margin)?;
        let start = Instant::now();
        let g = self.graph();
        let table = self.cost_table(&a.devices, devices, costs)?;
        let p = self.cost_problem(a, &table)?;
        let mut starts = vec![p.units.device.clone()];
        let mut candidates = Vec::new();
        let capability = p.estimate(&p.units.device);
        candidates.push(Candidate {
            name: "capability".into(),
            total_s: capability.total_s,
            parts: capability.partition.count,
        });
        let mut singles = Vec::new();
        for (k, name) in a.devices.iter().enumerate() {
            if let Some(s) = p.single(k as u16) {
                let e = p.estimate(&s);
                candidates.push(Candidate {
                    name: format!("all on {name}"),
                    total_s: e.total_s,
                    parts: e.partition.count,
                });
                starts.push(s.clone());
                singles.push((e, s));
            }
        }
        let mut placed =
            cleave_cost::cheapest_placement(&p, &starts, SEARCH_BUDGET).ok_or_else(|| {
                Error::argument(self.path(), "no placement: some unit may run on no device")
            })?;
        let best_single = singles
            .into_iter()
            .min_by(|x, y| x.0.total_s.total_cmp(&y.0.total_s));
        let mut kept_single = None;
        if let Some((e, s)) = best_single {
            if placed.estimate.partition.count > 1
                && e.total_s <= placed.estimate.total_s * (1.0 + margin)
            {
                kept_single = Some(placed.estimate.total_s);
                placed.device = s;
                placed.estimate = e;
            }
        }
        // Fewer parts are worth a little predicted time too: the capability split, when it
        // has fewer parts and is within the margin, is kept.
        let mut kept_capability = None;
        if kept_single.is_none() {
            let cap = capability;
            if cap.partition.count < placed.estimate.partition.count
                && cap.total_s <= placed.estimate.total_s * (1.0 + margin)
            {
                kept_capability = Some((placed.estimate.total_s, placed.estimate.partition.count));
                placed.device = p.units.device.clone();
                placed.estimate = cap;
            }
        }
        let mut assignment = a.clone();
        let mut moved = Vec::new();
        for (u, ns) in p.units.unit_nodes().enumerate() {
            let (from, to) = (p.units.device[u], placed.device[u]);
            if from == to {
                continue;
            }
            for &n in ns {
                assignment.placement[n.index()] = Placement::Device(to, Reason::Cost);
            }
            moved.push(Moved {
                label: g.node_label(ns[0]).to_string(),
                op: g.node(ns[0]).op_type.to_string(),
                from: a.devices[from as usize].clone(),
                to: a.devices[to as usize].clone(),
                from_s: p.unit_cost(u, from),
                to_s: p.unit_cost(u, to),
            });
        }
        // A group fused for one device does not follow its nodes to another.
        assignment
            .groups
            .retain(|(d, grp)| assignment.placement[grp.anchor().index()].device() == Some(*d));
        Ok(LatencyChoice {
            assignment,
            method: placed.method,
            planning: start.elapsed(),
            total_s: placed.estimate.total_s,
            split_declined: kept_single,
            more_parts_declined: kept_capability,
            candidates,
            moved,
            declared: table.declared,
            estimated: table.estimated,
        })
    }

    /// Every placed node of `a` on device `k`, when its profile runs them all and no rule
    /// pins one elsewhere.
    pub fn single_device(&self, a: &Assignment, k: u16, devices: &Devices) -> Option<Assignment> {
        let g = self.graph();
        let name = a.devices.get(k as usize)?;
        let mut out = a.clone();
        for (i, p) in a.placement.iter().enumerate() {
            let Placement::Device(e, reason) = *p else {
                continue;
            };
            let pinned = matches!(
                reason,
                Reason::OpName | Reason::OpCode | Reason::ConstantOutput
            );
            if e != k && pinned {
                return None;
            }
            if devices
                .profiles
                .check(name, g, &g.nodes[i], self.semantics())
                != Verdict::Supported
            {
                return None;
            }
            if e != k {
                out.placement[i] = Placement::Device(k, Reason::Cost);
            }
        }
        out.groups.retain(|(d, _)| *d == k);
        Some(out)
    }

    /// The predicted latency of a plan's parts, in their order.
    pub fn predict(
        &self,
        a: &Assignment,
        plan: &Plan,
        devices: &Devices,
        costs: &Costs,
    ) -> Result<Prediction, Error> {
        let table = self.cost_table(&a.devices, devices, costs)?;
        let p = self.cost_problem(a, &table)?;
        let mut part_of_node = vec![0u32; self.graph().nodes.len()];
        for (k, part) in plan.parts.iter().enumerate() {
            for n in &part.nodes {
                part_of_node[n.index()] = k as u32;
            }
        }
        let partition = Partition {
            part_of: p
                .units
                .unit_nodes()
                .map(|ns| ns.first().map_or(u32::MAX, |n| part_of_node[n.index()]))
                .collect(),
            count: plan.parts.len(),
        };
        Ok(Prediction {
            estimate: p.price(&p.units.device, partition),
            declared: table.declared,
            estimated: table.estimated,
        })
    }
}

/// Ops that read only their input's shape, or give it a new one without moving its data (in
/// ONNX's and TFLite's words): no memory traffic to price.
const NO_TRAFFIC: &[&str] = &[
    "Shape",
    "Size",
    "Reshape",
    "Squeeze",
    "Unsqueeze",
    "Flatten",
    "Identity",
    "SHAPE",
    "RESHAPE",
    "SQUEEZE",
    "EXPAND_DIMS",
];

/// The bytes a node reads and writes, as far as their types are known (weights included): what
/// a memory-bound device streams.
fn node_bytes(g: &cleave_ir::Graph, n: &cleave_ir::Node) -> u64 {
    if NO_TRAFFIC.contains(&n.op_type.as_str()) {
        return 0;
    }
    n.inputs
        .iter()
        .chain(n.outputs.iter())
        .flatten()
        .filter_map(|&v| g.value(v).ty.byte_size())
        .fold(0u64, u64::saturating_add)
}

/// A margin is a fraction, at least 0.
pub(crate) fn check_margin(margin: f64) -> Result<(), Error> {
    if margin.is_finite() && margin >= 0.0 {
        return Ok(());
    }
    Err(Error::request(Message::about(
        Arg::Margin,
        margin.to_string(),
        ": give a fraction, at least 0",
    )))
}
