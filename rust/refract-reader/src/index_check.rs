//! Deep verification: every user index segment compared, entry for entry,
//! with the data of the fragments it serves.
//!
//! A segment's entries (see [`IndexEntries`]) are read from its files,
//! translated to current addresses the way queries translate them (through
//! the FRI when the snapshot has one) and kept when they fall on a live row
//! of a fragment the segment serves. The data of those fragments is scanned
//! and the segment's type says which entries it implies. The two multisets
//! are compared per fragment by fingerprint — a count and a wrapping sum of
//! a 128-bit hash of each (key, address) — so memory stays one small tally
//! per fragment whatever the table's size.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::row::{RowConverter, SortField};
use arrow_array::ArrayRef;
use arrow_schema::DataType;
use async_trait::async_trait;
use futures::TryStreamExt;
use refract_core::deletion::DeletionVector;
use refract_core::{Error, Result};
use refract_index::manage::{index_context, single_field, user_segments};
use refract_index::translate::BatchTranslator;
use refract_index::{EntrySink, IndexEntries, IndexRegistry, IndexSegmentReader, ResolvedSegment};
use refract_table::io::index_dir;
use refract_table::references::FileKind;
use refract_table::{
    Dataset, IndexDataReport, IndexMetadata, UncheckedSegment, VerifyProblem, VerifyReport,
};
use roaring::RoaringBitmap;

use crate::resolver::FriReader;
use crate::rowmap::ChunkCacheMode;

/// Progress of a deep check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexCheckProgress {
    /// Segments compared (or given up on) so far.
    pub segments_done: u64,
    /// Segments to compare.
    pub segments_total: u64,
    /// Entries the data implied so far.
    pub entries_checked: u64,
}

/// Compares every user index segment of `dataset` that serves a fragment
/// with the data of the fragments it serves, and adds the outcome to
/// `report`: the counts in [`VerifyReport::index_data`], each mismatch (or
/// unreadable segment) as a problem named by the segment's directory.
/// Segments of types `registry` does not know, or that cannot list their
/// entries, are listed as unchecked.
///
/// # Errors
/// Only when the snapshot's FRI cannot be read (the segments then cannot be
/// resolved at all) or the data cannot be scanned.
pub async fn verify_index_data(
    dataset: &Dataset,
    registry: &IndexRegistry,
    report: &mut VerifyReport,
    progress: Option<&(dyn Fn(IndexCheckProgress) + Send + Sync)>,
) -> Result<()> {
    let reader = FriReader::open(dataset, ChunkCacheMode::Lazy).await?;
    let mut by_name: BTreeMap<&str, Vec<IndexMetadata>> = BTreeMap::new();
    for meta in user_segments(&dataset.manifest().indices) {
        by_name.entry(&meta.name).or_default().push(meta.clone());
    }
    let mut resolved = Vec::new();
    for segments in by_name.values() {
        resolved.extend(
            reader
                .resolve(segments)
                .await?
                .into_iter()
                .filter(|r| !r.coverage.is_empty()),
        );
    }
    let mut counts = IndexDataReport::default();
    let mut progress_now = IndexCheckProgress {
        segments_done: 0,
        segments_total: resolved.len() as u64,
        entries_checked: 0,
    };
    // Files already found damaged: a segment that fails on one of them is
    // not blamed for it again.
    let damaged: Vec<String> = report.problems.iter().map(|p| p.file.clone()).collect();
    for segment in &resolved {
        let dir = index_dir(&segment.meta.uuid).to_string();
        let unchecked = |reason: String| UncheckedSegment {
            segment: dir.clone(),
            reason,
        };
        match check_segment(dataset, registry, segment).await {
            Ok(Outcome::Matched(entries)) => {
                counts.segments_checked += 1;
                counts.entries_checked += entries;
            }
            Ok(Outcome::Unchecked(reason)) => counts.segments_unchecked.push(unchecked(reason)),
            Ok(Outcome::Differs(messages)) => {
                counts.segments_checked += 1;
                report
                    .problems
                    .extend(messages.into_iter().map(|error| problem(&dir, error)));
            }
            Err(err) => {
                let error = err.to_string();
                match damaged.iter().find(|file| error.contains(file.as_str())) {
                    Some(file) => counts
                        .segments_unchecked
                        .push(unchecked(format!("reads {file}, which is damaged"))),
                    None => report.problems.push(problem(&dir, error)),
                }
            }
        }
        progress_now.segments_done += 1;
        progress_now.entries_checked = counts.entries_checked;
        if let Some(progress) = progress {
            progress(progress_now);
        }
    }
    report.problems.sort_by(|a, b| a.file.cmp(&b.file));
    report.index_data = Some(counts);
    Ok(())
}

