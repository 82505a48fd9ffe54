use cleave_device::{Profiles, Verdict};
use cleave_fuse::{find_groups, Group, Rule, UnknownRule};
use cleave_ir::{Graph, Node, NodeId, OpSemantics};

use crate::error::{AssignError, Hint};
use crate::part_file::PartFile;
use crate::placement::{Placement, Reason};

#[derive(Clone, Debug)]
pub struct Assignment {
    /// Devices in priority order.
    pub devices: Vec<String>,
    /// One per node of the graph.
    pub placement: Vec<Placement>,
    /// Fused groups, each placed whole on `devices[.0]`.
    pub groups: Vec<(u16, Group)>,
    /// Things a user should know (groups dissolved by rules).
    pub warnings: Vec<String>,
}

impl Assignment {
    /// Node pairs that must share a part: the pairs the front-end calls inseparable (a
    /// quantize and its dequantize), the members of each fused group, and the ops of each
    /// piece of shared state with the ops between them.
    pub fn glue(&self, g: &Graph, sem: &dyn OpSemantics) -> Vec<(NodeId, NodeId)> {
        let mut pairs = inseparable_pairs(g, sem);
        for (_, grp) in &self.groups {
            pairs.extend(grp.nodes[1..].iter().map(|&m| (grp.anchor(), m)));
        }
        if !sem.shared_state(g).is_empty() {
            for r in crate::state::regions(g, sem, &sem.constant_nodes(g)) {
                if let Some((&first, rest)) = r.nodes.split_first() {
                    pairs.extend(rest.iter().map(|&m| (first, m)));
                }
            }
        }
        pairs
    }

    pub fn device_name(&self, n: NodeId) -> Option<&str> {
        self.placement[n.index()]
            .device()
            .map(|d| self.devices[d as usize].as_str())
    }
}

pub struct AssignOptions<'a> {
    /// Priority list; ignored when `part` is given (its backends, already overridden by
    /// `--backends`, are the list).
    pub devices: Vec<String>,
    pub default: Option<String>,
    pub part: Option<&'a PartFile>,
}

