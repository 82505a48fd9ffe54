//! A device plugin's own answer about one model (OpenVINO's `query_model`).

use std::collections::HashMap;

use cleave_ir::{Graph, Node};

use crate::verdict::Verdict;

/// What a device's own software answered about one model (OpenVINO's `query_model`): for
/// each tensor the model names, `None` when the device runs everything that computes it from
/// the named tensors before it, else the operations it lacks.
#[derive(Clone, Debug, Default)]
pub struct PluginAnswer {
    /// Who answered, in the words a refusal quotes: `OpenVINO 2026.4.1 CPU`.
    pub answered_by: String,
    pub tensors: HashMap<String, Option<String>>,
    /// The plugin read the whole model at once. Its reader then drops some names (a Dropout's
    /// unused mask, the input of an op it removes as an identity): a node none of whose
    /// outputs it kept is judged by the nodes that read them.
    pub whole_model: bool,
}

/// How far a node whose names the plugin dropped is judged by its readers' readers.
const DROPPED_NAME_DEPTH: usize = 8;

impl PluginAnswer {
    /// A node runs when every output the plugin kept was answered yes; a node the plugin was
    /// not asked about (made by a rewrite after the question) does not.
    pub(crate) fn check(&self, g: &Graph, node: &Node) -> Verdict {
        self.check_at(g, node, 0)
    }

    fn check_at(&self, g: &Graph, node: &Node, depth: usize) -> Verdict {
        let mut kept = 0;
        for v in node.outputs.iter().flatten() {
            let name = &g.value(*v).name;
            match self.tensors.get(name.as_str()) {
                Some(None) => kept += 1,
                Some(Some(lacks)) => {
                    return Verdict::Constraint(format!(
                        "{} does not run {lacks}, which computes '{name}'",
                        self.answered_by
                    ))
                }
                None => {}
            }
        }
        let Some(first) = node.outputs.iter().flatten().next() else {
            return Verdict::Supported;
        };
        if kept > 0 {
            return Verdict::Supported;
        }
        if !self.whole_model || depth >= DROPPED_NAME_DEPTH {
            return Verdict::Constraint(format!(
                "{} was not asked about '{}' (it is not in the model file it answered for)",
                self.answered_by,
                g.value(*first).name
            ));
        }
        for v in node.outputs.iter().flatten() {
            for &c in g.consumers(*v) {
                if let v @ Verdict::Constraint(_) = self.check_at(g, g.node(c), depth + 1) {
                    return v;
                }
            }
        }
        Verdict::Supported
    }

    /// How many of `g`'s nodes it runs.
    pub fn count_supported(&self, g: &Graph) -> usize {
        g.nodes
            .iter()
            .filter(|n| self.check(g, n) == Verdict::Supported)
            .count()
    }
}
