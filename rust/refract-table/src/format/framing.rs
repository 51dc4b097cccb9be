//! Lance's manifest file framing: length-prefixed protobuf sections, the
//! manifest message last, and a 16-byte footer (`i64` LE position of the
//! manifest message, `u16` major 0, `u16` minor 1, `b"LANC"`). Positions are
//! absolute offsets in the file.

use lance_table::format::pb;
use prost::Message;
use refract_core::{Error, Result};

/// Magic at the end of every Lance manifest.
const FOOTER_MAGIC: &[u8; 4] = b"LANC";
/// Footer length: position, major, minor, magic.
const FOOTER_LEN: usize = 16;
/// Lance's manifest format numbers.
const MAJOR: u16 = 0;
const MINOR: u16 = 1;

/// The decoded Lance sections of a manifest file.
pub(crate) struct LanceSections {
    pub manifest: pb::Manifest,
    pub indices: Vec<pb::IndexMetadata>,
    pub transaction: Option<pb::Transaction>,
}

/// Frames `manifest` with its index section and inline transaction; the
/// bytes are placed at offset `base` of the file (after a prefix).
pub(crate) fn frame(
    base: usize,
    mut manifest: pb::Manifest,
    indices: Vec<pb::IndexMetadata>,
    transaction: Option<&pb::Transaction>,
) -> Vec<u8> {
    let mut out = Vec::new();
    let section = |out: &mut Vec<u8>, body: Vec<u8>| -> u64 {
        let position = (base + out.len()) as u64;
        // Manifest sections stay far below 4 GiB (Lance frames them the same way).
        out.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(&body);
        position
    };
    manifest.index_section = if indices.is_empty() {
        None
    } else {
        Some(section(
            &mut out,
            pb::IndexSection { indices }.encode_to_vec(),
        ))
    };
    manifest.transaction_section = transaction.map(|tx| section(&mut out, tx.encode_to_vec()));
    manifest.transaction_section_deprecated = None;
    let position = section(&mut out, manifest.encode_to_vec());
    out.extend_from_slice(&(position as i64).to_le_bytes());
    out.extend_from_slice(&MAJOR.to_le_bytes());
    out.extend_from_slice(&MINOR.to_le_bytes());
    out.extend_from_slice(FOOTER_MAGIC);
    out
}

/// Decodes the Lance sections of `bytes`, whose first Lance section starts
/// at `base` (after a Refract sidecar, or 0).
///
/// # Errors
/// Corrupt (the manifest) when the footer, a position or a message is
/// damaged, or bytes before the first section are unaccounted for (which is
/// how a damaged sidecar magic shows).
pub(crate) fn unframe(bytes: &[u8], base: usize) -> Result<LanceSections> {
    let len = bytes.len();
    if len < FOOTER_LEN + 4 || &bytes[len - 4..] != FOOTER_MAGIC {
        return Err(corrupt(
            "the Lance footer is missing or damaged".to_string(),
        ));
    }
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&bytes[len - FOOTER_LEN..len - 8]);
    let manifest_pos = usize::try_from(i64::from_le_bytes(raw))
        .map_err(|_| corrupt("the footer records a negative position".to_string()))?;
    let body = message_at(bytes, manifest_pos, len - FOOTER_LEN, "manifest")?;
    if manifest_pos + 4 + body.len() != len - FOOTER_LEN {
        return Err(corrupt(
            "the manifest message does not end at the footer".to_string(),
        ));
    }
    let manifest = pb::Manifest::decode(body)
        .map_err(|err| corrupt(format!("protobuf decode failed: {err}")))?;
    let mut first = manifest_pos;
    let indices = match manifest.index_section {
        Some(position) => {
            let position = offset(position)?;
            first = first.min(position);
            let body = message_at(bytes, position, manifest_pos, "index section")?;
            pb::IndexSection::decode(body)
                .map_err(|err| corrupt(format!("index section does not decode: {err}")))?
                .indices
        }
        None => Vec::new(),
    };
    let transaction = match manifest
        .transaction_section
        .or(manifest.transaction_section_deprecated)
    {
        Some(position) => {
            let position = offset(position)?;
            first = first.min(position);
            let body = message_at(bytes, position, manifest_pos, "transaction section")?;
            Some(
                pb::Transaction::decode(body)
                    .map_err(|err| corrupt(format!("transaction does not decode: {err}")))?,
            )
        }
        None => None,
    };
    if first != base {
        return Err(corrupt(format!(
            "{first} bytes precede the first section where {base} were expected (damaged header?)"
        )));
    }
    Ok(LanceSections {
        manifest,
        indices,
        transaction,
    })
}

fn offset(position: u64) -> Result<usize> {
    usize::try_from(position)
        .map_err(|_| corrupt(format!("section position {position} is out of range")))
}

/// The message body of the section at `position`, which must end by `limit`.
fn message_at<'a>(bytes: &'a [u8], position: usize, limit: usize, what: &str) -> Result<&'a [u8]> {
    let start = position
        .checked_add(4)
        .filter(|start| *start <= limit)
        .ok_or_else(|| corrupt(format!("the {what} position {position} is out of range")))?;
    let mut raw = [0u8; 4];
    raw.copy_from_slice(&bytes[position..start]);
    let length = u32::from_le_bytes(raw) as usize;
    let end = start
        .checked_add(length)
        .filter(|end| *end <= limit)
        .ok_or_else(|| corrupt(format!("the {what} claims {length} bytes past its end")))?;
    Ok(&bytes[start..end])
}

fn corrupt(message: String) -> Error {
    Error::corrupt("manifest", message)
}
