//! `cleanup`, `tag` and `restore`: version retention, named versions and
//! going back to an earlier version.

use std::time::Duration;

use refract_core::Result;
use refract_table::cleanup::{cleanup_orphans, CleanupReport};
use refract_table::references::FileKind;
use refract_table::{
    cleanup_old_versions, create_tag, delete_tag, list_tags, RetentionPolicy, RetentionReport,
};
use serde::Serialize;
use serde_json::json;

use super::location::{Location, VersionSelector};
use super::progress::styled_bar;
use crate::duration::MAX_DURATION;
use crate::output::to_json;

/// What `refract cleanup` removes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanupRequest {
    /// `--older-than`: keep versions younger than this.
    pub older_than: Option<Duration>,
    /// `--keep-last`: keep the newest this many versions.
    pub keep_last: Option<u64>,
    /// `--dry-run`: list without deleting.
    pub dry_run: bool,
    /// `--orphans`: also delete unreferenced files older than `older_than`.
    pub orphans: bool,
}

impl CleanupRequest {
    /// The retention policy: the library's default (two weeks) when neither
    /// `older_than` nor `keep_last` is given, else exactly what is given.
    /// Tagged versions are always kept.
    pub fn policy(&self) -> RetentionPolicy {
        let defaults = RetentionPolicy::default();
        let (older_than, keep_last) = if self.older_than.is_none() && self.keep_last.is_none() {
            (defaults.older_than, defaults.keep_last)
        } else {
            (self.older_than, self.keep_last)
        };
        RetentionPolicy {
            older_than,
            keep_last,
            keep_tagged: true,
            dry_run: self.dry_run,
        }
    }

    /// How old an unreferenced file must be before `--orphans` deletes it:
    /// `older_than`, else the default retention window (two weeks). Younger
    /// files may belong to a commit still being written.
    pub fn orphan_min_age(&self) -> Duration {
        self.older_than
            .or(RetentionPolicy::default().older_than)
            // Were the default ever unbounded, delete no orphan rather than all.
            .unwrap_or(MAX_DURATION)
    }
}

/// `refract cleanup`: expires versions by the request's policy (and deletes
/// orphaned files with `--orphans`), then prints a summary line and one line
/// per removed file, or the report as JSON.
///
/// # Errors
/// Those of opening the dataset, [`cleanup_old_versions`] and, with
/// `--orphans`, [`cleanup_orphans`] (Corrupt for an unreadable manifest,
/// External when a delete fails).
pub async fn cleanup(at: &Location, request: &CleanupRequest, json: bool) -> Result<()> {
    let dataset = at.open().await?;
    let bar = styled_bar("{spinner} cleanup: {msg} {elapsed}");
    bar.enable_steady_tick(Duration::from_millis(120));
    let outcome = async {
        bar.set_message("expiring versions");
        let report = cleanup_old_versions(&dataset, &request.policy()).await?;
        let orphans = if request.orphans {
            bar.set_message("deleting orphaned files");
            Some(cleanup_orphans(&dataset, request.orphan_min_age()).await?)
        } else {
            None
        };
        Ok::<_, refract_core::Error>((report, orphans))
    }
    .await;
    bar.finish_and_clear();
    let (report, orphans) = outcome?;
    if json {
        let output = CleanupOutput {
            retention: &report,
            orphans_removed: orphans
                .as_ref()
                .map(|o| o.deleted.iter().map(|p| p.to_string()).collect()),
        };
        crate::out!("{}", to_json(&output)?);
        return Ok(());
    }
    print_retention(&report);
    if let Some(orphans) = &orphans {
        print_orphans(orphans);
    }
    Ok(())
}

/// What `refract cleanup --json` prints: the retention report's fields and,
/// with `--orphans`, the orphaned files deleted.
#[derive(Serialize)]
struct CleanupOutput<'a> {
    #[serde(flatten)]
    retention: &'a RetentionReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    orphans_removed: Option<Vec<String>>,
}

/// The summary line of a retention report, then one line per removed file.
fn print_retention(report: &RetentionReport) {
    let versions = report.expired_versions.len() + report.retained_versions.len();
    if report.dry_run {
        crate::out!(
            "cleanup (dry run): would expire {} of {versions} version(s), remove {} file(s) and free {} bytes",
            report.expired_versions.len(),
            report.removed.len(),
            report.bytes_freed
        );
    } else {
        crate::out!(
            "cleanup: expired {} of {versions} version(s), removed {} file(s), freed {} bytes",
            report.expired_versions.len(),
            report.removed.len(),
            report.bytes_freed
        );
    }
    let verb = if report.dry_run {
        "would remove"
    } else {
        "removed"
    };
    for file in &report.removed {
        crate::out!(
            "  {verb} {} ({}, {} bytes)",
            file.path,
            kind_label(file.kind),
            file.size_bytes
        );
    }
}

