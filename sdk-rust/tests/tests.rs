//! Integration tests of hearth-plugin against its own fake broker
//! (`hearth_plugin::testing`: a real tonic `PluginHost` server on a temp Unix socket),
//! the test harness itself, plus the `stress` example as a process.

mod broker;
mod harness;
mod process;
// Quoted verbatim by README.md: formatted as the README shows it.
#[rustfmt::skip]
mod readme;
mod session;
mod stress_process;
mod token;
mod trace;
