//! Grouping translated rows by destination.
//!
//! A stable partition scatters one source fragment's rows over its
//! destinations, but keeps each destination's rows in source order. So the
//! rows of one posting part, translated in source order and grouped by
//! destination, form one ascending run per destination — which a bitmap
//! builder appends in bulk instead of switching destination at every row.
//! [`RouteBuffer`] holds at most [`ROUTE_BATCH_ROWS`] translated rows, then
//! hands them over grouped by label (a counting sort, stable, so each run
//! keeps its order); the caller knows which destination a label stands for.

use refract_core::{Error, Result};

/// Most translated rows a [`RouteBuffer`] holds before it hands them over.
pub const ROUTE_BATCH_ROWS: usize = 16_384;

/// Translated rows waiting to be handed over, grouped by label. Memory is
/// bounded by [`ROUTE_BATCH_ROWS`] rows (12 bytes each) plus 8 bytes per
/// label.
#[derive(Debug, Default)]
pub struct RouteBuffer {
    /// `label << 32 | destination offset`, in translation order.
    pending: Vec<u64>,
    /// The destination offsets of `pending`, grouped by label.
    grouped: Vec<u32>,
    /// Per label (and one spare slot): where its group starts in `grouped`.
    starts: Vec<u32>,
    /// Per label: where its next row goes in `grouped`, then its group's end.
    ends: Vec<u32>,
    /// Labels of the map being routed.
    labels: usize,
}

impl RouteBuffer {
    /// Empties the buffer for a map of `labels` labels.
    pub(crate) fn reset(&mut self, labels: usize) {
        self.pending.clear();
        self.labels = labels;
    }

    /// Buffers the row that goes to offset `low` of the destination of
    /// `label` (a label of the map given to [`Self::reset`]); true when the
    /// buffer is full and must be [flushed](Self::flush).
    #[inline]
    pub(crate) fn push(&mut self, label: u32, low: u32) -> bool {
        self.pending.push((u64::from(label) << 32) | u64::from(low));
        self.pending.len() >= ROUTE_BATCH_ROWS
    }

    /// Hands every buffered row to `emit(label, offsets)`, one call per
    /// label in label order, each with its offsets in the order they were
    /// pushed; the buffer is empty after. A label outside the map is
    /// `Corrupt`.
    pub(crate) fn flush(&mut self, mut emit: impl FnMut(u32, &[u32]) -> Result<()>) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let labels = self.labels;
        if self.pending.len() < labels {
            // Fewer rows than labels: sorting beats counting over every label.
            // The offsets ascend within a label, so the order within a group
            // is the push order.
            self.pending.sort_unstable();
            self.grouped.clear();
            let mut at = 0;
            while let Some(&first) = self.pending.get(at) {
                let label = (first >> 32) as u32;
                if label as usize >= labels {
                    return Err(stray_label(labels));
                }
                let run = self.pending[at..]
                    .iter()
                    .take_while(|p| (**p >> 32) as u32 == label)
                    .count();
                // Truncation keeps the destination offset.
                self.grouped
                    .extend(self.pending[at..at + run].iter().map(|p| *p as u32));
                emit(label, &self.grouped)?;
                self.grouped.clear();
                at += run;
            }
            self.pending.clear();
            return Ok(());
        }
        // Callers push labels below `labels` (each one had a destination
        // base); a stray one is counted in the spare last slot and refused.
        let slot = |packed: &u64| ((packed >> 32) as usize).min(labels);
        self.starts.clear();
        self.starts.resize(labels + 1, 0);
        for packed in &self.pending {
            self.starts[slot(packed)] += 1;
        }
        if self.starts[labels] > 0 {
            return Err(stray_label(labels));
        }
        let mut start = 0;
        for count in self.starts.iter_mut() {
            let rows = *count;
            *count = start;
            start += rows;
        }
        self.grouped.clear();
        self.grouped.resize(self.pending.len(), 0);
        self.ends.clone_from(&self.starts);
        for packed in &self.pending {
            let end = &mut self.ends[slot(packed)];
            // Each label's rows fill exactly its group; truncation keeps the
            // destination offset.
            self.grouped[*end as usize] = *packed as u32;
            *end += 1;
        }
        for (label, (from, to)) in self.starts.iter().zip(&self.ends).enumerate().take(labels) {
            if from < to {
                // `label` < `labels`, which fit the u32 labels pushed.
                emit(label as u32, &self.grouped[*from as usize..*to as usize])?;
            }
        }
        self.pending.clear();
        Ok(())
    }
}

/// A row was pushed under a label the map does not have.
fn stray_label(labels: usize) -> Error {
    Error::corrupt(
        "row map",
        format!("a routed row has a label outside the map's {labels}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pushes `rows` ((label, offset) pairs) into a buffer for `labels`
    /// labels and collects what one flush hands over.
    fn route(labels: usize, rows: &[(u32, u32)]) -> Vec<(u32, Vec<u32>)> {
        let mut buffer = RouteBuffer::default();
        buffer.reset(labels);
        for (label, low) in rows {
            assert!(!buffer.push(*label, *low));
        }
        let mut out = Vec::new();
        buffer
            .flush(|fragment, lows| {
                out.push((fragment, lows.to_vec()));
                Ok(())
            })
            .unwrap();
        out
    }

    #[test]
    fn groups_come_by_label_in_push_order() {
        let rows = [(2, 5), (0, 1), (2, 6), (0, 3), (2, 9), (1, 4)];
        let want = vec![(0, vec![1, 3]), (1, vec![4]), (2, vec![5, 6, 9])];
        // Fewer rows than labels sorts; more counts; both group alike.
        assert_eq!(route(8, &rows), want);
        assert_eq!(route(3, &rows), want);
        assert!(route(3, &[]).is_empty());
    }

    #[test]
    fn a_label_outside_the_map_is_corrupt_in_both_modes() {
        for labels in [2, 6] {
            let mut buffer = RouteBuffer::default();
            buffer.reset(labels);
            for low in 0..3 {
                buffer.push(0, low);
            }
            buffer.push(7, 0);
            let err = buffer.flush(|_, _| Ok(())).unwrap_err();
            assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        }
    }

    #[test]
    fn the_buffer_fills_at_the_batch_size_and_empties_on_flush() {
        let mut buffer = RouteBuffer::default();
        buffer.reset(2);
        for low in 0..ROUTE_BATCH_ROWS as u32 - 1 {
            assert!(!buffer.push(low % 2, low));
        }
        assert!(buffer.push(1, u32::MAX), "the last row fills it");
        let mut handed = Vec::new();
        buffer
            .flush(|fragment, lows| {
                handed.push((fragment, lows.len(), lows.last().copied()));
                Ok(())
            })
            .unwrap();
        let half = ROUTE_BATCH_ROWS / 2;
        assert_eq!(
            handed,
            vec![
                (0, half, Some(ROUTE_BATCH_ROWS as u32 - 2)),
                (1, half, Some(u32::MAX))
            ]
        );
        let mut calls = 0;
        buffer
            .flush(|_, _| {
                calls += 1;
                Ok(())
            })
            .unwrap();
        assert_eq!(calls, 0, "nothing left after a flush");
    }
}
