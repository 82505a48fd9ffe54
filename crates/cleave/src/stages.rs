//! Pipeline stages: consecutive slices of a topological order, one per device, with the
//! slowest stage as fast as each device's memory budget allows (see [`cleave_cost::plan_stages`]).

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use cleave_assign::{Assignment, Placement, Reason};
use cleave_cost::{plan_stages, StageDevice, StageError, StagePlan, StageProblem, StageTensor};
use cleave_ir::{ValueDef, ValueId};
use cleave_partition::{Partition, UnitGraph};

use cleave_view::human_bytes;

use crate::latency::Costs;
use crate::{Arg, Assigned, Devices, Error, Face, LoadedModel, Message, UnitPartition};

/// What `--stages` is asked.
pub struct StageRequest<'a> {
    pub stages: usize,
    /// The stages' devices in order (stage k on `devices[k]`, or in turn when fewer); empty:
    /// `stage1..N`.
    pub devices: &'a [String],
    /// Memory budgets in bytes by device name; a device not named is unbounded.
    pub memory: &'a [(String, u64)],
    /// Profiles (for declared `[cost]` figures) and the cost file, if any.
    pub profiles: &'a Devices,
    pub costs: &'a Costs,
    /// A decoder counted at this context (`--context`, `--batch`); the parts stay dynamic.
    pub context: Option<DecodeContext>,
}

/// The sizes a decoder's stages are counted at: one new token per step after `tokens - 1`,
/// for `batch` sequences, so that a stage's memory holds its KV cache at that context and its
/// time is the per-token work there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeContext {
    pub tokens: u64,
    pub batch: u64,
}

/// What the stage times are in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StageTime {
    /// Seconds, from a cost file or declared figures.
    Seconds,
    /// Estimated floating-point operations (no figures were given).
    Flops,
}

/// The stages chosen, with their figures.
pub struct Stages {
    pub assignment: Assignment,
    pub cut: UnitPartition,
    pub plan: StagePlan,
    /// Device of each stage.
    pub devices: Vec<String>,
    /// Nodes placed in each stage.
    pub nodes: Vec<usize>,
    pub time: StageTime,
    /// Stage devices timed with another device's measured figures: (stage device, device
    /// measured), where the cost file measured one device only (identical workers).
    pub timed_as: Vec<(String, String)>,
}

/// Each unit's time on each stage's device, those devices, the unit of the times, and the
/// stage devices timed with another's figures.
struct StageTimes {
    time: Vec<f64>,
    devices: Vec<StageDevice>,
    unit: StageTime,
    timed_as: Vec<(String, String)>,
}

impl LoadedModel {
    /// The model as `n` pipeline stages on `req`'s devices in turn (or on `stage1..N`), the
    /// slowest as fast as the memory budgets allow, timed by `costs` where they have figures:
    /// each stage's nodes on its device, cut already. The stages decide the devices, so the
    /// request's objective plays no part.
    pub fn into_staged(
        self,
        devices: Devices,
        costs: &Costs,
        n: usize,
        req: &crate::PartitionRequest,
    ) -> Result<Assigned, Error> {
        let loaded = self.prepared(&devices, &req.assign)?;
        let stages = loaded.stages(&StageRequest {
            stages: n,
            devices: &req.assign.devices.devices,
            memory: &req.memory,
            profiles: &devices,
            costs,
            context: req.context,
        })?;
        Ok(Assigned {
            loaded,
            devices: Devices::priority(&[]),
            assignment: stages.assignment.clone(),
            costs: None,
            latency: None,
            stages: Some(stages),
        })
    }

