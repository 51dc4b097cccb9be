//! A Lance [`Writer`] that checksums every byte it passes on.
//!
//! Lance file writers stream their bytes through a [`Writer`]; wrapping it in
//! a [`ChecksummingWriter`] records the file's [`FileChecksum`] as it is
//! written, with no second read. The checksum is taken from the shared
//! [`ChecksumHandle`] once the writer has shut down.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use async_trait::async_trait;
use lance_io::object_writer::WriteResult;
use lance_io::traits::Writer;
use refract_core::checksum::{ChecksumBuilder, FileChecksum};
use tokio::io::AsyncWrite;

/// Reads the checksum of what a [`ChecksummingWriter`] wrote.
#[derive(Debug, Clone, Default)]
pub(crate) struct ChecksumHandle {
    builder: Arc<Mutex<ChecksumBuilder>>,
}

impl ChecksumHandle {
    /// The checksum of the bytes written so far, and their count.
    pub(crate) fn finish(&self) -> (FileChecksum, u64) {
        // A poisoned lock still holds the bytes counted before the panic;
        // the caller compares the count with the file size.
        let builder = self
            .builder
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let len = builder.len();
        (builder.finish(), len)
    }
}

/// Passes writes to `inner`, checksumming the bytes it accepted.
pub(crate) struct ChecksummingWriter {
    inner: Box<dyn Writer>,
    handle: ChecksumHandle,
}

impl ChecksummingWriter {
    /// Wraps `inner`, adding what it writes to `handle`'s checksum.
    pub(crate) fn new(inner: Box<dyn Writer>, handle: ChecksumHandle) -> Self {
        Self { inner, handle }
    }
}

impl AsyncWrite for ChecksummingWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(written)) = &poll {
            if let Some(accepted) = buf.get(..*written) {
                self.handle
                    .builder
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .update(accepted);
            }
        }
        poll
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[async_trait]
impl Writer for ChecksummingWriter {
    async fn tell(&mut self) -> lance_core::Result<usize> {
        self.inner.tell().await
    }

    async fn shutdown(&mut self) -> lance_core::Result<WriteResult> {
        self.inner.shutdown().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// Keeps what it accepts, at most `most` bytes per write.
    struct Collect {
        bytes: Vec<u8>,
        most: usize,
    }

    impl AsyncWrite for Collect {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let n = buf.len().min(self.most);
            self.bytes.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[async_trait]
    impl Writer for Collect {
        async fn tell(&mut self) -> lance_core::Result<usize> {
            Ok(self.bytes.len())
        }

        async fn shutdown(&mut self) -> lance_core::Result<WriteResult> {
            Ok(WriteResult {
                size: self.bytes.len(),
                e_tag: None,
            })
        }
    }

    #[tokio::test]
    async fn the_checksum_covers_exactly_the_bytes_the_inner_writer_accepted() {
        let data: Vec<u8> = (0..(3 << 20) + 12_345)
            .map(|i| (i * 31 % 251) as u8)
            .collect();
        for most in [usize::MAX, (1 << 20) + 1, 4_097, 7] {
            let handle = ChecksumHandle::default();
            let inner = Box::new(Collect {
                bytes: Vec::new(),
                most,
            });
            let mut writer = ChecksummingWriter::new(inner, handle.clone());
            // Small writes and one large one, as Lance's writer mixes them.
            writer.write_all(&data[..10]).await.unwrap();
            writer.write_all(&data[10..]).await.unwrap();
            let (checksum, len) = handle.finish();
            assert_eq!(len, data.len() as u64);
            assert_eq!(
                checksum,
                FileChecksum::of(&data),
                "inner accepting {most} per write"
            );
        }
    }
}
