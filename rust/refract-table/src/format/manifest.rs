//! The manifest: one immutable version of a dataset, and its protobuf codec.
//!
//! Decoding treats the bytes as untrusted: truncated or garbage input, paths
//! that leave the root, duplicate or out-of-range fragment ids and inconsistent
//! row counts are `Corrupt`, never panics.
//!
//! Stored form: [`MANIFEST_MAGIC`], the CRC-32C of the body (little-endian
//! u32), then the protobuf body. A manifest written before checksums is a
//! bare protobuf body; its first byte is always `0x08` (the tag of field 1,
//! `version`, which is never zero), which no single flipped bit turns into
//! the magic's first byte or back, so damage to the header is never
//! mistaken for the old form.

use std::collections::{HashMap, HashSet};
use std::io::Cursor;

use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow_schema::{Schema, SchemaRef};
use bytes::Bytes;
use prost::Message;
use refract_core::{DeepSize, Error, Result};
use refract_ledger::flags::check_fri_flag_pair;

use super::fragment::{Fragment, MAX_FRAGMENT_ID};
use super::index::IndexMetadata;
use super::proto;
use crate::io::manifest_path;
use crate::transaction::Transaction;

/// First bytes of a checksummed manifest.
pub const MANIFEST_MAGIC: [u8; 4] = *b"RFM1";
/// Magic and checksum.
const HEADER_LEN: usize = 8;
/// First byte of a manifest written before checksums (tag of field 1, varint).
const LEGACY_FIRST_BYTE: u8 = 0x08;

/// The protobuf body of stored manifest bytes, verified against the checksum
/// in its header; a manifest written before checksums is returned as it is.
///
/// # Errors
/// Corrupt (the manifest) when the header is damaged or the body does not
/// match its checksum.
pub fn manifest_body(bytes: &[u8]) -> Result<&[u8]> {
    if bytes.first() == Some(&LEGACY_FIRST_BYTE) {
        return Ok(bytes);
    }
    let (Some(magic), Some(crc), Some(body)) = (
        bytes.get(..4),
        bytes.get(4..HEADER_LEN),
        bytes.get(HEADER_LEN..),
    ) else {
        return Err(corrupt(format!(
            "{} bytes are too short for a manifest header",
            bytes.len()
        )));
    };
    if magic != MANIFEST_MAGIC {
        return Err(corrupt("the header is damaged (unknown magic)".to_string()));
    }
    let expected = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    let actual = refract_core::checksum::crc32c(body);
    if actual != expected {
        return Err(corrupt(format!(
            "checksum mismatch: the body's CRC-32C is {actual:#010x}, the header records {expected:#010x}"
        )));
    }
    Ok(body)
}

