//! `MappingReader`: the read contract of one fragment transition (sources → destinations).
//!
//! Readers answer two questions for an index that was built over the source
//! fragments: which destination fragments it fully covers, given the sources it
//! covers, and where each source row went. Implementations may need I/O (a stable
//! partition reads its row map from storage), so translation is async.

use roaring::{RoaringBitmap, RoaringTreemap};

use crate::cache::DeepSize;
use crate::error::{Error, Result};
use crate::remap::{CompactRemap, FragmentRows, LookupCursor, RewriteGroupInput};
use crate::translate::MAX_TRANSLATION_BATCH;

/// The read contract of one transition.
#[async_trait::async_trait]
pub trait MappingReader: Send + Sync {
    /// Source fragment ids, in the transition's order.
    fn sources(&self) -> &[u64];

    /// Destination fragment ids, in the transition's order.
    fn destinations(&self) -> &[u64];

    /// Destination fragments every one of whose sources is in `covered_sources`
    /// (complete destinations only; a partially covered one is not returned).
    fn coverage(&self, covered_sources: &RoaringBitmap) -> Vec<u64>;

    /// Clears `out` and pushes, per address of `batch`, its destination address or
    /// `None` if the row was deleted. Errors with [`Error::InvalidInput`] if an address
    /// is not a row of a source fragment. Callers pass at most
    /// [`MAX_TRANSLATION_BATCH`] addresses; larger batches are rejected.
    async fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()>;

    /// The in-memory ordered-compaction mapping behind this reader, if it is
    /// one: callers may then translate synchronously through its
    /// [`CompactRemap`] (no I/O). `None` by default.
    fn as_ordered_compaction(&self) -> Option<&OrderedCompactionMapping> {
        None
    }

    /// The concrete reader, for crates that define readers of their own and
    /// offer faster paths for them (a stable partition's labels held in
    /// memory). `None` by default.
    fn as_any(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        None
    }
}

/// The mapping of one ordered compaction group: survivors of the sources, read in
/// order, written in order to the destinations.
#[derive(Debug, Clone, PartialEq)]
pub struct OrderedCompactionMapping {
    remap: CompactRemap,
    sources: Vec<u64>,
    destinations: Vec<u64>,
}

impl OrderedCompactionMapping {
    /// Builds the mapping from sources (read order) and destinations (write order)
    /// with their physical rows, and the addresses of the surviving source rows.
    ///
    /// # Errors
    /// InvalidInput when the fragments, their row counts or the survivors are
    /// inconsistent, as [`crate::RowAddrRemap::compact`] checks.
    pub fn new(
        sources: Vec<FragmentRows>,
        destinations: Vec<FragmentRows>,
        surviving: RoaringTreemap,
    ) -> Result<Self> {
        Self::from_group(RewriteGroupInput {
            old_fragments: sources,
            new_fragments: destinations,
            surviving,
        })
    }

    /// Builds the mapping from one captured rewrite group.
    ///
    /// # Errors
    /// InvalidInput when the group's fragments, row counts or survivors are
    /// inconsistent, as [`crate::RowAddrRemap::compact`] checks.
    pub fn from_group(group: RewriteGroupInput) -> Result<Self> {
        let sources = group.old_fragments.iter().map(|f| f.id).collect();
        let destinations = group.new_fragments.iter().map(|f| f.id).collect();
        let remap = CompactRemap::new(vec![group])?;
        Ok(Self {
            remap,
            sources,
            destinations,
        })
    }

    /// The underlying compact remap (one group).
    pub fn remap(&self) -> &CompactRemap {
        &self.remap
    }

    /// Bytes held, heap included.
    pub fn deep_size_bytes(&self) -> u64 {
        self.remap.deep_size_bytes()
            + ((self.sources.capacity() + self.destinations.capacity()) * 8) as u64
    }

