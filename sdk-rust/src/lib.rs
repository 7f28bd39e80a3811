//! Hearth plugin SDK for Rust (being written).
