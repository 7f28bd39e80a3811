//! The `fault` example as a real process against the fake broker.
