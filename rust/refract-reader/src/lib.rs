//! # refract-reader
//!
//! The dataset-level FRI reader: derives each index segment's usable coverage by
//! walking fragment lineage, translates stored row addresses hop by hop to live
//! fragments, and caches decoded ledgers, mapping readers and row-map chunks in the
//! session's shared index cache.
//!
//! * [`entry`]: the FRI system entry and metadata-only lookups (no decoding).
//! * [`history`]: the validated ledger of one FRI uuid, cached.
//! * [`coverage`]: lineage-derived coverage of the segments of one index.
//! * [`listing`]: the derived listing of one snapshot, cached per (version, FRI uuid).
//! * [`mapping`]: mapping readers bound per transition, cached by fingerprint + root.
//! * [`translate`]: per-segment hop-by-hop translation with duplicate suppression.
//! * [`resolver`]: `FriReader` and the `FriResolver` used by query execution.
//! * [`rowmap`]: the stable-partition row-map file format, writer and chunk-cached reader.
//! * [`index_check`]: deep verification of index segments against their data.
//!
//! ```
//! # #[tokio::main]
//! # async fn main() -> refract_core::Result<()> {
//! use std::sync::Arc;
//!
//! use arrow_array::{Int64Array, RecordBatch};
//! use arrow_schema::{DataType, Field, Schema};
//! use refract_index::{create_index, IndexParams, Query};
//! use refract_reader::FriResolver;
//! use refract_table::{Dataset, OpenOptions, WriteOptions};
//!
//! let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
//! let mut dataset =
//!     Dataset::create("memory://reader-example", schema.clone(), OpenOptions::default()).await?;
//! let ids = Arc::new(Int64Array::from_iter_values(0..100));
//! let batch = RecordBatch::try_new(schema, vec![ids]).expect("ids match the schema");
//! dataset.append(vec![batch], &WriteOptions::default()).await?;
//! let dataset = create_index(&dataset, "by_id", "id", "btree", &IndexParams::default()).await?;
//! // Queries translate stored addresses through the FRI (none here yet).
//! let result = Query::new(&dataset)
//!     .filter("id < 3")?
//!     .with_resolver(Arc::new(FriResolver::default()))
//!     .execute()
//!     .await?;
//! assert_eq!(result.batch.num_rows(), 3);
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]
#![warn(clippy::missing_errors_doc)]

pub mod coverage;
pub mod entry;
pub mod history;
pub mod index_check;
pub mod listing;
pub mod mapping;
pub mod resolver;
pub mod rowmap;
pub mod translate;

pub use coverage::{Disposition, Exclusion, IndexPlan, SegmentPlan};
pub use entry::{
    fri_entry, fri_statistics, fri_uuid, has_fri, is_fri_entry, FriContent, FriStatistics,
    FRI_INDEX_NAME, FRI_INDEX_TYPE,
};
pub use history::{load_history, FriHistory};
pub use index_check::{verify_index_data, IndexCheckProgress};
pub use listing::{DerivedListing, ListedEntry};
pub use mapping::{MappingBinder, StablePartitionMapping};
pub use resolver::{FriReader, FriResolver};
pub use rowmap::ChunkCacheMode;
