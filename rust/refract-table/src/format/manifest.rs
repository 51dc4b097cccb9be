//! The manifest: one immutable version of a dataset, and its codec to and
//! from Lance's manifest file (`lance.table.Manifest` with its index and
//! transaction sections, see `framing`), with Refract's sidecar in front
//! (see `sidecar`).
//!
//! Decoding treats the bytes as untrusted: truncated or garbage input, paths
//! that leave the root, duplicate or out-of-range fragment ids and inconsistent
//! row counts are `Corrupt`, never panics. A manifest Refract wrote is
//! checksummed whole; one another Lance writer wrote is checked structurally.

use std::collections::{HashMap, HashSet};

use arrow_schema::SchemaRef;
use bytes::Bytes;
use lance_table::format::pb;
use prost::Message;
use refract_core::checksum::FileChecksum;
use refract_core::{DeepSize, Error, Result};
use refract_ledger::flags::{
    check_fri_flag_pair, FLAG_DELETION_FILES, FLAG_MIXED_DATA_FILE_VERSIONS, FLAG_TABLE_CONFIG,
};

use super::fragment::{Fragment, FIRST_FRAGMENT_ID, MAX_FRAGMENT_ID};
use super::framing::{frame, unframe};
use super::index::IndexMetadata;
use super::schema::{FieldPaths, TableSchema};
use super::sidecar::{self, Checksums, Sidecar};
use crate::io::paths::transaction_file_path;
use crate::io::{manifest_path, RelativePath};
use crate::transaction::Transaction;

/// The Lance file version new data files are written in, as the manifest
/// records it.
pub const DATA_STORAGE_VERSION: &str = "2.2";
/// The field id Lance records in a data file for a dropped column.
const DROPPED_FIELD_ID: i32 = -2;
/// The library name Refract records as the manifest's writer.
const WRITER_LIBRARY: &str = "refract";

/// What Lance records about a version that the engine does not interpret,
/// kept so every commit carries it forward.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LanceManifestFields {
    /// The schema with Lance's field ids.
    pub schema: TableSchema,
    /// Table config (`lance.*` keys are Lance's).
    pub config: HashMap<String, String>,
    /// Table metadata.
    pub table_metadata: HashMap<String, String>,
    /// Default Lance file version of the data files (`"2.0"`, `"2.1"`, `"2.2"`).
    pub data_storage_version: String,
    /// Lance's stable-row-id counter (unused without stable row ids).
    pub next_row_id: u64,
    /// Highest field id ever allocated, when the table records it.
    pub max_allocated_field_id: Option<i32>,
    /// The transaction file of this version, relative to `_transactions/`.
    pub transaction_file: String,
    /// Block checksums of the transaction file, when Refract wrote it.
    pub transaction_file_checksum: Option<FileChecksum>,
}

/// One version of a dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// The version (>= 1).
    pub version: u64,
    /// The table schema as scans return it (derived from `lance.schema`).
    pub schema: SchemaRef,
    /// Fragments in positional (scan) order.
    pub fragments: Vec<Fragment>,
    /// Highest fragment id ever assigned; never decreases. `None` before
    /// the first fragment.
    pub max_fragment_id: Option<u64>,
    /// Features a reader must support.
    pub reader_flags: u64,
    /// Features a writer must support.
    pub writer_flags: u64,
    /// Index segments.
    pub indices: Vec<IndexMetadata>,
    /// Commit time, ms since the epoch.
    pub timestamp_ms: i64,
    /// The transaction that produced this version (None for version 1, or
    /// when the writer recorded it only in a transaction file).
    pub transaction: Option<Transaction>,
    /// Lance's fields the engine carries forward.
    pub lance: LanceManifestFields,
}

/// A manifest's fragments by id (see [`Manifest::fragment_index`]).
#[derive(Debug, Clone)]
pub struct FragmentIndex<'a> {
    fragments: &'a [Fragment],
    positions: HashMap<u64, usize>,
}

impl<'a> FragmentIndex<'a> {
    /// The fragment with `id`.
    pub fn get(&self, id: u64) -> Option<&'a Fragment> {
        self.position(id).and_then(|at| self.fragments.get(at))
    }

    /// The position of fragment `id` in the manifest's list.
    pub fn position(&self, id: u64) -> Option<usize> {
        self.positions.get(&id).copied()
    }

    /// True when the manifest has fragment `id`.
    pub fn contains(&self, id: u64) -> bool {
        self.positions.contains_key(&id)
    }
}

