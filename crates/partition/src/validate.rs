use std::collections::{HashMap, HashSet};

use cleave_assign::{Assignment, Placement};
use cleave_ir::{Graph, NodeId, ValueDef, ValueId};

use crate::plan::Plan;

/// A plan that breaks a partitioning invariant; messages name parts (1-based, as in file
/// names), nodes and tensors.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ValidationError {
    #[error("node '{node}' is in no part")]
    NotPlaced { node: String },
    #[error("node '{node}' is in parts {first} and {second}")]
    PlacedTwice {
        node: String,
        first: usize,
        second: usize,
    },
    #[error("part {part} runs on {device}, but node '{node}' is assigned to {assigned}")]
    WrongDevice {
        part: usize,
        device: String,
        node: String,
        assigned: String,
    },
    #[error(
        "part {part} holds node '{node}', which computes a constant and is copied, not placed"
    )]
    ConstantPlaced { part: usize, node: String },
    #[error("part {part} copies constant node '{node}' but nothing in it reads that")]
    ConstantUnused { part: usize, node: String },
    #[error("part {part} reads '{tensor}', which is neither produced in it, a constant, nor one of its inputs")]
    MissingInput { part: usize, tensor: String },
    #[error("part {part} takes '{tensor}' as input, but it is neither a model input nor an output of an earlier part")]
    InputNotReady { part: usize, tensor: String },
    #[error("model output '{tensor}' is produced by no part")]
    OutputNotProduced { tensor: String },
}

/// A plan that has passed [`validate`] against its graph and assignment. Only validation
/// makes one, and writing parts takes nothing else, so no unproven plan reaches a file.
#[derive(Clone, Debug)]
pub struct ValidatedPlan {
    plan: Plan,
}

impl ValidatedPlan {
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    pub fn into_plan(self) -> Plan {
        self.plan
    }
}

impl std::ops::Deref for ValidatedPlan {
    type Target = Plan;

    fn deref(&self) -> &Plan {
        &self.plan
    }
}

/// Proves `plan` sound for `g` under `a` (see [`check_plan`]) and seals it.
pub fn validate(g: &Graph, a: &Assignment, plan: Plan) -> Result<ValidatedPlan, ValidationError> {
    check_plan(g, a, &plan)?;
    Ok(ValidatedPlan { plan })
}

/// Proves a plan sound: every non-constant node in exactly one part, constants copied only
/// where read, one device per part, and every part input a model input or an output of an
/// earlier part (which also rules out cycles among parts).
pub fn check_plan(g: &Graph, a: &Assignment, plan: &Plan) -> Result<(), ValidationError> {
    let label = |n: NodeId| g.node_label(n).to_string();
    let name = |v: ValueId| g.value(v).name.to_string();
    let mut owner: HashMap<NodeId, usize> = HashMap::new();
    for (i, part) in plan.parts.iter().enumerate() {
        for &n in &part.nodes {
            if let Some(&first) = owner.get(&n) {
                return Err(ValidationError::PlacedTwice {
                    node: label(n),
                    first: first + 1,
                    second: i + 1,
                });
            }
            owner.insert(n, i);
            match a.placement[n.index()] {
                Placement::Constant => {
                    return Err(ValidationError::ConstantPlaced {
                        part: i + 1,
                        node: label(n),
                    })
                }
                Placement::Device(d, _) if d != part.device => {
                    return Err(ValidationError::WrongDevice {
                        part: i + 1,
                        device: plan.device_name(part).to_string(),
                        node: label(n),
                        assigned: plan.devices[d as usize].clone(),
                    })
                }
                _ => {}
            }
        }
    }
    for (i, p) in a.placement.iter().enumerate() {
        if p.device().is_some() && !owner.contains_key(&NodeId(i as u32)) {
            return Err(ValidationError::NotPlaced {
                node: label(NodeId(i as u32)),
            });
        }
    }
    let mut available: HashSet<ValueId> = HashSet::new();
    for (i, part) in plan.parts.iter().enumerate() {
        let inside: HashSet<NodeId> = part
            .nodes
            .iter()
            .chain(&part.constant_nodes)
            .copied()
            .collect();
        let inputs: HashSet<ValueId> = part.inputs.iter().copied().collect();
        for &v in &part.inputs {
            let from_model = matches!(g.value(v).def, ValueDef::Input | ValueDef::Outer);
            if !from_model && !available.contains(&v) {
                return Err(ValidationError::InputNotReady {
                    part: i + 1,
                    tensor: name(v),
                });
            }
        }
        for &c in &part.constant_nodes {
            if a.placement[c.index()] != Placement::Constant {
                return Err(ValidationError::ConstantUnused {
                    part: i + 1,
                    node: label(c),
                });
            }
            // A constant pinned to a part by name may only hand its value on.
            let read = g.node(c).outputs.iter().flatten().any(|&o| {
                part.outputs.contains(&o) || g.consumers(o).iter().any(|r| inside.contains(r))
            });
            if !read {
                return Err(ValidationError::ConstantUnused {
                    part: i + 1,
                    node: label(c),
                });
            }
        }
        for &n in &inside {
            for v in g.node(n).all_inputs() {
                let v = part.reads(n, v);
                let ok = match g.value(v).def {
                    ValueDef::Weight(_) => true,
                    ValueDef::Node(p, _) => inside.contains(&p) || inputs.contains(&v),
                    ValueDef::Input | ValueDef::Outer => inputs.contains(&v),
                };
                if !ok {
                    return Err(ValidationError::MissingInput {
                        part: i + 1,
                        tensor: name(v),
                    });
                }
            }
        }
        available.extend(part.outputs.iter().copied());
    }
    for &o in &g.outputs {
        let direct = matches!(g.value(o).def, ValueDef::Input | ValueDef::Weight(_));
        if !direct && !available.contains(&o) {
            return Err(ValidationError::OutputNotProduced { tensor: name(o) });
        }
    }
    Ok(())
}
