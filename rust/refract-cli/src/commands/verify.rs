//! `verify`: every stored file against its recorded checksum and, with
//! `--deep`, every index segment against its data.

use refract_core::{Error, Result};
use refract_index::IndexRegistry;
use refract_reader::{verify_index_data, IndexCheckProgress};
use refract_table::verify::{verify_dataset, VerifyOptions, VerifyProgress};

use super::location::Location;
use super::progress::styled_bar;

/// `refract verify`: prints the report (text or JSON); a damaged, missing or
/// unreadable file, or (with `deep`) an index segment that does not match
/// its data, makes the command fail after the report.
pub async fn verify(
    at: &Location,
    options: VerifyOptions,
    deep: bool,
    as_json: bool,
) -> Result<()> {
    let dataset = at.open().await?;
    let bar = styled_bar("verify [{bar:30}] {pos}/{len} files, {msg}, {elapsed}");
    let handle = bar.clone();
    let progress = move |p: VerifyProgress| {
        handle.set_length(p.files_total);
        handle.set_position(p.files_done);
        handle.set_message(format!("{} MB", p.bytes_done / 1_000_000));
    };
    let report = verify_dataset(&dataset, options, Some(&progress)).await;
    bar.finish_and_clear();
    let mut report = report?;
    if deep {
        let bar =
            styled_bar("verify --deep [{bar:30}] {pos}/{len} index segments, {msg}, {elapsed}");
        let handle = bar.clone();
        let progress = move |p: IndexCheckProgress| {
            handle.set_length(p.segments_total);
            handle.set_position(p.segments_done);
            handle.set_message(format!("{} entries", p.entries_checked));
        };
        let checked = verify_index_data(
            &dataset,
            &IndexRegistry::with_builtins(),
            &mut report,
            Some(&progress),
        )
        .await;
        bar.finish_and_clear();
        checked?;
    }
    if as_json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| Error::external("encoding the verify report", e))?;
        crate::out!("{text}");
    } else {
        let versions: Vec<String> = report.versions.iter().map(u64::to_string).collect();
        crate::out!(
            "verified {} files ({} bytes) of version {}",
            report.files_verified,
            report.bytes_verified,
            versions.join(", ")
        );
        if report.files_without_checksum > 0 || report.segments_without_file_list > 0 {
            crate::out!(
                "not checksummed (recorded without a checksum, e.g. by another Lance writer): {} files present, {} index segments without a file list",
                report.files_without_checksum,
                report.segments_without_file_list
            );
        }
        if let Some(index_data) = &report.index_data {
            crate::out!(
                "compared {} index segments ({} entries) with their data",
                index_data.segments_checked,
                index_data.entries_checked
            );
            for unchecked in &index_data.segments_unchecked {
                crate::out!("not compared: {}: {}", unchecked.segment, unchecked.reason);
            }
        }
        for problem in &report.problems {
            crate::out!("damaged: {}: {}", problem.file, problem.error);
        }
    }
    if report.is_clean() {
        return Ok(());
    }
    Err(Error::corrupt(
        format!("dataset {}", dataset.uri()),
        format!("{} file(s) failed verification", report.problems.len()),
    ))
}
