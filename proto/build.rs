//! Compiles `hearth/v1/*.proto` with protox (pure Rust), so no system protoc is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "hearth/v1/plugin.proto",
        "hearth/v1/admin.proto",
        "hearth/v1/host.proto",
        "hearth/v1/agent.proto",
        // Broker ⇄ plugin host over NATS (broker only; SDKs get no stubs of it).
        "hearth/v1/node.proto",
    ];
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["."])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
