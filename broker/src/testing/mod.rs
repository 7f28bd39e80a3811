//! Test support shared by the broker's unit tests, the integration tests and the
//! benchmarks (not part of Hearth's interface).

pub mod postgres;

/// A small deterministic random generator (xorshift64*), so that a generated case or a
/// chaos schedule reproduces from its seed. Not for anything that needs real
/// randomness.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next number below `n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    }
}
