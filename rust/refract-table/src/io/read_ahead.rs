//! Reading a Lance file window by window, ahead of the consumer.
//!
//! A one-pass rewrite (an index remap) alternates between waiting for the
//! next rows and working on them. Reading the next window on its own task
//! while the consumer works on the current one overlaps the two; a window is
//! read only once a slot of a channel of `ahead` slots is free, so at most
//! `ahead` windows are read or waiting besides the consumer's, and memory
//! stays that of a few windows whatever the file's size.
//!
//! Rows can differ in size by orders of magnitude (an ngram posting holds
//! anything from one row address to millions), so a window can be sized in
//! bytes ([`WindowSize::bytes`]): each window's row count follows the size of
//! the rows read just before it.

use std::ops::Range;

use arrow_array::{Array, RecordBatch};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use refract_core::{Error, Result};
use tokio::sync::mpsc;

use super::lance_files::LanceFileReader;
use crate::task::AbortOnDrop;

/// How many rows each window of [`read_ahead`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSize {
    max_rows: u32,
    /// Decoded bytes a window aims at; `None` reads `max_rows` every time.
    target_bytes: Option<usize>,
}

impl WindowSize {
    /// Windows of `rows` rows (the last one may be shorter).
    pub const fn rows(rows: u32) -> Self {
        Self {
            max_rows: rows,
            target_bytes: None,
        }
    }

    /// Windows of about `target_bytes` decoded bytes and at most `max_rows`
    /// rows. The first window is one row; each later one is sized from the
    /// bytes per row of the window before, growing at most twofold per
    /// window, so a file of large rows is read a row or two at a time while
    /// a file of small rows soon reads `max_rows` at once. A single row
    /// larger than `target_bytes` is still read whole.
    pub const fn bytes(target_bytes: usize, max_rows: u32) -> Self {
        Self {
            max_rows,
            target_bytes: Some(target_bytes),
        }
    }

    fn check(&self) -> Result<()> {
        if self.max_rows == 0 || self.target_bytes == Some(0) {
            return Err(Error::invalid_input(format!(
                "read-ahead windows need at least one row and one byte (got {self:?})"
            )));
        }
        Ok(())
    }

    /// Rows of the first window.
    fn first(&self) -> u32 {
        match self.target_bytes {
            Some(_) => 1,
            None => self.max_rows,
        }
    }

    /// Rows of the window after one of `rows` rows that decoded to `bytes`.
    fn after(&self, rows: u32, bytes: usize) -> u32 {
        let Some(target) = self.target_bytes else {
            return self.max_rows;
        };
        let bytes_per_row = (bytes / rows.max(1) as usize).max(1);
        let fitting = u32::try_from(target / bytes_per_row).unwrap_or(u32::MAX);
        fitting.clamp(1, self.max_rows.min(rows.saturating_mul(2)).max(1))
    }
}

/// Streams every row of `reader` in windows sized by `size` (one
/// `read_range` per window, so the reader never reads past the window it was
/// asked for), with at most `ahead` windows read (or being read) before the
/// consumer asks.
/// Dropping the stream stops the reading task. Must be called inside a tokio
/// runtime.
///
/// # Errors
/// InvalidInput for a window of zero rows or bytes, or a zero `ahead`; the
/// stream yields the errors of reading the file.
pub fn read_ahead(
    reader: &LanceFileReader,
    size: WindowSize,
    ahead: usize,
) -> Result<BoxStream<'static, Result<RecordBatch>>> {
    read_ahead_counting(reader, size, ahead, || {})
}

/// [`read_ahead`], calling `on_read` as each window's read begins (tests
/// count the windows read ahead of the consumer this way).
pub(crate) fn read_ahead_counting(
    reader: &LanceFileReader,
    size: WindowSize,
    ahead: usize,
    on_read: impl Fn() + Send + 'static,
) -> Result<BoxStream<'static, Result<RecordBatch>>> {
    size.check()?;
    if ahead == 0 {
        return Err(Error::invalid_input(
            "read-ahead needs at least one window ahead (got 0)",
        ));
    }
    let (sender, receiver) = mpsc::channel::<Result<Vec<RecordBatch>>>(ahead);
    let reader = reader.clone();
    let task = AbortOnDrop::spawn(async move {
        let rows = reader.num_rows();
        let (mut start, mut window_rows) = (0u64, size.first());
        while start < rows {
            // A slot first, then the read: a window is only read once it has
            // somewhere to wait, so at most `ahead` windows are read or being
            // read beyond the one the consumer works on. A closed channel
            // means the consumer is gone: stop reading.
            let Ok(slot) = sender.reserve().await else {
                return;
            };
            on_read();
            let window = start..(start + u64::from(window_rows)).min(rows);
            start = window.end;
            let read = read_window(&reader, window.clone(), window_rows).await;
            if let Ok(batches) = &read {
                let bytes = batches.iter().map(data_bytes).sum();
                // A window is at most `window_rows` (a u32) rows long.
                let read_rows = u32::try_from(window.end - window.start).unwrap_or(u32::MAX);
                window_rows = size.after(read_rows, bytes);
            }
            let failed = read.is_err();
            slot.send(read);
            if failed {
                return;
            }
        }
    });
    let stream = futures::stream::unfold((receiver, task), |(mut receiver, task)| async move {
        let window = receiver.recv().await?;
        Some((window, (receiver, task)))
    });
    Ok(stream
        .map_ok(|batches| futures::stream::iter(batches.into_iter().map(Ok)))
        .try_flatten()
        .boxed())
}

/// The bytes `batch`'s rows hold in its buffers (not the capacity the decoder
/// happened to allocate, which carries tens of KiB of fixed overhead).
pub(crate) fn data_bytes(batch: &RecordBatch) -> usize {
    batch
        .columns()
        .iter()
        .map(|column| {
            let data = column.to_data();
            // Only slices of malformed data fail to size; count capacity then.
            data.get_slice_memory_size()
                .unwrap_or_else(|_| column.get_array_memory_size())
        })
        .sum()
}

async fn read_window(
    reader: &LanceFileReader,
    window: Range<u64>,
    window_rows: u32,
) -> Result<Vec<RecordBatch>> {
    reader
        .read_range(window, None, window_rows)
        .await?
        .try_collect()
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_windows_keep_their_rows() {
        let size = WindowSize::rows(8);
        assert_eq!(size.first(), 8);
        assert_eq!(size.after(8, 1 << 30), 8);
        assert_eq!(size.after(3, 1), 8);
    }

    #[test]
    fn byte_windows_follow_the_rows_read_before() {
        let size = WindowSize::bytes(1_000, 64);
        assert_eq!(size.first(), 1);
        // Small rows: grow at most twofold per window, then stop at max_rows.
        assert_eq!(size.after(1, 10), 2);
        assert_eq!(size.after(32, 320), 64);
        assert_eq!(size.after(64, 640), 64);
        // Large rows: back to the rows that fit, never below one.
        assert_eq!(size.after(64, 64 * 250), 4);
        assert_eq!(size.after(4, 4 * 5_000), 1);
        assert_eq!(size.after(1, 0), 2);
    }

    #[test]
    fn zero_windows_are_invalid() {
        assert!(WindowSize::rows(0).check().is_err());
        assert!(WindowSize::bytes(0, 8).check().is_err());
        assert!(WindowSize::bytes(8, 0).check().is_err());
        assert!(WindowSize::bytes(8, 1).check().is_ok());
    }
}
