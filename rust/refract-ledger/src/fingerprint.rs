//! Transition fingerprints.
//!
//! A fingerprint identifies a transition's *content*: blake3 of the canonical
//! encoding of Lance's `Transition` holding the sources, destinations and
//! mapping (no dataset version and no row-map checksum, so a restamped commit
//! keeps its identity). Canonical means: fields in number order (prost), digests in their
//! recorded order, the bitmap in canonical roaring form, the map id in
//! hyphenated lowercase. A lifted legacy group and the equivalent version-1
//! transition therefore share a fingerprint. Readers key mapping and row-map
//! caches by it; trim names transitions by it.

use prost::Message;

use crate::encode::transition_proto;
use crate::model::{FragmentDigest, Mapping};

/// A 32-byte blake3 digest.
pub type Fingerprint = [u8; 32];

/// Fingerprint of a transition's content.
pub(crate) fn fingerprint(
    sources: &[FragmentDigest],
    destinations: &[FragmentDigest],
    mapping: &Mapping,
) -> Fingerprint {
    let proto = transition_proto(sources, destinations, mapping);
    *blake3::hash(&proto.encode_to_vec()).as_bytes()
}

/// Lowercase hex of a fingerprint, for paths, cache keys and logs.
pub fn fingerprint_hex(fingerprint: &Fingerprint) -> String {
    fingerprint.iter().map(|b| format!("{b:02x}")).collect()
}
