//! The budgeted materialized fallback for legacy `HashMap<u64, Option<u64>>` remap APIs.
//!
//! A plugin index that only implements the legacy remap needs the whole map in
//! memory. Before anything is allocated or translated, the cost is estimated the way
//! hashbrown actually allocates (buckets rounded up to a power of two, one control
//! byte per bucket, one trailing group of control bytes); over budget, or when the
//! stored fragments or their row counts are unknown, the request is declined with a
//! typed error so maintenance can skip the segment instead of running out of memory.

use std::collections::HashMap;
use std::mem::size_of;

use crate::address::row_address;
use crate::error::{Error, Result};
use crate::hashmap_size::estimate_hashmap_bytes;
use crate::translate::MAX_TRANSLATION_BATCH;
use crate::translate::{translate_stream, translate_stream_async, BatchTranslator, Translator};

/// Default memory budget of one materialized remap: 256 MiB.
pub const DEFAULT_MATERIALIZE_BUDGET_BYTES: u64 = 256 * 1024 * 1024;

/// Working memory of one translation batch: the addresses plus the results.
const BATCH_BYTES_PER_ADDRESS: u64 = (size_of::<u64>() + size_of::<Option<u64>>()) as u64;

/// Bytes [`materialize`] needs for `total_rows` addresses: the full table plus one
/// translation batch.
pub fn estimate_materialize_bytes(total_rows: u64) -> u64 {
    let batch = total_rows.min(MAX_TRANSLATION_BATCH as u64);
    estimate_hashmap_bytes(total_rows).saturating_add(batch * BATCH_BYTES_PER_ADDRESS)
}

/// Memory budget of one materialized remap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaterializeBudget {
    /// Most bytes the map and its working buffers may take.
    pub budget_bytes: u64,
}

impl Default for MaterializeBudget {
    fn default() -> Self {
        Self {
            budget_bytes: DEFAULT_MATERIALIZE_BUDGET_BYTES,
        }
    }
}

/// What to enumerate, decided before any allocation proportional to rows.
#[derive(Debug)]
struct Plan {
    /// `(fragment id, physical rows)`, ascending by id, deduplicated.
    fragments: Vec<(u32, u32)>,
    total_rows: u64,
}

impl Plan {
    fn addresses(&self) -> impl Iterator<Item = u64> + '_ {
        self.fragments
            .iter()
            .flat_map(|(id, rows)| (0..*rows).map(move |o| row_address(*id, o)))
    }
}

/// Checks stored fragments, their row counts and the budget; declines with a typed
/// error before anything proportional to the row count is allocated.
fn plan(
    stored_fragments: Option<&[u64]>,
    fragment_rows: impl Fn(u64) -> Option<u64>,
    budget: MaterializeBudget,
) -> Result<Plan> {
    let stored = stored_fragments.ok_or(Error::StoredFragmentsUnknown)?;
    let mut ids = stored.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let mut fragments = Vec::with_capacity(ids.len());
    let mut total_rows = 0u64;
    for id in ids {
        let rows = fragment_rows(id).ok_or(Error::FragmentRowsUnknown { fragment_id: id })?;
        let id32 = u32::try_from(id).map_err(|_| {
            Error::invalid_input(format!("stored fragment id {id} does not fit in u32"))
        })?;
        let rows32 = u32::try_from(rows).map_err(|_| {
            Error::invalid_input(format!(
                "fragment {id} has {rows} physical rows, more than u32::MAX"
            ))
        })?;
        fragments.push((id32, rows32));
        total_rows += rows;
    }
    let estimated_bytes = estimate_materialize_bytes(total_rows);
    if estimated_bytes > budget.budget_bytes {
        return Err(Error::OverBudget {
            estimated_bytes,
            budget_bytes: budget.budget_bytes,
        });
    }
    Ok(Plan {
        fragments,
        total_rows,
    })
}

/// Allocates the map for the planned rows without aborting on allocation failure.
fn allocate(plan: &Plan) -> Result<HashMap<u64, Option<u64>>> {
    let mut map = HashMap::new();
    // The budget check passed, so this is at most the estimated size; reserving the
    // full size up front avoids the transient double allocation of a rehash.
    map.try_reserve(plan.total_rows as usize)
        .map_err(|e| Error::external("reserving the materialized remap", e))?;
    Ok(map)
}

/// Records every address whose translation differs from itself.
fn record(map: &mut HashMap<u64, Option<u64>>, batch: &[u64], out: &[Option<u64>]) {
    for (addr, new) in batch.iter().zip(out) {
        if *new != Some(*addr) {
            map.insert(*addr, *new);
        }
    }
}

/// Materializes a translator as a legacy `HashMap<u64, Option<u64>>`.
///
/// Every address of every stored fragment (`stored_fragments`, the fragments whose
/// addresses the index may hold, retired ones included) is translated in bounded
/// batches; only changed addresses are stored (`Some(new)` or `None` for a removed
/// row), so a missing key still means "unchanged".
///
/// # Errors
/// Declines before allocating or translating: [`Error::StoredFragmentsUnknown`] if
/// `stored_fragments` is `None`, [`Error::FragmentRowsUnknown`] if `fragment_rows`
/// does not know a fragment, [`Error::OverBudget`] if the estimate exceeds `budget`,
/// InvalidInput for a fragment id or row count that does not fit `u32`. Later,
/// External when the map cannot be allocated, and the translator's errors.
pub fn materialize<T: Translator + ?Sized>(
    translator: &T,
    stored_fragments: Option<&[u64]>,
    fragment_rows: impl Fn(u64) -> Option<u64>,
    budget: MaterializeBudget,
) -> Result<HashMap<u64, Option<u64>>> {
    let plan = plan(stored_fragments, fragment_rows, budget)?;
    let mut map = allocate(&plan)?;
    translate_stream(translator, plan.addresses(), |batch, out| {
        record(&mut map, batch, out);
        Ok(())
    })?;
    Ok(map)
}

