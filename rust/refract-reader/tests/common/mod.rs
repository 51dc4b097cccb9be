//! Test fixtures: tables with indices, rewrites recorded in an FRI entry
//! (ordered compactions and stable partitions built directly with the ledger
//! API and Rewrite commits), hand-encoded legacy and external details, and a
//! brute-force comparison of every query.

#![allow(dead_code)]

use std::sync::Arc;

use arrow::compute::{concat_batches, filter_record_batch};
use arrow_array::{
    Array, BooleanArray, FixedSizeListArray, Float32Array, Int64Array, RecordBatch, StringArray,
    UInt16Array, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use futures::TryStreamExt;
use refract_core::checksum::FileChecksum;
use refract_core::Result;
use refract_index::{create_index, IndexParams, IndexUse, Query, QueryResult};
use refract_ledger::{FragmentDigest, FragmentDigestExt, Ledger, Mapping, TransitionRecord};
use refract_optimize::fri::RowMapWriter;
use refract_reader::{ChunkCacheMode, FriResolver, FRI_INDEX_NAME, FRI_INDEX_TYPE};
use refract_table::io::{RecordedFile, RelativePath};
use refract_table::transaction::RewriteGroup;
use refract_table::{Dataset, IndexMetadata, Manifest, OpenOptions, Operation, WriteOptions};
use roaring::RoaringTreemap;
use uuid::Uuid;

/// Queries every fixture is checked with (btree on `id`, bitmap on `grp`,
/// ngram on `name`).
pub const FILTERS: &[&str] = &[
    "id = 5",
    "id = 77",
    "id >= 40 AND id < 130",
    "id < 12",
    "id IN (1, 64, 99, 150, 233, 239)",
    "grp = 3",
    "grp IN (0, 6)",
    "contains(name, 'ow1')",
    "contains(name, 'w23')",
];

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("grp", DataType::Int64, false),
        Field::new("name", DataType::Utf8, false),
        Field::new(
            "vec",
            DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), DIM),
            false,
        ),
    ]))
}

/// Vector dimension of the `vec` column.
pub const DIM: i32 = 4;

/// Component `j` of row `id`'s vector (pseudo-random, so distances rarely tie).
pub fn component(id: i64, j: i32) -> f32 {
    let h = (id as u64)
        .wrapping_mul(2_654_435_761)
        .wrapping_add(j as u64 * 97)
        % 10_007;
    h as f32 / 100.0
}

/// Rows `first..first + n`: id, id % 7, "row<id>".
pub fn rows(first: i64, n: i64) -> RecordBatch {
    let ids: Vec<i64> = (first..first + n).collect();
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(ids.clone())),
            Arc::new(Int64Array::from(
                ids.iter().map(|i| i % 7).collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(
                ids.iter().map(|i| format!("row{i}")).collect::<Vec<_>>(),
            )),
            Arc::new(vectors(&ids)),
        ],
    )
    .unwrap()
}

fn vectors(ids: &[i64]) -> FixedSizeListArray {
    let values: Vec<f32> = ids
        .iter()
        .flat_map(|id| (0..DIM).map(move |j| component(*id, j)))
        .collect();
    FixedSizeListArray::new(
        Arc::new(Field::new("item", DataType::Float32, true)),
        DIM,
        Arc::new(Float32Array::from(values)),
        None,
    )
}

/// How the FRI details are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// Inline in the entry.
    Inline,
    /// In `_indices/<uuid>/details.binpb`, at a non-zero offset.
    External,
}

/// A table plus the ledger its FRI entry holds.
pub struct Table {
    pub ds: Dataset,
    pub ledger: Ledger,
    pub storage: Storage,
    /// Raw transitions with a field this build does not know, appended to
    /// the encoded content (they make the history "unsupported").
    pub unknown: Vec<Vec<u8>>,
    /// Write the history as a version-0 entry (one legacy version per
    /// compaction) instead of a tagged one.
    pub legacy: bool,
}

impl Table {
    /// A table of `fragments` × `rows_per_fragment` rows at a fresh memory URI.
    pub async fn new(fragments: usize, rows_per_fragment: i64) -> Table {
        let uri = format!("memory://reader-{}", Uuid::new_v4());
        let mut ds = Dataset::create(&uri, schema(), OpenOptions::default())
            .await
            .unwrap();
        for f in 0..fragments {
            ds.append(
                vec![rows(f as i64 * rows_per_fragment, rows_per_fragment)],
                &WriteOptions::default(),
            )
            .await
            .unwrap();
        }
        Table {
            ds,
            ledger: Ledger::new(),
            storage: Storage::Inline,
            unknown: Vec::new(),
            legacy: false,
        }
    }

