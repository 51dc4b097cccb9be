//! The FRI system entry, its one home: recognising it, finding exactly one
//! in a manifest, its uuid, loading (decoding) its ledger inline or external
//! through the store, writing a new entry, and the flag rules checked at
//! publication. The reader and the maintenance crates re-export these.
//!
//! The entry is Lance's: the reserved name [`FRI_INDEX_NAME`], no fields, a
//! fragment bitmap of every fragment its history produced, and details of
//! type `lance.table.FragmentReuseIndexDetails` holding the encoded ledger
//! inline, or referencing `_indices/<fri uuid>/details.binpb` when the
//! content exceeds 200 KiB.

use bytes::Bytes;
use refract_core::{Error, Result};
use refract_ledger::flags::FLAG_FRAGMENT_REUSE_INDEX;
use refract_ledger::{
    is_fri_entry_of, parse_details, ContentLocation, ExternalContent, Ledger, FRI_INDEX_NAME,
    FRI_INDEX_TYPE, FRI_INDEX_VERSION_TAGGED,
};
use roaring::RoaringBitmap;
use uuid::Uuid;

use crate::dataset::Dataset;
use crate::format::{IndexMetadata, Manifest};
use crate::io::{DatasetStore, RecordedFile, RelativePath};
use refract_core::checksum::FileChecksum;

/// True when `index` is the FRI system entry.
pub fn is_fri_entry(index: &IndexMetadata) -> bool {
    is_fri_entry_of(&index.name, &index.index_type)
}

/// The FRI entry of `manifest`, if any. Two FRI entries are corrupt.
///
/// # Errors
/// Corrupt when the manifest holds more than one FRI entry.
pub fn find_fri_entry(manifest: &Manifest) -> Result<Option<&IndexMetadata>> {
    fri_entry_in(&manifest.indices).map_err(|_| {
        Error::corrupt(
            "manifest",
            format!("version {} has more than one FRI entry", manifest.version),
        )
    })
}

/// The FRI entry of an index section, if any. Corrupt when there are several.
///
/// # Errors
/// Corrupt when `indices` holds more than one FRI entry.
pub fn fri_entry_in(indices: &[IndexMetadata]) -> Result<Option<&IndexMetadata>> {
    let mut entries = indices.iter().filter(|index| is_fri_entry(index));
    let first = entries.next();
    if entries.next().is_some() {
        return Err(Error::corrupt(
            "manifest",
            format!("more than one {FRI_INDEX_NAME} entry"),
        ));
    }
    Ok(first)
}

/// The uuid of the FRI entry, from metadata only (the ledger is not decoded,
/// so this works on a corrupt ledger too).
pub fn fri_uuid(manifest: &Manifest) -> Option<Uuid> {
    manifest
        .indices
        .iter()
        .find(|index| is_fri_entry(index))
        .map(|index| index.uuid)
}

/// True when the manifest carries an FRI entry.
pub fn has_fri(manifest: &Manifest) -> bool {
    fri_uuid(manifest).is_some()
}

/// Loads and validates the ledger of `dataset`'s FRI entry (`None` without one).
///
/// # Errors
/// Those of [`load_ledger_of`], on the dataset's store and manifest.
pub async fn load_ledger(dataset: &Dataset) -> Result<Option<(IndexMetadata, Ledger)>> {
    load_ledger_of(dataset.store(), dataset.manifest()).await
}

/// Loads the ledger of `manifest`'s FRI entry through `store`. The version gate
/// and the external reference (path under `_indices/<fri uuid>/`, offset and
/// size) are checked before any I/O; the received length is checked after.
///
/// # Errors
/// Corrupt when the manifest holds more than one FRI entry; otherwise those of
/// [`decode_entry`].
pub async fn load_ledger_of(
    store: &DatasetStore,
    manifest: &Manifest,
) -> Result<Option<(IndexMetadata, Ledger)>> {
    let Some(entry) = find_fri_entry(manifest)? else {
        return Ok(None);
    };
    let ledger = decode_entry(store, entry).await?;
    Ok(Some((entry.clone(), ledger)))
}

/// Decodes one FRI entry's ledger, reading external content when needed
/// (verified against the checksum the entry records for its file), with the
/// row-map checksums its details record. The version gate and reference
/// checks run before any I/O.
///
/// # Errors
/// NotSupported for an unknown index version; Corrupt for malformed details or
/// ledger content, a bad external reference or a path-like ledger `map_id`;
/// for external content, those of [`read_external_content`].
pub async fn decode_entry(store: &DatasetStore, entry: &IndexMetadata) -> Result<Ledger> {
    let mut ledger = match parse_details(&entry.details, entry.index_version, &entry.uuid)? {
        ContentLocation::Inline(content) => {
            Ledger::from_content_bytes(content, entry.index_version)?
        }
        ContentLocation::External(external) => {
            let bytes = read_external_content(&store.verifying(&entry.files), &external).await?;
            Ledger::from_content_bytes(&bytes, entry.index_version)?
        }
    };
    ledger.attach_row_map_checksums(&entry.details)?;
    Ok(ledger)
}