/// Assigns every node. `constant[i]` says node `i` computes a constant from constants alone;
/// `sem` is the model's operator semantics (fused-group patterns, inseparable pairs).
pub fn assign(
    g: &Graph,
    profiles: &Profiles,
    opts: &AssignOptions,
    constant: &[bool],
    sem: &dyn OpSemantics,
) -> Result<Assignment, AssignError> {
    let (devices, default) = match opts.part {
        Some(p) => (p.backends.clone(), Some(p.default.clone())),
        None => (opts.devices.clone(), opts.default.clone()),
    };
    if devices.is_empty() {
        return Err(AssignError::NoDevices);
    }
    let index = |name: &str| devices.iter().position(|d| d == name).map(|i| i as u16);
    let default_idx = match &default {
        Some(d) => Some(index(d).ok_or_else(|| AssignError::DefaultNotListed(d.clone()))?),
        None => None,
    };
    let graph_outputs: std::collections::HashSet<_> = g.outputs.iter().copied().collect();
    let mut placement = Vec::with_capacity(g.nodes.len());
    for (i, node) in g.nodes.iter().enumerate() {
        let id = NodeId(i as u32);
        let label = g.node_label(id);
        let rule = opts.part.and_then(|p| {
            let by_name = p
                .comply
                .opname
                .then(|| p.backend_of(label).map(|d| (d, Reason::OpName, "[OPNAME]")))
                .flatten();
            by_name.or_else(|| {
                p.comply
                    .opcode
                    .then(|| {
                        p.opcode
                            .get(&node.op_type.to_lowercase())
                            .map(|d| (d, Reason::OpCode, "[OPCODE]"))
                    })
                    .flatten()
            })
        });
        if constant[i] && !matches!(rule, Some((_, Reason::OpName, _))) {
            let is_output = node
                .outputs
                .iter()
                .flatten()
                .any(|v| graph_outputs.contains(v));
            placement.push(if is_output {
                Placement::Device(default_idx.unwrap_or(0), Reason::ConstantOutput)
            } else {
                Placement::Constant
            });
            continue;
        }
        if let Some((device, reason, section)) = rule {
            let d = index(device).ok_or_else(|| AssignError::DefaultNotListed(device.clone()))?;
            match profiles.check(device, g, node, sem) {
                Verdict::Supported => {
                    placement.push(Placement::Device(d, reason));
                    continue;
                }
                v => {
                    return Err(AssignError::RuleUnsupported {
                        rule: format!(
                            "{section} rule {}",
                            if reason == Reason::OpName {
                                label.to_string()
                            } else {
                                node.op_type.to_string()
                            }
                        ),
                        node: label.to_string(),
                        op: node.op_type.to_string(),
                        device: device.clone(),
                        reason: describe(&v),
                    })
                }
            }
        }
        if let Some(d) = default_idx {
            if profiles.check(&devices[d as usize], g, node, sem) == Verdict::Supported {
                placement.push(Placement::Device(d, Reason::Default));
                continue;
            }
        }
        let mut first_refusal = None;
        let mut chosen = None;
        for (k, dev) in devices.iter().enumerate() {
            match profiles.check(dev, g, node, sem) {
                Verdict::Supported => {
                    chosen = Some(k as u16);
                    break;
                }
                v => {
                    first_refusal.get_or_insert((dev.clone(), v));
                }
            }
        }
        match chosen {
            Some(d) => placement.push(Placement::Device(d, Reason::Priority)),
            None => {
                let (device, verdict) =
                    first_refusal.unwrap_or_else(|| (devices[0].clone(), Verdict::UnsupportedOp));
                let detail = match verdict {
                    Verdict::Constraint(r) => format!(" ({r})"),
                    _ => String::new(),
                };
                return Err(AssignError::Unsupported {
                    device: device.to_uppercase(),
                    node: label.to_string(),
                    op: node.op_type.to_string(),
                    detail,
                    hint: fallback_hint(&devices, profiles, g, node, sem),
                });
            }
        }
    }
    keep_pairs_together(g, profiles, &devices, &mut placement, sem);
    let state = crate::state::regions(g, sem, constant);
    let mut warnings = Vec::new();
    crate::state::place(
        g,
        profiles,
        &devices,
        &mut placement,
        &state,
        sem,
        &mut warnings,
    )?;
    let mut a = Assignment {
        devices,
        placement,
        groups: Vec::new(),
        warnings,
    };
    // A fused group must not take an op away from the state it shares.
    let mut locked = vec![false; g.nodes.len()];
    for n in state.iter().flat_map(|r| &r.nodes) {
        locked[n.index()] = true;
    }
    cleave_ir::phases::phase("fusion groups", || {
        place_groups(g, profiles, constant, &mut a, sem, locked)
    })?;
    Ok(a)
}

/// Each device's fused groups, found on the whole graph before assignment (as OpenVINO's
/// query_model runs a device's transformations), are placed whole: in priority order, a group
/// whose anchor went to its device and whose members that device all runs takes its members
/// along. A rule that pins a member elsewhere dissolves the group, with a warning.
fn place_groups(
    g: &Graph,
    profiles: &Profiles,
    constant: &[bool],
    a: &mut Assignment,
    sem: &dyn OpSemantics,
    locked: Vec<bool>,
) -> Result<(), AssignError> {
    let mut claimed = locked;
    for (d, device) in a.devices.clone().iter().enumerate() {
        let Some(profile) = profiles.get(device) else {
            continue;
        };
        let rules = Rule::parse_all(&profile.fuse.rules).map_err(|UnknownRule(r)| {
            AssignError::FuseRule {
                device: device.clone(),
                message: UnknownRule(r).to_string(),
            }
        })?;
        for grp in find_groups(g, constant, &rules, sem) {
            let d = d as u16;
            if grp.nodes.iter().any(|m| claimed[m.index()])
                || a.placement[grp.anchor().index()].device() != Some(d)
            {
                continue;
            }
            let pinned = grp.nodes.iter().find(|m| matches!(a.placement[m.index()], Placement::Device(e, Reason::OpName | Reason::OpCode) if e != d));
            if let Some(&m) = pinned {
                let (rule, e) = match a.placement[m.index()] {
                    Placement::Device(e, Reason::OpName) => ("[OPNAME]", e),
                    Placement::Device(e, _) => ("[OPCODE]", e),
                    Placement::Constant => continue,
                };
                a.warnings.push(format!(
                    "fused group {} ({}) dissolved: {rule} puts {} on {}, the group's anchor is on {device}",
                    grp.nodes.iter().map(|&n| g.node_label(n)).collect::<Vec<_>>().join(" + "),
                    grp.rule.name(),
                    g.node_label(m),
                    a.devices[e as usize],
                ));
                continue;
            }
            if grp
                .nodes
                .iter()
                .any(|&m| profiles.check(device, g, g.node(m), sem) != Verdict::Supported)
            {
                continue;
            }
            for &m in &grp.nodes {
                claimed[m.index()] = true;
                if a.placement[m.index()].device() != Some(d) {
                    a.placement[m.index()] = Placement::Device(d, Reason::Fused);
                }
            }
            a.groups.push((d, grp));
        }
    }
    Ok(())
}

