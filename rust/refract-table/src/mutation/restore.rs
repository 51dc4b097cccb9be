//! Restoring an old version as the new latest one.

use refract_core::Result;

use crate::dataset::Dataset;
use crate::transaction::{Operation, Transaction};

impl Dataset {
    /// Commits a new version whose content equals this (older) checkout.
    /// Feature flags are sticky and `max_fragment_id` never decreases.
    ///
    /// # Errors
    /// Those of [`Self::checkout_latest`] and [`Self::commit_transaction`]; a
    /// commit landing after the latest version is read is a retryable Conflict.
    pub async fn restore(&mut self) -> Result<()> {
        let latest = self.checkout_latest().await?;
        let txn = Transaction::new(
            latest.version(),
            Operation::Restore {
                version: self.version(),
            },
        );
        *self = latest.commit_transaction(txn, None).await?;
        Ok(())
    }
}
