//! `verify`: every stored file against its recorded checksum.

use indicatif::{ProgressBar, ProgressStyle};
use refract_core::{Error, Result};
use refract_table::verify::{verify_dataset, VerifyOptions, VerifyProgress};

use super::location::Location;

/// `refract verify`: prints the report (text or JSON); a damaged, missing or
/// unreadable file makes the command fail after the report.
pub async fn verify(at: &Location, all_versions: bool, as_json: bool) -> Result<()> {
    let dataset = at.open().await?;
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("verify [{bar:30}] {pos}/{len} files, {msg}, {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let handle = bar.clone();
    let progress = move |p: VerifyProgress| {
        handle.set_length(p.files_total);
        handle.set_position(p.files_done);
        handle.set_message(format!("{} MB", p.bytes_done / 1_000_000));
    };
    let report = verify_dataset(&dataset, VerifyOptions { all_versions }, Some(&progress)).await;
    bar.finish_and_clear();
    let report = report?;
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
                "not checksummed (written before checksums): {} files present, {} index segments without a file list",
                report.files_without_checksum,
                report.segments_without_file_list
            );
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
