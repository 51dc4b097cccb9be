//! Hostile FRI external content, through a dataset: the entry's external file
//! is truncated, or the entry's offset / size lie. An indexed query through
//! the FRI resolver must fail with a clear error: Corrupt, also for a
//! path outside the FRI's directory (a shifted or shortened range happens to
//! be caught by the ledger's own validation; none may yield rows).
//! Maintenance loads the ledger through `refract_table`'s own path, which
//! must report the same. Everything that does not need the ledger keeps
//! working: scans, brute-force queries, metadata-only statistics.

mod common;

use std::sync::Arc;

use common::*;
use refract_core::Error;
use refract_index::Query;
use refract_reader::{fri_statistics, fri_uuid, ChunkCacheMode, FriContent, FriResolver};
use refract_table::io::RelativePath;
use refract_table::Dataset;
use rstest::rstest;

/// Bytes before the content in the fixture's external file.
const PREFIX: u64 = b"some leading bytes".len() as u64;
/// The filter checked (the btree on `id`).
const FILTER: &str = "id >= 12 AND id < 47";

/// How the external content lies.
#[derive(Debug, Clone, Copy)]
enum Lie {
    /// The file loses its last `n` bytes (the entry is unchanged).
    TruncateFile(u64),
    /// The file is replaced by an empty one.
    EmptyFile,
    /// The recorded size grows by `n`.
    SizeLarger(u64),
    /// The recorded size shrinks by `n`.
    SizeSmaller(u64),
    /// The recorded offset moves by `n` (same size).
    OffsetShift(i64),
    /// The offset points past the end of the file.
    OffsetPastEnd,
    /// offset + size overflows u64.
    Overflow,
    /// A size above the 4 GiB limit.
    Oversized,
    /// The path leaves the FRI's directory.
    PathOutside,
}

/// A table whose FRI (external content) records one compaction, and the path,
/// offset and size of its content.
async fn table() -> (Table, String, u64) {
    let mut t = Table::new(3, 20).await;
    t.storage = Storage::External;
    t.index_all().await;
    t.delete("id % 5 = 2").await;
    t.compact(&[1, 2], 100).await;
    let uuid = fri_uuid(t.ds.manifest()).unwrap();
    let path = format!("_indices/{uuid}/details.binpb");
    let FriContent::External { .. } = fri_statistics(t.ds.manifest()).unwrap().content else {
        panic!("the fixture stores its content externally");
    };
    let size = t.ledger.encode_content().unwrap().len() as u64;
    (t, path, size)
}

/// Replaces the entry with one recording `offset` / `size` / `path`.
async fn install(t: &mut Table, path: &str, offset: u64, size: u64) {
    let (mut entry, _) = t.fri_entry().await;
    // Keep the uuid of the entry's own directory valid for `path`.
    entry.uuid = fri_uuid(t.ds.manifest()).unwrap();
    entry.details = external_details(path, offset, size);
    t.install_raw(entry).await;
}

async fn apply(t: &mut Table, path: &str, size: u64, lie: Lie) {
    let relative = RelativePath::parse(path).unwrap();
    let store = t.ds.store().clone();
    match lie {
        Lie::TruncateFile(n) => {
            let bytes = store.get(&relative).await.unwrap();
            let keep = bytes.len() - n as usize;
            store.put(&relative, bytes.slice(..keep)).await.unwrap();
        }
        Lie::EmptyFile => store.put(&relative, Vec::new().into()).await.unwrap(),
        Lie::SizeLarger(n) => install(t, path, PREFIX, size + n).await,
        Lie::SizeSmaller(n) => install(t, path, PREFIX, size - n).await,
        Lie::OffsetShift(n) => install(t, path, PREFIX.checked_add_signed(n).unwrap(), size).await,
        Lie::OffsetPastEnd => install(t, path, PREFIX + size + 100, size).await,
        Lie::Overflow => install(t, path, u64::MAX - 4, size).await,
        Lie::Oversized => install(t, path, PREFIX, (1 << 32) + 1).await,
        Lie::PathOutside => install(t, "../../data/elsewhere.binpb", PREFIX, size).await,
    }
}

async fn fri_query(ds: &Dataset) -> refract_core::Result<Vec<i64>> {
    let result = Query::new(ds)
        .filter(FILTER)?
        .with_resolver(Arc::new(FriResolver::with_mode(ChunkCacheMode::Lazy)))
        .execute()
        .await?;
    let mut ids = ids_of(&result);
    ids.sort_unstable();
    Ok(ids)
}

async fn brute_force(ds: &Dataset) -> Vec<i64> {
    let result = Query::new(ds)
        .filter(FILTER)
        .unwrap()
        .use_index(false)
        .execute()
        .await
        .unwrap();
    let mut ids = ids_of(&result);
    ids.sort_unstable();
    ids
}

/// The rows every check expects: ids 0..60 without `id % 5 = 2`.
fn live_ids() -> Vec<i64> {
    (0..60).filter(|id| id % 5 != 2).collect()
}

/// A fresh handle on the latest version (new session: nothing cached).
async fn reopen(t: &Table) -> Dataset {
    Dataset::open(t.ds.uri()).await.unwrap()
}

