//! Deletion vectors: the set of deleted physical offsets of one fragment.
//!
//! Stored on disk as a portable-format serialized 32-bit roaring bitmap. Decoding is
//! defensive: the bytes come from storage and may be truncated or hostile, so the
//! framing is walked and checked *before* roaring allocates anything, which bounds
//! the decoded size by a small multiple of the input size.

use roaring::RoaringBitmap;

use crate::cache::DeepSize;
use crate::error::{Error, Result};
use crate::roaring_format::BitmapFrame;

/// What [`Error::Corrupt`] names for a bad deletion vector.
const WHAT: &str = "deletion vector";

/// The deleted physical offsets of one fragment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeletionVector {
    deleted: RoaringBitmap,
}

impl DeletionVector {
    /// An empty vector (nothing deleted).
    pub fn new() -> Self {
        Self::default()
    }

    /// Wraps an existing bitmap of deleted offsets.
    pub fn from_bitmap(bitmap: RoaringBitmap) -> Self {
        Self { deleted: bitmap }
    }

    /// The deleted offsets.
    pub fn bitmap(&self) -> &RoaringBitmap {
        &self.deleted
    }

    /// The deleted offsets, by value.
    pub fn into_bitmap(self) -> RoaringBitmap {
        self.deleted
    }

    /// True if `offset` is deleted.
    pub fn contains(&self, offset: u32) -> bool {
        self.deleted.contains(offset)
    }

    /// Marks `offset` deleted; returns true if it was not deleted before.
    pub fn insert(&mut self, offset: u32) -> bool {
        self.deleted.insert(offset)
    }

    /// Adds every deletion of `other`.
    pub fn extend(&mut self, other: &DeletionVector) {
        self.deleted |= &other.deleted;
    }

    /// Number of deleted offsets.
    pub fn len(&self) -> u64 {
        self.deleted.len()
    }

    /// True if nothing is deleted.
    pub fn is_empty(&self) -> bool {
        self.deleted.is_empty()
    }

    /// The deleted offsets in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.deleted.iter()
    }

    /// Rows still visible in a fragment of `physical_rows` rows.
    pub fn live_rows(&self, physical_rows: u64) -> u64 {
        physical_rows.saturating_sub(self.deleted.len())
    }

    /// Serializes in the roaring portable format (the on-disk deletion file body).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(self.deleted.serialized_size());
        // Writing into a Vec cannot fail.
        let _ = self.deleted.serialize_into(&mut bytes);
        bytes
    }

    /// Decodes a deletion vector for a fragment of `physical_rows` rows.
    ///
    /// # Errors
    /// [`Error::Corrupt`] on bad framing, truncated or trailing bytes, or an
    /// offset `>= physical_rows`.
    pub fn from_bytes(bytes: &[u8], physical_rows: u64) -> Result<DeletionVector> {
        check_framing(bytes)?;
        let deleted = RoaringBitmap::deserialize_from(bytes)
            .map_err(|e| Error::corrupt(WHAT, format!("undecodable roaring bitmap: {e}")))?;
        if let Some(max) = deleted.max() {
            if u64::from(max) >= physical_rows {
                return Err(Error::corrupt(
                    WHAT,
                    format!("deleted offset {max} >= physical rows {physical_rows}"),
                ));
            }
        }
        Ok(Self { deleted })
    }
}

impl DeepSize for DeletionVector {
    fn deep_size_bytes(&self) -> usize {
        // The serialized size tracks the in-memory containers closely.
        std::mem::size_of::<Self>() + self.deleted.serialized_size()
    }
}

/// Checks the portable-format framing (every announced section present,
/// nothing trailing) so the decoder that runs next never allocates for data
/// that is not there.
fn check_framing(bytes: &[u8]) -> Result<()> {
    BitmapFrame::read_exact(bytes)
        .map(|_| ())
        .map_err(|e| Error::corrupt(WHAT, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rstest::rstest;

    fn dv(offsets: impl IntoIterator<Item = u32>) -> DeletionVector {
        DeletionVector::from_bitmap(offsets.into_iter().collect())
    }

    #[test]
    fn basic_operations() {
        let mut a = DeletionVector::new();
        assert!(a.is_empty());
        assert!(a.insert(5));
        assert!(!a.insert(5));
        assert!(a.insert(1));
        assert!(a.contains(5));
        assert!(!a.contains(2));
        a.extend(&dv([2, 5]));
        assert_eq!(a.iter().collect::<Vec<_>>(), vec![1, 2, 5]);
        assert_eq!(a.len(), 3);
        assert_eq!(a.live_rows(10), 7);
        assert_eq!(a.live_rows(2), 0);
        assert_eq!(a.bitmap().len(), 3);
    }

    #[rstest]
    #[case::empty(dv([]))]
    #[case::sparse(dv([0, 3, 99_999]))]
    #[case::dense(dv(0..10_000))]
    #[case::runs({ let mut d = dv(0..50_000); let mut b = d.bitmap().clone(); b.optimize(); d = DeletionVector::from_bitmap(b); d })]
    #[case::many_containers(dv((0..20).map(|i| i * 70_000)))]
    fn round_trips(#[case] v: DeletionVector) {
        let bytes = v.to_bytes();
        assert_eq!(DeletionVector::from_bytes(&bytes, 2_000_000).unwrap(), v);
    }

    #[test]
    fn rejects_offset_beyond_physical_rows() {
        let bytes = dv([0, 10]).to_bytes();
        assert!(DeletionVector::from_bytes(&bytes, 11).is_ok());
        let err = DeletionVector::from_bytes(&bytes, 10).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    }

    #[rstest]
    #[case::empty_input(vec![])]
    #[case::bad_cookie(vec![1, 2, 3, 4, 0, 0, 0, 0])]
    #[case::huge_container_count(vec![0x3a, 0x30, 0, 0, 0xff, 0xff, 0xff, 0xff])]
    #[case::announced_but_missing(vec![0x3a, 0x30, 0, 0, 0x00, 0x01, 0, 0])]
    #[case::run_cookie_max_containers(vec![0x3b, 0x30, 0xff, 0xff])]
    fn rejects_hostile_headers(#[case] bytes: Vec<u8>) {
        let err = DeletionVector::from_bytes(&bytes, u64::MAX).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    }

    #[test]
    fn rejects_truncation_and_trailing_bytes() {
        let bytes = dv([1, 2, 3, 70_000]).to_bytes();
        for cut in 0..bytes.len() {
            let err = DeletionVector::from_bytes(&bytes[..cut], 1 << 20).unwrap_err();
            assert!(matches!(err, Error::Corrupt { .. }), "cut {cut}: {err}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        let err = DeletionVector::from_bytes(&longer, 1 << 20).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = DeletionVector::from_bytes(&bytes, 1 << 40);
        }

        #[test]
        fn round_trip_random(offsets in proptest::collection::btree_set(0u32..300_000, 0..2000)) {
            let v = dv(offsets.iter().copied());
            let back = DeletionVector::from_bytes(&v.to_bytes(), 300_000).unwrap();
            prop_assert_eq!(back, v);
        }
    }
}
