//! Arithmetic on dimensions that may be symbolic or unknown.

use cleave_ir::Dim;

pub fn fixed(v: &[i64]) -> Vec<Dim> {
    v.iter().map(|&d| Dim::Fixed(d)).collect()
}

/// Normalises a possibly negative axis against `rank`.
pub fn axis(a: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let a = if a < 0 { a + r } else { a };
    (0..r).contains(&a).then_some(a as usize)
}

/// Numpy-style multidirectional broadcast of several shapes.
pub fn broadcast(shapes: &[&[Dim]]) -> Vec<Dim> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    (0..rank)
        .map(|i| {
            let mut out: Option<Dim> = None;
            for s in shapes {
                let Some(d) = (i + s.len()).checked_sub(rank).map(|j| &s[j]) else {
                    continue;
                };
                out = Some(match (out, d) {
                    (None, d) => d.clone(),
                    (Some(Dim::Fixed(1)), d) => d.clone(),
                    (Some(o), Dim::Fixed(1)) => o,
                    (Some(o), d) if o == *d => o,
                    // A symbol against a number other than 1 must be that number.
                    (Some(Dim::Fixed(n)), _) => Dim::Fixed(n),
                    (Some(_), Dim::Fixed(n)) => Dim::Fixed(*n),
                    _ => Dim::Unknown,
                });
            }
            out.unwrap_or(Dim::Fixed(1))
        })
        .collect()
}

/// The product of dims, when all are known.
pub fn product(d: &[Dim]) -> Option<i64> {
    d.iter()
        .try_fold(1i64, |acc, x| acc.checked_mul(x.fixed()?))
}

/// The product of dims as a dim: ones drop out, so `[batch, 1, 1]` stays `batch`.
pub fn product_dim(d: &[Dim]) -> Dim {
    let rest: Vec<&Dim> = d.iter().filter(|x| **x != Dim::Fixed(1)).collect();
    match rest.as_slice() {
        [] => Dim::Fixed(1),
        [one] => (*one).clone(),
        many => many
            .iter()
            .try_fold(1i64, |acc, x| acc.checked_mul(x.fixed()?))
            .map_or(Dim::Unknown, Dim::Fixed),
    }
}

/// A fixed dim mapped through arithmetic on values from the file: `f` returns `None` where
/// it would overflow, and that, like a negative result, leaves the dim unknown.
pub fn map_fixed(d: &Dim, f: impl Fn(i64) -> Option<i64>) -> Dim {
    match d {
        Dim::Fixed(n) => f(*n).filter(|&v| v >= 0).map_or(Dim::Unknown, Dim::Fixed),
        _ => Dim::Unknown,
    }
}

/// An `i128` result back to a dim size, when it fits.
pub fn fits(v: i128) -> Option<i64> {
    i64::try_from(v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasts_like_numpy() {
        let a = fixed(&[2, 1, 4]);
        let b = fixed(&[3, 1]);
        assert_eq!(broadcast(&[&a, &b]), fixed(&[2, 3, 4]));
        let n = vec![Dim::Param("N".into()), Dim::Fixed(4)];
        assert_eq!(broadcast(&[&n, &fixed(&[4])]), n);
        assert_eq!(broadcast(&[&n, &fixed(&[7, 1])])[0], Dim::Fixed(7));
        assert_eq!(axis(-1, 4), Some(3));
        assert_eq!(
            product_dim(&[Dim::Param("N".into()), Dim::Fixed(1)]),
            Dim::Param("N".into())
        );
        assert_eq!(product_dim(&fixed(&[2, 3])), Dim::Fixed(6));
        assert_eq!(
            product_dim(&[Dim::Param("N".into()), Dim::Fixed(3)]),
            Dim::Unknown
        );
        assert_eq!(axis(4, 4), None);
    }
}