impl Manifest {
    /// The position of fragment `id` in the list.
    pub fn fragment_position(&self, id: u64) -> Option<usize> {
        self.fragments.iter().position(|fragment| fragment.id == id)
    }

    /// The fragment with `id`. Scans the list: for more than a few lookups
    /// use [`Self::fragment_index`].
    pub fn fragment(&self, id: u64) -> Option<&Fragment> {
        self.fragments.iter().find(|fragment| fragment.id == id)
    }

    /// Every fragment by id, built in one pass over the list: lookups in
    /// constant time, so work per looked-up id does not grow with the table.
    pub fn fragment_index(&self) -> FragmentIndex<'_> {
        FragmentIndex {
            fragments: &self.fragments,
            positions: self.fragment_positions(),
        }
    }

    /// Each fragment's position in the list, by id (one pass).
    pub fn fragment_positions(&self) -> HashMap<u64, usize> {
        self.fragments
            .iter()
            .enumerate()
            .map(|(at, fragment)| (fragment.id, at))
            .collect()
    }

    /// Rows a full scan returns.
    pub fn live_rows(&self) -> u64 {
        self.fragments.iter().map(Fragment::live_rows).sum()
    }

    /// The first manifest of a table with `schema`.
    ///
    /// # Errors
    /// InvalidInput when Lance cannot store a column's type.
    pub fn first(schema: &arrow_schema::Schema, timestamp_ms: i64) -> Result<Manifest> {
        let table_schema = TableSchema::for_new_table(schema)?;
        Ok(Manifest {
            version: 1,
            schema: table_schema
                .to_arrow()
                .map_err(|e| Error::invalid_input(e.to_string()))?,
            fragments: Vec::new(),
            max_fragment_id: None,
            reader_flags: 0,
            writer_flags: 0,
            indices: Vec::new(),
            timestamp_ms,
            transaction: None,
            lance: LanceManifestFields {
                schema: table_schema,
                data_storage_version: DATA_STORAGE_VERSION.to_string(),
                ..LanceManifestFields::default()
            },
        })
    }

    /// The transaction file name (relative to `_transactions/`) Lance's
    /// `{read_version}-{uuid}.txn` scheme gives this version's transaction.
    fn transaction_file_name(&self) -> String {
        match &self.transaction {
            Some(tx) => format!("{}-{}.txn", tx.read_version, tx.uuid.hyphenated()),
            None => self.lance.transaction_file.clone(),
        }
    }

    /// The id the next new fragment gets.
    pub fn next_fragment_id(&self) -> u64 {
        self.max_fragment_id
            .map_or(FIRST_FRAGMENT_ID, |max| max + 1)
    }

    /// The reader and writer flags this manifest's contents call for, on top
    /// of the sticky ones it carries (deletion files, table config, mixed
    /// data file versions, as Lance sets them).
    pub(crate) fn derive_flags(&mut self) {
        if self.fragments.iter().any(|f| f.deletion_file.is_some()) {
            self.reader_flags |= FLAG_DELETION_FILES;
            self.writer_flags |= FLAG_DELETION_FILES;
        }
        if !self.lance.config.is_empty() {
            self.writer_flags |= FLAG_TABLE_CONFIG;
        }
        let default = lance_file::version::ConcreteFileVersion::from_manifest_string(
            &self.lance.data_storage_version,
        );
        let mixed = default.is_ok_and(|default| {
            self.fragments
                .iter()
                .flat_map(|f| &f.files)
                .any(|file| file.layout.file_version != default)
        });
        if mixed {
            self.reader_flags |= FLAG_MIXED_DATA_FILE_VERSIONS;
            self.writer_flags |= FLAG_MIXED_DATA_FILE_VERSIONS;
        }
    }

    /// Lance's transaction file of this version, `_transactions/<file>`, and
    /// its bytes, when the version has a transaction.
    ///
    /// # Errors
    /// As [`Self::encode`].
    pub fn encode_transaction_file(&self) -> Result<Option<(RelativePath, Bytes)>> {
        let Some(transaction) = &self.transaction else {
            return Ok(None);
        };
        let fields = FieldPaths::new(&self.lance.schema);
        let message =
            transaction.to_pb(&fields, &mut Checksums::default(), &mut Sidecar::default())?;
        Ok(Some((
            transaction_file_path(&self.transaction_file_name())?,
            Bytes::from(message.encode_to_vec()),
        )))
    }

    /// Encodes to a Lance manifest file with Refract's sidecar (after
    /// checking the invariants, so an invalid manifest is never published).
    ///
    /// # Errors
    /// Corrupt (the manifest) when it breaks an invariant (duplicate ids,
    /// fragment ids out of range, FRI entry or flag rules, an index on a
    /// column the schema lacks); InvalidInput for a transaction only another
    /// Lance writer commits.
    pub fn encode(&self) -> Result<Bytes> {
        self.validate()?;
        let fields = FieldPaths::new(&self.lance.schema);
        let mut checksums = Checksums::default();
        let mut sidecar = Sidecar::default();
        let transaction = self
            .transaction
            .as_ref()
            .map(|tx| tx.to_pb(&fields, &mut checksums, &mut sidecar))
            .transpose()?;
        let indices = self
            .indices
            .iter()
            .map(|index| index.to_pb(&fields, &mut checksums))
            .collect::<Result<Vec<_>>>()?;
        let manifest = pb::Manifest {
            fields: self.lance.schema.fields.clone(),
            schema_metadata: self.lance.schema.metadata.clone(),
            fragments: self
                .fragments
                .iter()
                .map(|fragment| fragment.to_pb(&mut checksums))
                .collect(),
            version: self.version,
            writer_version: Some(pb::manifest::WriterVersion {
                library: WRITER_LIBRARY.to_string(),
                version: env!("CARGO_PKG_VERSION").to_string(),
                ..Default::default()
            }),
            timestamp: Some(prost_types::Timestamp {
                seconds: self.timestamp_ms.div_euclid(1000),
                // A remainder of a division by 1000 times 10^6 fits an i32.
                nanos: (self.timestamp_ms.rem_euclid(1000) * 1_000_000) as i32,
            }),
            reader_feature_flags: self.reader_flags,
            writer_feature_flags: self.writer_flags,
            // Checked against MAX_FRAGMENT_ID (< u32::MAX) by `validate`.
            max_fragment_id: self.max_fragment_id.map(|max| max as u32),
            transaction_file: self.transaction_file_name(),
            next_row_id: self.lance.next_row_id,
            data_format: Some(pb::manifest::DataStorageFormat {
                file_format: "lance".to_string(),
                version: self.lance.data_storage_version.clone(),
            }),
            config: self.lance.config.clone(),
            table_metadata: self.lance.table_metadata.clone(),
            max_allocated_field_id: self.lance.max_allocated_field_id,
            ..Default::default()
        };
        if !self.lance.transaction_file.is_empty() {
            checksums.record(
                &transaction_file_path(&self.lance.transaction_file)?,
                self.lance.transaction_file_checksum.as_ref(),
            );
        }
        sidecar.files = checksums.to_stored();
        let sidecar_bytes = sidecar.encode_to_vec();
        let lance = frame(
            sidecar::sidecar_prefix_len(sidecar_bytes.len()),
            manifest,
            indices,
            transaction.as_ref(),
        );
        Ok(Bytes::from(sidecar::seal(&sidecar_bytes, &lance)))
    }

    /// This manifest with its transaction decoded from `bytes`, the contents
    /// of its `_transactions/` file: Lance writers before inline transactions
    /// recorded a version's transaction only there.
    ///
    /// # Errors
    /// Corrupt when the bytes are not a Lance transaction, or record another
    /// read version than the file's name.
    pub(crate) fn with_transaction_file(&self, bytes: &[u8]) -> Result<Manifest> {
        let name = format!("_transactions/{}", self.lance.transaction_file);
        let message = pb::Transaction::decode(bytes)
            .map_err(|err| Error::corrupt(name.clone(), format!("does not decode: {err}")))?;
        let fields = FieldPaths::new(&self.lance.schema);
        let transaction = Transaction::from_pb(
            &message,
            None,
            &fields,
            &Checksums::default(),
            &self.indices,
        )?;
        if transaction.read_version >= self.version {
            return Err(Error::corrupt(
                name,
                format!(
                    "the transaction of version {} records read version {}",
                    self.version, transaction.read_version
                ),
            ));
        }
        Ok(Manifest {
            transaction: Some(transaction),
            ..self.clone()
        })
    }

    /// Verifies, decodes and validates untrusted manifest bytes.
    ///
    /// # Errors
    /// Corrupt for a damaged sidecar, checksum, framing, message or schema,
    /// a broken invariant, or a file path leaving the dataset root;
    /// NotSupported for Lance features Refract does not implement.
    pub fn decode(bytes: &[u8]) -> Result<Manifest> {
        let (sidecar, base) = sidecar::open(bytes)?;
        let sections = unframe(bytes, base)?;
        let message = sections.manifest;
        if !message.fragments.is_empty() && message.fragment_tree.is_some() {
            return Err(corrupt(
                "both a fragment list and a fragment tree are recorded".into(),
            ));
        }
        let checksums = match &sidecar {
            Some(sidecar) => Checksums::from_stored(&sidecar.files)?,
            None => Checksums::default(),
        };
        let table_schema = TableSchema {
            fields: message.fields,
            metadata: message.schema_metadata,
        };
        let fields = FieldPaths::new(&table_schema);
        let indices = sections
            .indices
            .iter()
            .map(|index| IndexMetadata::from_pb(index, &fields, &checksums))
            .collect::<Result<Vec<_>>>()?;
        let transaction = sections
            .transaction
            .as_ref()
            .map(|tx| Transaction::from_pb(tx, sidecar.as_ref(), &fields, &checksums, &indices))
            .transpose()?;
        let timestamp_ms = message.timestamp.map_or(0, |ts| {
            ts.seconds
                .saturating_mul(1000)
                .saturating_add(i64::from(ts.nanos) / 1_000_000)
        });
        if !message.transaction_file.is_empty() {
            transaction_file_path(&message.transaction_file).map_err(|_| {
                corrupt(format!(
                    "file path {:?} leaves the dataset root",
                    format!("_transactions/{}", message.transaction_file)
                ))
            })?;
        }
        let manifest = Manifest {
            version: message.version,
            schema: table_schema.to_arrow()?,
            fragments: message
                .fragments
                .iter()
                .map(|fragment| Fragment::from_pb(fragment, &checksums))
                .collect::<Result<Vec<_>>>()?,
            max_fragment_id: message.max_fragment_id.map(u64::from),
            reader_flags: message.reader_feature_flags,
            writer_flags: message.writer_feature_flags,
            indices,
            timestamp_ms,
            transaction,
            lance: LanceManifestFields {
                schema: table_schema,
                config: message.config,
                table_metadata: message.table_metadata,
                data_storage_version: message
                    .data_format
                    .map(|format| format.version)
                    .unwrap_or_default(),
                next_row_id: message.next_row_id,
                max_allocated_field_id: message.max_allocated_field_id,
                transaction_file_checksum: match message.transaction_file.as_str() {
                    "" => None,
                    name => checksums.lookup(&transaction_file_path(name)?, None)?,
                },
                transaction_file: message.transaction_file,
            },
        };
        manifest.validate()?;
        Ok(manifest)
    }

    /// Structural invariants (feature support is checked by the client, not here).
    pub(crate) fn validate(&self) -> Result<()> {
        if self.version == 0 {
            return Err(corrupt("version 0 is not a valid manifest version".into()));
        }
        if self
            .max_fragment_id
            .is_some_and(|max| max > MAX_FRAGMENT_ID)
        {
            return Err(corrupt(format!(
                "max_fragment_id {:?} exceeds {MAX_FRAGMENT_ID}",
                self.max_fragment_id
            )));
        }
        let mut seen = HashSet::with_capacity(self.fragments.len());
        for fragment in &self.fragments {
            fragment.validate()?;
            if !seen.insert(fragment.id) {
                return Err(corrupt(format!("duplicate fragment id {}", fragment.id)));
            }
            if self.max_fragment_id.is_none_or(|max| fragment.id > max) {
                return Err(corrupt(format!(
                    "fragment id {} is above max_fragment_id {:?}",
                    fragment.id, self.max_fragment_id
                )));
            }
        }
        let field_ids: HashSet<i32> = self
            .lance
            .schema
            .fields
            .iter()
            .map(|field| field.id)
            .collect();
        for fragment in &self.fragments {
            for file in &fragment.files {
                // Lance marks a dropped column's slot with -2.
                if let Some(id) = file
                    .layout
                    .fields
                    .iter()
                    .find(|id| **id != DROPPED_FIELD_ID && !field_ids.contains(id))
                {
                    return Err(corrupt(format!(
                        "data file {} stores field id {id}, which the schema does not have",
                        file.path
                    )));
                }
                if file.layout.fields.len() != file.layout.column_indices.len() {
                    return Err(corrupt(format!(
                        "data file {} records {} fields but {} column indices",
                        file.path,
                        file.layout.fields.len(),
                        file.layout.column_indices.len()
                    )));
                }
            }
        }
        let mut uuids = HashSet::with_capacity(self.indices.len());
        for index in &self.indices {
            if !uuids.insert(index.uuid) {
                return Err(corrupt(format!("duplicate index uuid {}", index.uuid)));
            }
        }
        check_fri_flag_pair(self.reader_flags, self.writer_flags)?;
        crate::commit::fri_entry::check_fri_metadata(self)
    }
}

