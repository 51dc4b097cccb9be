//! What Lance's messages cannot express, stored in front of the Lance
//! sections of a manifest file, where Lance's readers never look.
//!
//! Layout of a manifest Refract writes:
//!
//! ```text
//! "RFX1" | u32 LE CRC-32C of every byte after these 8 | u32 LE sidecar length
//! | Sidecar protobuf | Lance sections and footer (see `framing`)
//! ```
//!
//! The CRC covers the sidecar and every Lance byte, so a flipped bit anywhere
//! in a Refract manifest is caught. A manifest another Lance writer commits
//! has no sidecar: its files are read unchecksummed, never against a stale
//! record (a pylance commit cannot carry one forward).

use std::collections::HashMap;

use prost::Message;
use refract_core::checksum::FileChecksum;
use refract_core::{Error, Result};

use crate::io::RelativePath;

/// First bytes of a manifest that carries a Refract sidecar.
pub const SIDECAR_MAGIC: [u8; 4] = *b"RFX1";
/// Magic, CRC and sidecar length.
pub(crate) const SIDECAR_HEADER_LEN: usize = 12;

/// Refract's record of a version, beside Lance's.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct Sidecar {
    /// Block checksums of the files the version references, by root-relative path.
    #[prost(message, repeated, tag = "1")]
    pub files: Vec<StoredChecksum>,
    /// Surviving old row addresses of the transaction's rewrite groups.
    #[prost(message, repeated, tag = "2")]
    pub survivors: Vec<GroupSurvivors>,
    /// Set when the transaction (a Lance `Rewrite`) is a stable partition.
    #[prost(message, optional, tag = "3")]
    pub partition: Option<PartitionRecord>,
    /// Uuids (16 raw bytes) of the segments a rewrite added, in order.
    #[prost(bytes = "vec", repeated, tag = "4")]
    pub new_index_uuids: Vec<Vec<u8>>,
    /// Uuids of the segments a rewrite removed.
    #[prost(bytes = "vec", repeated, tag = "5")]
    pub removed_index_uuids: Vec<Vec<u8>>,
}

/// Block checksums of one file.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct StoredChecksum {
    /// Root-relative path.
    #[prost(string, tag = "1")]
    pub path: String,
    /// Bytes per block.
    #[prost(uint64, tag = "2")]
    pub block_bytes: u64,
    /// One little-endian u32 CRC-32C per block.
    #[prost(bytes = "vec", tag = "3")]
    pub crc32c: Vec<u8>,
}

/// The surviving old addresses (a serialized `RoaringTreemap`) of one group.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct GroupSurvivors {
    /// Position of the group in the transaction.
    #[prost(uint32, tag = "1")]
    pub group: u32,
    /// The serialized treemap.
    #[prost(bytes = "vec", tag = "2")]
    pub addresses: Vec<u8>,
}

/// The row map of a stable partition.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct PartitionRecord {
    /// 16 raw uuid bytes of `_fri/<map_id>/`; empty without a row map.
    #[prost(bytes = "vec", tag = "1")]
    pub map_id: Vec<u8>,
    /// Size of the row-map file (0 without one).
    #[prost(uint64, tag = "2")]
    pub map_size_bytes: u64,
}

/// Checksums by path: collected while encoding, looked up while decoding.
#[derive(Debug, Default, Clone)]
pub(crate) struct Checksums {
    by_path: HashMap<String, FileChecksum>,
}

impl Checksums {
    /// Notes the checksum, if any, of the file at `path`.
    pub(crate) fn record(&mut self, path: &RelativePath, checksum: Option<&FileChecksum>) {
        if let Some(checksum) = checksum {
            self.by_path
                .insert(path.as_str().to_string(), checksum.clone());
        }
    }

