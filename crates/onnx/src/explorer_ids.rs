//! The node ids Model Explorer gives an ONNX model. Its ONNX adapter (`model-explorer-onnx`)
//! keys each node by its name after onnx-ir's `NameFixPass`: nodes are visited in file order,
//! each followed by the nodes of its subgraphs (each subgraph a scope of its own); an unnamed
//! node is called `node`, and a name already used in its scope gets `_1`, `_2`, ... from a
//! counter per name that all scopes share. The adapter then draws the branches of an `If`
//! inside the main graph, as `IF/ATTR/NODE` (nested Ifs alike), merged by a node `IF_phi`;
//! other bodies (Loop, Scan) are graphs of their own.

use std::collections::{HashMap, HashSet};

use cleave_ir::{AttrValue, Graph, NodeId};

/// A node as the adapter names it, with the nodes of its subgraphs per attribute.
struct Named {
    record: usize,
    id: String,
    op: String,
    is_if: bool,
    bodies: Vec<(String, Vec<Named>)>,
}

/// `ids[i]`: (id, op) of every node Model Explorer draws in the main graph for node record
/// `i`: the node itself, and for an If its phi and the nodes of its branches.
pub fn explorer_ids(g: &Graph) -> Vec<Vec<(String, String)>> {
    let mut counter: HashMap<String, usize> = HashMap::new();
    let top = name_scope(g, &mut counter);
    let len = top.iter().map(|n| n.record + 1).max().unwrap_or(0);
    let mut ids = vec![Vec::new(); len];
    for n in &top {
        flatten(n, "", &mut ids[n.record]);
    }
    ids
}

fn flatten(n: &Named, prefix: &str, out: &mut Vec<(String, String)>) {
    let id = format!("{prefix}{}", n.id);
    out.push((id.clone(), n.op.clone()));
    if !n.is_if {
        return;
    }
    out.push((format!("{id}_phi"), "(Phi)".to_string()));
    for (attr, body) in &n.bodies {
        for m in body {
            flatten(m, &format!("{id}/{attr}/"), out);
        }
    }
}

fn name_scope(g: &Graph, counter: &mut HashMap<String, usize>) -> Vec<Named> {
    let mut order: Vec<(usize, NodeId)> = (0..g.nodes.len())
        .filter_map(|i| {
            let id = NodeId(i as u32);
            g.node(id).source.map(|s| (s.index(), id))
        })
        .collect();
    order.sort();
    let mut used: HashSet<String> = HashSet::new();
    let mut out = Vec::with_capacity(order.len());
    for (record, n) in order {
        let node = g.node(n);
        let id = if !node.name.is_empty() && used.insert(node.name.to_string()) {
            node.name.to_string()
        } else {
            let preferred = if node.name.is_empty() {
                "node"
            } else {
                node.name.as_str()
            };
            unique(preferred, &mut used, counter)
        };
        let mut bodies = Vec::new();
        for a in &node.attrs {
            let graphs: &[Graph] = match &a.value {
                AttrValue::Graph(sub) => std::slice::from_ref(sub.as_ref()),
                AttrValue::Graphs(subs) => subs,
                _ => continue,
            };
            for sub in graphs {
                bodies.push((a.name.clone(), name_scope(sub, counter)));
            }
        }
        out.push(Named {
            record,
            id,
            op: node.op_type.to_string(),
            is_if: node.op_type == "If" && node.domain.is_empty(),
            bodies,
        });
    }
    out
}

fn unique(
    preferred: &str,
    used: &mut HashSet<String>,
    counter: &mut HashMap<String, usize>,
) -> String {
    let mut name = preferred.to_string();
    while used.contains(&name) {
        let c = counter.entry(preferred.to_string()).or_insert(0);
        *c += 1;
        name = format!("{preferred}_{c}");
    }
    used.insert(name.clone());
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use cleave_ir::{GraphBuilder, NodeSpec, SourceRef};

    fn graph(names: &[&str]) -> Graph {
        let mut b = GraphBuilder::new("g");
        b.input("x", Default::default());
        for (i, n) in names.iter().enumerate() {
            b.node(NodeSpec {
                name: n.to_string(),
                op_type: "Relu".into(),
                domain: String::new(),
                inputs: vec!["x".into()],
                outputs: vec![format!("y{i}")],
                attrs: vec![],
                source: Some(SourceRef(i as u32)),
            });
        }
        b.finish(false).unwrap()
    }

    #[test]
    fn unnamed_and_repeated_names_are_numbered_as_onnx_ir_does() {
        let g = graph(&["", "a", "", "a", "node_1", ""]);
        // "node", "a", "node_1", "a" again → "a_1", "node_1" again → "node_1_1", then "node_2".
        let ids: Vec<String> = explorer_ids(&g)
            .into_iter()
            .map(|v| v[0].0.clone())
            .collect();
        assert_eq!(ids, ["node", "a", "node_1", "a_1", "node_1_1", "node_2"]);
    }
}
