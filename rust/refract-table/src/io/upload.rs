//! A Lance file sink that uploads in small parts, for one-pass rewrites.
//!
//! Lance's own `ObjectWriter` uploads in parts of at least 5 MiB with up to
//! ten in flight, so a rewrite of a large index file holds 10 MiB or more of
//! upload buffers. [`StreamingUpload`] holds at most one part being filled
//! plus [`PARTS_IN_FLIGHT`] parts being written, however large a single
//! write is (each write is accepted up to the end of the part being filled).
//! A file smaller than one part is written with a single PUT (one request,
//! like Lance's writer); larger ones go through a multipart upload, which the
//! store makes visible only when complete. Dropping the sink before `shutdown` abandons the
//! upload and leaves no object behind.
//!
//! Part sizes below 5 MiB suit the stores a dataset opens (local and memory);
//! a wrapped cloud store with a minimum part size needs the Lance writer.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use futures::future::BoxFuture;
use futures::FutureExt;
use lance_io::object_writer::WriteResult;
use lance_io::traits::Writer;
use object_store::path::Path;
use object_store::{MultipartUpload, ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use tokio::io::AsyncWrite;

/// Parts uploaded at once besides the one being filled.
pub const PARTS_IN_FLIGHT: usize = 2;

/// Where the upload stands.
enum State {
    /// Nothing sent yet: bytes wait until a part is full.
    Buffering(Vec<u8>),
    /// The multipart upload is being created; `pending` is its first bytes.
    Starting {
        start: BoxFuture<'static, object_store::Result<Box<dyn MultipartUpload>>>,
        pending: Vec<u8>,
    },
    /// Parts are being uploaded.
    Uploading(WriteMultipart),
    /// Shut down (or failed): nothing more may be written.
    Done,
}

/// A Lance [`Writer`] uploading to `path` of `store` in parts of
/// `part_bytes`.
pub struct StreamingUpload {
    store: Arc<dyn ObjectStore>,
    path: Path,
    part_bytes: usize,
    state: State,
    written: usize,
}

impl StreamingUpload {
    /// A sink for `path` of `store`; `part_bytes` is at least one.
    pub fn new(store: Arc<dyn ObjectStore>, path: Path, part_bytes: usize) -> Self {
        Self {
            store,
            path,
            part_bytes: part_bytes.max(1),
            state: State::Buffering(Vec::new()),
            written: 0,
        }
    }

    /// Starts the multipart upload with `pending` as its first bytes.
    fn start(&mut self, pending: Vec<u8>) {
        let store = self.store.clone();
        let path = self.path.clone();
        let start = async move { store.put_multipart(&path).await }.boxed();
        self.state = State::Starting { start, pending };
    }
}

fn io_error(err: object_store::Error) -> io::Error {
    io::Error::other(err)
}

impl AsyncWrite for StreamingUpload {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        loop {
            match &mut this.state {
                State::Buffering(buffer) if buffer.len() + data.len() < this.part_bytes => {
                    buffer.extend_from_slice(data);
                    this.written += data.len();
                    return Poll::Ready(Ok(data.len()));
                }
                State::Buffering(buffer) => {
                    let pending = std::mem::take(buffer);
                    this.start(pending);
                }
                State::Starting { start, pending } => {
                    let upload = match ready!(start.poll_unpin(cx)) {
                        Ok(upload) => upload,
                        Err(err) => {
                            this.state = State::Done;
                            return Poll::Ready(Err(io_error(err)));
                        }
                    };
                    let mut parts = WriteMultipart::new_with_chunk_size(upload, this.part_bytes);
                    parts.write(pending);
                    this.state = State::Uploading(parts);
                }
                State::Uploading(parts) => {
                    ready!(parts.poll_for_capacity(cx, PARTS_IN_FLIGHT)).map_err(io_error)?;
                    // At most the rest of the part being filled: a larger
                    // write would start several parts past the capacity check
                    // (`write_all` comes back for the remainder).
                    let room = this.part_bytes - this.written % this.part_bytes;
                    let accepted = &data[..data.len().min(room)];
                    parts.write(accepted);
                    this.written += accepted.len();
                    return Poll::Ready(Ok(accepted.len()));
                }
                State::Done => {
                    return Poll::Ready(Err(io::Error::other(format!(
                        "upload of {} was already finished",
                        this.path
                    ))))
                }
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Parts go out as they fill; the rest waits for `Writer::shutdown`.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Completion is `Writer::shutdown`, which reports the written object.
        Poll::Ready(Ok(()))
    }
}

#[async_trait::async_trait]
impl Writer for StreamingUpload {
    async fn tell(&mut self) -> lance_core::Result<usize> {
        Ok(self.written)
    }

    async fn shutdown(&mut self) -> lance_core::Result<WriteResult> {
        // Keep the store's error as the source: callers look through the
        // chain (injected faults, not-found).
        let finish = |err: object_store::Error| lance_core::Error::io_source(Box::new(err));
        let put = match std::mem::replace(&mut self.state, State::Done) {
            State::Buffering(buffer) => self
                .store
                .put(&self.path, PutPayload::from(buffer))
                .await
                .map_err(finish)?,
            State::Starting { start, pending } => {
                let mut parts = WriteMultipart::new_with_chunk_size(
                    start.await.map_err(finish)?,
                    self.part_bytes,
                );
                parts.write(&pending);
                parts.finish().await.map_err(finish)?
            }
            State::Uploading(parts) => parts.finish().await.map_err(finish)?,
            State::Done => {
                return Err(lance_core::Error::io(format!(
                    "upload of {} was already finished",
                    self.path
                )))
            }
        };
        Ok(WriteResult {
            size: self.written,
            e_tag: put.e_tag,
        })
    }
}
