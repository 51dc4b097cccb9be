//! Decoding allocates at most a small multiple of its input.
//!
//! A counting global allocator (for this test binary only) tracks live bytes
//! per thread; each measurement runs on the test's own thread, so parallel
//! tests do not disturb it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use proptest::prelude::*;

use super::fixtures::*;
use super::fuzz::valid_content;
use crate::Ledger;

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn record(delta: isize) {
    // `try_with` fails only during thread teardown; allocations then are not measured.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: delegates every call to `System` and only updates counters.
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

/// Peak bytes allocated (above the starting level) while running `f`.
fn peak_during(f: impl FnOnce()) -> usize {
    let start = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(start));
    f();
    (PEAK.with(Cell::get) - start).max(0) as usize
}

/// The allowed peak for `input_len` bytes: 64x plus a fixed 64 KiB.
fn budget(input_len: usize) -> usize {
    64 * input_len + 64 * 1024
}

fn decode_peak(bytes: &[u8]) -> usize {
    peak_during(|| {
        let _ = Ledger::from_content_bytes(bytes, 1);
        let _ = Ledger::decode(bytes, 1, &FRI, |_| Ok(Vec::new()));
    })
}

#[test]
fn hostile_headers_do_not_allocate() {
    // A roaring bitmap header claiming 65,536 containers (roaring itself would
    // allocate ~2 MiB of buffers before noticing the input is short).
    let mut bitmap = 1u64.to_le_bytes().to_vec();
    bitmap.extend(1u32.to_le_bytes());
    bitmap.extend(12346u32.to_le_bytes());
    bitmap.extend(65_536u32.to_le_bytes());
    bitmap.extend([0u8; 64]);
    let run_cookie = {
        let mut b = 1u64.to_le_bytes().to_vec();
        b.extend(1u32.to_le_bytes());
        b.extend((12347u32 | 0xFFFF << 16).to_le_bytes());
        b.extend([0xffu8; 64]);
        b
    };
    let treemap_count = u64::MAX.to_le_bytes().to_vec();
    for bitmap in [bitmap, run_cookie, treemap_count] {
        let content = tagged(vec![raw_with_bitmap(
            vec![d(1, u32::MAX as u64, 0)],
            vec![d(2, u32::MAX as u64, 0)],
            bitmap,
        )]);
        assert_corrupt(&decode_err(&content, 1));
        let peak = decode_peak(&content);
        assert!(
            peak <= budget(content.len()),
            "peak {peak} for {} input bytes",
            content.len()
        );
    }
    // A huge protobuf length prefix.
    let huge_len = [0x12, 0xff, 0xff, 0xff, 0xff, 0x0f];
    assert!(decode_peak(&huge_len) <= budget(huge_len.len()));
}

#[test]
fn the_counter_sees_roaring_preallocate() {
    // Why the header scan exists: roaring alone allocates megabytes for a
    // 12-byte header claiming 65,536 containers.
    let mut header = 12346u32.to_le_bytes().to_vec();
    header.extend(65_536u32.to_le_bytes());
    header.extend([0u8; 4]);
    let peak = peak_during(|| {
        let _ = roaring::RoaringBitmap::deserialize_from(&header[..]);
    });
    assert!(peak > budget(header.len()), "peak {peak}");
}

#[test]
fn many_empty_digests_stay_within_budget() {
    // 100k empty `sources` entries (2 bytes each on the wire).
    let mut transition = Vec::new();
    for _ in 0..100_000 {
        append_bytes_field(&mut transition, 1, &[]);
    }
    // A mapping, so the digests are really decoded (and then found duplicate).
    append_bytes_field(&mut transition, 3, &[]);
    let content = content_with_raw_transitions(&[transition]);
    assert_corrupt_with(&decode_err(&content, 1), "listed twice");
    let peak = decode_peak(&content);
    assert!(
        peak <= budget(content.len()),
        "peak {peak} for {} input bytes",
        content.len()
    );
}

#[test]
fn valid_content_stays_within_budget() {
    let content = valid_content();
    let peak = decode_peak(&content);
    assert!(
        peak <= budget(content.len()),
        "peak {peak} for {} input bytes",
        content.len()
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn mutated_content_stays_within_budget(position in any::<prop::sample::Index>(), value in any::<u8>()) {
        let mut bytes = valid_content();
        let i = position.index(bytes.len());
        bytes[i] = value;
        let peak = decode_peak(&bytes);
        prop_assert!(peak <= budget(bytes.len()), "peak {} for {} input bytes", peak, bytes.len());
    }

    #[test]
    fn arbitrary_bytes_stay_within_budget(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let peak = decode_peak(&bytes);
        prop_assert!(peak <= budget(bytes.len()), "peak {} for {} input bytes", peak, bytes.len());
    }
}
