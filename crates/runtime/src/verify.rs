//! Parts against the whole model, tensor by tensor.

use cleave_ir::ElemType;

use crate::tensor::{Diff, HostTensor};

/// How close a part's tensor must be to the whole model's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tolerance {
    /// Floating-point tensors within this relative L2 error (`‖got − want‖ / ‖want‖`, at
    /// least 16 ulps of the element type's epsilon), or with every element within 16
    /// epsilons absolute; other types equal. An engine that
    /// rounds or fuses differently across a part boundary (tract folds BatchNorm into the Conv
    /// in the whole model, not across a cut) leaves errors of 1e-7..1e-5 spread over the
    /// tensor; a miswired tensor is off by about its own size.
    Norm(f64),
    /// Every element within `atol + rtol·|want|`, as numpy's `allclose`.
    Elementwise { rtol: f64, atol: f64 },
}

/// The default [`Tolerance::Norm`] bound.
pub const DEFAULT_NORM_TOL: f64 = 1e-3;

impl Default for Tolerance {
    fn default() -> Self {
        Tolerance::Norm(DEFAULT_NORM_TOL)
    }
}

impl Tolerance {
    /// Compares `got` with `want`; the row says whether it is within tolerance.
    pub fn compare(&self, got: &HostTensor, want: &HostTensor) -> (Diff, bool) {
        match *self {
            Tolerance::Elementwise { rtol, atol } => {
                let d = got.diff(want, rtol, atol);
                (d, d.beyond == 0)
            }
            Tolerance::Norm(tol) => {
                let d = got.diff(want, 0.0, 0.0);
                let ok = match float_epsilon(want.elem) {
                    // A tensor whose every element is within 16 epsilons of the whole model's
                    // in absolute terms agrees to the rounding of a unit-scale computation,
                    // however small its own norm (a sigmoid's tail of 1e-7s, where two
                    // engines' exp differ by one ulp of 1.0).
                    Some(eps) if want.elem == got.elem => {
                        d.rel_l2 <= tol.max(16.0 * eps) || d.max_abs <= 16.0 * eps
                    }
                    _ => d.beyond == 0,
                };
                (d, ok)
            }
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Tolerance::Norm(tol) => format!("relative L2 error {tol:e}"),
            Tolerance::Elementwise { rtol, atol } => format!("rtol {rtol:e} / atol {atol:e}"),
        }
    }
}

fn float_epsilon(e: ElemType) -> Option<f64> {
    match e {
        ElemType::F64 => Some(f64::EPSILON),
        ElemType::F32 => Some(f64::from(f32::EPSILON)),
        ElemType::F16 => Some(half::f16::EPSILON.to_f64()),
        ElemType::BF16 => Some(half::bf16::EPSILON.to_f64()),
        _ => None,
    }
}

/// One compared tensor.
#[derive(Clone, Debug)]
pub struct Row {
    pub tensor: String,
    /// `true` for a model output, `false` for a boundary tensor between parts.
    pub is_output: bool,
    pub diff: Diff,
    pub ok: bool,
}

#[derive(Clone, Debug, Default)]
pub struct Report {
    pub rows: Vec<Row>,
    /// Tensors not compared because neither side gives them as a tensor (a sequence or map
    /// output), each once.
    pub skipped: Vec<String>,
}

impl Report {
    /// Every row within tolerance. A report without rows passes here; [`Report::verdict`]
    /// refuses it.
    pub fn passed(&self) -> bool {
        self.rows.iter().all(|r| r.ok)
    }

