//! What a `HashMap<u64, Option<u64>>` allocates: the memory model the
//! materialized remap budget and the direct remap's [`crate::cache::DeepSize`]
//! both use.

use std::mem::size_of;

/// Bytes per hashbrown bucket of a `HashMap<u64, Option<u64>>`: the `(u64, Option<u64>)` slot.
const SLOT_BYTES: u64 = size_of::<(u64, Option<u64>)>() as u64;
/// One control byte per bucket.
const CTRL_BYTES_PER_BUCKET: u64 = 1;
/// hashbrown appends one SIMD group of control bytes (x86-64 SSE2 width).
const GROUP_WIDTH: u64 = 16;
/// Bytes a `HashMap<u64, Option<u64>>` allocates for `n` entries.
///
/// Buckets: 4 below 4 entries, 8 below 8, else the next power of two of
/// `ceil(n * 8 / 7)` (hashbrown keeps at most 7/8 of the buckets full). Each bucket
/// costs a 24-byte slot and a control byte; 16 more control bytes close the table.
pub const fn estimate_hashmap_bytes(n: u64) -> u64 {
    let buckets = hashmap_buckets(n);
    buckets
        .saturating_mul(SLOT_BYTES + CTRL_BYTES_PER_BUCKET)
        .saturating_add(GROUP_WIDTH)
}

/// hashbrown's bucket count for `n` entries (see [`estimate_hashmap_bytes`]).
const fn hashmap_buckets(n: u64) -> u64 {
    if n < 4 {
        4
    } else if n < 8 {
        8
    } else {
        let adjusted = n.saturating_mul(8).div_ceil(7);
        match adjusted.checked_next_power_of_two() {
            Some(b) => b,
            None => u64::MAX,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use rstest::rstest;

    use super::*;

    #[rstest]
    #[case(0, 116)]
    #[case(3, 116)]
    #[case(4, 216)]
    #[case(7, 216)]
    #[case(8, 416)]
    #[case(14, 416)]
    #[case(15, 816)]
    #[case(7_350_000, 419_430_416)]
    fn estimates_like_hashbrown(#[case] n: u64, #[case] bytes: u64) {
        assert_eq!(estimate_hashmap_bytes(n), bytes);
    }

    /// The model's bucket count equals the real table's: hashbrown reports capacity
    /// = buckets * 7 / 8 (or buckets - 1 below 8 buckets) for what `with_capacity` made.
    #[rstest]
    #[case(1)]
    #[case(5)]
    #[case(8)]
    #[case(15)]
    #[case(100)]
    #[case(1000)]
    #[case(100_000)]
    fn model_matches_real_hashmap(#[case] n: usize) {
        assert_eq!(SLOT_BYTES, 24);
        let map = HashMap::<u64, Option<u64>>::with_capacity(n);
        let buckets = hashmap_buckets(n as u64) as usize;
        let expected_capacity = if buckets < 8 {
            buckets - 1
        } else {
            buckets / 8 * 7
        };
        assert_eq!(map.capacity(), expected_capacity, "n = {n}");
    }
}
