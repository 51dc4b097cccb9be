//! Hostile bytes: manifests, data files and deletion files written by an
//! attacker (or a broken writer) must give errors, never panics, never an
//! allocation sized by a claim instead of by the bytes actually present, and
//! never a read outside the dataset root.
//!
//! Cases per property: `REFRACT_FUZZ_CASES` (default 256).
//! A counting global allocator (this test binary only) measures the peak bytes
//! live on the test's own thread while decoding.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use bytes::Bytes;
use proptest::prelude::*;
use refract_core::Error;
use refract_table::io::{manifest_path, RelativePath};
use refract_table::testing::{open_manifest, pb, sample_rows, snapshot, FaultRig};
use refract_table::{Dataset, Manifest, WriteOptions};
use rstest::rstest;

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn record(delta: isize) {
    // `try_with` fails only during thread teardown; those allocations are not measured.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: delegates every call to `System` and only updates thread-local counters.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size() as isize);
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        record(-(layout.size() as isize));
        System.dealloc(ptr, layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        record(layout.size() as isize);
        System.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size as isize - layout.size() as isize);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Peak bytes allocated on this thread (above the starting level) while running `f`.
fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let start = LIVE.with(Cell::get);
    PEAK.with(|peak| peak.set(start));
    let value = f();
    let peak = PEAK.with(Cell::get);
    (value, (peak - start).max(0) as usize)
}

/// Decoding may use a fixed working set plus a small multiple of the input.
fn allocation_bound(input_len: usize) -> usize {
    256 * 1024 + 64 * input_len
}

