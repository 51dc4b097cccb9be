//! Unit tests of the ledger (decode, validation, lineage, fingerprints,
//! encoding, robustness against arbitrary bytes).

mod alloc;
mod envelope;
mod fixtures;
mod fuzz;
mod lineage;
mod records;
mod roundtrip;