    /// Appends `n` rows starting at id `first` as one fragment; returns its id.
    pub async fn append(&mut self, first: i64, n: i64) -> u64 {
        self.ds
            .append(vec![rows(first, n)], &WriteOptions::default())
            .await
            .unwrap();
        self.ds.fragments().last().unwrap().id
    }

    /// Builds a btree on `id`, a bitmap on `grp` and an ngram on `name` over
    /// the current fragments (new segments of existing indices are made with
    /// [`Table::index_fragments`]).
    pub async fn index_all(&mut self) {
        for (name, column, kind) in INDICES {
            self.ds = create_index(&self.ds, name, column, kind, &IndexParams::default())
                .await
                .unwrap();
        }
    }

    /// Adds a segment to each index covering exactly `fragments`.
    pub async fn index_fragments(&mut self, fragments: &[u64]) {
        let registry = refract_index::IndexRegistry::with_builtins();
        let mut new = Vec::new();
        for (name, column, kind) in INDICES {
            let meta = refract_index::manage::build_segment(
                &self.ds,
                registry.get(kind).unwrap(),
                name,
                column,
                fragments,
                &IndexParams::default(),
            )
            .await
            .unwrap();
            new.push(meta);
        }
        self.ds = self
            .ds
            .commit(Operation::CreateIndex {
                new_indices: new,
                removed_index_uuids: vec![],
            })
            .await
            .unwrap();
    }

    /// Deletes rows matching `predicate`.
    pub async fn delete(&mut self, predicate: &str) {
        self.ds.delete(predicate).await.unwrap();
    }

    /// Ordered compaction of the contiguous run `sources` into fragments of
    /// at most `rows_per_destination` rows; returns the destination ids.
    pub async fn compact(&mut self, sources: &[u64], rows_per_destination: u64) -> Vec<u64> {
        let digests = self.source_digests(sources).await;
        let live = self.scan_sources(sources).await;
        let surviving: RoaringTreemap = live.1.iter().copied().collect();
        let new_fragments = if live.0.num_rows() == 0 {
            Vec::new()
        } else {
            self.ds
                .write_fragments(
                    futures::stream::iter(vec![Ok(live.0.clone())]),
                    &WriteOptions {
                        max_rows_per_file: rows_per_destination,
                        ..WriteOptions::default()
                    },
                )
                .await
                .unwrap()
        };
        let first = self.ds.manifest().next_fragment_id();
        let destinations: Vec<FragmentDigest> = new_fragments
            .iter()
            .enumerate()
            .map(|(i, f)| FragmentDigest::new(first + i as u64, f.physical_rows, 0))
            .collect();
        let record = TransitionRecord::new(
            digests,
            destinations.clone(),
            Mapping::OrderedCompaction { surviving },
        )
        .unwrap();
        self.commit_rewrite(sources, new_fragments, Some(record))
            .await;
        destinations.iter().map(|d| d.id).collect()
    }