    /// Cuts the graph into `r.stages` consecutive stages minimising the slowest one, each
    /// within its device's memory budget.
    pub fn stages(&self, r: &StageRequest) -> Result<Stages, Error> {
        let n = r.stages;
        if n == 0 {
            return Err(Error::request(Message::about_arg(
                Arg::Stages,
                " must be at least 1",
            )));
        }
        let names: Vec<String> = if r.devices.is_empty() {
            (1..=n).map(|i| format!("stage{i}")).collect()
        } else {
            r.devices.to_vec()
        };
        for (d, _) in r.memory {
            if !names.contains(d) {
                return Err(Error::request(Message::about_arg(
                    Arg::Memory,
                    format!(
                        " names '{d}', which is not one of the stages' devices ({})",
                        names.join(", ")
                    ),
                )));
            }
        }
        if !r.memory.is_empty() && n > names.len() {
            return Err(Error::request(
                Message::about(Arg::Stages, n.to_string(), " with ")
                    .arg(Arg::Memory)
                    .then(format!(" needs {n} devices in "))
                    .arg(Arg::Devices)
                    .then(format!(
                        ", one per stage (got {}): two stages on one device would share its budget",
                        names.len()
                    )),
            ));
        }
        let stage_device: Vec<String> = (0..n).map(|k| names[k % names.len()].clone()).collect();
        let mut order: Vec<String> = Vec::new();
        for d in &stage_device {
            if !order.contains(d) {
                order.push(d.clone());
            }
        }
        let g = self.graph();
        // Sizes and times from the model at that context; cuts and parts from the model itself.
        let sized = match r.context {
            Some(c) => Some(self.at_context(c)?),
            None => None,
        };
        let gs = sized.as_ref().map_or(g, |m| m.graph());
        // A decoder's stages each compute the mask, positions and rotary tables themselves.
        let copies = self.semantics().stage_copies(g, &self.model().state);
        let one = self.on_one_device_copying(&order[0], &copies);
        let ug = self.unit_graph(&one);
        let start = Instant::now();
        let units = ug.order();
        let mut pos_of_unit = vec![0u32; ug.len()];
        let mut pos_of_node = vec![u32::MAX; g.nodes.len()];
        for (p, &u) in units.iter().enumerate() {
            pos_of_unit[u as usize] = p as u32;
            for &x in ug.nodes_of(u as usize) {
                pos_of_node[x.index()] = p as u32;
            }
        }

        let budgeted = !r.memory.is_empty();
        let bytes_of = |v: ValueId| -> Result<u64, Error> {
            let value = gs.value(v);
            match value.ty.byte_size() {
                Some(b) => Ok(b),
                None if !budgeted => Ok(0),
                None => Err(Error::argument_file(
                    self.path(),
                    Message::text(format!(
                        "tensor '{}' ({}) has no static size, so the stages' memory cannot be counted: fix its dims with ",
                        value.name, value.ty
                    ))
                    .arg(Arg::Shape)
                    .then(" or ")
                    .arg(Arg::Dim)
                    .then(" (a decoder: count it at ")
                    .given(Arg::Context, "T")
                    .then(")"),
                )),
            }
        };

        // Weights: stored constants, counted in every stage that reads them. A constant node is
        // copied into each part that reads it together with what it computes from, so reading
        // its output costs the stored weights of its whole constant cone (a 380 MB table
        // reduced to 4 bytes still travels in the part), or its own output where it computes
        // from nothing stored (a Constant node's attribute).
        let mut weight_of = vec![u32::MAX; g.values.len()];
        let mut cone_of: HashMap<ValueId, Vec<u32>> = HashMap::new();
        let mut weight_bytes = Vec::new();
        let mut reads = vec![Vec::new(); units.len()];
        let mut tensor_of = vec![u32::MAX; g.values.len()];
        let mut tensors: Vec<StageTensor> = Vec::new();
        let outputs: HashSet<ValueId> = g.outputs.iter().copied().collect();
        for (i, v) in g.values.iter().enumerate() {
            let id = ValueId(i as u32);
            let producer = match v.def {
                ValueDef::Input => None,
                ValueDef::Node(p, _) if pos_of_node[p.index()] != u32::MAX => {
                    Some(pos_of_node[p.index()])
                }
                ValueDef::Weight(_) => {
                    if !g.consumers(id).is_empty() {
                        weight_of[i] = weight_bytes.len() as u32;
                        weight_bytes.push(bytes_of(id)?);
                    }
                    continue;
                }
                ValueDef::Node(..) | ValueDef::Outer => continue,
            };
            tensor_of[i] = tensors.len() as u32;
            tensors.push(StageTensor {
                producer,
                readers: Vec::new(),
                bytes: bytes_of(id)?,
                output: outputs.contains(&id),
            });
        }
        for &x in g.topo_order() {
            if pos_of_node[x.index()] != u32::MAX {
                continue;
            }
            let node = g.node(x);
            let mut cone: Vec<u32> = Vec::new();
            for v in node.all_inputs() {
                match weight_of[v.index()] {
                    u32::MAX => cone.extend(cone_of.get(&v).into_iter().flatten()),
                    w => cone.push(w),
                }
            }
            cone.sort_unstable();
            cone.dedup();
            for out in node.outputs.iter().flatten().copied() {
                if g.consumers(out).is_empty() {
                    continue;
                }
                let mut own = cone.clone();
                // A copy computed from model inputs (a decoder's mask) stores nothing.
                if own.is_empty() && self.constant[x.index()] {
                    own.push(weight_bytes.len() as u32);
                    weight_bytes.push(bytes_of(out)?);
                }
                cone_of.insert(out, own);
            }
        }
        for (x, node) in g.nodes.iter().enumerate() {
            let p = pos_of_node[x];
            if p == u32::MAX {
                continue;
            }
            for v in node.all_inputs() {
                let w = weight_of[v.index()];
                if w != u32::MAX {
                    reads[p as usize].push(w);
                }
                if let Some(cone) = cone_of.get(&v) {
                    reads[p as usize].extend_from_slice(cone);
                }
                let t = tensor_of[v.index()];
                if t != u32::MAX {
                    tensors[t as usize].readers.push(p);
                }
            }
        }

        let StageTimes {
            time,
            devices,
            unit,
            timed_as,
        } = self.stage_times(r, gs, &ug, &pos_of_unit, &stage_device)?;
        let starts = self.layer_starts(&tensors, &pos_of_node, units.len());
        if let Some(s) = &starts {
            let layers = 1 + s.iter().skip(1).filter(|&&b| b).count();
            if layers < n {
                return Err(Error::request(Message::about(
                    Arg::Stages,
                    n.to_string(),
                    format!(
                        ": the decoder has {layers} layers to put in stages; give at most {layers}"
                    ),
                )));
            }
        }
        let problem = StageProblem {
            time,
            devices,
            weight_bytes,
            reads,
            tensors,
            starts,
        };
        let plan = plan_stages(&problem).map_err(|e| self.stage_error(e, &stage_device))?;

        let mut stage_of_pos = vec![0u32; units.len()];
        for (k, s) in plan.stages.iter().enumerate() {
            stage_of_pos[s.start..s.end].fill(k as u32);
        }
        let mut placement = one.placement.clone();
        let mut part_of = vec![0u32; ug.len()];
        let mut nodes = vec![0usize; n];
        for (u, ns) in ug.unit_nodes().enumerate() {
            let k = stage_of_pos[pos_of_unit[u] as usize];
            part_of[u] = k;
            let d = order
                .iter()
                .position(|x| *x == stage_device[k as usize])
                .unwrap_or(0) as u16;
            nodes[k as usize] += ns.len();
            for &x in ns {
                placement[x.index()] = Placement::Device(d, Reason::Default);
            }
        }
        let assignment = Assignment {
            devices: order,
            placement,
            groups: Vec::new(),
            warnings: Vec::new(),
        };
        let units = self.unit_graph(&assignment);
        let elapsed = start.elapsed();
        Ok(Stages {
            assignment,
            cut: UnitPartition {
                units,
                partition: Partition::from_labels(&part_of),
                references: None,
                elapsed,
            },
            plan,
            devices: stage_device,
            nodes,
            time: unit,
            timed_as,
        })
    }