/// Reads validated external ledger content: one ranged read of exactly the
/// recorded bytes, whose length is checked. A recorded range beyond the end of
/// the file is Corrupt (object stores report it as a generic range error, so
/// the size is checked with a HEAD on that failure path only); a missing file
/// stays NotFound and any other failure (I/O) is returned unchanged.
///
/// # Errors
/// NotFound for a missing file; Corrupt for a recorded path leaving the root, a range beyond the file, bytes failing the store view's checksum, or a
/// length other than recorded; External for other store failures.
pub async fn read_external_content(
    store: &DatasetStore,
    external: &ExternalContent,
) -> Result<Bytes> {
    let path = RelativePath::parse_recorded(external.path(), "FRI ledger")?;
    let range = external.byte_range();
    let bytes = match store.get_range(&path, range.clone()).await {
        Ok(bytes) => bytes,
        Err(err @ Error::NotFound { .. }) => return Err(err),
        Err(err) => {
            return Err(match store.head(&path).await {
                Ok(size) if range.end > size => Error::corrupt(
                    "FRI ledger",
                    format!(
                    "external content {path} records bytes {}..{} but the file holds {size} bytes",
                    range.start, range.end
                ),
                ),
                _ => err,
            })
        }
    };
    external.verify_received(&bytes)?;
    Ok(bytes)
}

/// Encodes `ledger` as a new FRI entry with a fresh uuid, writing the external
/// content file first when the ledger is too large to inline. Every update
/// mints a new uuid, so an external file is never overwritten.
///
/// # Errors
/// NotSupported when the ledger holds transitions this client does not
/// understand; External when writing the external content file fails.
pub async fn new_fri_entry(
    store: &DatasetStore,
    ledger: &Ledger,
    dataset_version: u64,
) -> Result<IndexMetadata> {
    let uuid = Uuid::new_v4();
    let encoded = ledger.encode_details(&uuid)?;
    let mut files = Vec::new();
    if let Some((path, bytes)) = encoded.external_file {
        let path = RelativePath::parse(&path)?;
        files.push(RecordedFile {
            path: path.clone(),
            size_bytes: bytes.len() as u64,
            checksum: FileChecksum::of(&bytes),
        });
        store.put(&path, Bytes::from(bytes)).await?;
    }
    Ok(IndexMetadata {
        uuid,
        name: FRI_INDEX_NAME.to_string(),
        fields: Vec::new(),
        fragment_bitmap: Some(produced_fragments(ledger)),
        index_type: FRI_INDEX_TYPE.to_string(),
        details: encoded.details,
        index_version: encoded.index_version,
        dataset_version,
        files,
        lance: Default::default(),
    })
}

/// Every fragment the ledger's history produced: what Lance records as the
/// FRI entry's fragment bitmap.
fn produced_fragments(ledger: &Ledger) -> RoaringBitmap {
    let legacy = ledger.legacy_versions().iter().flat_map(|v| v.groups());
    legacy
        .chain(ledger.transitions())
        .flat_map(|record| record.destinations())
        // The ledger validates fragment ids below u32::MAX.
        .filter_map(|digest| u32::try_from(digest.id).ok())
        .collect()
}

/// True when the manifest's flags mark it as carrying (or having carried) a
/// version-1 history.
pub fn is_tagged(manifest: &Manifest) -> bool {
    manifest.reader_flags & FLAG_FRAGMENT_REUSE_INDEX != 0
        || manifest.writer_flags & FLAG_FRAGMENT_REUSE_INDEX != 0
}

/// The FRI rules every published manifest satisfies (checked by
/// `Manifest::validate`, so a violating manifest is never written):
/// at most one FRI entry, shaped as a system entry (no fields); a
/// version-1 entry requires the FRI bit in both flag sets; once the bits are
/// set, a version-0 entry may not be published (the flag is permanent).
pub(crate) fn check_fri_metadata(manifest: &Manifest) -> Result<()> {
    let Some(entry) = find_fri_entry(manifest)? else {
        return Ok(());
    };
    let corrupt = |message: String| Error::corrupt("manifest", message);
    if !entry.fields.is_empty() {
        return Err(corrupt(format!(
            "FRI entry {} must have no fields",
            entry.uuid
        )));
    }
    let both = FLAG_FRAGMENT_REUSE_INDEX;
    let flags_set = manifest.reader_flags & both != 0 && manifest.writer_flags & both != 0;
    if entry.index_version >= FRI_INDEX_VERSION_TAGGED && !flags_set {
        return Err(corrupt(format!(
            "FRI entry {} has index_version {} but the FRI feature flag is not set in both \
             the reader and the writer flags",
            entry.uuid, entry.index_version
        )));
    }
    if entry.index_version < FRI_INDEX_VERSION_TAGGED && is_tagged(manifest) {
        return Err(corrupt(format!(
            "FRI entry {} has index_version {} on a table tagged with the FRI feature flag \
             (the flag is permanent; histories must stay at version 1)",
            entry.uuid, entry.index_version
        )));
    }
    Ok(())
}
