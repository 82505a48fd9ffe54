// Generates the ONNX protobuf types from the vendored proto2 schema with protox, a pure-Rust
// compiler, so building cleave needs no `protoc`.
fn main() {
    let protos = ["proto/onnx.proto", "proto/lean.proto"];
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    let fds = match protox::compile(protos, ["proto"]) {
        Ok(fds) => fds,
        Err(e) => panic!("compiling {protos:?}: {e}"),
    };
    let mut config = prost_build::Config::new();
    // `bytes::Bytes` fields let a decode from a memory map slice weights instead of copying them.
    config.bytes(["."]);
    if let Err(e) = config.compile_fds(fds) {
        panic!("generating Rust for {protos:?}: {e}");
    }
}
