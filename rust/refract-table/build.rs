//! Compiles `protos/table.proto` into the `proto` module (see `src/format/proto.rs`).

fn main() -> std::io::Result<()> {
    println!("cargo:rerun-if-changed=../../protos/table.proto");
    prost_build::Config::new().compile_protos(&["../../protos/table.proto"], &["../../protos"])
}
