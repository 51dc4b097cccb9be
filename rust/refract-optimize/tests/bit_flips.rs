//! Bit-flip sweeps: single flipped bits in every kind of stored file either
//! leave results identical or make every operation that reads the file fail
//! with `Corrupt` naming it. Zero silent differences, zero panics, and a
//! failed compaction commits nothing.
//!
//! The default run flips a bounded number of bits per file kind, spread over
//! the whole file; `REFRACT_LONG_SWEEPS=1` flips every bit of a sample many
//! times larger.

mod support;
use support::remap as common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::RecordBatch;
use bytes::Bytes;
use common::{add_index, ids, INDICES};
use refract_core::Error;
use refract_index::{IndexUse, Query};
use refract_optimize::compaction::{compact_files, CompactionOptions};
use refract_optimize::remap::{remap_indices, RemapOptions};
use refract_reader::{ChunkCacheMode, FriResolver};
use refract_table::testing::{sample_rows, sample_schema, snapshot};
use refract_table::{Dataset, OpenOptions, WriteOptions};
use support::fri::dataset_with_rows;

/// Flips per file kind in the default run (and with `REFRACT_LONG_SWEEPS`).
fn flips_per_kind() -> usize {
    if std::env::var_os("REFRACT_LONG_SWEEPS").is_some() {
        4_000
    } else {
        300
    }
}

/// What one flip did.
#[derive(Debug, Default)]
struct Tally {
    identical: usize,
    corrupt: usize,
}

/// A dataset of four 500-row fragments with deletions in two, on disk.
async fn fixture(dir: &Path) -> (String, Dataset) {
    let uri = dir.join("table").to_string_lossy().to_string();
    let mut dataset = Dataset::create(&uri, sample_schema(), OpenOptions::default())
        .await
        .unwrap();
    let options = WriteOptions {
        max_rows_per_file: 500,
        ..WriteOptions::default()
    };
    dataset
        .append(vec![sample_rows(0, 2_000)], &options)
        .await
        .unwrap();
    dataset.delete("id % 7 = 3 AND id < 1000").await.unwrap();
    (uri, dataset)
}

/// Every position to flip in a file of `len` bytes: `count` bits spread
/// evenly over the file (each byte gets a different bit).
fn flip_positions(len: usize, count: usize) -> Vec<(usize, u8)> {
    let bits = len * 8;
    let step = (bits / count.max(1)).max(1);
    (0..bits)
        .step_by(step)
        .map(|bit| (bit / 8, (bit % 8) as u8))
        .collect()
}

/// Runs `check` on the dataset at `uri` with one bit of `file` flipped at a
/// time; restores the file after each flip.
async fn sweep<F, Fut>(file: &Path, name: &str, mut check: F) -> Tally
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    let original = std::fs::read(file).unwrap();
    let mut tally = Tally::default();
    for (at, bit) in flip_positions(original.len(), flips_per_kind()) {
        let mut damaged = original.clone();
        damaged[at] ^= 1 << bit;
        std::fs::write(file, &damaged).unwrap();
        match check().await {
            Ok(()) => tally.identical += 1,
            Err(Error::Corrupt { what, message }) => {
                assert!(
                    what.contains(name) || message.contains(name),
                    "flip of bit {bit} at byte {at} of {name}: Corrupt does not name the file: {what}: {message}"
                );
                tally.corrupt += 1;
            }
            Err(other) => panic!("flip of bit {bit} at byte {at} of {name}: not Corrupt: {other}"),
        }
        std::fs::write(file, &original).unwrap();
    }
    tally
}

/// The scan of a freshly opened dataset (no cache from before the flip):
/// identical to `expected` or an error. A different answer fails the test.
async fn scan_matches(uri: &str, expected: &RecordBatch) -> Result<(), Error> {
    let dataset = Dataset::open(uri).await?;
    let rows = snapshot(&dataset).await?;
    assert_eq!(&rows, expected, "a damaged file changed the scan silently");
    Ok(())
}