/// What `--orphans` deleted.
fn print_orphans(orphans: &CleanupReport) {
    crate::out!(
        "orphans: removed {} unreferenced file(s)",
        orphans.deleted.len()
    );
    for path in &orphans.deleted {
        crate::out!("  removed {path} (orphan)");
    }
}

/// The name of a removed file's kind, as the JSON report spells it
/// (`manifest` for a version's manifest).
fn kind_label(kind: Option<FileKind>) -> &'static str {
    match kind {
        None => "manifest",
        Some(FileKind::Data) => "data",
        Some(FileKind::Deletion) => "deletion",
        Some(FileKind::IndexSegment) => "index_segment",
        Some(FileKind::FriLedger) => "fri_ledger",
        Some(FileKind::RowMap) => "row_map",
        Some(FileKind::Transaction) => "transaction",
    }
}

/// `refract tag create`: names `version` (default: the latest) `name`.
///
/// # Errors
/// Those of opening the dataset and of [`create_tag`] (InvalidInput for a bad
/// or taken name, NotFound for a missing version).
pub async fn tag_create(at: &Location, name: &str, version: Option<u64>) -> Result<()> {
    let dataset = at.open().await?;
    let version = version.unwrap_or(dataset.version());
    create_tag(&dataset, name, version).await?;
    crate::out!("tagged version {version} as '{name}'");
    Ok(())
}

/// `refract tag delete`.
///
/// # Errors
/// Those of opening the dataset and of [`delete_tag`] (InvalidInput for a bad
/// name, NotFound for a missing tag).
pub async fn tag_delete(at: &Location, name: &str) -> Result<()> {
    let dataset = at.open().await?;
    delete_tag(&dataset, name).await?;
    crate::out!("deleted tag '{name}'");
    Ok(())
}

/// `refract tag list`: `version  tag` lines by name under a header, or a
/// JSON array of `{"name", "version"}` objects.
///
/// # Errors
/// Those of opening the dataset and of [`list_tags`] (Corrupt for an
/// unreadable tag file, External for store failures).
pub async fn tag_list(at: &Location, json: bool) -> Result<()> {
    let dataset = at.open().await?;
    let tags = list_tags(&dataset).await?;
    if json {
        let tags: Vec<serde_json::Value> = tags
            .iter()
            .map(|(name, version)| json!({ "name": name, "version": version }))
            .collect();
        crate::out!("{}", to_json(&tags)?);
        return Ok(());
    }
    crate::out!("{:>8}  tag", "version");
    for (name, version) in &tags {
        crate::out!("{version:>8}  {name}");
    }
    Ok(())
}

/// `refract restore`: commits a new version equal to the selected one.
///
/// # Errors
/// Those of [`Location::open_at`] (NotFound for a missing version or tag) and
/// of committing the restore (NotSupported, a Conflict, store errors).
pub async fn restore(at: &Location, selected: &VersionSelector) -> Result<()> {
    let mut dataset = at.open_at(Some(selected)).await?;
    let restored = dataset.version();
    dataset.restore().await?;
    match selected {
        VersionSelector::Number(_) => {
            crate::out!("restored version {restored}; version {}", dataset.version())
        }
        VersionSelector::Tag(name) => crate::out!(
            "restored tag '{name}' (version {restored}); version {}",
            dataset.version()
        ),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_WEEKS: Duration = Duration::from_secs(14 * 24 * 3600);

    #[test]
    fn no_window_and_no_count_mean_the_default_policy() {
        let request = CleanupRequest::default();
        assert_eq!(
            request.policy(),
            RetentionPolicy {
                older_than: Some(TWO_WEEKS),
                keep_last: None,
                keep_tagged: true,
                dry_run: false,
            }
        );
        assert_eq!(request.orphan_min_age(), TWO_WEEKS);
    }

    #[test]
    fn given_bounds_replace_the_default_window() {
        let request = CleanupRequest {
            keep_last: Some(3),
            dry_run: true,
            ..CleanupRequest::default()
        };
        assert_eq!(
            request.policy(),
            RetentionPolicy {
                older_than: None,
                keep_last: Some(3),
                keep_tagged: true,
                dry_run: true,
            }
        );
        assert_eq!(request.orphan_min_age(), TWO_WEEKS);
        let request = CleanupRequest {
            older_than: Some(Duration::from_secs(90)),
            keep_last: Some(2),
            ..CleanupRequest::default()
        };
        assert_eq!(
            request.policy(),
            RetentionPolicy {
                older_than: Some(Duration::from_secs(90)),
                keep_last: Some(2),
                keep_tagged: true,
                dry_run: false,
            }
        );
        assert_eq!(request.orphan_min_age(), Duration::from_secs(90));
    }
}