/// Async [`materialize`], for translators that do I/O.
///
/// # Errors
/// Those of [`materialize`]: the same declines before any work, External when
/// the map cannot be allocated, and the translator's errors.
pub async fn materialize_async<T: BatchTranslator + ?Sized>(
    translator: &T,
    stored_fragments: Option<&[u64]>,
    fragment_rows: impl Fn(u64) -> Option<u64>,
    budget: MaterializeBudget,
) -> Result<HashMap<u64, Option<u64>>> {
    let plan = plan(stored_fragments, fragment_rows, budget)?;
    let mut map = allocate(&plan)?;
    translate_stream_async(translator, plan.addresses(), |batch, out| {
        record(&mut map, batch, out);
        Ok(())
    })
    .await?;
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::row_address as ra;
    use crate::remap::tests::{fr, tm};
    use crate::remap::{RewriteGroupInput, RowAddrRemap};
    use crate::translate::tests::CountingTranslator;
    use std::sync::atomic::Ordering;

    #[test]
    fn seven_million_entries_need_sixteen_million_buckets() {
        let map = HashMap::<u64, Option<u64>>::with_capacity(7_350_000);
        assert_eq!(map.capacity(), 14_680_064); // 16_777_216 buckets * 7 / 8
        assert_eq!(16_777_216 * (24 + 1) + 16, 419_430_416);
        assert_eq!(estimate_hashmap_bytes(7_350_000), 419_430_416);
        // A flat 32 bytes per entry would have said 235,200,000 and fit 256 MiB.
        assert!(estimate_hashmap_bytes(7_350_000) > DEFAULT_MATERIALIZE_BUDGET_BYTES);
    }

    #[test]
    fn declines_over_budget_before_translating() {
        let t = CountingTranslator::default();
        let err = materialize(
            &t,
            Some(&[1, 2]),
            |id| Some(if id == 1 { 7_000_000 } else { 350_000 }),
            MaterializeBudget::default(),
        )
        .unwrap_err();
        match err {
            Error::OverBudget {
                estimated_bytes,
                budget_bytes,
            } => {
                assert_eq!(estimated_bytes, 419_430_416 + 65_536 * 24);
                assert_eq!(budget_bytes, 268_435_456);
            }
            other => panic!("expected OverBudget, got {other:?}"),
        }
        assert_eq!(t.calls.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn declines_on_unknown_fragments_before_translating() {
        let t = CountingTranslator::default();
        let budget = MaterializeBudget::default();
        let err = materialize(&t, None, |_| Some(1), budget).unwrap_err();
        assert!(matches!(err, Error::StoredFragmentsUnknown), "{err}");
        let err = materialize(&t, Some(&[1, 5]), |id| (id == 1).then_some(3), budget).unwrap_err();
        assert!(
            matches!(err, Error::FragmentRowsUnknown { fragment_id: 5 }),
            "{err}"
        );
        assert_eq!(t.calls.load(Ordering::SeqCst), 0);
    }

    /// Reference F.34: fragments {1: 4 rows, 2: 3, 3: 2}, row (1,1) deleted by the
    /// rewrite of fragment 1, fragment 3 withdrawn (rewritten with no survivors).
    #[test]
    fn stores_only_changed_addresses() {
        let remap = RowAddrRemap::compact(vec![
            RewriteGroupInput {
                old_fragments: vec![fr(1, 4)],
                new_fragments: vec![fr(10, 3)],
                surviving: tm(&[(1, 0), (1, 2), (1, 3)]),
            },
            RewriteGroupInput {
                old_fragments: vec![fr(3, 2)],
                new_fragments: vec![],
                surviving: tm(&[]),
            },
        ])
        .unwrap();
        let rows = |id| match id {
            1 => Some(4),
            2 => Some(3),
            3 => Some(2),
            _ => None,
        };
        let map = materialize(
            &remap,
            Some(&[3, 1, 2, 1]),
            rows,
            MaterializeBudget::default(),
        )
        .unwrap();
        let want = HashMap::from([
            (ra(1, 0), Some(ra(10, 0))),
            (ra(1, 1), None),
            (ra(1, 2), Some(ra(10, 1))),
            (ra(1, 3), Some(ra(10, 2))),
            (ra(3, 0), None),
            (ra(3, 1), None),
        ]);
        assert_eq!(map, want);
    }

    #[tokio::test]
    async fn async_materialize_uses_bounded_batches() {
        let t = CountingTranslator::default();
        let n = 2 * MAX_TRANSLATION_BATCH as u64 + 1;
        let map = materialize_async(&t, Some(&[7]), |_| Some(n), MaterializeBudget::default())
            .await
            .unwrap();
        assert!(map.is_empty()); // identity translator: nothing changed
        assert_eq!(*t.sizes.lock().unwrap(), vec![65_536, 65_536, 1]);
    }
}