fn problem(dir: &str, error: String) -> VerifyProblem {
    VerifyProblem {
        file: dir.to_string(),
        kind: Some(FileKind::IndexSegment),
        error,
    }
}

/// How one segment compared.
enum Outcome {
    /// Same entries as the data; how many.
    Matched(u64),
    /// The fragments where they differ, one line each.
    Differs(Vec<String>),
    /// Not comparable here; why.
    Unchecked(String),
}

async fn check_segment(
    dataset: &Dataset,
    registry: &IndexRegistry,
    segment: &ResolvedSegment,
) -> Result<Outcome> {
    let Ok(registered) = registry.get(&segment.meta.index_type) else {
        return Ok(Outcome::Unchecked(format!(
            "index type '{}' is not registered",
            segment.meta.index_type
        )));
    };
    let opened = registered
        .open(&index_context(dataset), &segment.meta)
        .await?;
    let mut deletions = BTreeMap::new();
    for fragment in segment.coverage.iter() {
        let Some(meta) = dataset.manifest().fragment(u64::from(fragment)) else {
            continue;
        };
        deletions.insert(fragment, dataset.deletion_vector(meta).await?);
    }
    let mut encoder = KeyEncoder::default();
    let mut stored = StoredSide {
        translator: segment.translator.as_deref(),
        coverage: &segment.coverage,
        deletions: &deletions,
        encoder: &mut encoder,
        tally: Tallies::default(),
        translated: Vec::new(),
    };
    let cannot_list = || {
        Outcome::Unchecked(format!(
            "index type '{}' cannot list its entries",
            segment.meta.index_type
        ))
    };
    if !opened.visit_entries(&mut stored).await? {
        return Ok(cannot_list());
    }
    let stored = stored.tally;
    let Some(implied) = implied_tallies(dataset, segment, opened.as_ref(), &mut encoder).await?
    else {
        return Ok(cannot_list());
    };
    let mut differences = Vec::new();
    let fragments: std::collections::BTreeSet<u32> =
        stored.0.keys().chain(implied.0.keys()).copied().collect();
    for fragment in fragments {
        let held = stored.0.get(&fragment).copied().unwrap_or_default();
        let wanted = implied.0.get(&fragment).copied().unwrap_or_default();
        if held == wanted {
            continue;
        }
        let which = format!(
            "index '{}' ({}) does not match fragment {fragment}",
            segment.meta.name, segment.meta.index_type
        );
        differences.push(if held.entries == wanted.entries {
            format!(
                "{which}: it holds {} entries for the fragment, as the data implies, but not the same ones",
                held.entries
            )
        } else {
            format!(
                "{which}: it holds {} entries for the fragment, the data implies {}",
                held.entries, wanted.entries
            )
        });
    }
    if differences.is_empty() {
        let entries = implied.0.values().map(|t| t.entries).sum();
        Ok(Outcome::Matched(entries))
    } else {
        Ok(Outcome::Differs(differences))
    }
}

/// The entries the data of the fragments `segment` serves implies; `None`
/// when the type cannot tell.
async fn implied_tallies(
    dataset: &Dataset,
    segment: &ResolvedSegment,
    opened: &dyn IndexSegmentReader,
    encoder: &mut KeyEncoder,
) -> Result<Option<Tallies>> {
    let column = single_field(&segment.meta)?;
    let fragments: Vec<u64> = dataset
        .fragments()
        .iter()
        .map(|f| f.id)
        .filter(|id| u32::try_from(*id).is_ok_and(|id| segment.coverage.contains(id)))
        .collect();
    let mut tally = Tallies::default();
    let mut batches = dataset
        .scan()
        .project(&[column])
        .with_row_address()
        .fragments(&fragments)
        .try_into_stream()
        .await?;
    while let Some(batch) = batches.try_next().await? {
        let Some(entries) = opened.expected_entries(&batch)? else {
            return Ok(None);
        };
        let keys = encoder.encode(&entries.keys)?;
        for (row, address) in entries.addresses.values().iter().enumerate() {
            tally.add(keys.row(row).as_ref(), *address);
        }
    }
    Ok(Some(tally))
}