fn fuzz_cases() -> u32 {
    std::env::var("REFRACT_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

fn per_file(rows: u64) -> WriteOptions {
    WriteOptions {
        max_rows_per_file: rows,
        ..WriteOptions::default()
    }
}

/// A realistic manifest: 3 fragments, one with a deletion file, an index entry
/// and a Delete transaction.
fn valid_manifest_bytes() -> Vec<u8> {
    static BYTES: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    BYTES
        .get_or_init(|| {
            runtime().block_on(async {
                let rig = FaultRig::memory();
                let mut dataset = rig.create_sample().await.unwrap();
                dataset
                    .append(vec![sample_rows(0, 30)], &per_file(10))
                    .await
                    .unwrap();
                dataset.delete("id = 4").await.unwrap();
                dataset.manifest().encode().unwrap().to_vec()
            })
        })
        .clone()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// arrow-ipc panics on some schema values; the manifest decoder catches that
/// and reports Corrupt. The first panic of a process initialises the panic
/// machinery, which is not the decoder's allocation: pay it before measuring.
/// The default hook also captures and prints a backtrace for *every* panic
/// when `RUST_BACKTRACE=1` (hundreds of KB, counted against the decoder), so
/// this test binary's hook prints the message only.
fn warm_up_panic_machinery() {
    static WARM: std::sync::Once = std::sync::Once::new();
    WARM.call_once(|| {
        std::panic::set_hook(Box::new(|info| eprintln!("{info}")));
        let _ = std::panic::catch_unwind(|| panic!("warming up the panic hook (not a failure)"));
    });
}

fn decode_bounded(bytes: &[u8]) {
    warm_up_panic_machinery();
    let (result, peak) = peak_during(|| Manifest::decode(bytes));
    assert!(
        peak <= allocation_bound(bytes.len()),
        "decoding {} bytes allocated {peak} bytes ({:?})",
        bytes.len(),
        result.err()
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(fuzz_cases()))]

    #[test]
    fn manifest_decode_of_arbitrary_bytes_is_bounded(bytes in proptest::collection::vec(any::<u8>(), 0..1024)) {
        decode_bounded(&bytes);
    }

    #[test]
    fn manifest_decode_of_mutated_manifests_is_bounded(
        mutations in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = valid_manifest_bytes();
        for (index, value) in mutations {
            let at = index.index(bytes.len());
            bytes[at] = value;
        }
        decode_bounded(&bytes);
    }

    #[test]
    fn manifest_decode_of_truncated_manifests_is_bounded(cut in any::<prop::sample::Index>()) {
        let bytes = valid_manifest_bytes();
        let at = cut.index(bytes.len());
        decode_bounded(&bytes[..at]);
    }

    #[test]
    fn parsed_paths_never_leave_the_root(raw in "[a-z./\\\\:_%-]{0,24}") {
        if let Ok(path) = RelativePath::parse(&raw) {
            let text = path.as_str();
            prop_assert!(!text.starts_with('/'));
            prop_assert!(!text.contains('\\'));
            prop_assert!(!text.contains("://"));
            prop_assert!(text.split('/').all(|s| s != ".." && s != "."));
        }
    }
}

/// Deterministic sweep: every byte of a real manifest set to each of a few
/// boundary values (this includes the Arrow schema bytes that made arrow-ipc
/// panic or allocate 1.3 GB before the decoder guarded them).
#[test]
fn every_single_byte_mutation_of_a_manifest_is_bounded() {
    let valid = valid_manifest_bytes();
    for position in 0..valid.len() {
        for value in [0x00, 0x01, 0x5B, 0x7F, 0x80, 0xFF] {
            let mut bytes = valid.clone();
            bytes[position] = value;
            decode_bounded(&bytes);
        }
    }
}

/// A dataset of 30 rows in 3 fragments (fragment 1 has a deletion file), and its rig.
async fn stored_dataset() -> (FaultRig, Dataset) {
    let rig = FaultRig::memory();
    let mut dataset = rig.create_sample().await.unwrap();
    dataset
        .append(vec![sample_rows(0, 30)], &per_file(10))
        .await
        .unwrap();
    dataset.delete("id = 4").await.unwrap();
    (rig, dataset)
}

/// Publishes the latest manifest of `dataset`, changed by `damage`, as the next version.
async fn publish_damaged(
    rig: &FaultRig,
    dataset: &Dataset,
    damage: impl FnOnce(&mut pb::Manifest),
) {
    let mut parts = open_manifest(&dataset.manifest().encode().unwrap()).unwrap();
    parts.manifest.version += 1;
    damage(&mut parts.manifest);
    rig.clean_store()
        .put(&manifest_path(parts.manifest.version), parts.seal())
        .await
        .unwrap();
}

/// Opens the latest version and scans it; the error, if any.
async fn open_and_scan(rig: &FaultRig) -> Result<usize, Error> {
    let dataset = rig.open_clean().await?;
    Ok(snapshot(&dataset).await?.num_rows())
}

fn fragment(message: &mut pb::Manifest, index: usize) -> &mut pb::DataFragment {
    &mut message.fragments[index]
}

#[rstest]
#[case::physical_rows_beyond_the_file(|m: &mut pb::Manifest| fragment(m, 1).physical_rows = 1 << 32)]
#[case::physical_rows_above_the_limit(|m: &mut pb::Manifest| fragment(m, 1).physical_rows = u64::MAX)]
#[case::physical_rows_below_the_file(|m: &mut pb::Manifest| fragment(m, 1).physical_rows = 3)]
#[case::file_size_beyond_the_file(|m: &mut pb::Manifest| fragment(m, 1).files[0].file_size_bytes = 1 << 40)]
#[case::file_size_below_the_file(|m: &mut pb::Manifest| fragment(m, 1).files[0].file_size_bytes = 3)]
#[case::file_field_unknown(|m: &mut pb::Manifest| fragment(m, 1).files[0].fields[0] = 99)]
#[case::file_version_unknown(|m: &mut pb::Manifest| fragment(m, 1).files[0].file_major_version = 9)]
#[case::deleted_count_above_physical(|m: &mut pb::Manifest| fragment(m, 0).deletion_file.as_mut().unwrap().num_deleted_rows = 1 << 40)]
#[case::deleted_count_disagrees(|m: &mut pb::Manifest| fragment(m, 0).deletion_file.as_mut().unwrap().num_deleted_rows = 2)]
#[case::deletion_type_unknown(|m: &mut pb::Manifest| fragment(m, 0).deletion_file.as_mut().unwrap().file_type = 7)]
#[case::data_path_escapes(|m: &mut pb::Manifest| fragment(m, 2).files[0].path = "../../etc/passwd".into())]
#[case::data_path_is_absolute(|m: &mut pb::Manifest| fragment(m, 2).files[0].path = "/etc/passwd".into())]
#[case::data_path_is_a_url(|m: &mut pb::Manifest| fragment(m, 2).files[0].path = "s3://bucket/data.lance".into())]
#[case::missing_data_file(|m: &mut pb::Manifest| fragment(m, 2).files[0].path = "missing.lance".into())]
#[test]
fn hostile_sizes_and_paths_are_errors_not_allocations(#[case] damage: fn(&mut pb::Manifest)) {
    let runtime = runtime();
    let (rig, dataset) = runtime.block_on(stored_dataset());
    runtime.block_on(publish_damaged(&rig, &dataset, damage));
    let (result, peak) = peak_during(|| runtime.block_on(open_and_scan(&rig)));
    let err = result.expect_err("a damaged manifest must not scan");
    assert!(
        matches!(
            err,
            Error::Corrupt { .. } | Error::PathEscape { .. } | Error::NotFound { .. }
        ),
        "unexpected error kind: {err:?}"
    );
    // The dataset holds a few KiB; a claim of 2^32 rows or 2^40 bytes must not be believed.
    assert!(
        peak < 64 << 20,
        "opening and scanning allocated {peak} bytes: {err}"
    );
    // The previous version is intact.
    let previous = runtime
        .block_on(Dataset::open_with(
            rig.uri(),
            refract_table::OpenOptions {
                version: Some(dataset.version()),
                ..rig.clean_options()
            },
        ))
        .unwrap();
    assert_eq!(
        runtime.block_on(snapshot(&previous)).unwrap().num_rows(),
        29
    );
}

/// Overwrites the stored object at `path` with `bytes`.
async fn overwrite(rig: &FaultRig, path: &RelativePath, bytes: Vec<u8>) {
    rig.clean_store()
        .put(path, Bytes::from(bytes))
        .await
        .unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(fuzz_cases() / 4))]

    #[test]
    fn garbage_deletion_files_are_corrupt_errors(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let runtime = runtime();
        let (rig, dataset) = runtime.block_on(stored_dataset());
        let path = dataset.fragments()[0].deletion_file.as_ref().unwrap().path.clone();
        let original = runtime.block_on(rig.clean_store().get(&path)).unwrap();
        let same = bytes == original.as_ref();
        runtime.block_on(overwrite(&rig, &path, bytes));
        let (result, peak) = peak_during(|| runtime.block_on(open_and_scan(&rig)));
        prop_assert!(peak < 64 << 20, "scan allocated {} bytes", peak);
        match result {
            Ok(rows) => prop_assert!(same || rows == 29, "garbage accepted as a different deletion set"),
            Err(err) => prop_assert!(matches!(err, Error::Corrupt { .. }), "{:?}", err),
        }
    }

    #[test]
    fn garbage_data_files_are_errors(
        bytes in proptest::collection::vec(any::<u8>(), 0..2048),
        keep_prefix in any::<prop::sample::Index>(),
    ) {
        let runtime = runtime();
        let (rig, dataset) = runtime.block_on(stored_dataset());
        let file = &dataset.fragments()[1].files[0];
        let original = runtime.block_on(rig.clean_store().get(&file.path)).unwrap();
        // Keep a prefix of the real file (so headers look plausible), then garbage.
        let cut = keep_prefix.index(original.len());
        let mut damaged = original[..cut].to_vec();
        damaged.extend_from_slice(&bytes);
        prop_assume!(damaged != original.as_ref());
        runtime.block_on(overwrite(&rig, &file.path, damaged));
        let (result, peak) = peak_during(|| runtime.block_on(open_and_scan(&rig)));
        prop_assert!(peak < 64 << 20, "scan allocated {} bytes", peak);
        if let Ok(rows) = result {
            // Only a damage that leaves the same logical content may scan.
            prop_assert_eq!(rows, 29);
        }
    }
}