    /// The model with a decoder's dims set for counting at `c`: the batch dims to
    /// `c.batch`, the new tokens to 1, each cache's open dims to `c.tokens - 1` and the
    /// attention mask's length to `c.tokens`. Its nodes and tensors are this model's, in
    /// the same order.
    fn at_context(&self, c: DecodeContext) -> Result<LoadedModel, Error> {
        let g = self.graph();
        let state = &self.model().state;
        if state.is_empty() {
            return Err(Error::request(
                Message::about_arg(
                    Arg::Context,
                    format!(
                        " counts a decoder's KV cache, but {} has no state pairs (declare them with ",
                        self.path().display()
                    ),
                )
                .given(Arg::State, "IN=OUT")
                .then(")"),
            ));
        }
        if c.tokens == 0 || c.batch == 0 {
            return Err(Error::request(
                Message::default()
                    .arg(Arg::Context)
                    .then(" and ")
                    .arg(Arg::Batch)
                    .then(" must be at least 1"),
            ));
        }
        let to_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let mut dims: Vec<(String, i64)> = Vec::new();
        let mut set = |name: &str, value: i64| -> Result<(), Error> {
            match dims.iter().find(|(n, _)| n == name) {
                Some((_, v)) if *v != value => Err(Error::request(
                    Message::about_arg(
                        Arg::Context,
                        format!(
                            ": the dim '{name}' stands for both {v} and {value} tokens here; fix it with "
                        ),
                    )
                    .arg(Arg::Dim),
                )),
                Some(_) => Ok(()),
                None => {
                    dims.push((name.to_string(), value));
                    Ok(())
                }
            }
        };
        for &v in &g.inputs {
            let value = g.value(v);
            let Some(shape) = &value.ty.shape else {
                continue;
            };
            let is_state = state.iter().any(|p| p.input == value.name.as_str());
            for (k, d) in shape.iter().enumerate() {
                let cleave_ir::Dim::Param(p) = d else {
                    continue;
                };
                let n = if k == 0 {
                    to_i64(c.batch)
                } else if is_state {
                    to_i64(c.tokens - 1)
                } else if value.name.as_str() == "attention_mask" {
                    to_i64(c.tokens)
                } else {
                    1
                };
                set(p, n)?;
            }
        }
        let fixed = cleave_frontend::FixedDims {
            shapes: Vec::new(),
            dims,
        };
        let sized = self.clone().fix_dims(&fixed)?;
        let same = sized.graph().nodes.len() == g.nodes.len()
            && sized.graph().values.len() == g.values.len()
            && sized
                .graph()
                .values
                .iter()
                .zip(&g.values)
                .all(|(a, b)| a.name == b.name);
        if !same {
            return Err(Error::internal(
                self.path(),
                "the model at the context asked has other tensors than the model itself",
            ));
        }
        Ok(sized)
    }