impl DeepSize for Manifest {
    fn deep_size_bytes(&self) -> usize {
        let fragments: usize = self
            .fragments
            .iter()
            .map(|fragment| {
                std::mem::size_of::<Fragment>()
                    + fragment
                        .files
                        .iter()
                        .map(|file| 64 + file.path.as_str().len())
                        .sum::<usize>()
                    + fragment
                        .deletion_file
                        .as_ref()
                        .map_or(0, |deletion| 32 + deletion.path.as_str().len())
            })
            .sum();
        let indices: usize = self
            .indices
            .iter()
            .map(|index| {
                std::mem::size_of::<IndexMetadata>()
                    + index.details.len()
                    + index.name.len()
                    + index
                        .fields
                        .iter()
                        .map(|field| field.len() + 24)
                        .sum::<usize>()
                    + index
                        .fragment_bitmap
                        .as_ref()
                        .map_or(0, |bitmap| bitmap.serialized_size())
            })
            .sum();
        // The schema and transaction are small next to fragment lists; a fixed
        // allowance per field keeps the estimate honest without walking them.
        std::mem::size_of::<Manifest>() + fragments + indices + self.schema.fields().len() * 128
    }
}

fn corrupt(message: String) -> Error {
    Error::corrupt("manifest", message)
}

/// How errors name the manifest of `version`: its version and its
/// dataset-relative path.
pub fn manifest_label(version: u64) -> String {
    format!("manifest of version {version} ({})", manifest_path(version))
}

