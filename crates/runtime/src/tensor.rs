use cleave_ir::{Dim, ElemType, TensorType};

/// A tensor in host memory: element type, shape and little-endian bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub elem: ElemType,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

/// A tensor whose bytes someone else owns (a caller's array), read in place by an engine
/// that can (`Session::run_views`).
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    pub elem: ElemType,
    pub shape: &'a [usize],
    pub data: &'a [u8],
}

impl TensorView<'_> {
    /// A copy that owns its bytes.
    pub fn to_host(&self) -> HostTensor {
        HostTensor {
            elem: self.elem,
            shape: self.shape.to_vec(),
            data: self.data.to_vec(),
        }
    }
}

/// How far apart two tensors are.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Diff {
    pub max_abs: f64,
    pub max_rel: f64,
    /// Elements beyond `atol + rtol * |expected|`.
    pub beyond: usize,
    /// `‖computed − expected‖₂ / ‖expected‖₂`: 0 when equal, infinite when they differ and
    /// the expected tensor is all zeros (or a value is NaN on one side only).
    pub rel_l2: f64,
}

impl HostTensor {
    /// The tensor, borrowed.
    pub fn view(&self) -> TensorView<'_> {
        TensorView {
            elem: self.elem,
            shape: &self.shape,
            data: &self.data,
        }
    }

    /// Elements; `usize::MAX` when the dims' product overflows (no buffer is that long, so a
    /// size check against the data then fails, as it must).
    pub fn len(&self) -> usize {
        self.checked_len().unwrap_or(usize::MAX)
    }

    /// Elements, or None when the dims' product overflows.
    pub fn checked_len(&self) -> Option<usize> {
        self.shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
    }

    /// Bytes the data must hold at `width` bytes an element, or None on overflow.
    pub fn byte_len(&self, width: usize) -> Option<usize> {
        self.checked_len()?.checked_mul(width)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The type this tensor has, to check against a declared one.
    pub fn ty(&self) -> TensorType {
        TensorType::fixed(
            self.elem,
            &self.shape.iter().map(|&d| d as i64).collect::<Vec<_>>(),
        )
    }

    /// Whether it fits a declared type: same element type, same rank, equal fixed dims.
    pub fn fits(&self, want: &TensorType) -> Result<(), String> {
        if let Some(e) = want.elem {
            if e != self.elem {
                return Err(format!(
                    "element type is {}, the model wants {e}",
                    self.elem
                ));
            }
        }
        if let Some(dims) = &want.shape {
            let ok = dims.len() == self.shape.len()
                && dims.iter().zip(&self.shape).all(|(d, &s)| match d {
                    Dim::Fixed(n) => *n == s as i64,
                    _ => true,
                });
            if !ok {
                return Err(format!("shape is {:?}, the model wants {want}", self.shape));
            }
        }
        Ok(())
    }

    /// Elements as f64, for comparison; `None` for types without a numeric reading here.
    pub fn to_f64(&self) -> Option<Vec<f64>> {
        let d = &self.data;
        Some(match self.elem {
            ElemType::F32 => d
                .chunks_exact(4)
                .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
            ElemType::F64 => d
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
            ElemType::I64 => d
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f64)
                .collect(),
            ElemType::I32 => d
                .chunks_exact(4)
                .map(|c| f64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
            ElemType::I16 => d
                .chunks_exact(2)
                .map(|c| f64::from(i16::from_le_bytes([c[0], c[1]])))
                .collect(),
            ElemType::U16 => d
                .chunks_exact(2)
                .map(|c| f64::from(u16::from_le_bytes([c[0], c[1]])))
                .collect(),
            ElemType::F16 => d
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64())
                .collect(),
            ElemType::BF16 => d
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64())
                .collect(),
            ElemType::U8 | ElemType::Bool => d.iter().map(|&x| f64::from(x)).collect(),
            ElemType::I8 => d.iter().map(|&x| f64::from(x as i8)).collect(),
            ElemType::U32 => d
                .chunks_exact(4)
                .map(|c| f64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
            ElemType::U64 => d
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f64)
                .collect(),
            _ => return None,
        })
    }

    /// Differences of `self` (computed) against `expected`. Shapes or types that differ count
    /// every element as beyond tolerance.
    pub fn diff(&self, expected: &HostTensor, rtol: f64, atol: f64) -> Diff {
        if self.elem != expected.elem || self.shape != expected.shape {
            return Diff {
                max_abs: f64::INFINITY,
                max_rel: f64::INFINITY,
                beyond: expected.len().max(1),
                rel_l2: f64::INFINITY,
            };
        }
        let (Some(a), Some(b)) = (self.to_f64(), expected.to_f64()) else {
            let same = self.data == expected.data;
            let far = if same { 0.0 } else { f64::INFINITY };
            return Diff {
                max_abs: far,
                max_rel: far,
                beyond: usize::from(!same),
                rel_l2: far,
            };
        };
        let mut d = Diff::default();
        let (mut err2, mut norm2) = (0.0f64, 0.0f64);
        for (x, y) in a.iter().zip(&b) {
            if y.is_finite() {
                norm2 += y * y;
            }
            // Equal values (infinities included) and NaN against NaN agree.
            if x == y || (x.is_nan() && y.is_nan()) {
                continue;
            }
            let abs = (x - y).abs();
            let abs = if abs.is_nan() { f64::INFINITY } else { abs };
            err2 += abs * abs;
            let rel = if *y != 0.0 {
                abs / y.abs()
            } else if abs == 0.0 {
                0.0
            } else {
                f64::INFINITY
            };
            d.max_abs = d.max_abs.max(abs);
            d.max_rel = d.max_rel.max(rel);
            if abs > atol + rtol * y.abs() {
                d.beyond += 1;
            }
        }
        d.rel_l2 = if err2 == 0.0 {
            0.0
        } else if norm2 == 0.0 {
            f64::INFINITY
        } else {
            (err2 / norm2).sqrt()
        };
        d
    }

    /// Seeded random data of a type: normal floats, small non-negative integers, booleans.
    pub fn random(elem: ElemType, shape: &[usize], seed: u64) -> Result<HostTensor, String> {
        let width = match elem {
            ElemType::F64 | ElemType::I64 => 8,
            ElemType::F32 | ElemType::I32 => 4,
            _ => 1,
        };
        let bytes = crate::memory::elements(shape, width)
            .map_err(|e| format!("shape {shape:?} of {elem} is {e}"))?;
        let n = usize::try_from(bytes / width).map_err(|e| e.to_string())?;
        let mut rng = cleave_ir::XorShift64::seeded(seed);
        let mut next = || rng.next_u64();
        let mut uniform = || (next() >> 11) as f64 / (1u64 << 53) as f64;
        let data: Vec<u8> = match elem {
            ElemType::F32 | ElemType::F64 => {
                let mut v = Vec::with_capacity(usize::try_from(bytes).unwrap_or(0));
                for _ in 0..n {
                    // Box-Muller: a standard normal sample.
                    let (u1, u2) = (uniform().max(1e-12), uniform());
                    let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
                    if elem == ElemType::F32 {
                        v.extend_from_slice(&(z as f32).to_le_bytes());
                    } else {
                        v.extend_from_slice(&z.to_le_bytes());
                    }
                }
                v
            }
            ElemType::I64 => (0..n)
                .flat_map(|_| ((uniform() * 4.0) as i64).to_le_bytes())
                .collect(),
            ElemType::I32 => (0..n)
                .flat_map(|_| ((uniform() * 4.0) as i32).to_le_bytes())
                .collect(),
            ElemType::U8 | ElemType::I8 => (0..n).map(|_| (uniform() * 4.0) as u8).collect(),
            ElemType::Bool => (0..n).map(|_| u8::from(uniform() < 0.5)).collect(),
            other => {
                return Err(format!(
                    "cannot make random {other} data; give this input with --input"
                ))
            }
        };
        Ok(HostTensor {
            elem,
            shape: shape.to_vec(),
            data,
        })
    }
}