    /// Stable partition of the contiguous run `sources` into `destinations`
    /// fragments by `label(id)`; every label must occur. Returns the
    /// destination ids in label order.
    pub async fn partition(
        &mut self,
        sources: &[u64],
        destinations: u16,
        label: impl Fn(i64) -> u16,
    ) -> Vec<u64> {
        let digests = self.source_digests(sources).await;
        let map_id = Uuid::new_v4();
        let mut writer = RowMapWriter::create(self.ds.store(), &map_id, u32::from(destinations))
            .await
            .unwrap();
        let mut live_batches = Vec::new();
        let mut live_labels = Vec::new();
        for id in sources {
            let fragment = self.ds.manifest().fragment(*id).unwrap().clone();
            let (batch, addresses) = self.scan_sources(&[*id]).await;
            let ids = batch
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            let mut labels = vec![None; fragment.physical_rows as usize];
            for (row, address) in addresses.iter().enumerate() {
                let l = label(ids.value(row));
                labels[(*address & 0xFFFF_FFFF) as usize] = Some(l);
                live_labels.push(l);
            }
            writer.push(UInt16Array::from(labels)).await.unwrap();
            live_batches.push(batch);
        }
        let written = writer.finish().await.unwrap();
        let all = concat_batches(&schema(), &live_batches).unwrap();
        let mut new_fragments = Vec::new();
        for d in 0..destinations {
            let mask = BooleanArray::from(live_labels.iter().map(|l| *l == d).collect::<Vec<_>>());
            let part = filter_record_batch(&all, &mask).unwrap();
            assert!(part.num_rows() > 0, "label {d} has no rows");
            let mut written = self
                .ds
                .write_fragments(
                    futures::stream::iter(vec![Ok(part)]),
                    &WriteOptions::default(),
                )
                .await
                .unwrap();
            assert_eq!(written.len(), 1);
            new_fragments.push(written.remove(0));
        }
        let first = self.ds.manifest().next_fragment_id();
        let dest_digests: Vec<FragmentDigest> = new_fragments
            .iter()
            .enumerate()
            .map(|(i, f)| FragmentDigest::new(first + i as u64, f.physical_rows, 0))
            .collect();
        assert_eq!(
            written.destination_rows,
            dest_digests
                .iter()
                .map(|d| d.physical_rows)
                .collect::<Vec<_>>()
        );
        let record = TransitionRecord::new(
            digests,
            dest_digests.clone(),
            Mapping::StablePartition {
                map_id,
                map_size_bytes: written.size_bytes,
                map_checksum: Some(written.checksum.clone()),
            },
        )
        .unwrap();
        self.commit_rewrite(sources, new_fragments, Some(record))
            .await;
        dest_digests.iter().map(|d| d.id).collect()
    }

    /// A compaction of `sources` recorded as a transition this build cannot
    /// read (a field from the future): the rows move, the ledger only marks
    /// the history as unsupported.
    pub async fn compact_unknown(&mut self, sources: &[u64]) -> Vec<u64> {
        let live = self.scan_sources(sources).await;
        let new_fragments = self
            .ds
            .write_fragments(
                futures::stream::iter(vec![Ok(live.0.clone())]),
                &WriteOptions::default(),
            )
            .await
            .unwrap();
        let first = self.ds.manifest().next_fragment_id();
        let mut transition = Vec::new();
        for id in sources {
            let f = self.ds.manifest().fragment(*id).unwrap();
            let digest = digest_bytes(*id, f.physical_rows, f.num_deleted_rows());
            field_bytes(&mut transition, 1, &digest);
        }
        for (i, f) in new_fragments.iter().enumerate() {
            field_bytes(
                &mut transition,
                2,
                &digest_bytes(first + i as u64, f.physical_rows, 0),
            );
        }
        field_bytes(&mut transition, 9, b"a mapping from the future");
        self.unknown.push(transition);
        let (entry, _) = self.fri_entry().await;
        let count = new_fragments.len() as u64;
        let sources = sources.to_vec();
        self.publish_raw(move |m| {
            let start = m.fragment_position(sources[0]).unwrap();
            let assigned: Vec<_> = new_fragments
                .into_iter()
                .enumerate()
                .map(|(i, f)| refract_table::Fragment {
                    id: first + i as u64,
                    ..f
                })
                .collect();
            m.fragments.splice(start..start + sources.len(), assigned);
            m.max_fragment_id = Some(first + count - 1);
            m.indices.retain(|i| i.name != FRI_INDEX_NAME);
            m.indices.push(entry);
            m.reader_flags |= refract_ledger::flags::FLAG_FRAGMENT_REUSE_INDEX;
            m.writer_flags |= refract_ledger::flags::FLAG_FRAGMENT_REUSE_INDEX;
        })
        .await;
        (first..first + count).collect()
    }

    async fn source_digests(&self, sources: &[u64]) -> Vec<FragmentDigest> {
        sources
            .iter()
            .map(|id| {
                let f = self.ds.manifest().fragment(*id).unwrap();
                FragmentDigest::new(*id, f.physical_rows, f.num_deleted_rows())
            })
            .collect()
    }

    /// Live rows of `sources` (in order) and their addresses.
    async fn scan_sources(&self, sources: &[u64]) -> (RecordBatch, Vec<u64>) {
        let batch = self
            .ds
            .scan()
            .fragments(sources)
            .with_row_address()
            .try_into_batch()
            .await
            .unwrap();
        let addresses = batch
            .column(schema().fields().len())
            .as_any()
            .downcast_ref::<UInt64Array>()
            .unwrap()
            .values()
            .to_vec();
        let width = schema().fields().len();
        let data = RecordBatch::try_new(schema(), batch.columns()[..width].to_vec()).unwrap();
        (data, addresses)
    }