/// The segment's side: entries translated, filtered to live rows of served
/// fragments, tallied.
struct StoredSide<'a> {
    translator: Option<&'a dyn BatchTranslator>,
    coverage: &'a RoaringBitmap,
    deletions: &'a BTreeMap<u32, Arc<DeletionVector>>,
    encoder: &'a mut KeyEncoder,
    tally: Tallies,
    translated: Vec<Option<u64>>,
}

impl StoredSide<'_> {
    /// The current address of a stored one, when it is a live row the
    /// segment serves.
    fn served(&self, address: u64) -> Option<u64> {
        let fragment = u32::try_from(address >> 32).ok()?;
        let deleted = self.deletions.get(&fragment)?;
        // The low 32 bits are the row offset.
        (!deleted.bitmap().contains(address as u32)).then_some(address)
    }
}

#[async_trait]
impl EntrySink for StoredSide<'_> {
    async fn accept(&mut self, entries: IndexEntries) -> Result<()> {
        let stored = entries.addresses.values();
        match self.translator {
            Some(translator) => {
                translator
                    .translate_batch(stored, &mut self.translated)
                    .await?;
                if self.translated.len() != stored.len() {
                    return Err(Error::invalid_input(format!(
                        "translator returned {} results for {} addresses",
                        self.translated.len(),
                        stored.len()
                    )));
                }
            }
            None => {
                self.translated.clear();
                self.translated.extend(stored.iter().copied().map(Some));
            }
        }
        let keys = self.encoder.encode(&entries.keys)?;
        for (row, current) in self.translated.iter().enumerate() {
            let Some(current) = current.and_then(|a| self.served(a)) else {
                continue;
            };
            debug_assert!(self.coverage.contains((current >> 32) as u32));
            self.tally.add(keys.row(row).as_ref(), current);
        }
        Ok(())
    }
}

/// Key columns to comparable bytes: one row format for both sides, built
/// from the first key types seen; later keys of other types are cast to them.
#[derive(Default)]
struct KeyEncoder {
    format: Option<(Vec<DataType>, RowConverter)>,
}

impl KeyEncoder {
    fn encode(&mut self, keys: &[ArrayRef]) -> Result<arrow::row::Rows> {
        if self.format.is_none() {
            let types: Vec<DataType> = keys.iter().map(|k| k.data_type().clone()).collect();
            let converter =
                RowConverter::new(types.iter().map(|t| SortField::new(t.clone())).collect())
                    .map_err(|e| Error::external("encoding index keys", e))?;
            self.format = Some((types, converter));
        }
        let Some((types, converter)) = &self.format else {
            // Set just above.
            return Err(Error::invalid_input("index key format missing"));
        };
        if types.len() != keys.len() {
            return Err(Error::invalid_input(format!(
                "index entries have {} key columns, earlier ones {}",
                keys.len(),
                types.len()
            )));
        }
        let keys = keys
            .iter()
            .zip(types)
            .map(|(k, t)| {
                if k.data_type() == t {
                    Ok(k.clone())
                } else {
                    arrow::compute::cast(k, t).map_err(|e| Error::external("casting index keys", e))
                }
            })
            .collect::<Result<Vec<_>>>()?;
        converter
            .convert_columns(&keys)
            .map_err(|e| Error::external("encoding index keys", e))
    }
}

/// Entries of one fragment: how many, and the wrapping sum of their hashes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Tally {
    entries: u64,
    sum: u128,
}

/// Tallies by fragment id.
#[derive(Debug, Default)]
struct Tallies(BTreeMap<u32, Tally>);

impl Tallies {
    fn add(&mut self, key: &[u8], address: u64) {
        let mut hasher = blake3::Hasher::new();
        hasher.update(key);
        hasher.update(&address.to_le_bytes());
        let digest = hasher.finalize();
        let mut first = [0u8; 16];
        first.copy_from_slice(&digest.as_bytes()[..16]);
        let tally = self.0.entry((address >> 32) as u32).or_default();
        tally.entries += 1;
        tally.sum = tally.sum.wrapping_add(u128::from_le_bytes(first));
    }
}
