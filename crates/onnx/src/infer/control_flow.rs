//! Control flow: If, Loop and Scan, whose bodies are subgraphs in their attributes. Their
//! outputs' types come from the bodies' outputs, and the checks hold the bodies to the
//! node's inputs and outputs.

use cleave_ir::{AttrValue, Dim, Node, TensorType};

use super::late_ops::with_rank;
use super::Cx;
use crate::op_registry::OpRegistry;

pub(crate) fn register(r: &mut OpRegistry) {
    r.check(&["If"], check_if);
    r.check(&["Loop"], check_loop);
    r.check(&["Scan"], check_scan);
    r.add(&["Scan"], scan);
    r.add(&["If"], |cx| {
        // Both branches must agree on element types; take shapes only where they agree too.
        let branch = |name: &str| match cx.attr(name) {
            Some(AttrValue::Graph(g)) => Some(
                g.outputs
                    .iter()
                    .map(|&o| g.value(o).ty.clone())
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        };
        // A condition that shapes decide (fixed with --shape, say) picks its branch.
        match cx.ints(0) {
            Some([c]) if *c != 0 => return branch("then_branch").unwrap_or_default(),
            Some([_]) => return branch("else_branch").unwrap_or_default(),
            _ => {}
        }
        match (branch("then_branch"), branch("else_branch")) {
            (Some(t), Some(e)) => t
                .into_iter()
                .zip(e)
                .map(|(a, b)| TensorType {
                    elem: a.elem.or(b.elem),
                    shape: agree(a.shape, b.shape),
                })
                .collect(),
            (Some(t), None) => t,
            _ => Vec::new(),
        }
    });
    r.add(&["Loop"], |cx| {
        // Outputs: the final carried values, then each scan output stacked over iterations.
        let Some(AttrValue::Graph(body)) = cx.attr("body") else {
            return Vec::new();
        };
        let carried = cx.n_inputs().saturating_sub(2);
        let body_out: Vec<TensorType> = body
            .outputs
            .iter()
            .map(|&o| body.value(o).ty.clone())
            .collect();
        (0..cx.n_outputs())
            .map(|k| {
                let inner = body_out.get(k + 1).cloned().unwrap_or_default();
                if k < carried {
                    TensorType {
                        elem: inner.elem.or(cx.elem(k + 2)),
                        shape: agree(inner.shape, cx.ty(k + 2).shape),
                    }
                } else {
                    TensorType {
                        elem: inner.elem,
                        shape: inner.shape.map(|s| {
                            let mut out = vec![Dim::Unknown];
                            out.extend(s);
                            out
                        }),
                    }
                }
            })
            .collect()
    });
}

/// What two shapes that a value may take have in common: the rank where they agree, each dim
/// where it agrees too.
fn agree(a: Option<Vec<Dim>>, b: Option<Vec<Dim>>) -> Option<Vec<Dim>> {
    let (a, b) = (a?, b?);
    (a.len() == b.len()).then(|| {
        a.into_iter()
            .zip(b)
            .map(|(x, y)| if x == y { x } else { Dim::Unknown })
            .collect()
    })
}

/// Both branches give as many outputs as the node has.
fn check_if(n: &Node, _: i64) -> Result<(), String> {
    let count = |name: &str| match n.attr(name) {
        Some(AttrValue::Graph(g)) => Some(g.outputs.len()),
        _ => None,
    };
    if let (Some(t), Some(e)) = (count("then_branch"), count("else_branch")) {
        let outs = n.outputs.len();
        if t != e || t != outs {
            return Err(format!(
                "then_branch has {t} outputs, else_branch {e}, the node {outs}"
            ));
        }
    }
    Ok(())
}

/// The body takes the iteration count, the condition and the loop-carried values, and gives
/// the condition, the carried values and the scan outputs.
fn check_loop(n: &Node, _: i64) -> Result<(), String> {
    if let Some(AttrValue::Graph(body)) = n.attr("body") {
        let carried = n.inputs.len().saturating_sub(2);
        let (ins, outs) = (body.inputs.len(), body.outputs.len());
        if ins != carried + 2 {
            return Err(format!(
                "body has {ins} inputs; {carried} loop-carried value{} needs {}",
                if carried == 1 { "" } else { "s" },
                carried + 2
            ));
        }
        if n.outputs.len() < carried || outs != 1 + n.outputs.len() {
            return Err(format!(
                "body has {outs} outputs; the node's {} outputs with {carried} loop-carried value(s) need {}",
                n.outputs.len(),
                1 + n.outputs.len().max(carried)
            ));
        }
    }
    Ok(())
}

/// Scan (opset 9+): the final states, then each scan output stacked along its axis.
fn scan(cx: &Cx) -> Vec<TensorType> {
    let Some(cleave_ir::AttrValue::Graph(body)) = cx.attr("body") else {
        return Vec::new();
    };
    let n_scan_in = usize::try_from(cx.attr_i("num_scan_inputs").unwrap_or(0)).unwrap_or(0);
    // Opset 8 adds a first input (sequence lengths) and a batch axis to every scan output.
    let (lens, stacked) = if cx.opset < 9 { (1, 2) } else { (0, 1) };
    let n_state = cx.n_inputs().saturating_sub(n_scan_in + lens);
    // The number of iterations: the first scan input's length along its scan axis.
    let steps = (lens == 0)
        .then(|| {
            let first = lens + n_state;
            let shape = cx.shape(first)?;
            let axis = cx
                .attr_ints("scan_input_axes")
                .and_then(|a| a.first().copied())
                .unwrap_or(0);
            let axis = if axis < 0 {
                axis + shape.len() as i64
            } else {
                axis
            };
            shape.get(usize::try_from(axis).ok()?).cloned()
        })
        .flatten()
        .unwrap_or(Dim::Unknown);
    body.outputs
        .iter()
        .enumerate()
        .map(|(k, &o)| {
            let t = body.value(o).ty.clone();
            if k < n_state {
                // Opset 8's states carry the batch axis too.
                match lens {
                    0 => t,
                    _ => with_rank(t.elem, t.rank().map(|r| r + 1)),
                }
            } else if let (0, Some(shape)) = (lens, t.shape.as_ref()) {
                // Stacked along its output axis (0 unless scan_output_axes says).
                let axis = cx
                    .attr_ints("scan_output_axes")
                    .and_then(|a| a.get(k - n_state).copied())
                    .unwrap_or(0);
                let rank = shape.len() as i64 + 1;
                let axis = if axis < 0 { axis + rank } else { axis };
                let mut shape = shape.clone();
                match usize::try_from(axis).ok().filter(|&a| a <= shape.len()) {
                    Some(a) => shape.insert(a, steps.clone()),
                    None => return with_rank(t.elem, Some(shape.len() + 1)),
                }
                TensorType {
                    elem: t.elem,
                    shape: Some(shape),
                }
            } else {
                with_rank(t.elem, t.rank().map(|r| r + stacked))
            }
        })
        .collect()
}

/// The body sees every input but opset 8's optional sequence_lens, and gives every output;
/// `num_scan_inputs` is within the inputs.
fn check_scan(n: &cleave_ir::Node, opset: i64) -> Result<(), String> {
    let inputs = n.inputs.len().saturating_sub(usize::from(opset < 9));
    if let Some(m) = crate::validate::int(n, "num_scan_inputs") {
        if m < 1 || usize::try_from(m).map_or(true, |m| m > inputs) {
            return Err(format!(
                "num_scan_inputs {m} is more than its {inputs} inputs or below 1"
            ));
        }
    }
    if let Some(cleave_ir::AttrValue::Graph(body)) = n.attr("body") {
        if body.inputs.len() != inputs || body.outputs.len() != n.outputs.len() {
            return Err(format!(
                "body has {} inputs and {} outputs; the node has {inputs} and {}",
                body.inputs.len(),
                body.outputs.len(),
                n.outputs.len()
            ));
        }
    }
    Ok(())
}
