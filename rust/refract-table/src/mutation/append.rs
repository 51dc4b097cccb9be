//! Appending batches as new fragments at the end of the fragment list.

use arrow_array::RecordBatch;
use refract_core::Result;

use crate::dataset::write::conform_batch;
use crate::dataset::{Dataset, WriteOptions};
use crate::transaction::Operation;

impl Dataset {
    /// Appends `batches` as new fragments at the end of the list and commits.
    /// The schema is checked before anything is written: a mismatch is
    /// InvalidInput and leaves the dataset unchanged.
    ///
    /// # Errors
    /// InvalidInput for out-of-range `options` or a mismatched batch;
    /// NotSupported for writer flags this client does not write; those of
    /// [`Self::write_fragments`] and [`Self::commit`].
    pub async fn append(
        &mut self,
        batches: Vec<RecordBatch>,
        options: &WriteOptions,
    ) -> Result<()> {
        options.validate()?;
        self.features().check_write(self.manifest().writer_flags)?;
        let schema = self.schema();
        let batches = batches
            .iter()
            .map(|batch| conform_batch(&schema, batch))
            .collect::<Result<Vec<_>>>()?;
        let fragments = self
            .write_fragments(futures::stream::iter(batches.into_iter().map(Ok)), options)
            .await?;
        if fragments.is_empty() {
            // Nothing to add: no new version.
            return Ok(());
        }
        *self = self.commit(Operation::Append { fragments }).await?;
        Ok(())
    }
}
