//! Tags: names for versions that retention never removes.
//!
//! A tag is one small JSON object, `_refs/tags/<name>.json` holding
//! `{"version": N}`, written with put-if-absent so two writers creating the
//! same tag cannot both succeed. Names are 1–128 characters of ASCII
//! letters, digits, `.`, `_` and `-`, not starting with `.`, so a name is
//! always one safe path segment.

use std::collections::BTreeMap;

use bytes::Bytes;
use refract_core::{Error, Result};
use serde::{Deserialize, Serialize};

use crate::dataset::{list_versions, Dataset};
use crate::io::paths::{v1_manifest_path, TAGS_DIR};
use crate::io::{manifest_path, DatasetStore, RelativePath};

/// Longest tag name.
const MAX_TAG_NAME_CHARS: usize = 128;

/// What a tag file holds: pylance's JSON shape, so both engines read and
/// write the same tags (only `version` is needed to read one).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TagFile {
    #[serde(default)]
    branch: Option<String>,
    version: u64,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    updated_at: Option<String>,
    /// Size of the tagged version's manifest file (pylance's readers use it).
    #[serde(default)]
    manifest_size: u64,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
}

/// The path of tag `name`, after checking the name.
fn tag_path(name: &str) -> Result<RelativePath> {
    let valid = !name.is_empty()
        && name.len() <= MAX_TAG_NAME_CHARS
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !valid {
        return Err(Error::invalid_input(format!(
            "invalid tag name '{}': use 1 to {MAX_TAG_NAME_CHARS} ASCII letters, digits, '.', '_' or '-', not starting with '.'",
            refract_core::error::clean_text(name)
        )));
    }
    RelativePath::parse(&format!("{TAGS_DIR}/{name}.json"))
}

/// Names `version` of `dataset` as `name`.
///
/// # Errors
/// InvalidInput for a bad name or a tag that already exists (even one a
/// concurrent writer created first); NotFound when the version does not exist.
pub async fn create_tag(dataset: &Dataset, name: &str, version: u64) -> Result<()> {
    let path = tag_path(name)?;
    if !list_versions(dataset.store()).await?.contains(&version) {
        return Err(Error::not_found(format!(
            "cannot tag version {version} as '{name}': the version does not exist"
        )));
    }
    let manifest_size = match dataset.store().head(&manifest_path(version)).await {
        // A table created with Lance's V1 naming.
        Err(Error::NotFound { .. }) => dataset.store().head(&v1_manifest_path(version)).await?,
        other => other?,
    };
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    let tag = TagFile {
        branch: None,
        version,
        created_at: Some(now.clone()),
        updated_at: Some(now),
        manifest_size,
        metadata: BTreeMap::new(),
    };
    let bytes = serde_json::to_vec(&tag).map_err(|e| Error::external("encoding a tag", e))?;
    if dataset
        .store()
        .put_if_absent(&path, Bytes::from(bytes))
        .await?
    {
        return Ok(());
    }
    let existing = read_tag(dataset.store(), &path, name).await?;
    Err(Error::invalid_input(format!(
        "tag '{name}' already exists (it names version {existing}); delete it first"
    )))
}

/// Removes tag `name`.
///
/// # Errors
/// InvalidInput for a bad name; NotFound when there is no such tag.
pub async fn delete_tag(dataset: &Dataset, name: &str) -> Result<()> {
    let path = tag_path(name)?;
    // Reading first turns a missing tag into NotFound (deletes are idempotent).
    read_tag(dataset.store(), &path, name).await?;
    dataset.store().delete(&path).await
}

/// Every tag and the version it names, by name.
///
/// # Errors
/// Corrupt for an unreadable tag file; External on store failures.
pub async fn list_tags(dataset: &Dataset) -> Result<BTreeMap<String, u64>> {
    list_tags_in(dataset.store()).await
}

