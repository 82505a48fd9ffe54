//! What needs inferred ranks and shapes, or the values of constant inputs: axes in range,
//! attribute lists as long as the rank, operands that fit each other, shape arguments a
//! kernel can honour. Run after type inference, before any stage reads an axis. Each check
//! speaks only where what it needs is known; an unknown dim is never a reason to refuse.

use cleave_ir::{AttrValue, Graph, Model, Node, NodeId, TensorType, ValueDef, Weight};

use super::{int, ints, Refusal, Subject};

pub fn typed(m: &Model) -> Result<(), Refusal> {
    typed_graph(&m.graph)
}

fn typed_graph(g: &Graph) -> Result<(), Refusal> {
    for (i, n) in g.nodes.iter().enumerate() {
        if n.domain.is_empty() || n.domain == "ai.onnx" {
            node(&Operands { g, n }).map_err(|cause| {
                let label = g.node_label(NodeId(i as u32));
                let op = n.op_type.to_string();
                (
                    Subject::Node {
                        label: label.to_string(),
                        op,
                    },
                    cause,
                )
            })?;
        }
        for a in &n.attrs {
            match &a.value {
                AttrValue::Graph(sub) => typed_graph(sub)?,
                AttrValue::Graphs(subs) => {
                    for s in subs {
                        typed_graph(s)?;
                    }
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// A node's inputs as type inference and the file know them.
struct Operands<'a> {
    g: &'a Graph,
    n: &'a Node,
}

impl Operands<'_> {
    fn ty(&self, i: usize) -> Option<&TensorType> {
        let v = self.n.inputs.get(i).copied().flatten()?;
        Some(&self.g.value(v).ty)
    }

    fn rank(&self, i: usize) -> Option<i64> {
        self.ty(i)?.rank().and_then(|r| i64::try_from(r).ok())
    }

    /// Each dim of input `i`, `None` where it is not a known number.
    fn dims(&self, i: usize) -> Option<Vec<Option<i64>>> {
        let shape = self.ty(i)?.shape.as_ref()?;
        Some(shape.iter().map(|d| d.fixed()).collect())
    }

    /// Input `i` when it is a constant: an initializer or a Constant node's tensor.
    fn weight(&self, i: usize) -> Option<&Weight> {
        let v = self.n.inputs.get(i).copied().flatten()?;
        match &self.g.value(v).def {
            ValueDef::Weight(w) => Some(w),
            ValueDef::Node(p, 0) => {
                let p = self.g.nodes.get(p.0 as usize)?;
                match (p.op_type.as_str(), p.attr("value")?) {
                    ("Constant", AttrValue::Tensor(w)) => Some(w),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// The values of input `i` when it is a constant.
    fn constant(&self, i: usize) -> Option<Vec<f64>> {
        self.weight(i)?.to_f64s()
    }

    /// Integer constants (shapes, axes, sizes); a float constant is not one.
    fn int_constant(&self, i: usize) -> Option<Vec<i64>> {
        self.weight(i)
            .filter(|w| !w.elem.is_float())
            .and_then(|w| w.to_i64s())
    }

    /// An attribute's list, or input `i` when the attribute is absent (opsets moved `axes`,
    /// `pads` and `split` from attributes to inputs).
    fn list(&self, attr: &str, i: usize) -> Option<Vec<i64>> {
        ints(self.n, attr)
            .map(<[i64]>::to_vec)
            .or_else(|| self.int_constant(i))
    }
}

fn node(o: &Operands) -> Result<(), String> {
    let n = o.n;
    axes(n, o)?;
    match n.op_type.as_str() {
        "Gemm" => {
            for i in 0..2 {
                if let Some(r) = o.rank(i).filter(|&r| r != 2) {
                    return Err(format!(
                        "input {i} has rank {r}; Gemm multiplies matrices (rank 2)"
                    ));
                }
            }
        }
        "MatMul" => {
            if let (Some(a), Some(b)) = (o.dims(0), o.dims(1)) {
                let inner_b = if b.len() >= 2 { b.len() - 2 } else { 0 };
                if let (Some(Some(k)), Some(Some(kb))) = (a.last(), b.get(inner_b)) {
                    if k != kb {
                        return Err(format!(
                            "inner dimensions differ: {k} (input 0's last) and {kb} (input 1's {})",
                            if b.len() >= 2 {
                                "second-to-last"
                            } else {
                                "only"
                            }
                        ));
                    }
                }
            }
        }
        "Concat" => {
            let ranks: Vec<(usize, i64)> = (0..n.inputs.len())
                .filter_map(|i| o.rank(i).map(|r| (i, r)))
                .collect();
            if let Some(&(i0, r0)) = ranks.first() {
                if let Some((i, r)) = ranks.iter().find(|(_, r)| *r != r0) {
                    return Err(format!("input {i} has rank {r}, input {i0} rank {r0}"));
                }
            }
        }
        "Conv" | "ConvTranspose" | "ConvInteger" | "MaxPool" | "AveragePool" | "LpPool" => {
            windows(o)?
        }
        "Pad" => {
            if let (Some(r), Some(p)) = (o.rank(0), o.list("pads", 1)) {
                // Opset 18 pads only the axes it is given.
                let axes = o.int_constant(3).map_or(r, |a| a.len() as i64);
                if p.len() as i64 != 2 * axes {
                    return Err(format!(
                        "pads {p:?} has {} entries; {axes} padded axes need {}",
                        p.len(),
                        2 * axes
                    ));
                }
            }
        }
        "Reshape" => reshape(o)?,
        "Tile" => {
            if let Some(reps) = o.int_constant(1) {
                if let Some(bad) = reps.iter().find(|&&x| x < 0) {
                    return Err(format!("repeats {reps:?}: {bad} is negative"));
                }
                if let Some(r) = o.rank(0).filter(|&r| r != reps.len() as i64) {
                    return Err(format!(
                        "repeats {reps:?} has {} entries; the input has rank {r}",
                        reps.len()
                    ));
                }
            }
        }
        "Expand" => {
            if let Some(shape) = o.int_constant(1) {
                if let Some(bad) = shape.iter().find(|&&x| x < 0) {
                    return Err(format!("shape {shape:?}: {bad} is negative"));
                }
                if let Some(dims) = o.dims(0) {
                    for (d, s) in dims.iter().rev().zip(shape.iter().rev()) {
                        if let Some(d) = *d {
                            if d != *s && d != 1 && *s != 1 {
                                return Err(format!(
                                    "shape {shape:?} does not broadcast with the input's {}",
                                    show(&dims)
                                ));
                            }
                        }
                    }
                }
            }
        }
        "ConstantOfShape" => {
            if let Some(shape) = o.int_constant(0) {
                if let Some(bad) = shape.iter().find(|&&x| x < 0) {
                    return Err(format!("shape {shape:?}: {bad} is negative"));
                }
            }
        }
        "Slice" => {
            if let Some(steps) = o.int_constant(4) {
                if steps.contains(&0) {
                    return Err(format!("steps {steps:?}: a step of 0 never advances"));
                }
            }
        }
        "Split" => split(o)?,
        "Resize" => {
            if let Some(scales) = o.constant(2).filter(|s| !s.is_empty()) {
                if let Some(bad) = scales.iter().find(|&&x| x.is_nan() || x <= 0.0) {
                    return Err(format!("scales {scales:?}: {bad} is not above 0"));
                }
                let axes = ints(n, "axes").map(<[i64]>::len);
                let want = axes.map(|a| a as i64).or(o.rank(0));
                if let Some(want) = want.filter(|&w| w != scales.len() as i64) {
                    return Err(format!(
                        "scales has {} entries; the input has rank {want}",
                        scales.len()
                    ));
                }
            }
        }
        "OneHot" => {
            if let Some(&d) = o.constant(1).as_deref().and_then(<[f64]>::first) {
                if d < 0.0 {
                    return Err(format!("depth {d} is negative"));
                }
            }
        }
        "Range" => {
            if let Some(&d) = o.constant(2).as_deref().and_then(<[f64]>::first) {
                if d == 0.0 {
                    return Err("delta 0 never reaches the limit".into());
                }
            }
        }
        "TopK" => {
            if let Some(&k) = o.int_constant(1).as_deref().and_then(<[i64]>::first) {
                if k < 0 {
                    return Err(format!("k {k} is negative"));
                }
            }
        }
        _ => {}
    }
    Ok(())
}

fn show(dims: &[Option<i64>]) -> String {
    let d: Vec<String> = dims
        .iter()
        .map(|d| d.map_or("?".into(), |d| d.to_string()))
        .collect();
    format!("[{}]", d.join(", "))
}

/// Axes in range for the rank, a permutation as long as the rank.
fn axes(n: &Node, o: &Operands) -> Result<(), String> {
    let Some(rank) = o.rank(0) else {
        return Ok(());
    };
    let in_range = |a: i64, hi: i64| (-rank..hi).contains(&a);
    match n.op_type.as_str() {
        "Concat" | "Softmax" | "LogSoftmax" | "Hardmax" | "Gather" | "GatherElements"
        | "ScatterElements" | "Split" | "ArgMax" | "ArgMin" | "Compress" | "LayerNormalization"
        | "Flatten" => {
            // Flatten may split after the last axis.
            let hi = if n.op_type == "Flatten" {
                rank + 1
            } else {
                rank
            };
            if let Some(a) = int(n, "axis") {
                if !in_range(a, hi) {
                    return Err(format!("axis {a} is out of range for rank {rank}"));
                }
            }
        }
        "Transpose" => {
            if let Some(p) = ints(n, "perm") {
                if i64::try_from(p.len()).ok() != Some(rank) {
                    return Err(format!(
                        "perm {p:?} has {} entries; its input has rank {rank}",
                        p.len()
                    ));
                }
            }
        }
        "Squeeze" | "Unsqueeze" => {
            let Some(v) = o.list("axes", 1) else {
                return Ok(());
            };
            // Unsqueeze's axes index its output, which has one more dim per axis.
            let out = if n.op_type == "Unsqueeze" {
                rank + v.len() as i64
            } else {
                rank
            };
            let mut seen = Vec::with_capacity(v.len());
            for &a in &v {
                if !(-out..out).contains(&a) {
                    return Err(format!("axes {v:?}: {a} is out of range for rank {out}"));
                }
                let a = if a < 0 { a + out } else { a };
                if seen.contains(&a) {
                    return Err(format!("axes {v:?} name axis {a} twice"));
                }
                seen.push(a);
            }
            if n.op_type == "Squeeze" {
                let dims = o.dims(0).unwrap_or_default();
                for &a in &seen {
                    if let Some(Some(d)) = usize::try_from(a).ok().and_then(|a| dims.get(a)) {
                        if *d != 1 {
                            return Err(format!("axes {v:?}: axis {a} has size {d}, not 1"));
                        }
                    }
                }
            }
        }
        op if op.starts_with("Reduce") => {
            if let Some(v) = o.list("axes", 1) {
                if v.iter().any(|&a| !in_range(a, rank)) {
                    return Err(format!("axes {v:?} out of range for rank {rank}"));
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// Convolutions and pools: one stride, dilation and kernel entry per spatial axis, two pads,
/// weights of the input's rank whose channels match the input's.
fn windows(o: &Operands) -> Result<(), String> {
    let n = o.n;
    let Some(rank) = o.rank(0) else {
        return Ok(());
    };
    let spatial = rank - 2;
    if spatial < 1 {
        return Err(format!(
            "the input has rank {rank}; {} needs batch, channels and at least one spatial axis",
            n.op_type
        ));
    }
    for (name, per_axis) in [
        ("strides", 1),
        ("dilations", 1),
        ("kernel_shape", 1),
        ("pads", 2),
        ("output_padding", 1),
    ] {
        if let Some(v) = ints(n, name) {
            let want = per_axis * spatial;
            if v.len() as i64 != want {
                return Err(format!(
                    "{name} {v:?} has {} entries; {spatial} spatial axes need {want}",
                    v.len()
                ));
            }
        }
    }
    if !matches!(n.op_type.as_str(), "Conv" | "ConvInteger" | "ConvTranspose") {
        return Ok(());
    }
    let Some(w) = o.dims(1) else {
        return Ok(());
    };
    if w.len() as i64 != rank {
        return Err(format!(
            "weights {} have rank {}; the input has rank {rank}",
            show(&w),
            w.len()
        ));
    }
    let group = int(n, "group").unwrap_or(1);
    let x = o.dims(0).unwrap_or_default();
    if n.op_type == "ConvTranspose" {
        if let (Some(Some(c)), Some(m)) = (x.get(1), w[0]) {
            if *c != m {
                return Err(format!(
                    "weights {} take {m} input channels; the input has {c}",
                    show(&w)
                ));
            }
        }
        return Ok(());
    }
    if let (Some(Some(c)), Some(per_group)) = (x.get(1), w[1]) {
        if per_group.checked_mul(group) != Some(*c) {
            return Err(format!(
                "weights {} take {per_group} input channels per group × group {group}; the input has {c}",
                show(&w)
            ));
        }
    }
    if let Some(m) = w[0] {
        if group > 0 && m % group != 0 {
            return Err(format!(
                "{m} output channels do not divide into group {group}"
            ));
        }
    }
    Ok(())
}

fn reshape(o: &Operands) -> Result<(), String> {
    let Some(shape) = o.int_constant(1) else {
        return Ok(());
    };
    if shape.iter().filter(|&&d| d == -1).count() > 1 {
        return Err(format!("shape {shape:?} has more than one -1"));
    }
    if let Some(bad) = shape.iter().find(|&&d| d < -1) {
        return Err(format!("shape {shape:?}: {bad} is below -1"));
    }
    let allow_zero = int(o.n, "allowzero").unwrap_or(0) != 0;
    let input = o.dims(0);
    // The target's dims as numbers: a 0 copies the input's dim unless allowzero.
    let mut known: Option<i64> = Some(1);
    for (i, &d) in shape.iter().enumerate() {
        let d = match d {
            -1 => continue,
            0 if !allow_zero => match input.as_ref().map(|x| x.get(i).copied()) {
                Some(Some(Some(x))) => x,
                Some(None) => {
                    return Err(format!(
                        "shape {shape:?} copies dim {i} (a 0), which the input's {} lacks",
                        show(input.as_deref().unwrap_or_default())
                    ))
                }
                _ => {
                    known = None;
                    continue;
                }
            },
            d => d,
        };
        known = match known.map(|k| k.checked_mul(d)) {
            Some(None) => return Err(format!("shape {shape:?} has more than 2^63 elements")),
            Some(Some(k)) => Some(k),
            None => None,
        };
    }
    let total = input
        .as_ref()
        .and_then(|x| x.iter().try_fold(1i64, |t, d| t.checked_mul((*d)?)));
    if let (Some(total), Some(known)) = (total, known) {
        let fits = if shape.contains(&-1) {
            known != 0 && total % known == 0 || known == 0 && total == 0
        } else {
            known == total
        };
        if !fits {
            return Err(format!(
                "shape {shape:?} cannot hold the input's {total} elements ({})",
                show(input.as_deref().unwrap_or_default())
            ));
        }
    }
    Ok(())
}

fn split(o: &Operands) -> Result<(), String> {
    let Some(sizes) = o.list("split", 1) else {
        return Ok(());
    };
    if let Some(bad) = sizes.iter().find(|&&s| s < 0) {
        return Err(format!("split {sizes:?}: {bad} is negative"));
    }
    if sizes.len() != o.n.outputs.len() {
        return Err(format!(
            "split {sizes:?} has {} sizes for {} outputs",
            sizes.len(),
            o.n.outputs.len()
        ));
    }
    let (Some(rank), Some(dims)) = (o.rank(0), o.dims(0)) else {
        return Ok(());
    };
    let axis = int(o.n, "axis").unwrap_or(0);
    let axis = if axis < 0 { axis + rank } else { axis };
    let dim = usize::try_from(axis)
        .ok()
        .and_then(|a| dims.get(a).copied().flatten());
    let sum = sizes.iter().try_fold(0i64, |t, &s| t.checked_add(s));
    if let Some(d) = dim {
        if sum != Some(d) {
            return Err(format!(
                "split {sizes:?} sums to {}, but axis {axis} has {d}",
                sum.map_or("more than 2^63".into(), |s| s.to_string())
            ));
        }
    }
    Ok(())
}
