//! Integration tests of hearth-sdk against an in-process fake broker (a real tonic
//! `PluginHost` server on a temp Unix socket), plus the `fault` and `stress` examples
//! as processes.

mod broker;
mod fault_process;
mod session;
mod stress_process;