    /// The recorded checksum of `path`, checked to cover `size` bytes when
    /// the size is known.
    ///
    /// # Errors
    /// Corrupt (the manifest) when the record does not cover `size` bytes.
    pub(crate) fn lookup(
        &self,
        path: &RelativePath,
        size: Option<u64>,
    ) -> Result<Option<FileChecksum>> {
        let Some(checksum) = self.by_path.get(path.as_str()) else {
            return Ok(None);
        };
        if let Some(size) = size {
            if checksum.check_size("manifest", size).is_err() {
                return Err(Error::corrupt(
                    "manifest",
                    format!(
                        "the checksum of {path} covers {} blocks of {} bytes, not a {size}-byte file",
                        checksum.blocks().len(),
                        checksum.block_bytes()
                    ),
                ));
            }
        }
        Ok(Some(checksum.clone()))
    }

    pub(crate) fn to_stored(&self) -> Vec<StoredChecksum> {
        let mut stored: Vec<StoredChecksum> = self
            .by_path
            .iter()
            .map(|(path, checksum)| StoredChecksum {
                path: path.clone(),
                block_bytes: checksum.block_bytes(),
                crc32c: checksum.blocks_le_bytes(),
            })
            .collect();
        stored.sort_by(|a, b| a.path.cmp(&b.path));
        stored
    }

    /// # Errors
    /// Corrupt (the manifest) for a malformed checksum or a path leaving the root.
    pub(crate) fn from_stored(stored: &[StoredChecksum]) -> Result<Checksums> {
        let mut by_path = HashMap::with_capacity(stored.len());
        for entry in stored {
            let path = RelativePath::parse_recorded(&entry.path, "manifest")?;
            let checksum = FileChecksum::from_le_bytes(entry.block_bytes, &entry.crc32c)
                .map_err(|e| Error::corrupt("manifest", format!("checksum of {path}: {e}")))?;
            by_path.insert(entry.path.clone(), checksum);
        }
        Ok(Checksums { by_path })
    }
}

/// Prepends the sidecar header to `lance` (the Lance sections, whose
/// positions already count the header: see [`sidecar_prefix_len`]).
pub(crate) fn seal(sidecar_bytes: &[u8], lance: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(SIDECAR_HEADER_LEN + sidecar_bytes.len() + lance.len());
    out.extend_from_slice(&SIDECAR_MAGIC);
    out.extend_from_slice(&[0; 4]);
    // A sidecar is a few checksums per file: far below 4 GiB.
    out.extend_from_slice(
        &u32::try_from(sidecar_bytes.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    out.extend_from_slice(sidecar_bytes);
    out.extend_from_slice(lance);
    let crc = refract_core::checksum::crc32c(&out[8..]);
    out[4..8].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Bytes in front of the Lance sections for a sidecar of `sidecar_len` bytes.
pub(crate) fn sidecar_prefix_len(sidecar_len: usize) -> usize {
    SIDECAR_HEADER_LEN + sidecar_len
}

/// The sidecar of stored manifest bytes, if they carry one, and the offset
/// where the Lance sections begin.
///
/// # Errors
/// Corrupt (the manifest) when the header claims more bytes than exist, the
/// CRC does not match, or the sidecar does not decode.
pub(crate) fn open(bytes: &[u8]) -> Result<(Option<Sidecar>, usize)> {
    if bytes.get(..4) != Some(&SIDECAR_MAGIC[..]) {
        return Ok((None, 0));
    }
    let corrupt = |message: String| Error::corrupt("manifest", message);
    let header = bytes
        .get(..SIDECAR_HEADER_LEN)
        .ok_or_else(|| corrupt("the Refract header is truncated".to_string()))?;
    let expected = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    let len = u32::from_le_bytes([header[8], header[9], header[10], header[11]]) as usize;
    let actual = refract_core::checksum::crc32c(&bytes[8..]);
    if actual != expected {
        return Err(corrupt(format!(
            "checksum mismatch: the file's CRC-32C is {actual:#010x}, the header records {expected:#010x}"
        )));
    }
    let end = SIDECAR_HEADER_LEN
        .checked_add(len)
        .filter(|end| *end <= bytes.len())
        .ok_or_else(|| {
            corrupt(format!(
                "the Refract sidecar claims {len} bytes past the end"
            ))
        })?;
    let sidecar = Sidecar::decode(&bytes[SIDECAR_HEADER_LEN..end])
        .map_err(|err| corrupt(format!("the Refract sidecar does not decode: {err}")))?;
    Ok((Some(sidecar), end))
}
