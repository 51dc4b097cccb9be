//! Page-level concatenation of complete Lance files.
//!
//! Rows that are neither deleted nor reordered do not need to be decoded and
//! encoded again to move into a bigger file: lance-file can copy each input's
//! encoded pages as they are and regenerate only the column metadata and the
//! footer. Compaction uses this for runs of fragments without deletions; this
//! module speaks the dataset store's terms (relative paths, manifest sizes,
//! Refract errors) around it.
//!
//! The output keeps the inputs' page sizes: concatenating many small files
//! yields a big file of small pages.

use std::sync::Arc;

use lance_file::concat::{
    concat_files, EncodedFileInput, FileConcatOptions, FileConcatResult, FileConcatTarget,
};
use lance_io::scheduler::{ScanScheduler, SchedulerConfig};
use lance_io::traits::Writer;
use lance_io::utils::CachedFileSize;
use refract_core::{Error, Result};

use super::checksumming_writer::{ChecksumHandle, ChecksummingWriter};
use super::lance_files::{
    check_footer_fits, ensure_absent, lance_error, written_summary, LanceFileSummary, FILE_VERSION,
    READ_BUFFER_BYTES,
};
use super::paths::RelativePath;
use super::recorded_files::RecordedFile;
use super::store::DatasetStore;
use refract_core::checksum::FileChecksum;

/// One complete Lance file to concatenate, as the manifest records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConcatInput {
    /// Path relative to the dataset root.
    pub path: RelativePath,
    /// File size in bytes (saves a HEAD request per input).
    pub size_bytes: u64,
    /// Rows the file must hold; a file with another count is an error.
    pub num_rows: u64,
    /// The checksum the manifest records, if any: every page copied is
    /// verified against it first.
    pub checksum: Option<FileChecksum>,
}

/// What [`concat_lance_files`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConcatOutcome {
    /// The output file was written and holds the inputs' rows in order.
    Written(LanceFileSummary),
    /// The inputs cannot be joined page by page (the reason says why: another
    /// file version, schema or column encoding, or fewer than two inputs).
    /// Nothing was written; decode and re-encode instead.
    Unsupported(String),
}

/// Writes `output` as the rows of `inputs`, in order, by copying their encoded
/// pages (no decoding). `schema` is the schema every input must store.
///
/// # Errors
/// InvalidInput when `output` already exists; NotFound for a missing input;
/// Corrupt or InvalidInput for an input whose bytes or row count do not match;
/// External for store failures. On error no file becomes visible at `output`.
pub async fn concat_lance_files(
    store: &DatasetStore,
    inputs: &[ConcatInput],
    schema: &lance_core::datatypes::Schema,
    output: &RelativePath,
) -> Result<ConcatOutcome> {
    if inputs.len() < 2 {
        return Ok(ConcatOutcome::Unsupported(format!(
            "{} input file(s); page concatenation needs at least two",
            inputs.len()
        )));
    }
    ensure_absent(store, output).await?;
    check_input_sizes(inputs)?;
    let target = FileConcatTarget::new(FILE_VERSION, Arc::new(schema.clone()));
    let task = tokio::spawn(run_concat(
        store.clone(),
        inputs.to_vec(),
        target,
        output.clone(),
    ));
    match task.await {
        Ok(result) => result,
        // Inputs are files of this dataset, but a panic on crafted bytes must
        // still surface as an error, not unwind through the caller.
        Err(join) if join.is_panic() => Err(Error::corrupt(
            format!("Lance files concatenated into {output}"),
            "the Lance page copier panicked",
        )),
        Err(join) => Err(Error::external(
            format!("concatenating Lance files into {output}"),
            join,
        )),
    }
}

/// Every input must at least hold a footer.
fn check_input_sizes(inputs: &[ConcatInput]) -> Result<()> {
    inputs
        .iter()
        .try_for_each(|input| check_footer_fits(&input.path, input.size_bytes))
}

async fn run_concat(
    store: DatasetStore,
    inputs: Vec<ConcatInput>,
    target: FileConcatTarget,
    output: RelativePath,
) -> Result<ConcatOutcome> {
    let lance_store = store.lance_store().clone();
    let recorded: Vec<RecordedFile> = inputs
        .iter()
        .filter_map(|input| {
            input.checksum.as_ref().map(|checksum| RecordedFile {
                path: input.path.clone(),
                size_bytes: input.size_bytes,
                checksum: checksum.clone(),
            })
        })
        .collect();
    let verifying = store.verifying(&recorded).lance_store().clone();
    let scheduler = ScanScheduler::new(verifying, SchedulerConfig::new(READ_BUFFER_BYTES));
    let mut encoded = Vec::with_capacity(inputs.len());
    for input in &inputs {
        let file = scheduler
            .open_file(
                &input.path.to_object_path(),
                &CachedFileSize::new(input.size_bytes),
            )
            .await
            .map_err(|e| lance_error("opening", &input.path, e, false))?;
        encoded.push(EncodedFileInput::new(file).with_expected_num_rows(input.num_rows));
    }
    for input in &inputs {
        if let Some(checksum) = &input.checksum {
            checksum.check_size(&format!("Lance file {}", input.path), input.size_bytes)?;
        }
    }
    let object_path = output.to_object_path();
    let checksum = ChecksumHandle::default();
    let output_checksum = checksum.clone();
    let factory = move || async move {
        let writer: Box<dyn Writer> = lance_store.create(&object_path).await?;
        let writer: Box<dyn Writer> = Box::new(ChecksummingWriter::new(writer, output_checksum));
        Ok::<_, lance_core::Error>(writer)
    };
    let result = concat_files(&target, &encoded, factory, FileConcatOptions::default())
        .await
        .map_err(|e| lance_error("concatenating into", &output, e, true))?;
    Ok(match result {
        FileConcatResult::Written(written) => ConcatOutcome::Written(written_summary(
            &output,
            written.num_rows,
            written.size_bytes,
            &checksum,
        )?),
        FileConcatResult::Reused(index, _) => {
            ConcatOutcome::Unsupported(format!("input {index} already is the whole output"))
        }
        FileConcatResult::Unsupported(reason) => ConcatOutcome::Unsupported(reason.to_string()),
    })
}
