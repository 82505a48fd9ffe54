//! The shapes a partition was cut for, as its conn.json records them, taken again by the
//! commands that run its parts: `partition --shape images=1,3,320,320` then `bench CONN` needs no
//! flag.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use cleave_frontend::{FixedDims, FormatModel};
use cleave_ir::{Dim, Graph};
use cleave_runtime::runner;
use cleave_workdir::ConnDim;

use crate::Error;

/// The source model a connection file names, with the dims its partition fixed applied under
/// `given` (the command's own `--shape`/`--dim`, which win where they name the same input or
/// dim). Returns the model and the recorded dims that were taken (empty when none were).
pub fn conn_source_fixed(
    conn: &Path,
    given: &FixedDims,
) -> Result<(Box<dyn FormatModel>, FixedDims), Error> {
    let c = runner::read_conn(conn)?;
    let dir = conn.parent().unwrap_or(Path::new("."));
    let source = crate::load(&dir.join(&c.source.file))?;
    let recorded = match &c.source.shapes {
        Some(shapes) => beneath(
            recorded_fixes(&source.model().graph, shapes),
            given,
            &source.model().graph,
        ),
        None => FixedDims::default(),
    };
    let mut all = recorded.clone();
    all.shapes.extend(given.shapes.iter().cloned());
    all.dims.extend(given.dims.iter().cloned());
    if all.is_empty() {
        return Ok((source, recorded));
    }
    Ok((source.fix_dims(&all)?, recorded))
}

/// What `shapes` fixes of the model's declared inputs: a whole `--shape` where every dim the
/// model leaves open is recorded as a number, else `--dim` for each named one that is. An
/// input whose fixed dims differ from the record (the source changed since) is left alone.
fn recorded_fixes(g: &Graph, shapes: &BTreeMap<String, Vec<ConnDim>>) -> FixedDims {
    let mut out = FixedDims::default();
    for &v in &g.inputs {
        let value = g.value(v);
        let (Some(declared), Some(rec)) =
            (value.ty.shape.as_ref(), shapes.get(value.name.as_str()))
        else {
            continue;
        };
        if declared.len() != rec.len() {
            continue;
        }
        let mut whole = Vec::with_capacity(declared.len());
        let mut named = Vec::new();
        let mut open_left = false;
        let mut changed = false;
        let mut agrees = true;
        for (d, r) in declared.iter().zip(rec) {
            match (d, r) {
                (Dim::Fixed(a), ConnDim::Fixed(b)) => {
                    agrees &= a == b;
                    whole.push(*a);
                }
                (Dim::Fixed(a), _) => whole.push(*a),
                (Dim::Param(p), ConnDim::Fixed(n)) => {
                    named.push((p.to_string(), *n));
                    whole.push(*n);
                    changed = true;
                }
                (Dim::Unknown, ConnDim::Fixed(n)) => {
                    whole.push(*n);
                    changed = true;
                }
                _ => open_left = true,
            }
        }
        if !agrees || !changed {
            continue;
        }
        if open_left {
            for d in named {
                if !out.dims.contains(&d) {
                    out.dims.push(d);
                }
            }
        } else {
            out.shapes.push((value.name.to_string(), whole));
        }
    }
    out
}

/// `recorded` without what `given` decides: an input `given` shapes, a dim it sets, or any
/// recorded fix touching a dim parameter of an input `given` shapes.
fn beneath(recorded: FixedDims, given: &FixedDims, g: &Graph) -> FixedDims {
    if given.is_empty() {
        return recorded;
    }
    let params_of = |name: &str| -> Vec<String> {
        g.inputs
            .iter()
            .map(|&v| g.value(v))
            .filter(|v| v.name.as_str() == name)
            .flat_map(|v| v.ty.shape.iter().flatten())
            .filter_map(|d| match d {
                Dim::Param(p) => Some(p.to_string()),
                _ => None,
            })
            .collect()
    };
    let mut taken: HashSet<String> = given.dims.iter().map(|(p, _)| p.clone()).collect();
    for (name, _) in &given.shapes {
        taken.extend(params_of(name));
    }
    let shaped: HashSet<&str> = given.shapes.iter().map(|(n, _)| n.as_str()).collect();
    let mut out = FixedDims {
        shapes: Vec::new(),
        dims: recorded
            .dims
            .into_iter()
            .filter(|(p, _)| !taken.contains(p))
            .collect(),
    };
    for (name, whole) in recorded.shapes {
        if shaped.contains(name.as_str()) {
            continue;
        }
        if params_of(&name).iter().all(|p| !taken.contains(p)) {
            out.shapes.push((name, whole));
            continue;
        }
        // A dim the user sets is theirs; the input's other named dims keep their record.
        let declared = g
            .inputs
            .iter()
            .map(|&v| g.value(v))
            .find(|v| v.name.as_str() == name)
            .and_then(|v| v.ty.shape.clone())
            .unwrap_or_default();
        for (d, &n) in declared.iter().zip(&whole) {
            if let Dim::Param(p) = d {
                let fix = (p.to_string(), n);
                if !taken.contains(&fix.0) && !out.dims.contains(&fix) {
                    out.dims.push(fix);
                }
            }
        }
    }
    out
}

/// `fixed` as the flags that would give it, for a note: `--shape images=1,3,320,320 --dim n=2`.
pub fn as_flags(fixed: &FixedDims) -> String {
    let join = |d: &[i64]| d.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
    fixed
        .shapes
        .iter()
        .map(|(n, d)| format!("--shape {n}={}", join(d)))
        .chain(fixed.dims.iter().map(|(p, n)| format!("--dim {p}={n}")))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use cleave_ir::{ElemType, GraphBuilder, TensorType};

    fn input(b: &mut GraphBuilder, name: &str, dims: &[&str]) {
        let shape = dims
            .iter()
            .map(|d| match d.parse::<i64>() {
                Ok(n) => Dim::Fixed(n),
                Err(_) => Dim::Param((*d).into()),
            })
            .collect();
        b.input(
            name,
            TensorType {
                elem: Some(ElemType::F32),
                shape: Some(shape),
            },
        );
    }

    fn rec(dims: &[i64]) -> Vec<ConnDim> {
        dims.iter().map(|&d| ConnDim::Fixed(d)).collect()
    }

    #[test]
    fn a_flag_takes_only_what_it_names_of_the_record() {
        let mut b = GraphBuilder::new("g");
        input(&mut b, "a", &["batch", "3"]);
        input(&mut b, "b", &["batch", "seq"]);
        b.output("a");
        let g = b.finish(false).unwrap();
        let shapes: BTreeMap<String, Vec<ConnDim>> = [
            ("a".to_string(), rec(&[2, 3])),
            ("b".to_string(), rec(&[2, 7])),
        ]
        .into_iter()
        .collect();
        let recorded = recorded_fixes(&g, &shapes);
        assert_eq!(
            recorded.shapes,
            vec![("a".to_string(), vec![2, 3]), ("b".to_string(), vec![2, 7])]
        );
        // --dim batch=4: both shapes touch batch, but b keeps its recorded seq.
        let given = FixedDims {
            shapes: Vec::new(),
            dims: vec![("batch".into(), 4)],
        };
        let kept = beneath(recorded.clone(), &given, &g);
        assert!(kept.shapes.is_empty(), "{:?}", kept.shapes);
        assert_eq!(kept.dims, vec![("seq".to_string(), 7)]);
        // No flag: the record whole.
        let kept = beneath(recorded, &FixedDims::default(), &g);
        assert_eq!(kept.shapes.len(), 2);
    }
}
