//! Integration tests of hearth-plugin against an in-process fake broker (a real tonic
//! `PluginHost` server on a temp Unix socket), plus the `stress` example as a process.

mod broker;
mod process;
mod session;
mod stress_process;
mod token;