fn describe(v: &Verdict) -> String {
    match v {
        Verdict::Supported => "supported".into(),
        Verdict::UnsupportedOp => "the op is not in its profile".into(),
        Verdict::Constraint(r) => r.clone(),
    }
}

/// Inseparable pairs (quantize → dequantize) that rules or fallback split: the reader
/// follows its producer where that device runs it, else the other way round.
fn keep_pairs_together(
    g: &Graph,
    profiles: &Profiles,
    devices: &[String],
    placement: &mut [Placement],
    sem: &dyn OpSemantics,
) {
    for (q, dq) in inseparable_pairs(g, sem) {
        let (Placement::Device(a, _), Placement::Device(b, _)) =
            (placement[q.index()], placement[dq.index()])
        else {
            continue;
        };
        if a == b {
            continue;
        }
        if profiles.check(&devices[a as usize], g, g.node(dq), sem) == Verdict::Supported {
            placement[dq.index()] = Placement::Device(a, Reason::QdqPair);
        } else if profiles.check(&devices[b as usize], g, g.node(q), sem) == Verdict::Supported {
            placement[q.index()] = Placement::Device(b, Reason::QdqPair);
        }
    }
}

/// Every (producer, reader) pair joined through the reader's first input that `sem` calls
/// inseparable.
pub fn inseparable_pairs(g: &Graph, sem: &dyn OpSemantics) -> Vec<(NodeId, NodeId)> {
    let mut out = Vec::new();
    for (i, node) in g.nodes.iter().enumerate() {
        let Some(Some(x)) = node.inputs.first() else {
            continue;
        };
        let n = NodeId(i as u32);
        if let Some(p) = g.value(*x).producer() {
            if sem.inseparable(g, p, n) {
                out.push((p, n));
            }
        }
    }
    out
}