    /// Commits the rewrite of `sources` with `new_fragments` and a new FRI
    /// entry holding the ledger (plus `record`).
    async fn commit_rewrite(
        &mut self,
        sources: &[u64],
        new_fragments: Vec<refract_table::Fragment>,
        record: Option<TransitionRecord>,
    ) {
        if let Some(record) = record {
            self.ledger.push_transition(record).unwrap();
        }
        let expected_first = self.ds.manifest().next_fragment_id();
        let count = new_fragments.len() as u64;
        for relabel in self.relabel_records(sources, expected_first + count, count) {
            self.ledger.push_transition(relabel).unwrap();
        }
        let (entry, removed) = self.fri_entry().await;
        self.ds = self
            .ds
            .commit(Operation::Rewrite {
                groups: vec![RewriteGroup {
                    old_fragment_ids: sources.to_vec(),
                    new_fragments,
                    surviving_old_addresses: None,
                }],
                new_indices: vec![entry],
                removed_index_uuids: removed,
            })
            .await
            .unwrap();
        let assigned: Vec<u64> = self
            .ds
            .fragments()
            .iter()
            .map(|f| f.id)
            .filter(|id| *id >= expected_first)
            .take(count as usize)
            .collect();
        // The run's outputs come first in list order; relabelled ids follow.
        assert_eq!(
            assigned,
            (expected_first..expected_first + count).collect::<Vec<_>>()
        );
    }

    /// The transitions of the fragments after `sources` that the commit
    /// relabels (ids from `first`, in list order; none when the rewrite
    /// writes nothing or ends the list), one per run of equal index coverage
    /// as the engine records them: every physical row moves, offsets unchanged.
    fn relabel_records(&self, sources: &[u64], first: u64, count: u64) -> Vec<TransitionRecord> {
        let fragments = self.ds.fragments();
        let Some(at) = sources
            .last()
            .and_then(|last| fragments.iter().position(|f| f.id == *last))
        else {
            return Vec::new();
        };
        if count == 0 {
            return Vec::new();
        }
        let coverage = |id: u64| -> Vec<bool> {
            self.ds
                .manifest()
                .indices
                .iter()
                .filter(|index| !index.is_system())
                .map(|index| {
                    index
                        .fragment_bitmap
                        .as_ref()
                        .is_none_or(|bitmap| bitmap.contains(id as u32))
                })
                .collect()
        };
        let mut runs: Vec<Vec<(u64, u64, u64)>> = Vec::new();
        for (fragment, id) in fragments[at + 1..].iter().zip(first..) {
            let entry = (fragment.id, id, fragment.physical_rows);
            match runs.last_mut() {
                Some(run) if coverage(run[run.len() - 1].0) == coverage(fragment.id) => {
                    run.push(entry)
                }
                _ => runs.push(vec![entry]),
            }
        }
        runs.into_iter()
            .map(|run| {
                let mut surviving = RoaringTreemap::new();
                for (old, _, rows) in &run {
                    surviving.insert_range(old << 32..(old << 32) + rows);
                }
                TransitionRecord::new(
                    run.iter()
                        .map(|(old, _, rows)| FragmentDigest::new(*old, *rows, 0))
                        .collect(),
                    run.iter()
                        .map(|(_, new, rows)| FragmentDigest::new(*new, *rows, 0))
                        .collect(),
                    Mapping::OrderedCompaction { surviving },
                )
                .unwrap()
            })
            .collect()
    }

    /// A new FRI entry for the current ledger, and the uuid it replaces.
    pub async fn fri_entry(&self) -> (IndexMetadata, Vec<Uuid>) {
        let uuid = Uuid::new_v4();
        let (content, index_version) = if self.legacy {
            (self.legacy_content(), 0)
        } else {
            let mut content = self.ledger.encode_content().unwrap();
            for raw in &self.unknown {
                field_bytes(&mut content, 2, raw);
            }
            let version = self
                .ledger
                .index_version()
                .max(u32::from(!self.unknown.is_empty()));
            (content, version)
        };
        let mut files = Vec::new();
        let details = match self.storage {
            Storage::Inline => inline_details(&content),
            Storage::External => {
                let prefix = b"some leading bytes";
                let path = format!("_indices/{uuid}/details.binpb");
                let mut file = prefix.to_vec();
                file.extend_from_slice(&content);
                // Recorded the way the engine's writer records its external files.
                files.push(RecordedFile {
                    path: RelativePath::parse(&path).unwrap(),
                    size_bytes: file.len() as u64,
                    checksum: FileChecksum::of(&file),
                });
                self.ds
                    .store()
                    .put(&RelativePath::parse(&path).unwrap(), file.into())
                    .await
                    .unwrap();
                external_details(&path, prefix.len() as u64, content.len() as u64)
            }
        };
        let mut details = details;
        self.append_row_map_checksums(&mut details);
        let entry = IndexMetadata {
            uuid,
            name: FRI_INDEX_NAME.to_string(),
            fields: vec![],
            fragment_bitmap: None,
            index_type: FRI_INDEX_TYPE.to_string(),
            details,
            index_version,
            dataset_version: self.ds.version(),
            files,
            lance: Default::default(),
        };
        let removed = refract_reader::fri_uuid(self.ds.manifest())
            .into_iter()
            .collect();
        (entry, removed)
    }