/// Compaction of a freshly opened dataset either fails and commits nothing,
/// or succeeds with exactly the expected rows.
async fn compaction_matches(uri: &str, expected: &RecordBatch, version: u64) -> Result<(), Error> {
    let mut dataset = Dataset::open(uri).await?;
    let options = CompactionOptions {
        target_rows_per_fragment: 10_000,
        ..CompactionOptions::default()
    };
    let outcome = compact_files(&mut dataset, &options, None).await;
    let latest = Dataset::open(uri).await;
    match outcome {
        Ok(_) => {
            let rows = snapshot(&dataset).await?;
            assert_eq!(&rows, expected, "compaction copied damaged values");
            Ok(())
        }
        Err(err) => {
            // Nothing was committed.
            if let Ok(latest) = latest {
                assert_eq!(latest.version(), version, "a failed compaction committed");
            }
            Err(err)
        }
    }
}

fn data_files(dataset: &Dataset, root: &Path) -> Vec<(PathBuf, String)> {
    dataset
        .fragments()
        .iter()
        .flat_map(|f| &f.files)
        .map(|f| (root.join(f.path.as_str()), f.path.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipped_bits_in_data_files_never_change_a_scan_or_a_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let (uri, dataset) = fixture(dir.path()).await;
    let expected = snapshot(&dataset).await.unwrap();
    let root = dir.path().join("table");
    let files = data_files(&dataset, &root);
    // Fragment 1 has deletions (its rows are decoded and re-encoded);
    // fragments 2 and 3 have none (their pages are copied as they are).
    for index in [1, 3] {
        let (file, name) = &files[index];
        let scans = sweep(file, name, || scan_matches(&uri, &expected)).await;
        assert_eq!(
            scans.identical, 0,
            "every flip in a data file is detected: {scans:?}"
        );
        let version = dataset.version();
        let compactions = sweep(file, name, || compaction_matches(&uri, &expected, version)).await;
        assert_eq!(compactions.identical, 0, "{compactions:?}");
    }
    // The sweeps left the dataset as it was.
    scan_matches(&uri, &expected).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipped_bits_in_deletion_files_never_change_a_scan() {
    let dir = tempfile::tempdir().unwrap();
    let (uri, dataset) = fixture(dir.path()).await;
    let expected = snapshot(&dataset).await.unwrap();
    let deletion = dataset
        .fragments()
        .iter()
        .find_map(|f| f.deletion_file.clone())
        .expect("the fixture deletes rows");
    let file = dir.path().join("table").join(deletion.path.as_str());
    let name = deletion.path.to_string();
    let scans = sweep(&file, &name, || scan_matches(&uri, &expected)).await;
    assert_eq!(scans.identical, 0, "{scans:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipped_bits_in_the_manifest_never_change_a_scan() {
    let dir = tempfile::tempdir().unwrap();
    let (uri, dataset) = fixture(dir.path()).await;
    let expected = snapshot(&dataset).await.unwrap();
    let name = refract_table::io::manifest_path(dataset.version()).to_string();
    let file = dir.path().join("table").join(&name);
    let scans = sweep(&file, &name, || scan_matches(&uri, &expected)).await;
    assert_eq!(scans.identical, 0, "{scans:?}");
}

/// The ids a query returns, in order; with `index` the index path is forced.
async fn query_ids(
    dataset: &Dataset,
    index_type: &str,
    index: bool,
) -> Result<Vec<Vec<i64>>, Error> {
    let use_index = if index {
        IndexUse::Always
    } else {
        IndexUse::Never
    };
    let mut answers = Vec::new();
    let filters: &[&str] = match index_type {
        "btree" => &["id >= 37 AND id < 301", "id = 250"],
        "bitmap" => &["cat = 3", "cat IS NULL"],
        "ngram" => &["contains(name, 'row-1')", "contains(name, '7-')"],
        _ => &[],
    };
    for filter in filters {
        let result = Query::new(dataset)
            .filter(filter)?
            .project(&["id"])
            .index_use(use_index)
            .execute()
            .await?;
        answers.push(ids(&result.batch));
    }
    if index_type == "ivf_flat" {
        let result = Query::new(dataset)
            .nearest("vector", &[120.3, -120.3], 10, 4)
            .project(&["id"])
            .use_index(index)
            .execute()
            .await?;
        answers.push(ids(&result.batch));
    }
    Ok(answers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipped_bits_in_index_files_never_change_an_indexed_query() {
    let mut dataset = dataset_with_rows("bit-flips", 600, 100).await;
    for (name, column, index_type) in INDICES {
        dataset = add_index(&dataset, name, column, index_type).await;
    }
    let store = dataset.store().clone();
    let uri = dataset.uri().to_string();
    let flips = flips_per_kind() / 3;
    for meta in dataset.manifest().indices.clone() {
        let expected = query_ids(&dataset, &meta.index_type, false).await.unwrap();
        assert_eq!(
            query_ids(&dataset, &meta.index_type, true).await.unwrap(),
            expected
        );
        assert!(
            !meta.files.is_empty(),
            "{} records its files",
            meta.index_type
        );
        for file in &meta.files {
            let original = store.get(&file.path).await.unwrap();
            let mut tally = Tally::default();
            for (at, bit) in flip_positions(original.len(), flips) {
                let mut damaged = original.to_vec();
                damaged[at] ^= 1 << bit;
                store.put(&file.path, Bytes::from(damaged)).await.unwrap();
                let fresh = Dataset::open(&uri).await.unwrap();
                match query_ids(&fresh, &meta.index_type, true).await {
                    Ok(answers) => {
                        assert_eq!(
                            answers, expected,
                            "flip of bit {bit} at byte {at} of {} changed a query silently",
                            file.path
                        );
                        tally.identical += 1;
                    }
                    Err(Error::Corrupt { what, message }) => {
                        assert!(
                            what.contains(file.path.as_str())
                                || message.contains(file.path.as_str()),
                            "flip at byte {at} of {}: Corrupt does not name it: {what}: {message}",
                            file.path
                        );
                        tally.corrupt += 1;
                    }
                    Err(other) => panic!(
                        "flip of bit {bit} at byte {at} of {}: not Corrupt: {other}",
                        file.path
                    ),
                }
            }
            store.put(&file.path, original).await.unwrap();
            assert!(tally.corrupt > 0, "{}: {tally:?}", file.path);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipped_bits_in_a_row_map_never_change_a_query_through_the_fri() {
    let mut dataset = dataset_with_rows("bit-flips-rowmap", 600, 100).await;
    dataset = add_index(&dataset, "by_id", "id", "btree").await;
    common::partition(&mut dataset, None, 3).await;
    let store = dataset.store().clone();
    let uri = dataset.uri().to_string();
    let maps = store
        .list(&refract_table::io::RelativePath::parse("_fri").unwrap())
        .await
        .unwrap();
    let [row_map] = maps.as_slice() else {
        panic!("one row map: {maps:?}");
    };
    let query = |dataset: Dataset| async move {
        let result = Query::new(&dataset)
            .filter("id >= 37 AND id < 301")?
            .project(&["id"])
            .with_resolver(Arc::new(FriResolver::with_mode(ChunkCacheMode::Lazy)))
            .index_use(IndexUse::Always)
            .execute()
            .await?;
        Ok::<_, Error>(ids(&result.batch))
    };
    let expected = query(dataset.clone()).await.unwrap();
    let mut sorted = expected.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (37..301).collect::<Vec<i64>>());
    let original = store.get(&row_map.path).await.unwrap();
    let mut tally = Tally::default();
    for (at, bit) in flip_positions(original.len(), flips_per_kind()) {
        let mut damaged = original.to_vec();
        damaged[at] ^= 1 << bit;
        store
            .put(&row_map.path, Bytes::from(damaged))
            .await
            .unwrap();
        match query(Dataset::open(&uri).await.unwrap()).await {
            Ok(answer) => {
                assert_eq!(
                    answer, expected,
                    "flip of bit {bit} at byte {at} of the row map"
                );
                tally.identical += 1;
            }
            Err(Error::Corrupt { what, message }) => {
                let name = row_map.path.as_str();
                assert!(
                    what.contains(name) || message.contains(name),
                    "flip at byte {at}: Corrupt does not name the row map: {what}: {message}"
                );
                tally.corrupt += 1;
            }
            Err(other) => {
                panic!("flip of bit {bit} at byte {at} of the row map: not Corrupt: {other}")
            }
        }
    }
    store.put(&row_map.path, original).await.unwrap();
    assert!(tally.corrupt > 0, "{tally:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remap_never_reuses_a_damaged_index_file() {
    let mut dataset = dataset_with_rows("bit-flips-remap", 600, 100).await;
    for (name, column, index_type) in INDICES {
        dataset = add_index(&dataset, name, column, index_type).await;
    }
    let options = CompactionOptions {
        target_rows_per_fragment: 300,
        ..CompactionOptions::default()
    };
    assert!(common::deferred_compaction(&mut dataset, &options).await);
    let store = dataset.store().clone();
    let uri = dataset.uri().to_string();
    // The files a btree and an ivf_flat remap copy instead of rewriting.
    let reused: Vec<_> = dataset
        .manifest()
        .indices
        .iter()
        .filter(|m| m.index_type == "btree" || m.index_type == "ivf_flat")
        .flat_map(|m| m.files.clone())
        .filter(|f| !f.path.as_str().ends_with("addresses.lance"))
        .collect();
    assert_eq!(reused.len(), 3, "values, page lookup and vectors");
    for file in reused {
        let original = store.get(&file.path).await.unwrap();
        let mut damaged = original.to_vec();
        let middle = damaged.len() / 2;
        damaged[middle] ^= 0x08;
        store.put(&file.path, Bytes::from(damaged)).await.unwrap();
        let mut fresh = Dataset::open(&uri).await.unwrap();
        let before = fresh.version();
        let err = remap_indices(&mut fresh, RemapOptions::default())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::Corrupt { what, message }
                if what.contains(file.path.as_str()) || message.contains(file.path.as_str())),
            "{}: {err}",
            file.path
        );
        assert_eq!(
            Dataset::open(&uri).await.unwrap().version(),
            before,
            "nothing committed"
        );
        store.put(&file.path, original).await.unwrap();
    }
    // Undamaged, the same remap succeeds.
    let mut fresh = Dataset::open(&uri).await.unwrap();
    remap_indices(&mut fresh, RemapOptions::default())
        .await
        .unwrap();
}

/// A table written before checksums is read unverified: a flipped bit in a
/// data file may decode to other values (the reason checksums exist), but
/// reading it never panics through the caller, and every failure is one
/// `Corrupt` naming the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipped_bits_in_unchecksummed_files_never_panic() {
    use refract_table::io::manifest_path;
    use refract_table::testing::open_manifest;

    let dir = tempfile::tempdir().unwrap();
    let (uri, dataset) = fixture(dir.path()).await;
    let expected = snapshot(&dataset).await.unwrap();
    let root = dir.path().join("table");
    // Rewrite the latest manifest as another Lance writer stores it: no
    // Refract sidecar, so no checksums.
    let manifest_file = root.join(manifest_path(dataset.version()).as_str());
    let stored = std::fs::read(&manifest_file).unwrap();
    let parts = open_manifest(&stored).unwrap();
    std::fs::write(&manifest_file, parts.seal_without_sidecar()).unwrap();
    scan_matches(&uri, &expected).await.unwrap();
    let (file, name) = data_files(&dataset, &root).remove(2);
    let original = std::fs::read(&file).unwrap();
    let (mut same, mut different, mut corrupt) = (0, 0, 0);
    for (at, bit) in flip_positions(original.len(), flips_per_kind()) {
        let mut damaged = original.clone();
        damaged[at] ^= 1 << bit;
        std::fs::write(&file, &damaged).unwrap();
        let outcome = async {
            let dataset = Dataset::open(&uri).await?;
            snapshot(&dataset).await
        }
        .await;
        match outcome {
            Ok(rows) if rows == expected => same += 1,
            Ok(_) => different += 1,
            Err(Error::Corrupt { what, message }) => {
                assert!(
                    what.contains(&name) || message.contains(&name),
                    "flip at byte {at}: Corrupt does not name {name}: {what}: {message}"
                );
                corrupt += 1;
            }
            Err(other) => panic!("flip of bit {bit} at byte {at} of {name}: not Corrupt: {other}"),
        }
    }
    std::fs::write(&file, &original).unwrap();
    eprintln!(
        "unchecksummed data file: {same} identical, {different} different, {corrupt} corrupt"
    );
    assert!(corrupt > 0);
}
