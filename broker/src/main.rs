//! The `hearth` binary; see [`hearth::cli`].

fn main() -> std::process::ExitCode {
    hearth::cli::main()
}