/// What to add to `devices` so `node` runs somewhere: the first known profile that runs it
/// (cpu first), never a list the user already gave; or that no known profile runs it.
fn fallback_hint(
    devices: &[String],
    profiles: &Profiles,
    g: &Graph,
    node: &Node,
    sem: &dyn OpSemantics,
) -> Hint {
    let known: Vec<&str> = std::iter::once("cpu")
        .chain(profiles.names().filter(|&n| n != "cpu"))
        .filter(|n| profiles.get(n).is_some())
        .collect();
    let runs = known.into_iter().find(|d| {
        !devices.iter().any(|x| x == d) && profiles.check(d, g, node, sem) == Verdict::Supported
    });
    match runs {
        Some(d) => Hint::Fallback(devices.iter().cloned().chain([d.to_string()]).collect()),
        None => Hint::NoProfile,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cleave_ir::{ElemType, GraphBuilder, NamedOps, NodeSpec, TensorType};
    use std::path::Path;

    fn chain() -> Graph {
        let mut b = GraphBuilder::new("g");
        b.input("x", TensorType::fixed(ElemType::F32, &[1, 2]));
        let ops = [
            ("", "Relu", "t1"),
            ("named", "Div", "t2"),
            ("", "Div", "t3"),
            ("", "Neg", "y"),
        ];
        let mut prev = "x".to_string();
        for (name, op, out) in ops {
            b.node(NodeSpec {
                name: name.into(),
                op_type: op.into(),
                inputs: vec![prev.clone()],
                outputs: vec![out.into()],
                ..Default::default()
            });
            b.value_type(out, TensorType::fixed(ElemType::F32, &[1, 2]));
            prev = out.to_string();
        }
        b.output("y");
        b.finish(false).unwrap()
    }

    fn run(text: &str) -> Vec<Option<String>> {
        let g = chain();
        let part = PartFile::parse(text, Path::new("t.part"), None, None).unwrap();
        let opts = AssignOptions {
            devices: vec![],
            default: None,
            part: Some(&part),
        };
        let a = assign(
            &g,
            &Profiles::builtin(),
            &opts,
            &vec![false; g.nodes.len()],
            &NamedOps::default(),
        )
        .unwrap();
        (0..g.nodes.len())
            .map(|i| a.device_name(NodeId(i as u32)).map(String::from))
            .collect()
    }

    fn names(v: &[&str]) -> Vec<Option<String>> {
        v.iter().map(|s| Some(s.to_string())).collect()
    }

    #[test]
    fn comply_selects_which_rules_apply() {
        let rules = "[OPCODE]\ndiv=npu\n[OPNAME]\nnamed=gpu\nt1=gpu\n";
        let head = |comply: &str| {
            format!("[partition]\nbackends=cpu,npu,gpu\ndefault=cpu\ncomply={comply}\n{rules}")
        };
        // Op codes match case-insensitively; unnamed nodes are addressed by their first output.
        assert_eq!(run(&head("opcode")), names(&["cpu", "npu", "npu", "cpu"]));
        assert_eq!(run(&head("opname")), names(&["gpu", "gpu", "cpu", "cpu"]));
        assert_eq!(
            run(&head("opname,opcode")),
            names(&["gpu", "gpu", "npu", "cpu"]),
            "names first, then op codes"
        );
        let underscore = "[partition]\nbackends=cpu,npu\ndefault=cpu\n[OPCODE]\n_=npu\nDIV=cpu\n";
        assert_eq!(run(underscore), names(&["npu", "cpu", "cpu", "npu"]));
    }

    #[test]
    fn fallback_follows_the_priority_list_and_unsupported_nodes_stop() {
        let g = chain();
        let opts = AssignOptions {
            devices: vec!["myriad".into(), "cpu".into()],
            default: None,
            part: None,
        };
        let a = assign(
            &g,
            &Profiles::builtin(),
            &opts,
            &[false; 4],
            &NamedOps::default(),
        )
        .unwrap();
        // myriad runs Relu and Div but not Neg.
        let got: Vec<_> = (0..4)
            .map(|i| a.device_name(NodeId(i)).unwrap().to_string())
            .collect();
        assert_eq!(got, ["myriad", "myriad", "myriad", "cpu"]);
        let opts = AssignOptions {
            devices: vec!["myriad".into()],
            default: None,
            part: None,
        };
        let e = assign(
            &g,
            &Profiles::builtin(),
            &opts,
            &[false; 4],
            &NamedOps::default(),
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "[MYRIAD] Cannot convert layer y due to unsupported layer type Neg; add a fallback device that supports it, e.g. --devices myriad,cpu");
    }

    #[test]
    fn constants_are_copied_unless_named_or_a_graph_output() {
        let g = chain();
        let part = PartFile::parse(
            "[partition]\nbackends=cpu,npu\ndefault=npu\ncomply=opname\n[OPNAME]\nnamed=cpu\n",
            Path::new("t.part"),
            None,
            None,
        )
        .unwrap();
        let opts = AssignOptions {
            devices: vec![],
            default: None,
            part: Some(&part),
        };
        let a = assign(
            &g,
            &Profiles::builtin(),
            &opts,
            &[true, true, true, true],
            &NamedOps::default(),
        )
        .unwrap();
        assert_eq!(a.placement[0], Placement::Constant);
        assert_eq!(
            a.placement[1],
            Placement::Device(0, Reason::OpName),
            "an [OPNAME] rule places a constant node"
        );
        assert_eq!(a.placement[2], Placement::Constant);
        assert_eq!(
            a.placement[3],
            Placement::Device(1, Reason::ConstantOutput),
            "a constant graph output is made on the default device"
        );
    }
}