    /// Where a decoder's stages may start: in each stretch between the units that give one
    /// layer's cache and the next layer's, the last position where the fewest tensors cross
    /// (the residual stream alone, once the mask and positions are copied), so that each
    /// stage holds whole layers, at least one, with their caches. `None` for a model
    /// without state pairs. Runs over the order once per position (the crossing counts by
    /// a difference array).
    fn layer_starts(
        &self,
        tensors: &[cleave_cost::StageTensor],
        pos_of_node: &[u32],
        n: usize,
    ) -> Option<Vec<bool>> {
        let g = self.graph();
        let mut state_pos: Vec<usize> = self
            .model()
            .state
            .iter()
            .filter_map(|p| g.find(&p.output))
            .filter_map(|v| g.value(v).producer())
            .map(|x| pos_of_node[x.index()])
            .filter(|&p| p != u32::MAX)
            .map(|p| p as usize)
            .collect();
        if state_pos.is_empty() {
            return None;
        }
        state_pos.sort_unstable();
        state_pos.dedup();
        // crossing[q]: tensors made before q and read at q or later.
        let mut delta = vec![0i64; n + 1];
        for t in tensors {
            let (Some(made), Some(&last)) = (t.producer, t.readers.iter().max()) else {
                continue;
            };
            if last > made {
                delta[made as usize + 1] += 1;
                delta[last as usize + 1] -= 1;
            }
        }
        let mut crossing = vec![0i64; n];
        let mut acc = 0;
        for (q, c) in crossing.iter_mut().enumerate() {
            acc += delta[q];
            *c = acc;
        }
        // A stage starts after one cache's unit and before the next's (never at it: a layer
        // begins with its norm and projections). Between one layer's key and value more
        // tensors cross than between layers, or no position lies between them: only the
        // stretches that reach the fewest of all hold a boundary.
        let fewest_in = |w: &[usize]| (w[0] + 1..w[1]).map(|q| crossing[q]).min();
        let fewest = state_pos.windows(2).filter_map(fewest_in).min();
        let mut starts = vec![false; n];
        for w in state_pos.windows(2) {
            if fewest_in(w).is_some() && fewest_in(w) == fewest {
                if let Some(q) = (w[0] + 1..w[1])
                    .rev()
                    .find(|&q| Some(crossing[q]) == fewest)
                {
                    starts[q] = true;
                }
            }
        }
        Some(starts)
    }

