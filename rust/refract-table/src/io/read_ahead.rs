//! Reading a Lance file window by window, one window ahead of the consumer.
//!
//! A one-pass rewrite (an index remap) alternates between waiting for the
//! next rows and working on them. Reading the next window on its own task
//! while the consumer works on the current one overlaps the two; a bounded
//! channel keeps at most `ahead` windows decoded and waiting, so memory stays
//! that of a few windows whatever the file's size.

use std::ops::Range;

use arrow_array::RecordBatch;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use refract_core::{Error, Result};
use tokio::sync::mpsc;

use super::lance_files::LanceFileReader;
use crate::task::AbortOnDrop;

/// Streams every row of `reader` in windows of `window_rows` rows (one
/// `read_range` per window, so the reader never reads past the window it was
/// asked for), with up to `ahead` windows read before the consumer asks.
/// Dropping the stream stops the reading task. Must be called inside a tokio
/// runtime; zero `window_rows` or `ahead` is `InvalidInput`.
pub fn read_ahead(
    reader: &LanceFileReader,
    window_rows: u32,
    ahead: usize,
) -> Result<BoxStream<'static, Result<RecordBatch>>> {
    if window_rows == 0 || ahead == 0 {
        return Err(Error::invalid_input(format!(
            "read-ahead needs windows of at least one row and at least one window ahead \
             (got {window_rows} rows, {ahead} ahead)"
        )));
    }
    let (sender, receiver) = mpsc::channel::<Result<Vec<RecordBatch>>>(ahead);
    let reader = reader.clone();
    let task = AbortOnDrop::spawn(async move {
        for window in windows(reader.num_rows(), window_rows) {
            let read = read_window(&reader, window, window_rows).await;
            let failed = read.is_err();
            // A closed channel means the consumer is gone: stop reading.
            if sender.send(read).await.is_err() || failed {
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

/// `0..rows` cut into consecutive ranges of at most `window_rows` rows.
fn windows(rows: u64, window_rows: u32) -> impl Iterator<Item = Range<u64>> {
    let step = u64::from(window_rows);
    (0..rows.div_ceil(step)).map(move |i| i * step..((i + 1) * step).min(rows))
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
    fn windows_cover_every_row_once() {
        assert_eq!(windows(0, 8).count(), 0);
        assert_eq!(windows(8, 8).collect::<Vec<_>>(), vec![0..8]);
        assert_eq!(
            windows(17, 8).collect::<Vec<_>>(),
            vec![0..8, 8..16, 16..17]
        );
    }
}
