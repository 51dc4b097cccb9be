//! The wire types of the FRI: Lance 14.0.2's `FragmentReuseIndexDetails`
//! messages (`lance-table`, `protos/table.proto`), plus the one record Refract
//! adds to the details envelope.
//!
//! Decoding into these is only one step: the typed model ([`crate::Ledger`],
//! [`crate::TransitionRecord`]) is what the rest of Refract uses, and it is
//! only produced through validation.

#![allow(missing_docs)]

pub use lance_table::format::pb::fragment_reuse_index_details::{
    transition, Content, FragmentDigest, Group, InlineContent, OrderedCompaction, StablePartition,
    Transition, Version,
};
pub use lance_table::format::pb::{ExternalFile, FragmentReuseIndexDetails};

/// Type URL of the FRI entry's details, as Lance writes and matches it.
pub const DETAILS_TYPE_URL: &str = "/lance.table.FragmentReuseIndexDetails";

/// Field of the details envelope holding [`RowMapChecksums`]. Lance's readers
/// take fields 1 (inline) and 2 (external) and skip every other envelope
/// field, and a Lance writer rebuilding the details drops it: the checksums
/// are then missing (the row maps read unverified), never stale.
pub const ROW_MAP_CHECKSUMS_FIELD: u32 = 16;

/// Block checksums of the stable-partition row maps a ledger references,
/// which Lance's `StablePartition` has no field for.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RowMapChecksums {
    #[prost(message, repeated, tag = "1")]
    pub maps: Vec<RowMapChecksum>,
}

/// Block checksums of `_fri/<map_id>/stable_partition.lance`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RowMapChecksum {
    /// The map's UUID, hyphenated, as in `StablePartition.map_id`.
    #[prost(string, tag = "1")]
    pub map_id: String,
    /// Bytes per block.
    #[prost(uint64, tag = "2")]
    pub block_bytes: u64,
    /// One little-endian CRC-32C per block.
    #[prost(bytes = "vec", tag = "3")]
    pub crc32c: Vec<u8>,
}