    /// Each unit's time on each stage's device: measured or declared seconds when there are
    /// figures for every stage device, else estimated FLOPs.
    fn stage_times(
        &self,
        r: &StageRequest,
        g: &cleave_ir::Graph,
        ug: &UnitGraph,
        pos_of_unit: &[u32],
        stage_device: &[String],
    ) -> Result<StageTimes, Error> {
        let sem = self.semantics();
        let s = stage_device.len();
        let budget = |name: &str| r.memory.iter().find(|(d, _)| d == name).map(|&(_, b)| b);
        let declared = stage_device
            .iter()
            // Built-in estimates are for placement; stages keep FLOPs unless told more.
            .all(|d| {
                r.profiles
                    .profiles
                    .get(d)
                    .and_then(|p| p.cost.as_ref())
                    .is_some_and(|c| !c.builtin)
            });
        let mut time = vec![0.0; ug.len() * s];
        if r.costs.file.is_none() && !declared {
            for (u, ns) in ug.unit_nodes().enumerate() {
                let f: f64 = ns.iter().map(|&x| sem.flops(g, x) as f64).sum();
                let p = pos_of_unit[u] as usize;
                time[p * s..(p + 1) * s].fill(f);
            }
            let devices = stage_device
                .iter()
                .map(|d| StageDevice {
                    launch_s: 0.0,
                    io_bytes_per_s: f64::INFINITY,
                    budget: budget(d),
                })
                .collect();
            return Ok(StageTimes {
                time,
                devices,
                unit: StageTime::Flops,
                timed_as: Vec::new(),
            });
        }
        // A cost file that measured one device times every stage device it has no figures
        // for (and whose profile declares none) with that device's: stages on identical
        // workers, profiled once.
        let only = r
            .costs
            .file
            .as_ref()
            .filter(|(_, f)| f.devices.len() == 1)
            .and_then(|(_, f)| f.devices.keys().next().cloned());
        let mut timed_as = Vec::new();
        let timing: Vec<String> = stage_device
            .iter()
            .map(|d| match &only {
                Some(o)
                    if o != d
                        && r.profiles
                            .profiles
                            .get(d)
                            .and_then(|p| p.cost.as_ref())
                            .is_none_or(|c| c.builtin) =>
                {
                    timed_as.push((d.clone(), o.clone()));
                    o.clone()
                }
                _ => d.clone(),
            })
            .collect();
        let table = self.cost_table(&timing, r.profiles, r.costs)?;
        // Stages are timed by measurement or the user's own figures, never a guess mixed in.
        if let (Some(name), Some((path, _))) = (table.estimated.first(), &r.costs.file) {
            return Err(Error::argument(
                path,
                format!("device '{name}' has no figures here: measure it with cleave measure --devices {name}, or declare [cost] in its profile"),
            ));
        }
        for (u, ns) in ug.unit_nodes().enumerate() {
            let p = pos_of_unit[u] as usize;
            for k in 0..s {
                time[p * s + k] = ns.iter().map(|&x| table.node[x.index() * s + k]).sum();
            }
        }
        let devices = stage_device
            .iter()
            .zip(&table.devices)
            .map(|(d, c)| StageDevice {
                launch_s: c.launch_s,
                io_bytes_per_s: c.io_bytes_per_s,
                budget: budget(d),
            })
            .collect();
        Ok(StageTimes {
            time,
            devices,
            unit: StageTime::Seconds,
            timed_as,
        })
    }

    fn stage_error(&self, e: StageError, stage_device: &[String]) -> Error {
        match e {
            StageError::TooFewUnits { units, stages } => Error::request(Message::about(
                Arg::Stages,
                stages.to_string(),
                format!(": the model has only {units} units to slice"),
            )),
            StageError::NoFiniteTime => Error::argument(
                self.path(),
                "no split gives every stage figures for all its nodes: profile each stage's device on this model",
            ),
            StageError::DoesNotFit { closest } => {
                let (k, worst) = closest
                    .stages
                    .iter()
                    .enumerate()
                    .max_by_key(|(_, s)| s.shortfall())
                    .map(|(k, s)| (k, s.clone()))
                    .unwrap_or((0, closest.stages[0].clone()));
                let weights: u64 = closest.stages.iter().map(|s| s.weights).sum();
                let budgets = closest
                    .stages
                    .iter()
                    .map(|s| s.budget)
                    .try_fold(0u64, |acc, b| b.map(|b| acc.saturating_add(b)));
                let total = match budgets {
                    Some(b) if b < weights => format!(
                        "; the budgets add up to {} for {} of weights: add a device or raise a budget",
                        human_bytes(b),
                        human_bytes(weights)
                    ),
                    _ => String::new(),
                };
                Error::argument(
                    self.path(),
                    format!(
                        "does not fit in {} stages: in the split that comes closest, stage {} on {} needs {} (weights {} + activations {}) of its {}, short by {}",
                        stage_device.len(),
                        k + 1,
                        stage_device[k],
                        human_bytes(worst.memory()),
                        human_bytes(worst.weights),
                        human_bytes(worst.activation_peak),
                        human_bytes(worst.budget.unwrap_or(0)),
                        human_bytes(worst.shortfall()),
                    ) + &total,
                )
            }
        }
    }
}