#[rstest]
#[case::truncated_by_one(Lie::TruncateFile(1))]
#[case::truncated_by_half(Lie::TruncateFile(40))]
#[case::empty_file(Lie::EmptyFile)]
#[case::size_one_larger(Lie::SizeLarger(1))]
#[case::size_much_larger(Lie::SizeLarger(1 << 20))]
#[case::size_one_smaller(Lie::SizeSmaller(1))]
#[case::size_half(Lie::SizeSmaller(30))]
#[case::offset_one_later(Lie::OffsetShift(1))]
#[case::offset_one_earlier(Lie::OffsetShift(-1))]
#[case::offset_past_end(Lie::OffsetPastEnd)]
#[case::offset_overflow(Lie::Overflow)]
#[case::oversized(Lie::Oversized)]
#[case::path_outside(Lie::PathOutside)]
#[tokio::test]
async fn lying_external_content_is_an_error_and_the_table_stays_readable(#[case] lie: Lie) {
    let (mut t, path, size) = table().await;
    assert_eq!(fri_query(&t.ds).await.unwrap(), brute_force(&t.ds).await);
    apply(&mut t, &path, size, lie).await;
    let ds = reopen(&t).await;
    match fri_query(&ds).await {
        Err(Error::Corrupt { .. }) => {}
        Err(err) => panic!("{lie:?}: unclear error {err:?}"),
        Ok(ids) => panic!("{lie:?}: the lie went unnoticed ({} rows)", ids.len()),
    }
    // The writers' path (maintenance loads the ledger the same way).
    match refract_table::commit::fri_entry::load_ledger(&ds).await {
        Err(Error::Corrupt { .. }) => {}
        Err(err) => panic!("{lie:?}: unclear error loading the ledger {err:?}"),
        Ok(_) => panic!("{lie:?}: the ledger loaded"),
    }
    // Nothing that does not need the ledger is affected.
    let scanned = ds
        .scan()
        .project(&["id"])
        .try_into_batch()
        .await
        .unwrap_or_else(|e| panic!("{lie:?}: scan failed: {e}"));
    let scanned: Vec<i64> = scanned
        .column(0)
        .as_any()
        .downcast_ref::<arrow_array::Int64Array>()
        .unwrap()
        .values()
        .to_vec();
    assert_eq!(scanned, live_ids(), "{lie:?}");
    let expected: Vec<i64> = live_ids()
        .into_iter()
        .filter(|id| (12..47).contains(id))
        .collect();
    assert_eq!(brute_force(&ds).await, expected, "{lie:?}");
    let stats = fri_statistics(ds.manifest()).unwrap();
    assert!(
        matches!(
            stats.content,
            FriContent::External { .. } | FriContent::Unreadable { .. }
        ),
        "{lie:?}: {stats:?}"
    );
}

/// A lie that is caught before any I/O reads nothing from the FRI directory.
#[rstest]
#[case::offset_overflow(Lie::Overflow)]
#[case::oversized(Lie::Oversized)]
#[case::path_outside(Lie::PathOutside)]
#[tokio::test]
async fn impossible_ranges_and_paths_are_refused_before_reading(#[case] lie: Lie) {
    let (mut t, path, size) = table().await;
    apply(&mut t, &path, size, lie).await;
    let ds = reopen(&t).await;
    ds.store().reset_stats();
    fri_query(&ds).await.unwrap_err();
    assert_eq!(ds.store().stats().requests_under("_indices"), 0, "{lie:?}");
}

/// Every flipped bit of the external file (spread over the whole file): the
/// FRI query and the writers' ledger load either fail `Corrupt` naming the
/// file or see exactly the recorded ledger; never other rows.
#[tokio::test]
async fn flipped_bits_in_external_content_are_detected() {
    let (t, path, _) = table().await;
    let expected = fri_query(&t.ds).await.unwrap();
    let relative = RelativePath::parse(&path).unwrap();
    let store = t.ds.store().clone();
    let original = store.get(&relative).await.unwrap();
    let bits = original.len() * 8;
    let mut corrupt = 0;
    for bit in (0..bits).step_by((bits / 400).max(1)) {
        let mut damaged = original.to_vec();
        damaged[bit / 8] ^= 1 << (bit % 8);
        store.put(&relative, damaged.into()).await.unwrap();
        let ds = reopen(&t).await;
        for outcome in [
            fri_query(&ds).await.map(Some),
            refract_table::commit::fri_entry::load_ledger(&ds)
                .await
                .map(|_| None),
        ] {
            match outcome {
                Ok(Some(ids)) => assert_eq!(ids, expected, "bit {bit}"),
                Ok(None) => {}
                Err(Error::Corrupt { what, message }) => {
                    assert!(
                        what.contains(&path) || message.contains(&path),
                        "bit {bit}: {what}: {message}"
                    );
                    corrupt += 1;
                }
                Err(err) => panic!("bit {bit}: not Corrupt: {err}"),
            }
        }
    }
    store.put(&relative, original).await.unwrap();
    // The file is one checksum block: every flip is caught by both readers.
    assert_eq!(corrupt, 2 * bits.div_ceil((bits / 400).max(1)));
}