    /// Records the ledger's row-map checksums in the details envelope, as
    /// the engine's writer does.
    fn append_row_map_checksums(&self, details: &mut Vec<u8>) {
        use refract_ledger::proto::ROW_MAP_CHECKSUMS_FIELD;
        // A `RowMapChecksums` record of `RowMapChecksum { map_id, block_bytes, crc32c }`.
        let mut record = Vec::new();
        for transition in self.ledger.transitions() {
            if let Mapping::StablePartition {
                map_id,
                map_checksum: Some(checksum),
                ..
            } = transition.mapping()
            {
                let mut map = Vec::new();
                field_bytes(&mut map, 1, map_id.hyphenated().to_string().as_bytes());
                field_varint(&mut map, 2, checksum.block_bytes());
                field_bytes(&mut map, 3, &checksum.blocks_le_bytes());
                field_bytes(&mut record, 1, &map);
            }
        }
        if !record.is_empty() {
            field_bytes(details, u64::from(ROW_MAP_CHECKSUMS_FIELD), &record);
        }
    }

    /// The ledger's compactions as legacy versions (one per transition).
    fn legacy_content(&self) -> Vec<u8> {
        let mut content = Vec::new();
        for record in self.ledger.transitions() {
            let Mapping::OrderedCompaction { surviving } = record.mapping() else {
                panic!("legacy histories hold compactions only");
            };
            let group = legacy_group(surviving, record.sources(), record.destinations());
            field_bytes(
                &mut content,
                1,
                &legacy_version(self.ds.version(), &[group]),
            );
        }
        content
    }

    /// Publishes the next version with `edit` applied to the current
    /// manifest, bypassing the commit path and its write gate: this is how a
    /// newer (or broken) writer's manifest reaches this reader.
    pub async fn publish_raw(&mut self, edit: impl FnOnce(&mut Manifest)) {
        let mut manifest = (**self.ds.manifest()).clone();
        edit(&mut manifest);
        manifest.version += 1;
        manifest.transaction = None;
        let bytes = manifest.encode().unwrap();
        let path = refract_table::io::manifest_path(manifest.version);
        assert!(self.ds.store().put_if_absent(&path, bytes).await.unwrap());
        self.ds = self.ds.checkout_latest().await.unwrap();
    }

    /// Replaces the FRI entry with `entry`, bypassing the write gate.
    pub async fn install_raw(&mut self, entry: IndexMetadata) {
        self.publish_raw(|m| {
            m.indices.retain(|i| i.name != FRI_INDEX_NAME);
            m.indices.push(entry);
        })
        .await;
    }

    /// Replaces the FRI entry with `entry` (no data change).
    pub async fn install_entry(&mut self, entry: IndexMetadata) {
        let removed = refract_reader::fri_uuid(self.ds.manifest())
            .into_iter()
            .collect();
        self.ds = self
            .ds
            .commit(Operation::CreateIndex {
                new_indices: vec![entry],
                removed_index_uuids: removed,
            })
            .await
            .unwrap();
    }
}

/// (name, column, type) of the fixture indices.
pub const INDICES: [(&str, &str, &str); 3] = [
    ("id_idx", "id", "btree"),
    ("grp_idx", "grp", "bitmap"),
    ("name_idx", "name", "ngram"),
];

/// Runs `filter` through the FRI resolver and as a brute-force scan, asserts
/// identical rows (values and addresses, in order), returns the FRI result.
pub async fn check(ds: &Dataset, filter: &str, mode: ChunkCacheMode) -> QueryResult {
    // The index path is forced: these checks are about translated answers.
    let fri = Query::new(ds)
        .filter(filter)
        .unwrap()
        .with_resolver(Arc::new(FriResolver::with_mode(mode)))
        .index_use(IndexUse::Always)
        .execute()
        .await
        .unwrap_or_else(|e| panic!("{filter}: {e}"));
    let brute = Query::new(ds)
        .filter(filter)
        .unwrap()
        .use_index(false)
        .execute()
        .await
        .unwrap();
    assert_eq!(fri.batch, brute.batch, "query {filter} differs from a scan");
    fri
}