/// The version tag `name` names.
///
/// # Errors
/// InvalidInput for a bad name; NotFound when there is no such tag.
pub async fn tag_version(dataset: &Dataset, name: &str) -> Result<u64> {
    read_tag(dataset.store(), &tag_path(name)?, name).await
}

pub(crate) async fn list_tags_in(store: &DatasetStore) -> Result<BTreeMap<String, u64>> {
    let mut tags = BTreeMap::new();
    for object in store.list(&RelativePath::parse(TAGS_DIR)?).await? {
        let Some(name) = object.path.file_name().strip_suffix(".json") else {
            continue;
        };
        if tag_path(name).is_err() {
            continue;
        }
        let version = read_tag(store, &object.path, name).await?;
        tags.insert(name.to_string(), version);
    }
    Ok(tags)
}

async fn read_tag(store: &DatasetStore, path: &RelativePath, name: &str) -> Result<u64> {
    let bytes = store.get(path).await.map_err(|err| match err {
        Error::NotFound { .. } => Error::not_found(format!("tag '{name}' does not exist")),
        other => other,
    })?;
    let tag: TagFile = serde_json::from_slice(&bytes)
        .map_err(|e| Error::corrupt(path.to_string(), format!("not a tag file: {e}")))?;
    Ok(tag.version)
}

impl Dataset {
    /// The version tag `name` names, checked out.
    ///
    /// # Errors
    /// As [`tag_version`], and NotFound when the version is gone.
    pub async fn checkout_tag(&self, name: &str) -> Result<Dataset> {
        self.checkout_version(tag_version(self, name).await?).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::OpenOptions;
    use crate::testing::{sample_rows, sample_schema};
    use crate::WriteOptions;

    async fn table() -> Dataset {
        let uri = format!("memory://tags-{}", uuid::Uuid::new_v4());
        let mut dataset = Dataset::create(&uri, sample_schema(), OpenOptions::default())
            .await
            .unwrap();
        dataset
            .append(vec![sample_rows(0, 10)], &WriteOptions::default())
            .await
            .unwrap();
        dataset
    }

    #[tokio::test]
    async fn tags_name_versions_until_deleted() {
        let dataset = table().await;
        create_tag(&dataset, "v1.0", 1).await.unwrap();
        create_tag(&dataset, "latest-good", 2).await.unwrap();
        let tags = list_tags(&dataset).await.unwrap();
        assert_eq!(
            tags.into_iter().collect::<Vec<_>>(),
            vec![("latest-good".to_string(), 2), ("v1.0".to_string(), 1)]
        );
        assert_eq!(dataset.checkout_tag("v1.0").await.unwrap().version(), 1);
        delete_tag(&dataset, "v1.0").await.unwrap();
        assert_eq!(list_tags(&dataset).await.unwrap().len(), 1);
        assert!(matches!(
            dataset.checkout_tag("v1.0").await,
            Err(Error::NotFound { .. })
        ));
    }

    #[tokio::test]
    async fn bad_tags_are_one_line_errors_that_change_nothing() {
        let dataset = table().await;
        create_tag(&dataset, "gold", 2).await.unwrap();
        let err = create_tag(&dataset, "gold", 1).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid input: tag 'gold' already exists (it names version 2); delete it first"
        );
        assert!(matches!(
            create_tag(&dataset, "future", 9).await,
            Err(Error::NotFound { .. })
        ));
        for bad in ["", ".hidden", "a/b", "../x", "sp ace", &"x".repeat(129)] {
            assert!(
                matches!(
                    create_tag(&dataset, bad, 1).await,
                    Err(Error::InvalidInput { .. })
                ),
                "{bad:?}"
            );
        }
        assert!(matches!(
            delete_tag(&dataset, "nope").await,
            Err(Error::NotFound { .. })
        ));
        assert_eq!(
            list_tags(&dataset)
                .await
                .unwrap()
                .into_iter()
                .collect::<Vec<_>>(),
            vec![("gold".to_string(), 2)]
        );
    }
}
