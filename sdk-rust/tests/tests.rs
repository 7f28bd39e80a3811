//! Integration tests of hearth-sdk against an in-process fake broker (a real tonic
//! `PluginHost` server on a temp Unix socket), plus the `fault` example as a process.

mod broker;
mod fault_process;
mod session;
