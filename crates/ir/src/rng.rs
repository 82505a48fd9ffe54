//! One small seeded generator for everything that draws "random" data cleave must be able to
//! draw again: smoke-test inputs, generated models, randomised tests replayed by their seed.

/// Marsaglia's xorshift64: fast, and the same sequence for the same seed on every platform.
/// Not for anything that needs real randomness.
#[derive(Clone, Debug)]
pub struct XorShift64(u64);

impl XorShift64 {
    /// Starts from `state` as given (zero, which would stay zero, becomes one).
    pub fn raw(state: u64) -> XorShift64 {
        XorShift64(state.max(1))
    }

    /// Starts from `seed` spread over all bits first, so small seeds (0, 1, 2) give unrelated
    /// sequences.
    pub fn seeded(seed: u64) -> XorShift64 {
        XorShift64(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Below `n` (which must not be zero).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in [0, 1), from the top 53 bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::XorShift64;

    #[test]
    fn the_same_seed_gives_the_same_sequence_and_zero_does_not_stick() {
        let a: Vec<u64> = {
            let mut r = XorShift64::seeded(7);
            (0..4).map(|_| r.next_u64()).collect()
        };
        let mut r = XorShift64::seeded(7);
        assert_eq!(a, (0..4).map(|_| r.next_u64()).collect::<Vec<_>>());
        assert_ne!(XorShift64::raw(0).next_u64(), 0);
        let mut r = XorShift64::raw(0x2545_F491_4F6C_DD1D);
        assert!((0..1000).all(|_| (0.0..1.0).contains(&r.unit()) && r.below(3) < 3));
    }
}
