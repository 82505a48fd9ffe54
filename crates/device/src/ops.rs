//! The ops of one vocabulary a device runs, each with its conditions.

use std::collections::BTreeMap;

use cleave_ir::{Graph, Node, OpSemantics};

use crate::constraint::Constraint;
use crate::verdict::Verdict;

/// The ops of one vocabulary that a device runs.
#[derive(Clone, Debug, Default)]
pub struct SupportedOps {
    /// Runs every op (subject to `defaults`).
    pub all_ops: bool,
    /// Conditions for every op, unless an op's own entry sets the same field.
    pub defaults: Constraint,
    /// Supported ops by (domain, op type); the default domain is "".
    pub ops: BTreeMap<(String, String), Constraint>,
}

impl SupportedOps {
    pub(crate) fn new(
        all_ops: bool,
        defaults: Constraint,
        ops: BTreeMap<String, Constraint>,
    ) -> SupportedOps {
        let ops = ops
            .into_iter()
            .map(|(key, c)| match key.rsplit_once("::") {
                Some((d, o)) => ((normalise_domain(d), o.to_string()), c),
                None => ((String::new(), key), c),
            })
            .collect();
        SupportedOps {
            all_ops,
            defaults,
            ops,
        }
    }

    pub(crate) fn check(&self, g: &Graph, node: &Node, sem: &dyn OpSemantics) -> Verdict {
        let own = self.lookup(&node.domain, &node.op_type);
        if own.is_none() && !self.all_ops {
            return Verdict::UnsupportedOp;
        }
        // Merging copies both constraints; where one of them sets nothing the other is the
        // merge (every node of a model is checked against each device).
        let merged;
        let effective = match own {
            None => &self.defaults,
            Some(own) if self.defaults.is_unconditional() => own,
            Some(own) if own.is_unconditional() => &self.defaults,
            Some(own) => {
                merged = merge(&self.defaults, Some(own));
                &merged
            }
        };
        match effective.violation(g, node, sem) {
            None => Verdict::Supported,
            Some(reason) => Verdict::Constraint(reason),
        }
    }

    /// The op's entry, looked up without building an owned key each time (a key buffer is
    /// kept per thread).
    pub(crate) fn lookup(&self, domain: &str, op: &str) -> Option<&Constraint> {
        thread_local! {
            static KEY: std::cell::RefCell<(String, String)> = const {
                std::cell::RefCell::new((String::new(), String::new()))
            };
        }
        KEY.with_borrow_mut(|key| {
            key.0.clear();
            if domain != DEFAULT_DOMAIN_ALIAS {
                key.0.push_str(domain);
            }
            key.1.clear();
            key.1.push_str(op);
            self.ops.get(key)
        })
    }

    pub(crate) fn runs_nothing(&self) -> bool {
        !self.all_ops && self.ops.is_empty()
    }

    pub(crate) fn without_constraints(&self) -> SupportedOps {
        let strip = |c: &Constraint| Constraint {
            note: c.note.clone(),
            ..Constraint::default()
        };
        SupportedOps {
            all_ops: self.all_ops,
            defaults: strip(&self.defaults),
            ops: self
                .ops
                .iter()
                .map(|(k, c)| (k.clone(), strip(c)))
                .collect(),
        }
    }
}

/// Profiles may spell ONNX's default domain out; the IR spells it as the empty string.
fn normalise_domain(d: &str) -> String {
    if d == DEFAULT_DOMAIN_ALIAS {
        String::new()
    } else {
        d.to_string()
    }
}

/// The one alias of the default domain a profile key may use (`ai.onnx::Conv`).
const DEFAULT_DOMAIN_ALIAS: &str = "ai.onnx";

fn merge(defaults: &Constraint, own: Option<&Constraint>) -> Constraint {
    let Some(own) = own else {
        return defaults.clone();
    };
    Constraint {
        dtypes: own.dtypes.clone().or_else(|| defaults.dtypes.clone()),
        ranks: own.ranks.clone().or_else(|| defaults.ranks.clone()),
        max_rank: own.max_rank.or(defaults.max_rank),
        attrs: defaults
            .attrs
            .iter()
            .chain(&own.attrs)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        require_attrs: defaults
            .require_attrs
            .iter()
            .chain(&own.require_attrs)
            .cloned()
            .collect(),
        const_inputs: defaults
            .const_inputs
            .iter()
            .chain(&own.const_inputs)
            .copied()
            .collect(),
        static_shape: defaults.static_shape || own.static_shape,
        note: own.note.clone(),
    }
}
