//! Dims a TFLite or circle part is written with where the file's own will not do: inputs
//! fixed by `--shape`, and tensors whose dims a run showed (`--learn-dims`).
//!
//! A converter writes each tensor's `shape` and, where a dim is only known at run time, -1 in
//! its `shape_signature`, leaving a placeholder (often 1) in `shape`. The source prepares,
//! since LiteRT computes such a dim from the operator that makes it; a part that receives
//! the tensor as an input has only the placeholder, which a convolution or concatenation
//! cannot be prepared with. cleave has no TFLite shape inference, so the real dims come from
//! a run of the source, on the user's input shapes, only when asked.

use std::collections::BTreeMap;

use cleave_frontend::{FixedDims, FrontendError};
use cleave_ir::words::{Arg, Message};
use cleave_ir::{Dim, TensorType, ValueDef, ValueId};
use cleave_partition::ValidatedPlan;

use crate::build::TensorDims;
use crate::TfliteSource;

fn join(dims: &[i64]) -> String {
    dims.iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Sets `--shape` dims in the model's inputs: they are written into every part that reads the
/// input (`shape` and `shape_signature`) and typed in the IR. `--dim` is refused, as TFLite
/// dims have no names.
pub(crate) fn fix_inputs(src: &mut TfliteSource, fixed: &FixedDims) -> Result<(), FrontendError> {
    let path = src.file.path.clone();
    let format = src.file.format.name();
    let err = |m: Message| FrontendError::asked(&path, m);
    if let Some((p, v)) = fixed.dims.first() {
        return Err(err(Message::about(
            Arg::Dim,
            format!("{p}={v}"),
            format!(": {format} models name no dims (a dynamic dim is -1 in the tensor's shape_signature); give the input's whole shape with "),
        )
        .given(Arg::Shape, "NAME=D,D,...")));
    }
    let g = &src.converted.model.graph;
    let input_names = g
        .inputs
        .iter()
        .map(|&v| g.value(v).name.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    for (name, dims) in &fixed.shapes {
        let flag = Message::default().given(Arg::Shape, format!("{name}={}", join(dims)));
        if let Some(d) = dims.iter().find(|&&d| d < 0) {
            return Err(err(flag.clone().then(format!(": {d} is not a dimension"))));
        }
        let g = &src.converted.model.graph;
        let Some(v) = g.inputs.iter().copied().find(|&v| g.value(v).name == *name) else {
            return Err(err(flag.clone().then(format!(
                ": the model has no input '{name}' (its inputs: {input_names})"
            ))));
        };
        if let Some(declared) = &g.value(v).ty.shape {
            if declared.len() != dims.len() {
                return Err(err(flag.clone().then(format!(
                    ": input '{name}' has rank {}, not {}",
                    declared.len(),
                    dims.len()
                ))));
            }
            for (axis, (d, &want)) in declared.iter().zip(dims).enumerate() {
                if let Some(w) = d.fixed().filter(|&w| w != want) {
                    return Err(err(flag.clone().then(format!(
                        ": dim {axis} of input '{name}' is fixed at {w} in the model"
                    ))));
                }
            }
        }
        let shape = dims
            .iter()
            .map(|&d| i32::try_from(d))
            .collect::<Result<Vec<i32>, _>>()
            .map_err(|_| {
                err(flag
                    .clone()
                    .then(format!(": a dim past {format}'s 32 bits")))
            })?;
        let i = src.tensor(v)?;
        src.dims.insert(
            i,
            TensorDims {
                shape: shape.clone(),
                signature: Some(shape),
            },
        );
        src.converted.model.graph.value_mut(v).ty.shape =
            Some(dims.iter().map(|&d| Dim::Fixed(d)).collect());
    }
    Ok(())
}

/// The tensors a run should show: every one an operator computes whose dims the file leaves
/// dynamic. Their element types and ranks the file gives.
pub(crate) fn to_learn(src: &TfliteSource) -> Vec<ValueId> {
    let g = &src.converted.model.graph;
    (0..g.values.len())
        .map(|i| ValueId(i as u32))
        .filter(|&v| {
            let value = g.value(v);
            matches!(value.def, ValueDef::Node(..)) && value.ty.static_dims().is_none()
        })
        .collect()
}

/// The tensors to learn, typed with `dims` (every main-subgraph tensor's, by index).
pub(crate) fn types_from_tensor_dims(
    src: &TfliteSource,
    dims: &[Option<Vec<i64>>],
) -> Vec<(ValueId, TensorType)> {
    let g = &src.converted.model.graph;
    to_learn(src)
        .into_iter()
        .filter_map(|v| {
            let shown = dims.get(src.tensor(v).ok()?)?.as_ref()?;
            let ty = TensorType {
                elem: g.value(v).ty.elem,
                shape: Some(shown.iter().map(|&d| Dim::Fixed(d)).collect()),
            };
            Some((v, ty))
        })
        .collect()
}

/// The converter's placeholder `shape` of an input whose `shape_signature` leaves dims open,
/// where every dim of it is above 0.
pub(crate) fn placeholder_shape(src: &TfliteSource, v: ValueId) -> Option<Vec<i64>> {
    let i = src.tensor(v).ok()?;
    if let Some(d) = src.dims.get(&i) {
        return Some(d.shape.iter().map(|&x| i64::from(x)).collect());
    }
    let sg = src.file.root().subgraphs()?.get(0);
    let shape = sg.tensors()?.get(i).shape()?;
    let dims: Vec<i64> = shape.iter().map(i64::from).collect();
    dims.iter().all(|&d| d > 0).then_some(dims)
}

/// Takes the dims a run showed: the IR's unknown dims are filled in, and each tensor is
/// written with them as its `shape`, its `shape_signature` kept (a dim the file calls
/// dynamic stays so for an engine that resizes).
pub(crate) fn learn(src: &mut TfliteSource, learned: &[(ValueId, TensorType)]) {
    let file_signature = |src: &TfliteSource, i: usize| -> Option<usize> {
        let sg = src.file.root().subgraphs()?.get(0);
        let t = sg.tensors()?.get(i);
        t.shape_signature().or_else(|| t.shape()).map(|s| s.len())
    };
    for (v, seen) in learned {
        let Ok(i) = src.tensor(*v) else { continue };
        let ty = &mut src.converted.model.graph.value_mut(*v).ty;
        match (&mut ty.shape, &seen.shape) {
            (Some(have), Some(s)) if have.len() == s.len() => {
                for (h, s) in have.iter_mut().zip(s) {
                    if h.fixed().is_none() {
                        *h = s.clone();
                    }
                }
            }
            (have @ None, s) => *have = s.clone(),
            _ => {}
        }
        if src.dims.contains_key(&i) {
            continue;
        }
        let Some(shape) = seen.static_dims().and_then(|d| {
            d.iter()
                .map(|&x| i32::try_from(x).ok())
                .collect::<Option<Vec<i32>>>()
        }) else {
            continue;
        };
        // A signature of another rank than the run's would contradict the shape.
        let signature = (file_signature(src, i) != Some(shape.len())).then(|| shape.clone());
        src.dims.insert(i, TensorDims { shape, signature });
    }
}

/// Says which part inputs keep a converter's placeholder dims, and how to get the real ones.
pub(crate) fn placeholder_note(src: &TfliteSource, plan: &ValidatedPlan) -> Option<String> {
    let g = &src.converted.model.graph;
    let mut kept: BTreeMap<String, (String, usize, String)> = BTreeMap::new();
    for (k, part) in plan.parts.iter().enumerate() {
        for &v in &part.inputs {
            let value = g.value(v);
            if g.inputs.contains(&v) || value.ty.static_dims().is_some() {
                continue;
            }
            let Ok(i) = src.tensor(v) else { continue };
            if src.dims.contains_key(&i) {
                continue;
            }
            let written = src
                .file
                .root()
                .subgraphs()
                .map(|s| s.get(0))
                .and_then(|sg| sg.tensors().map(|t| t.get(i)))
                .and_then(|t| t.shape())
                .map(|s| format!("{:?}", s.iter().collect::<Vec<i32>>()))
                .unwrap_or_else(|| "no shape".into());
            kept.insert(
                value.name.to_string(),
                (written, k + 1, plan.device_name(part).to_string()),
            );
        }
    }
    let (name, (shape, k, backend)) = kept.iter().next()?;
    // Only LiteRT shows a run's dims, and it runs TFLite files.
    let fix = match src.file.format {
        crate::Format::Tflite => "fix the model's inputs with --shape and add --learn-dims, which runs the source once and writes the dims it shows",
        crate::Format::Circle => "convert the model to TFLite (cleave convert MODEL.circle MODEL.tflite), then partition that with --shape and --learn-dims, which runs it once and writes the dims it shows",
    };
    Some(format!(
        "{} part input(s) have dims the file leaves dynamic (-1 in shape_signature) and are written with the converter's placeholder shape beside them, e.g. '{name}' as {shape} into part {k:05} ({backend}): LiteRT resizes such an input on a part's first run, but allocating before one (or an engine that prepares at load) needs the real dims: {fix}",
        kept.len()
    ))
}