/// One version of a dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// The version (>= 1).
    pub version: u64,
    /// The table schema.
    pub schema: SchemaRef,
    /// Fragments in positional (scan) order.
    pub fragments: Vec<Fragment>,
    /// Highest fragment id ever assigned; never decreases.
    pub max_fragment_id: u64,
    /// Features a reader must support.
    pub reader_flags: u64,
    /// Features a writer must support.
    pub writer_flags: u64,
    /// Index segments.
    pub indices: Vec<IndexMetadata>,
    /// Commit time, ms since the epoch.
    pub timestamp_ms: i64,
    /// The transaction that produced this version (None for version 1).
    pub transaction: Option<Transaction>,
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

    /// Encodes to protobuf bytes (after checking the invariants, so an invalid
    /// manifest is never published).
    ///
    /// # Errors
    /// Corrupt (the manifest) when it breaks an invariant (duplicate ids,
    /// fragment ids out of range, FRI entry or flag rules); External when the
    /// schema cannot be encoded as Arrow IPC.
    pub fn encode(&self) -> Result<Bytes> {
        self.validate()?;
        let message = proto::Manifest {
            version: self.version,
            schema: encode_schema(&self.schema)?,
            fragments: self.fragments.iter().map(Fragment::to_proto).collect(),
            max_fragment_id: self.max_fragment_id,
            reader_flags: self.reader_flags,
            writer_flags: self.writer_flags,
            indices: self.indices.iter().map(IndexMetadata::to_proto).collect(),
            timestamp_ms: self.timestamp_ms,
            transaction: self.transaction.as_ref().map(Transaction::to_proto),
        };
        let body = message.encode_to_vec();
        let mut stored = Vec::with_capacity(HEADER_LEN + body.len());
        stored.extend_from_slice(&MANIFEST_MAGIC);
        stored.extend_from_slice(&refract_core::checksum::crc32c(&body).to_le_bytes());
        stored.extend_from_slice(&body);
        Ok(Bytes::from(stored))
    }

    /// Verifies ([`manifest_body`]), decodes and validates untrusted bytes.
    ///
    /// # Errors
    /// Corrupt for a damaged header or checksum, a body or schema that does not
    /// decode, a broken invariant, or a file path leaving the dataset root.
    pub fn decode(bytes: &[u8]) -> Result<Manifest> {
        let message = proto::Manifest::decode(manifest_body(bytes)?)
            .map_err(|err| Error::corrupt("manifest", format!("protobuf decode failed: {err}")))?;
        let manifest = Manifest {
            version: message.version,
            schema: decode_schema(&message.schema)?,
            fragments: message
                .fragments
                .iter()
                .map(Fragment::from_proto)
                .collect::<Result<Vec<_>>>()?,
            max_fragment_id: message.max_fragment_id,
            reader_flags: message.reader_flags,
            writer_flags: message.writer_flags,
            indices: message
                .indices
                .iter()
                .map(IndexMetadata::from_proto)
                .collect::<Result<Vec<_>>>()?,
            timestamp_ms: message.timestamp_ms,
            transaction: message
                .transaction
                .as_ref()
                .map(Transaction::from_proto)
                .transpose()?,
        };
        manifest.validate()?;
        Ok(manifest)
    }

    /// Structural invariants (feature support is checked by the client, not here).
    pub(crate) fn validate(&self) -> Result<()> {
        if self.version == 0 {
            return Err(corrupt("version 0 is not a valid manifest version".into()));
        }
        if self.max_fragment_id > MAX_FRAGMENT_ID {
            return Err(corrupt(format!(
                "max_fragment_id {} exceeds {MAX_FRAGMENT_ID}",
                self.max_fragment_id
            )));
        }
        let mut seen = HashSet::with_capacity(self.fragments.len());
        for fragment in &self.fragments {
            fragment.validate()?;
            if fragment.id == 0 {
                return Err(corrupt(
                    "fragment id 0 is reserved for unassigned fragments".into(),
                ));
            }
            if !seen.insert(fragment.id) {
                return Err(corrupt(format!("duplicate fragment id {}", fragment.id)));
            }
            if fragment.id > self.max_fragment_id {
                return Err(corrupt(format!(
                    "fragment id {} is above max_fragment_id {}",
                    fragment.id, self.max_fragment_id
                )));
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

/// The schema as an Arrow IPC stream holding only the schema message.
pub(crate) fn encode_schema(schema: &Schema) -> Result<Vec<u8>> {
    let mut buffer = Vec::new();
    let mut writer = StreamWriter::try_new(&mut buffer, schema)
        .map_err(|err| Error::external("encoding the schema as Arrow IPC", err))?;
    writer
        .finish()
        .map_err(|err| Error::external("encoding the schema as Arrow IPC", err))?;
    drop(writer);
    Ok(buffer)
}

/// Decodes an Arrow IPC schema stream (flatbuffers are verified by arrow).
pub(crate) fn decode_schema(bytes: &[u8]) -> Result<SchemaRef> {
    check_schema_framing(bytes)?;
    // arrow-ipc verifies the flatbuffer but panics on values it does not support
    // (e.g. an Int of bit width 91). Decoding touches only `bytes` and locals,
    // so a caught panic leaves no broken state behind: report it as Corrupt.
    let decoded = std::panic::catch_unwind(|| StreamReader::try_new(Cursor::new(bytes), None))
        .map_err(|_| Error::corrupt("manifest", "schema holds an unsupported Arrow type"))?;
    let reader = decoded
        .map_err(|err| Error::corrupt("manifest", format!("schema does not decode: {err}")))?;
    Ok(reader.schema())
}

/// The IPC stream reader allocates the length its first message claims before
/// reading it; refuse a claim larger than the bytes present, so a few hostile
/// bytes cannot make it allocate gigabytes.
fn check_schema_framing(bytes: &[u8]) -> Result<()> {
    const CONTINUATION: [u8; 4] = [0xFF; 4];
    let rest = bytes.strip_prefix(&CONTINUATION[..]).unwrap_or(bytes);
    let claimed = rest
        .get(..4)
        .and_then(|prefix| <[u8; 4]>::try_from(prefix).ok())
        .map(i32::from_le_bytes)
        .ok_or_else(|| corrupt("schema is truncated before its length prefix".into()))?;
    // `rest` holds at least the 4 prefix bytes (the `get` above succeeded).
    let available = rest.len() - 4;
    match usize::try_from(claimed) {
        Ok(claimed) if claimed <= available => Ok(()),
        _ => Err(corrupt(format!(
            "schema message claims {claimed} bytes but only {available} follow"
        ))),
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
