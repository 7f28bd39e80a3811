//! Test support shared by the broker's unit tests, the integration tests and the
//! benchmarks (not part of Hearth's interface).

pub mod postgres;
