//! `inspect` and `versions`.

use super::location::{Location, VersionSelector};
use refract_core::Result;
use refract_table::dataset::{Dataset, VersionEntry};
use serde_json::{json, Value};

/// The JSON description `refract inspect --json` prints.
pub fn describe(dataset: &Dataset) -> Value {
    let manifest = dataset.manifest();
    let fragments: Vec<Value> = manifest
        .fragments
        .iter()
        .map(|fragment| {
            json!({
                "id": fragment.id,
                "physical_rows": fragment.physical_rows,
                "deleted_rows": fragment.num_deleted_rows(),
                "data_files": fragment.files.iter().map(|file| file.path.to_string()).collect::<Vec<_>>(),
            })
        })
        .collect();
    let indices: Vec<Value> = manifest
        .indices
        .iter()
        .map(|index| {
            json!({
                "name": index.name,
                "uuid": index.uuid.to_string(),
                "type": index.index_type,
                "fields": index.fields,
                "fragments": index.fragment_bitmap.as_ref().map(|bitmap| bitmap.iter().collect::<Vec<u32>>()),
                "system": index.is_system(),
            })
        })
        .collect();
    json!({
        "uri": dataset.uri(),
        "version": manifest.version,
        "reader_flags": manifest.reader_flags,
        "writer_flags": manifest.writer_flags,
        "max_fragment_id": manifest.max_fragment_id,
        "live_rows": manifest.fragments.iter().map(|f| f.live_rows()).sum::<u64>(),
        "fragments": fragments,
        "indices": indices,
    })
}

/// `refract inspect`: the latest version, or `version`.
pub async fn inspect(
    at: &Location,
    version: Option<&VersionSelector>,
    as_json: bool,
) -> Result<()> {
    let dataset = at.open_at(version).await?;
    let description = describe(&dataset);
    if as_json {
        crate::out!("{description:#}");
        return Ok(());
    }
    let manifest = dataset.manifest();
    crate::out!("dataset {} at version {}", dataset.uri(), manifest.version);
    crate::out!(
        "flags: reader 0x{:x}, writer 0x{:x}",
        manifest.reader_flags,
        manifest.writer_flags
    );
    crate::out!(
        "{:>8} {:>14} {:>12}  data files",
        "fragment",
        "physical_rows",
        "deleted_rows"
    );
    for fragment in &manifest.fragments {
        let files: Vec<String> = fragment.files.iter().map(|f| f.path.to_string()).collect();
        crate::out!(
            "{:>8} {:>14} {:>12}  {}",
            fragment.id,
            fragment.physical_rows,
            fragment.num_deleted_rows(),
            files.join(", ")
        );
    }
    if manifest.indices.is_empty() {
        crate::out!("indices: none");
    }
    for index in &manifest.indices {
        crate::out!(
            "index {} ({}) uuid {} on {:?}",
            index.name,
            index.index_type,
            index.uuid,
            index.fields
        );
    }
    Ok(())
}

/// `refract versions`: one line per committed version, ascending, under a
/// header line. A readable version prints `version timestamp_ms operation`;
/// a version whose manifest cannot be read prints its version, `-` for the
/// timestamp and `unreadable: <reason>`, the reason being the one-line error
/// (it names the version and its manifest file). The other versions are
/// listed all the same and the command succeeds; only a store failure fails
/// it. Works when the latest version is the unreadable one.
pub async fn versions(at: &Location) -> Result<()> {
    let history = Dataset::version_history_at(&at.uri, at.open_options()).await?;
    crate::out!("{:>8}  {:>15}  operation", "version", "timestamp_ms");
    for entry in history {
        match entry {
            VersionEntry::Readable(info) => crate::out!(
                "{:>8}  {:>15}  {}",
                info.version,
                info.timestamp_ms,
                info.operation
            ),
            VersionEntry::Unreadable { version, error } => crate::out!(
                "{:>8}  {:>15}  unreadable: {}",
                version,
                "-",
                error.to_string().replace(['\n', '\r'], " ")
            ),
        }
    }
    Ok(())
}