    /// Whether the parts match the whole model, or why the comparison proves nothing: with no
    /// tensor compared, "every tensor matches" says nothing.
    pub fn verdict(&self) -> Result<bool, String> {
        if self.rows.is_empty() {
            let why = match self.skipped.as_slice() {
                [] => "no output of the model is a tensor that both the parts and the whole \
                       model give"
                    .to_string(),
                [one] => format!("'{one}' is not a tensor"),
                many => format!(
                    "{} are not tensors",
                    many.iter()
                        .map(|n| format!("'{n}'"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            return Err(format!("nothing was compared: {why}"));
        }
        Ok(self.passed())
    }
}

/// Why a partition with `conn_outputs` cannot stand for a model with `model_outputs`: the
/// outputs the model gives and the partition does not (missing), and those the partition
/// gives that the model does not (extra), named. A partition that drops an output would
/// otherwise verify by comparing only what is left (nothing, for `"outputs": []`).
pub fn check_outputs(model_outputs: &[&str], conn_outputs: &[String]) -> Result<(), String> {
    let missing: Vec<&str> = model_outputs
        .iter()
        .copied()
        .filter(|o| !conn_outputs.iter().any(|c| c == o))
        .collect();
    let extra: Vec<&str> = conn_outputs
        .iter()
        .map(String::as_str)
        .filter(|c| !model_outputs.contains(c))
        .collect();
    let list = |v: &[&str]| {
        v.iter()
            .map(|n| format!("'{n}'"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let why = match (missing.is_empty(), extra.is_empty()) {
        (true, true) => return Ok(()),
        (false, true) => format!("lacks the model's outputs {}", list(&missing)),
        (true, false) => format!("gives outputs the model does not: {}", list(&extra)),
        (false, false) => format!(
            "lacks the model's outputs {} and gives outputs the model does not: {}",
            list(&missing),
            list(&extra)
        ),
    };
    Err(format!(
        "the partition's outputs are not the model's: it {why}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> HostTensor {
        HostTensor {
            elem: ElemType::F32,
            shape: vec![v.len()],
            data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    #[test]
    fn rounding_passes_and_a_wrong_tensor_fails_the_norm() {
        // Near-zero elements off by rounding fail an elementwise check, not the norm.
        let want = f32s(&[10.0, -20.0, 1e-7, 30.0]);
        let got = f32s(&[10.00001, -20.00002, 2e-7, 29.99997]);
        let elementwise = Tolerance::Elementwise {
            rtol: 1e-4,
            atol: 1e-12,
        };
        assert!(!elementwise.compare(&got, &want).1);
        let (d, ok) = Tolerance::default().compare(&got, &want);
        assert!(ok && d.rel_l2 < 1e-5, "{d:?}");
        // Two tensors swapped: as far off as the tensors are large.
        let other = f32s(&[-20.0, 10.0, 30.0, 1e-7]);
        let (d, ok) = Tolerance::default().compare(&other, &want);
        assert!(!ok && d.rel_l2 > 0.5, "{d:?}");
        // A tensor of near-zero values that two engines round one ulp of 1.0 apart: its own
        // norm is tiny, the difference is rounding (ONNX Runtime and OpenVINO on a sigmoid's
        // tail); 17 epsilons off is not.
        let tail = f32s(&[1e-7, 2e-7, 0.0, 5e-8]);
        let eps = f32::EPSILON;
        let near = f32s(&[1e-7 + eps, 2e-7, eps, 5e-8]);
        assert!(Tolerance::default().compare(&near, &tail).1);
        let off = f32s(&[1e-7 + 17.0 * eps, 2e-7, 0.0, 5e-8]);
        assert!(!Tolerance::default().compare(&off, &tail).1);
        // A wrong shape or element type is never within tolerance.
        assert!(!Tolerance::default().compare(&f32s(&[10.0]), &want).1);
    }

    #[test]
    fn a_partition_must_give_the_models_outputs_and_compare_something() {
        let conn = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(check_outputs(&["y", "z"], &conn(&["z", "y"])), Ok(()));
        assert_eq!(
            check_outputs(&["y"], &conn(&[])).unwrap_err(),
            "the partition's outputs are not the model's: it lacks the model's outputs 'y'"
        );
        assert_eq!(
            check_outputs(&["y", "z"], &conn(&["y", "w"])).unwrap_err(),
            "the partition's outputs are not the model's: it lacks the model's outputs 'z' \
             and gives outputs the model does not: 'w'"
        );
        assert!(check_outputs(&["y"], &conn(&["y", "w"]))
            .unwrap_err()
            .ends_with("it gives outputs the model does not: 'w'"));
        let e = Report::default().verdict().unwrap_err();
        assert!(e.starts_with("nothing was compared"), "{e}");
        let row = |ok| Row {
            tensor: "y".into(),
            is_output: true,
            diff: Diff::default(),
            ok,
        };
        let skipped = Report {
            skipped: vec!["s".into()],
            ..Report::default()
        };
        assert_eq!(
            skipped.verdict().unwrap_err(),
            "nothing was compared: 's' is not a tensor"
        );
        let report = |ok| Report {
            rows: vec![row(ok)],
            ..skipped.clone()
        };
        assert_eq!(report(true).verdict(), Ok(true));
        assert_eq!(report(false).verdict(), Ok(false));
    }

    #[test]
    fn integers_must_be_equal() {
        let ints = |v: &[i64]| HostTensor {
            elem: ElemType::I64,
            shape: vec![v.len()],
            data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        };
        assert!(
            Tolerance::default()
                .compare(&ints(&[1, 2, 3]), &ints(&[1, 2, 3]))
                .1
        );
        assert!(
            !Tolerance::default()
                .compare(&ints(&[1, 2, 4]), &ints(&[1, 2, 3]))
                .1
        );
    }
}
