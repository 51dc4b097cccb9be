//! Compiles `protos/fri.proto` into Rust types (module `refract_ledger::proto`).

fn main() -> std::io::Result<()> {
    println!("cargo:rerun-if-changed=../../protos/fri.proto");
    prost_build::Config::new().compile_protos(&["../../protos/fri.proto"], &["../../protos"])
}
