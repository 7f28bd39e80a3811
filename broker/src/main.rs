//! The `hearth` binary; see [`hearth_broker::cli`].

fn main() -> std::process::ExitCode {
    hearth_broker::cli::main()
}
