//! Ops that share state run in one part: one interpreter holds a variable, so its handle, every
//! read and write of it, and every op on a path between them go to one device and are glued
//! into one unit.

use cleave_device::{Profiles, Verdict};
use cleave_ir::{Graph, NodeId, OpSemantics};

use crate::assign::{AssignError, Placement, Reason};

/// One resource's ops and the ops between them, placed on one device.
#[derive(Clone, Debug)]
pub struct StateRegion {
    /// The resources, as the model names them (several when their regions overlap).
    pub names: Vec<String>,
    /// Closed under paths: every placed op on a path from one member to another is a member.
    pub nodes: Vec<NodeId>,
}

/// The regions of `sem`'s state groups, overlapping ones merged.
pub(crate) fn regions(g: &Graph, sem: &dyn OpSemantics, constant: &[bool]) -> Vec<StateRegion> {
    let mut regions: Vec<StateRegion> = Vec::new();
    for s in sem.shared_state(g) {
        let mut r = StateRegion {
            names: vec![s.name],
            nodes: s.nodes,
        };
        // Merging two closed regions can open a new path between them: close again until
        // nothing overlaps.
        loop {
            r.nodes = closure(g, &r.nodes, constant);
            let overlapping = regions
                .iter()
                .position(|o| o.nodes.iter().any(|n| r.nodes.binary_search(n).is_ok()));
            match overlapping {
                Some(k) => {
                    let o = regions.swap_remove(k);
                    r.names.extend(o.names);
                    r.nodes.extend(o.nodes);
                }
                None => break,
            }
        }
        regions.push(r);
    }
    regions
}

/// `members` and every non-constant node on a path between two of them, sorted.
fn closure(g: &Graph, members: &[NodeId], constant: &[bool]) -> Vec<NodeId> {
    let reach = |forward: bool| {
        let mut seen = vec![false; g.nodes.len()];
        let mut stack: Vec<NodeId> = members.to_vec();
        while let Some(n) = stack.pop() {
            let next: Vec<NodeId> = if forward {
                g.node(n)
                    .outputs
                    .iter()
                    .flatten()
                    .flat_map(|&v| g.value(v).consumers.iter().copied())
                    .collect()
            } else {
                g.node(n)
                    .all_inputs()
                    .filter_map(|v| g.value(v).producer())
                    .collect()
            };
            for m in next {
                if !seen[m.index()] {
                    seen[m.index()] = true;
                    stack.push(m);
                }
            }
        }
        seen
    };
    let (down, up) = (reach(true), reach(false));
    let mut out: Vec<NodeId> = (0..g.nodes.len())
        .filter(|&i| down[i] && up[i] && !constant[i])
        .map(|i| NodeId(i as u32))
        .chain(members.iter().copied())
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Puts each region on one device: where its first op (the handle) went when that device runs
/// every op of it, else the first device of the priority list that does. None does: refused,
/// naming the resource and its ops.
pub(crate) fn place(
    g: &Graph,
    profiles: &Profiles,
    devices: &[String],
    placement: &mut [Placement],
    regions: &[StateRegion],
    sem: &dyn OpSemantics,
    warnings: &mut Vec<String>,
) -> Result<(), AssignError> {
    for r in regions {
        let placed: Vec<u16> = r
            .nodes
            .iter()
            .filter_map(|n| placement[n.index()].device())
            .collect();
        let Some(&first) = placed.first() else {
            continue;
        };
        if placed.iter().all(|&d| d == first) {
            continue;
        }
        let runs_all = |d: u16| {
            r.nodes.iter().all(|&n| {
                profiles.check(&devices[d as usize], g, g.node(n), sem) == Verdict::Supported
            })
        };
        let order = std::iter::once(first).chain(0..devices.len() as u16);
        let Some(d) = order.into_iter().find(|&d| runs_all(d)) else {
            return Err(AssignError::SharedState {
                names: r.names.join(", "),
                ops: labels(g, &r.nodes),
                devices: devices.join(","),
            });
        };
        let moved = r
            .nodes
            .iter()
            .filter(|n| placement[n.index()].device() != Some(d))
            .count();
        for &n in &r.nodes {
            if placement[n.index()].device() != Some(d) {
                placement[n.index()] = Placement::Device(d, Reason::SharedState);
            }
        }
        warnings.push(format!(
            "{} op{} moved to {} to share one part with the rest of the state of {} ({})",
            moved,
            if moved == 1 { "" } else { "s" },
            devices[d as usize],
            r.names.join(", "),
            labels(g, &r.nodes)
        ));
    }
    Ok(())
}

/// At most eight labels, then how many more.
fn labels(g: &Graph, nodes: &[NodeId]) -> String {
    let mut s: Vec<String> = nodes
        .iter()
        .take(8)
        .map(|&n| format!("{} ({})", g.node_label(n), g.node(n).op_type))
        .collect();
    if nodes.len() > 8 {
        s.push(format!("{} more", nodes.len() - 8));
    }
    s.join(", ")
}
