//! Ops that share state run in one part: one interpreter holds a variable, so its handle, every
//! read and write of it, and every op on a path between them go to one device and are glued
//! into one unit.

use cleave_device::{Profiles, Verdict};
use cleave_ir::{Graph, NodeId, OpSemantics};

use crate::error::AssignError;
use crate::placement::{Placement, Reason};

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
                    .flat_map(|&v| g.consumers(v).iter().copied())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{assign, AssignOptions};
    use cleave_device::Profile;
    use cleave_ir::{ElemType, GraphBuilder, NamedOps, NodeSpec, StateGroup, TensorType};
    use std::path::Path;

    /// x → Relu → Div → Div → Neg → y, with node 0 and node `last` sharing a variable.
    struct Shared(usize);

    impl OpSemantics for Shared {
        fn class(&self, node: &cleave_ir::Node) -> cleave_ir::OpClass {
            NamedOps::default().class(node)
        }
        fn is_deterministic(&self, _: &cleave_ir::Node) -> bool {
            true
        }
        fn window(&self, _: &Graph, _: NodeId) -> Option<cleave_ir::Window> {
            None
        }
        fn channel_axis(&self, _: &Graph, _: cleave_ir::ValueId) -> Option<usize> {
            None
        }
        fn flops(&self, _: &Graph, _: NodeId) -> u64 {
            1
        }
        fn shared_state(&self, _: &Graph) -> Vec<StateGroup> {
            vec![StateGroup {
                name: "v".into(),
                nodes: vec![NodeId(0), NodeId(self.0 as u32)],
            }]
        }
    }

    fn chain() -> Graph {
        let mut b = GraphBuilder::new("g");
        b.input("x", TensorType::fixed(ElemType::F32, &[1, 2]));
        let mut prev = "x".to_string();
        for (k, op) in ["Relu", "Div", "Div", "Neg"].into_iter().enumerate() {
            let out = format!("t{k}");
            b.node(NodeSpec {
                name: format!("n{k}"),
                op_type: op.into(),
                inputs: vec![prev.clone()],
                outputs: vec![out.clone()],
                ..Default::default()
            });
            b.value_type(out.as_str(), TensorType::fixed(ElemType::F32, &[1, 2]));
            prev = out;
        }
        b.output(prev.as_str());
        b.finish(false).unwrap()
    }

    fn profiles() -> Profiles {
        let mut p = Profiles::builtin();
        for (name, ops) in [("a", ["Relu", "Div"]), ("b", ["Div", "Neg"])] {
            let table: Vec<String> = ops.iter().map(|o| format!("{o} = {{}}")).collect();
            let text = format!("name = \"{name}\"\n[ops]\n{}\n", table.join("\n"));
            p.insert(Profile::parse(&text, Path::new("p.toml")).unwrap());
        }
        p
    }

    fn run(last: usize) -> Result<crate::Assignment, AssignError> {
        let g = chain();
        let opts = AssignOptions {
            devices: vec!["b".into(), "a".into()],
            default: None,
            part: None,
        };
        assign(&g, &profiles(), &opts, &[false; 4], &Shared(last))
    }

    #[test]
    fn a_variable_and_the_ops_between_its_uses_move_to_one_device() {
        // b runs the Divs, a the Relu: the variable's reads sit on a and b until moved.
        let a = run(2).unwrap();
        let got: Vec<_> = (0..4).map(|i| a.device_name(NodeId(i)).unwrap()).collect();
        assert_eq!(got, ["a", "a", "a", "b"]);
        assert!(
            a.warnings.iter().any(|w| w.contains("2 ops moved to a")
                && w.contains("state of v")
                && w.contains("n1 (Div)")),
            "{:?}",
            a.warnings
        );
        let g = chain();
        let glue = a.glue(&g, &Shared(2));
        for n in [1, 2] {
            assert!(glue.contains(&(NodeId(0), NodeId(n))), "{glue:?}");
        }
    }

    #[test]
    fn a_variable_no_device_runs_whole_is_refused_naming_it() {
        // Relu (only a) and Neg (only b) share the variable: no device runs the four ops.
        let e = run(3).unwrap_err().to_string();
        assert!(
            e.contains("the ops of v share state")
                && e.contains("none of b,a runs them all")
                && e.contains("n0 (Relu)")
                && e.contains("n3 (Neg)"),
            "{e}"
        );
    }
}