/// Parses `DEVICE=SIZE` ([`parse_size`]); the message names the value, not the argument,
/// which each face names in its own words.
pub fn parse_memory(spec: &str) -> Result<(String, u64), String> {
    let (d, size) = spec
        .split_once('=')
        .ok_or_else(|| format!("'{spec}': expected DEVICE=SIZE, e.g. gpu0=16GiB"))?;
    if d.is_empty() {
        return Err(format!("'{spec}': needs a device name"));
    }
    let bytes = parse_size(size).map_err(|e| format!("'{spec}': {e}"))?;
    Ok((d.to_string(), bytes))
}

/// Parses a byte size like `16GiB`, `1.5GB`, `512MiB`, `4096` (bytes), above 0.
pub fn parse_size(size: &str) -> Result<u64, String> {
    let size = size.trim();
    let split = size
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(size.len());
    let (num, unit) = size.split_at(split);
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "unknown unit '{other}' (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
            ))
        }
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("'{num}' is not a number"))?;
    let bytes = v * scale;
    if !bytes.is_finite() || bytes < 1.0 || bytes > u64::MAX as f64 {
        return Err(format!("'{size}' is not a size above 0"));
    }
    Ok(bytes as u64)
}

fn time_text(t: StageTime, v: f64) -> String {
    match t {
        StageTime::Seconds => format!("{:.3} ms", v * 1e3),
        StageTime::Flops => format!("{:.3} GFLOP", v / 1e9),
    }
}

impl Stages {
    /// The table `partition --stages` prints (and Python's `Plan.stage_lines`): per stage,
    /// what it holds, moves and costs, then the bottleneck.
    pub fn table(&self, face: Face) -> Vec<String> {
        let s = self;
        let mut lines = vec![format!(
            "  {:<5}  {:<10}  {:>6}  {:>11}  {:>11}  {:>11}  {:>11}  {:>14}  {:>11}  {:>11}",
            "stage",
            "device",
            "nodes",
            "weights",
            "act. peak",
            "memory",
            "budget",
            "time",
            "in",
            "out"
        )];
        for (k, f) in s.plan.stages.iter().enumerate() {
            lines.push(format!(
                "  {:<5}  {:<10}  {:>6}  {:>11}  {:>11}  {:>11}  {:>11}  {:>14}  {:>11}  {:>11}",
                k + 1,
                s.devices[k],
                s.nodes[k],
                human_bytes(f.weights),
                human_bytes(f.activation_peak),
                human_bytes(f.memory()),
                f.budget.map_or_else(|| "-".to_string(), human_bytes),
                time_text(s.time, f.time),
                human_bytes(f.in_bytes),
                human_bytes(f.out_bytes),
            ));
        }
        let (k, slowest) = s
            .plan
            .stages
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.time.total_cmp(&b.1.time))
            .map_or((0, 0.0), |(k, f)| (k, f.time));
        let source = match s.time {
            StageTime::Seconds if !s.timed_as.is_empty() => {
                let stages: Vec<&str> = s.timed_as.iter().map(|(d, _)| d.as_str()).collect();
                format!(
                    "stage times from the cost figures ({} timed with {}'s, the one device the cost file measured)",
                    stages.join(", "),
                    s.timed_as[0].1
                )
            }
            StageTime::Seconds => "stage times from the cost figures".to_string(),
            StageTime::Flops => Message::text("stage times are estimated FLOPs (give ")
                .arg(Arg::Costs)
                .then(" from cleave measure for seconds)")
                .worded(face),
        };
        let rate = match s.time {
            StageTime::Seconds if slowest > 0.0 => {
                format!(
                    ", at most {:.1} results/s through the pipeline",
                    1.0 / slowest
                )
            }
            _ => String::new(),
        };
        lines.push(format!(
            "bottleneck: stage {} on {}, {}{rate}; {source}",
            k + 1,
            s.devices[k],
            time_text(s.time, slowest)
        ));
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sizes_parse_in_decimal_and_binary_units() {
        assert_eq!(parse_memory("gpu0=16GiB"), Ok(("gpu0".into(), 16 << 30)));
        assert_eq!(parse_memory("a=1.5GB"), Ok(("a".into(), 1_500_000_000)));
        assert_eq!(parse_memory("a=4096"), Ok(("a".into(), 4096)));
        assert!(parse_memory("a=12XB").is_err());
        assert!(parse_memory("a=0").is_err());
        assert!(parse_memory("16GiB").is_err());
        assert!(parse_memory("=1GB").is_err());
    }
}