/// [`check`] over every filter of [`FILTERS`]; returns the explains.
pub async fn check_all(ds: &Dataset) -> Vec<QueryResult> {
    let mut out = Vec::new();
    for filter in FILTERS {
        out.push(check(ds, filter, ChunkCacheMode::Lazy).await);
    }
    out
}

/// Ids of every row a query returned.
pub fn ids_of(result: &QueryResult) -> Vec<i64> {
    result
        .batch
        .column_by_name("id")
        .unwrap()
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .values()
        .to_vec()
}

/// Every stored segment uuid of index `name`.
pub fn segments(ds: &Dataset, name: &str) -> Vec<IndexMetadata> {
    ds.manifest()
        .indices
        .iter()
        .filter(|m| m.name == name)
        .cloned()
        .collect()
}

// ---- hand-encoded protobuf (legacy content, external references) ----

pub fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn field_bytes(out: &mut Vec<u8>, number: u64, bytes: &[u8]) {
    varint(out, (number << 3) | 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

pub fn field_varint(out: &mut Vec<u8>, number: u64, v: u64) {
    varint(out, number << 3);
    varint(out, v);
}

pub fn digest_bytes(id: u64, physical: u64, deleted: u64) -> Vec<u8> {
    let mut out = Vec::new();
    field_varint(&mut out, 1, id);
    field_varint(&mut out, 2, physical);
    field_varint(&mut out, 3, deleted);
    out
}

/// `FragmentReuseIndexDetails{inline}`.
pub fn inline_details(content: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    field_bytes(&mut out, 1, content);
    out
}

/// The stored form of a dataset-relative path under `_indices/<uuid>/`:
/// Lance records it relative to the index directory. Other paths are kept
/// as they are (hostile ones included).
pub fn relative_to_index_dir(path: &str) -> &str {
    match path.strip_prefix("_indices/") {
        Some(rest) => rest.split_once('/').map_or(path, |(_, tail)| tail),
        None => path,
    }
}

/// `FragmentReuseIndexDetails{external{path, offset, size}}`, `path`
/// dataset-relative.
pub fn external_details(path: &str, offset: u64, size: u64) -> Vec<u8> {
    let mut file = Vec::new();
    field_bytes(&mut file, 1, relative_to_index_dir(path).as_bytes());
    field_varint(&mut file, 2, offset);
    field_varint(&mut file, 3, size);
    let mut out = Vec::new();
    field_bytes(&mut out, 2, &file);
    out
}

/// A legacy `Group`.
pub fn legacy_group(
    surviving: &RoaringTreemap,
    old: &[FragmentDigest],
    new: &[FragmentDigest],
) -> Vec<u8> {
    let mut bitmap = Vec::new();
    surviving.serialize_into(&mut bitmap).unwrap();
    let mut out = Vec::new();
    field_bytes(&mut out, 1, &bitmap);
    for d in old {
        field_bytes(
            &mut out,
            2,
            &digest_bytes(d.id, d.physical_rows, d.num_deleted_rows),
        );
    }
    for d in new {
        field_bytes(
            &mut out,
            3,
            &digest_bytes(d.id, d.physical_rows, d.num_deleted_rows),
        );
    }
    out
}

/// A legacy `Version` of `groups`.
pub fn legacy_version(dataset_version: u64, groups: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    field_varint(&mut out, 1, dataset_version);
    for g in groups {
        field_bytes(&mut out, 3, g);
    }
    out
}

/// Collects a stream into batches.
pub async fn collect(
    stream: futures::stream::BoxStream<'static, Result<RecordBatch>>,
) -> Vec<RecordBatch> {
    stream.try_collect().await.unwrap()
}

/// `_rowaddr` values of a query result.
pub fn addresses_of(result: &QueryResult) -> Vec<u64> {
    result
        .batch
        .column_by_name(refract_table::ROW_ADDRESS_COLUMN)
        .unwrap()
        .as_any()
        .downcast_ref::<UInt64Array>()
        .unwrap()
        .values()
        .to_vec()
}

pub fn assert_len<T: Array>(_: &T) {}