    /// Synchronous translation (no I/O is involved); same contract as
    /// [`MappingReader::translate`].
    ///
    /// # Errors
    /// InvalidInput for a batch of more than [`MAX_TRANSLATION_BATCH`]
    /// addresses or an address that is not a row of a source fragment.
    pub fn translate_sync(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
        if batch.len() > MAX_TRANSLATION_BATCH {
            return Err(Error::invalid_input(format!(
                "translation batch of {} addresses exceeds the maximum of {MAX_TRANSLATION_BATCH}",
                batch.len()
            )));
        }
        out.clear();
        out.reserve(batch.len());
        let mut cursor = LookupCursor::default();
        for addr in batch {
            match self.remap.get_with(*addr, &mut cursor) {
                Some(new) => out.push(new),
                None => {
                    return Err(Error::invalid_input(format!(
                        "row address {} is not a row of a source fragment of this mapping",
                        crate::RowAddress(*addr)
                    )))
                }
            }
        }
        Ok(())
    }
}

impl DeepSize for OrderedCompactionMapping {
    fn deep_size_bytes(&self) -> usize {
        usize::try_from(OrderedCompactionMapping::deep_size_bytes(self)).unwrap_or(usize::MAX)
    }
}

#[async_trait::async_trait]
impl MappingReader for OrderedCompactionMapping {
    fn sources(&self) -> &[u64] {
        &self.sources
    }

    fn destinations(&self) -> &[u64] {
        &self.destinations
    }

    /// Rows of every source may land in any destination, so a destination is complete
    /// only when all sources are covered.
    fn coverage(&self, covered_sources: &RoaringBitmap) -> Vec<u64> {
        let all = self
            .sources
            .iter()
            // Validated to fit u32 at build time.
            .all(|s| covered_sources.contains(*s as u32));
        if all {
            self.destinations.clone()
        } else {
            Vec::new()
        }
    }

    async fn translate(&self, batch: &[u64], out: &mut Vec<Option<u64>>) -> Result<()> {
        self.translate_sync(batch, out)
    }

    fn as_ordered_compaction(&self) -> Option<&OrderedCompactionMapping> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::row_address as ra;
    use crate::remap::tests::{fr, group_a, tm};
    use std::sync::Arc;

    fn mapping() -> OrderedCompactionMapping {
        OrderedCompactionMapping::from_group(group_a()).unwrap()
    }

    #[test]
    fn lists_sources_and_destinations_in_order() {
        let m = mapping();
        assert_eq!(m.sources(), &[4, 3]);
        assert_eq!(m.destinations(), &[10, 11, 12]);
    }

    #[test]
    fn coverage_requires_every_source() {
        let m = mapping();
        let both: RoaringBitmap = [3u32, 4, 99].into_iter().collect();
        assert_eq!(m.coverage(&both), vec![10, 11, 12]);
        let one: RoaringBitmap = [4u32].into_iter().collect();
        assert_eq!(m.coverage(&one), Vec::<u64>::new());
        assert_eq!(m.coverage(&RoaringBitmap::new()), Vec::<u64>::new());
    }

    #[tokio::test]
    async fn translates_through_the_trait_object() {
        let m: Arc<dyn MappingReader> = Arc::new(mapping());
        let mut out = vec![Some(5)];
        m.translate(&[ra(3, 1), ra(4, 1), ra(4, 0), ra(3, 1)], &mut out)
            .await
            .unwrap();
        assert_eq!(
            out,
            vec![Some(ra(12, 2)), None, Some(ra(10, 0)), Some(ra(12, 2))]
        );
    }

    #[tokio::test]
    async fn rejects_addresses_outside_the_sources() {
        let m = mapping();
        let mut out = Vec::new();
        for addr in [ra(9, 0), ra(4, 5), ra(10, 0)] {
            let err = MappingReader::translate(&m, &[ra(4, 0), addr], &mut out)
                .await
                .unwrap_err();
            assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
        }
        let too_many = vec![ra(4, 0); MAX_TRANSLATION_BATCH + 1];
        let err = MappingReader::translate(&m, &too_many, &mut out)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    }

    #[test]
    fn new_validates_like_compact() {
        let err = OrderedCompactionMapping::new(vec![fr(1, 2)], vec![fr(2, 2)], tm(&[(1, 0)]))
            .unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
        let ok =
            OrderedCompactionMapping::new(vec![fr(1, 2)], vec![fr(2, 1)], tm(&[(1, 1)])).unwrap();
        let mut out = Vec::new();
        ok.translate_sync(&[ra(1, 1), ra(1, 0)], &mut out).unwrap();
        assert_eq!(out, vec![Some(ra(2, 0)), None]);
    }
}
