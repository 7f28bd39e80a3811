//! Hearth broker (being written).