/// An error raised while loading the manifest of `version`, made to name it
/// (see [`manifest_label`]): Corrupt, NotFound and NotSupported carry the
/// label; a PathEscape or an InvalidInput can only come from the stored
/// bytes here, so each becomes Corrupt. I/O
/// failures (External) and other kinds pass through unchanged.
pub(crate) fn manifest_error(version: u64, err: Error) -> Error {
    let label = manifest_label(version);
    match err {
        Error::Corrupt { what, message } if what == "manifest" => Error::corrupt(label, message),
        Error::Corrupt { what, message } => Error::corrupt(label, format!("{what}: {message}")),
        Error::InvalidInput { message } => Error::corrupt(label, message),
        Error::NotFound { .. } => Error::not_found(format!("{label} does not exist")),
        Error::NotSupported { message } => Error::not_supported(format!("{label}: {message}")),
        Error::PathEscape { path } => {
            Error::corrupt(label, format!("file path {path:?} leaves the dataset root"))
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use lance_table::feature_flags as lance;
    use refract_ledger::flags as ours;

    #[test]
    fn feature_bits_are_lance_14s() {
        assert_eq!(ours::FLAG_DELETION_FILES, lance::FLAG_DELETION_FILES);
        assert_eq!(
            ours::FLAG_USE_V2_FORMAT_DEPRECATED,
            lance::FLAG_USE_V2_FORMAT_DEPRECATED
        );
        assert_eq!(ours::FLAG_TABLE_CONFIG, lance::FLAG_TABLE_CONFIG);
        assert_eq!(
            ours::FLAG_MIXED_DATA_FILE_VERSIONS,
            lance::FLAG_MIXED_DATA_FILE_VERSIONS
        );
        assert_eq!(
            ours::FLAG_FRAGMENT_REUSE_INDEX,
            lance::FLAG_FRAGMENT_REUSE_INDEX
        );
        assert_eq!(ours::FLAG_UNKNOWN, lance::FLAG_UNKNOWN);
        // Everything Refract supports, Lance 14 knows.
        assert_eq!(ours::SUPPORTED_FLAGS & !(lance::FLAG_UNKNOWN - 1), 0);
    }
}
