//! ONNX's op registry: for each (domain, op) what cleave knows of it, registered in one place
//! per op family (`infer/nn.rs`, `infer/elementwise.rs`, …): its inference rule, the check of its
//! attribute values, the check of its operands' shapes once types are inferred, how it folds
//! small integer tensors (shapes, axes), the class the
//! format-neutral stages see, how its FLOPs are counted, whether its first output keeps its
//! input's rank when the rule cannot tell the dims, and whether it is deterministic. Adding an
//! op is one entry in its family's `register`. The registry and the types of what it stores
//! live here and name no family: the crate root builds it from the families
//! ([`crate::registry`]), which register into it.

use rustc_hash::FxHashMap;

use cleave_ir::{Dim, Node, OpClass, OpType, TensorType};

use crate::infer::cx::Cx;

mod operands;
pub(crate) use operands::Operands;

/// ONNX's default operator set: `""`, or spelled out as `ai.onnx`.
pub fn is_default_domain(domain: &str) -> bool {
    domain.is_empty() || domain == "ai.onnx"
}

/// A node's output types from what inference knows of its inputs and attributes.
pub(crate) type Rule = fn(&Cx) -> Vec<TensorType>;

/// The elements of a node's first output as dims, followed from its inputs' when those are
/// small integer tensors (shapes, axes, sizes).
pub(crate) type Fold = fn(&Cx) -> Option<Vec<Dim>>;

/// How a node's FLOPs are estimated (see `cost.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Flops {
    /// One per output element.
    #[default]
    Output,
    /// Two per output element and per weight it reads (Cin/group × kernel).
    Conv,
    /// Two per input element and per weight it scatters to.
    ConvTranspose,
    /// Two per output element and per element of the reduced axis (K).
    MatMul,
    /// As MatMul, K read from A's first axis when `transA` is set.
    Gemm,
}

/// Refuses attribute values outside what the op defines (the node, the model's opset),
/// with the reason.
pub(crate) type Check = fn(&Node, i64) -> Result<(), String>;

/// Refuses operands that do not fit the op, once their types are inferred: axes out of
/// range, lists not as long as the rank, shapes that do not fit each other, with the reason.
/// Speaks only where what it needs is known.
pub(crate) type ShapeCheck = fn(&Operands) -> Result<(), String>;

/// What the table holds for one op.
#[derive(Clone, Copy, Default)]
pub(crate) struct OpEntry {
    pub rule: Option<Rule>,
    pub check: Option<Check>,
    pub shapes: Option<ShapeCheck>,
    pub fold: Option<Fold>,
    pub class: Option<OpClass>,
    pub flops: Flops,
    pub rank_keeping: bool,
    pub nondeterministic: bool,
}

#[derive(Default)]
pub(crate) struct OpRegistry {
    /// Domain ("" for the default one), then op type. Fx hashing: looked up once per node.
    ops: FxHashMap<&'static str, FxHashMap<&'static str, OpEntry>>,
}

impl OpRegistry {
    fn entry(&mut self, domain: &'static str, op: &'static str) -> &mut OpEntry {
        self.ops.entry(domain).or_default().entry(op).or_default()
    }

    /// The inference rule of ops of the default domain.
    pub(crate) fn add(&mut self, ops: &[&'static str], rule: Rule) {
        self.add_in("", ops, rule);
    }

    pub(crate) fn add_in(&mut self, domain: &'static str, ops: &[&'static str], rule: Rule) {
        for op in ops {
            self.entry(domain, op).rule = Some(rule);
        }
    }

    /// The attribute check of ops of that name (in any domain, as ONNX's checker applies
    /// the default domain's rules to look-alikes).
    pub(crate) fn check(&mut self, ops: &[&'static str], check: Check) {
        for op in ops {
            self.entry("", op).check = Some(check);
        }
    }

    /// The shape check of default-domain ops.
    pub(crate) fn shapes(&mut self, ops: &[&'static str], check: ShapeCheck) {
        for op in ops {
            self.entry("", op).shapes = Some(check);
        }
    }

    /// How default-domain ops' elements follow from their inputs' when those are small
    /// integer tensors (shapes, axes, sizes).
    pub(crate) fn fold(&mut self, ops: &[&'static str], fold: Fold) {
        for op in ops {
            self.entry("", op).fold = Some(fold);
        }
    }

    /// The class a default-domain op has for the format-neutral stages.
    pub(crate) fn class(&mut self, op: &'static str, class: OpClass) {
        self.entry("", op).class = Some(class);
    }

    pub(crate) fn flops(&mut self, ops: &[&'static str], flops: Flops) {
        for op in ops {
            self.entry("", op).flops = flops;
        }
    }

    /// Default-domain ops whose first output has the rank of their first input, whatever
    /// their attributes or non-constant inputs do to its dims.
    pub(crate) fn rank_keeping(&mut self, ops: &[&'static str]) {
        for op in ops {
            self.entry("", op).rank_keeping = true;
        }
    }

    /// Default-domain ops whose result differs from run to run: never folded or copied as
    /// constants.
    pub(crate) fn nondeterministic(&mut self, ops: &[&'static str]) {
        for op in ops {
            self.entry("", op).nondeterministic = true;
        }
    }

    pub(crate) fn get(&self, domain: &str, op: &str) -> Option<&OpEntry> {
        let domain = if domain == "ai.onnx" { "" } else { domain };
        self.ops.get(domain)?.get(op)
    }

    /// The entry of a default-domain op, as [`OpRegistry::get`] finds it. Every stage asks this
    /// of every node, and comparing the op's name against the table's keys showed as the
    /// largest cost of loading a million-node model; a node's op type is shared by all nodes
    /// of that type, so a small per-thread cache keyed by that allocation answers instead.
    pub(crate) fn default_op(&'static self, op: &OpType) -> Option<&'static OpEntry> {
        thread_local! {
            static CACHE: OpCache<Option<&'static OpEntry>> = const { OpCache::new() };
        }
        CACHE.with(|c| c.get(op, || self.get("", op)))
    }

    pub(crate) fn rule(&'static self, domain: &str, op: &OpType) -> Option<Rule> {
        match domain {
            "" | "ai.onnx" => self.default_op(op)?.rule,
            _ => self.get(domain, op)?.rule,
        }
    }
}

/// What a lookup by op name found for an op type, answered again without comparing names
/// while the same interned [`OpType`] is asked (each slot holds a clone of it, so its
/// allocation cannot be freed and reused for another name while the slot answers for it).
pub(crate) struct OpCache<T> {
    slots: std::cell::RefCell<[Option<(OpType, T)>; 32]>,
}

impl<T: Copy> OpCache<T> {
    pub(crate) const fn new() -> Self {
        OpCache {
            slots: std::cell::RefCell::new([const { None }; 32]),
        }
    }

    pub(crate) fn get(&self, op: &OpType, find: impl FnOnce() -> T) -> T {
        let mut slots = self.slots.borrow_mut();
        let at = (op.as_str().as_ptr() as usize >> 4) % slots.len();
        match &slots[at] {
            Some((o, v)) if o.same_allocation(op) => *v,
            _ => {
                let v = find();
                slots[at] = Some((op.clone(), v));
                v
            }
        }
    }
}
