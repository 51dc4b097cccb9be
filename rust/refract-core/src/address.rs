//! Row addresses: `fragment_id << 32 | offset`.
//!
//! The offset is a *physical* position inside the fragment: deleted rows keep their
//! offsets until the fragment is rewritten, so an address stays valid (and stable)
//! for the whole life of its fragment.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Packs a fragment id and a physical offset into a row address.
pub const fn row_address(fragment_id: u32, offset: u32) -> u64 {
    ((fragment_id as u64) << 32) | offset as u64
}

/// A row address: the fragment id in the high 32 bits, the physical offset in the low 32.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct RowAddress(pub u64);

impl RowAddress {
    /// Builds the address of row `offset` of fragment `fragment_id`.
    pub const fn new(fragment_id: u32, offset: u32) -> Self {
        Self(row_address(fragment_id, offset))
    }

    /// The fragment id (high 32 bits).
    pub const fn fragment_id(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// The physical offset inside the fragment (low 32 bits).
    pub const fn offset(self) -> u32 {
        // Truncation is the point: the offset is the low half.
        self.0 as u32
    }
}

impl From<u64> for RowAddress {
    fn from(value: u64) -> Self {
        Self(value)
    }
}

impl From<RowAddress> for u64 {
    fn from(value: RowAddress) -> Self {
        value.0
    }
}

impl fmt::Display for RowAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.fragment_id(), self.offset())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(0, 0, 0)]
    #[case(1, 0, 1 << 32)]
    #[case(3, 7, (3 << 32) | 7)]
    #[case(u32::MAX, u32::MAX, u64::MAX)]
    fn packs_and_unpacks(#[case] frag: u32, #[case] offset: u32, #[case] expected: u64) {
        let addr = RowAddress::new(frag, offset);
        assert_eq!(addr.0, expected);
        assert_eq!(row_address(frag, offset), expected);
        assert_eq!(addr.fragment_id(), frag);
        assert_eq!(addr.offset(), offset);
        assert_eq!(RowAddress::from(expected), addr);
        assert_eq!(u64::from(addr), expected);
    }

    #[test]
    fn displays_fragment_colon_offset() {
        assert_eq!(RowAddress::new(12, 345).to_string(), "12:345");
    }

    #[test]
    fn orders_by_fragment_then_offset() {
        let mut v = vec![
            RowAddress::new(2, 0),
            RowAddress::new(1, 9),
            RowAddress::new(1, 3),
        ];
        v.sort();
        assert_eq!(
            v,
            vec![
                RowAddress::new(1, 3),
                RowAddress::new(1, 9),
                RowAddress::new(2, 0)
            ]
        );
    }

    #[test]
    fn serde_is_a_plain_number() {
        let json = serde_json_like(RowAddress::new(1, 2));
        assert_eq!(json, (1u64 << 32) | 2);
    }

    /// serde_json is not a dependency of this crate; round-trip through a u64 instead.
    fn serde_json_like(addr: RowAddress) -> u64 {
        use serde::de::value::{Error as DeError, U64Deserializer};
        use serde::de::IntoDeserializer;
        let de: U64Deserializer<DeError> = addr.0.into_deserializer();
        let back = RowAddress::deserialize(de).unwrap();
        back.0
    }
}
