//! Index arithmetic for folding small integer tensors of any rank: their elements are kept
//! flat, in row-major order, and their shape comes from their (static) type.

use cleave_ir::Dim;

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1].saturating_mul(shape[i + 1]);
    }
    s
}

/// Every multi-index of `shape`, in row-major order, fed to `f`.
fn for_each_index(shape: &[usize], mut f: impl FnMut(&[usize])) {
    if shape.contains(&0) {
        return;
    }
    let mut idx = vec![0; shape.len()];
    loop {
        f(&idx);
        let mut k = shape.len();
        loop {
            if k == 0 {
                return;
            }
            k -= 1;
            idx[k] += 1;
            if idx[k] < shape[k] {
                break;
            }
            idx[k] = 0;
        }
    }
}

pub(crate) fn transpose(data: &[Dim], shape: &[usize], perm: &[usize]) -> Option<Vec<Dim>> {
    if perm.len() != shape.len() || data.len() != shape.iter().product::<usize>() {
        return None;
    }
    let st = strides(shape);
    let out_shape: Vec<usize> = perm
        .iter()
        .map(|&p| shape.get(p).copied())
        .collect::<Option<_>>()?;
    let mut out = Vec::with_capacity(data.len());
    for_each_index(&out_shape, |i| {
        let at: usize = i.iter().zip(perm).map(|(&x, &p)| x * st[p]).sum();
        out.push(data[at].clone());
    });
    Some(out)
}

/// ONNX Slice over `axes` (already normalised), with its clamping rules.
pub(crate) fn slice(
    data: &[Dim],
    shape: &[usize],
    starts: &[i64],
    ends: &[i64],
    axes: &[usize],
    steps: &[i64],
) -> Option<Vec<Dim>> {
    if data.len() != shape.iter().product::<usize>() {
        return None;
    }
    let mut first: Vec<i64> = vec![0; shape.len()];
    let mut step: Vec<i64> = vec![1; shape.len()];
    let mut out_shape = shape.to_vec();
    for (k, &a) in axes.iter().enumerate() {
        let len = i64::try_from(*shape.get(a)?).ok()?;
        let (s, e, st) = (*starts.get(k)?, *ends.get(k)?, *steps.get(k)?);
        if st == 0 {
            return None;
        }
        let s = if s < 0 { s.saturating_add(len) } else { s };
        // ONNX clamps a start to [0, len] stepping forward and [0, len - 1] backward.
        first[a] = if st > 0 {
            s.max(0).min(len)
        } else {
            s.min(len - 1).max(0)
        };
        step[a] = st;
        out_shape[a] = usize::try_from(slice_len(len, *starts.get(k)?, e, st)).ok()?;
    }
    let st = strides(shape);
    let mut out = Vec::new();
    let mut bad = false;
    for_each_index(&out_shape, |i| {
        let at = i.iter().enumerate().try_fold(0usize, |acc, (a, &x)| {
            let pos = first[a].checked_add(step[a].checked_mul(x as i64)?)?;
            acc.checked_add(usize::try_from(pos).ok()?.checked_mul(st[a])?)
        });
        match at.and_then(|at| data.get(at)) {
            Some(d) => out.push(d.clone()),
            None => bad = true,
        }
    });
    (!bad).then_some(out)
}

/// Concatenation along `axis` of tensors whose shapes agree elsewhere.
pub(crate) fn concat(parts: &[(&[Dim], Vec<usize>)], axis: usize) -> Option<Vec<Dim>> {
    let product = |dims: &[usize]| dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    let outer = product(parts.first()?.1.get(..axis)?)?;
    let mut out = Vec::new();
    for o in 0..outer {
        for (data, shape) in parts {
            let chunk = product(shape.get(axis..)?)?;
            let start = o.checked_mul(chunk)?;
            out.extend_from_slice(data.get(start..start.checked_add(chunk)?)?);
        }
    }
    Some(out)
}

/// Elements that `start:end:step` selects from `len`, with ONNX's clamping rules.
pub(crate) fn slice_len(len: i64, start: i64, end: i64, step: i64) -> i64 {
    let norm = |v: i64| if v < 0 { v.saturating_add(len) } else { v };
    let (start, end) = (norm(start), norm(end));
    // Counted as (span - 1) / |step| + 1, so no step, INT64_MIN and MAX included, overflows.
    if step > 0 {
        let (s, e) = (start.clamp(0, len), end.clamp(0, len));
        if e > s {
            (e - s - 1) / step + 1
        } else {
            0
        }
    } else {
        let (s, e) = (start.clamp(-1, len - 1), end.clamp(-1, len - 1));
        if s > e {
            ((s - e - 1).unsigned_abs() / step.unsigned_abs()) as i64 + 1
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infer::dims::fixed;

    #[test]
    fn transposes_and_slices_like_numpy() {
        // [[0,1,2],[3,4,5]]
        let x = fixed(&[0, 1, 2, 3, 4, 5]);
        assert_eq!(
            transpose(&x, &[2, 3], &[1, 0]),
            Some(fixed(&[0, 3, 1, 4, 2, 5]))
        );
        // x[::-1, 1:]
        assert_eq!(
            slice(
                &x,
                &[2, 3],
                &[-1, 1],
                &[i64::MIN, i64::MAX],
                &[0, 1],
                &[-1, 1]
            ),
            Some(fixed(&[4, 5, 1, 2]))
        );
        // concat([[0,1,2],[3,4,5]], [[6],[7]], axis=1)
        let y = fixed(&[6, 7]);
        assert_eq!(
            concat(&[(&x, vec![2, 3]), (&y, vec![2, 1])], 1),
            Some(fixed(&[0, 1, 2, 6, 3, 4, 5, 7]))
        );
    }

    #[test]
    fn slice_lengths_follow_onnx_clamping() {
        assert_eq!(slice_len(10, 0, 3, 1), 3);
        assert_eq!(slice_len(10, 1, i64::MAX, 2), 5);
        assert_eq!(slice_len(10, -1, i64::MIN, -1), 10);
        assert_eq!(slice_len(10, 5, 2, 1), 0);
        assert_eq!(slice_len(4, -100, 100, 1), 4);
        // The extreme steps (a step of INT64_MIN once negated and overflowed): one element.
        assert_eq!(slice_len(4, 1, 0, i64::MIN), 1);
        assert_eq!(slice_len(4, 3, -100, i64::MIN), 1);
        assert_eq!(slice_len(4, 0, 4, i64::MAX), 1);
        assert_eq!(slice_len(4, 0, 4, 3), 2);
        assert_eq!(slice_len(4, 3, -100, -3), 2);
    }
}
