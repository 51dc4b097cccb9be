//! FRI writers: deferred compaction transitions, stable-partition rewrites,
//! and the metadata helpers the CLI and maintenance code use.
//!
//! * [`deferred`]: the commit hook that records rewrites in the ledger
//!   ([`deferred_remap_hook`], and a legacy version-0 variant);
//! * [`partition`]: [`partition_fragments`], the stable-partition rewrite;
//! * [`labels`]: the label functions ([`PartitionBy`]);
//! * [`describe`]: [`describe_fri`] for `refract fri`.
//!
//! The FRI entry helpers ([`load_ledger`], [`fri_uuid`]) live in the table
//! engine (`refract_table::commit::fri_entry`, next to the commit's write
//! gate) because every commit passes through them; they are re-exported here.

pub mod deferred;
pub mod describe;
pub mod labels;
pub mod partition;
mod row_map_writer;

pub use deferred::{
    deferred_remap_hook, legacy_deferred_remap_hook, preserve_history, DeferredRemapHook,
    HistoryFormat, HistoryPreservingHook,
};
pub use describe::{describe_fri, DigestDescription, FriDescription, TransitionDescription};
pub use labels::PartitionBy;
pub use partition::{partition_fragments, PartitionMetrics, PartitionOptions};
pub use refract_table::commit::fri_entry::{fri_uuid, load_ledger, new_fri_entry};
pub use row_map_writer::{RowMapWriter, WrittenRowMap};
