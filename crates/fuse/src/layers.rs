//! The runtime-graph view: what a device executes, and which source layers each runtime
//! layer stands for (OpenVINO's `originalLayersNames`).

use std::collections::HashMap;

use cleave_ir::Graph;

use crate::groups::Group;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeLayer {
    pub name: String,
    /// The op type of the layer (the anchor's for a fused group).
    pub op_type: String,
    /// The fusion rule, for a fused group.
    pub rule: Option<&'static str>,
    /// Source node labels fused or rewritten into this layer.
    pub original: Vec<String>,
}

/// One layer per fused group and per other non-constant node, in topological order.
/// `origins` maps labels of rewritten nodes to the source labels they replace.
pub fn runtime_layers(
    g: &Graph,
    constant: &[bool],
    groups: &[Group],
    origins: &HashMap<String, Vec<String>>,
) -> Vec<RuntimeLayer> {
    let mut group_of = vec![usize::MAX; g.nodes.len()];
    for (i, grp) in groups.iter().enumerate() {
        for n in &grp.nodes {
            group_of[n.index()] = i;
        }
    }
    let source = |label: &str| {
        origins
            .get(label)
            .cloned()
            .unwrap_or_else(|| vec![label.to_string()])
    };
    let mut layers = Vec::new();
    for &n in g.topo_order() {
        if constant.get(n.index()).copied().unwrap_or(false) {
            continue;
        }
        let gi = group_of[n.index()];
        if gi == usize::MAX {
            let label = g.node_label(n);
            layers.push(RuntimeLayer {
                name: label.to_string(),
                op_type: g.node(n).op_type.to_string(),
                rule: None,
                original: source(label),
            });
        } else if groups[gi].anchor() == n {
            let grp = &groups[gi];
            let original = grp
                .nodes
                .iter()
                .flat_map(|&m| source(g.node_label(m)))
                .collect();
            layers.push(RuntimeLayer {
                name: g.node_label(n).to_string(),
                op_type: g.node(n).op_type.to_string(),
                rule: Some(grp.rule.name()),
                original,
            });
        }
    }
    layers
}
