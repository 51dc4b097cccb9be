//! Ordered keys for the scalar index types (btree, bitmap).
//!
//! Both types support integer columns (every width, signed and unsigned) and
//! string columns. Values are compared exactly: integers as `i128` (so
//! `UInt64` above `i64::MAX` compares correctly against any `Int` literal) and
//! strings byte-wise, which is also Arrow's order for the scan-side recheck.
//! A literal of another kind (float, bool, or a string against an integer
//! column) is not answerable by these indices; the query falls back to a scan,
//! so the predicate engine's own semantics decide those cases.

use std::cmp::Ordering;
use std::ops::Bound;

use arrow::compute::cast;
use arrow_array::{Array, ArrayRef, Int64Array, LargeStringArray, StringArray, UInt64Array};
use arrow_schema::DataType;
use refract_core::{Error, Result};
use refract_table::predicate::Literal;

/// A decoded index key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    /// Any integer column value.
    Int(i128),
    /// A string column value.
    Str(String),
}

impl Key {
    /// Approximate heap + inline size, for cache weights.
    pub fn deep_size(&self) -> u64 {
        match self {
            Key::Int(_) => 16,
            Key::Str(s) => 24 + s.len() as u64,
        }
    }
}

/// The family of a supported column type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// Int8..Int64, UInt8..UInt64.
    Int,
    /// Utf8, LargeUtf8.
    Str,
}

impl KeyKind {
    /// The kind of `data_type`, or `None` if the scalar indices cannot hold it.
    pub fn of(data_type: &DataType) -> Option<KeyKind> {
        match data_type {
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64 => Some(KeyKind::Int),
            DataType::Utf8 | DataType::LargeUtf8 => Some(KeyKind::Str),
            _ => None,
        }
    }

    /// The key for `literal` in this kind, or `None` if the literal is of another kind.
    pub fn literal_key(self, literal: &Literal) -> Option<Key> {
        match (self, literal) {
            (KeyKind::Int, Literal::Int(v)) => Some(Key::Int(i128::from(*v))),
            (KeyKind::Str, Literal::Str(s)) => Some(Key::Str(s.clone())),
            _ => None,
        }
    }

    /// Converts both bounds of a range; `None` if either literal is of another kind.
    pub fn bound_keys(
        self,
        low: &Bound<Literal>,
        high: &Bound<Literal>,
    ) -> Option<(Bound<Key>, Bound<Key>)> {
        Some((self.bound_key(low)?, self.bound_key(high)?))
    }

    fn bound_key(self, bound: &Bound<Literal>) -> Option<Bound<Key>> {
        Some(match bound {
            Bound::Included(l) => Bound::Included(self.literal_key(l)?),
            Bound::Excluded(l) => Bound::Excluded(self.literal_key(l)?),
            Bound::Unbounded => Bound::Unbounded,
        })
    }
}

/// Random access to the keys of one Arrow array.
#[derive(Debug, Clone)]
pub enum KeyColumn {
    /// Signed integers widened to Int64.
    Signed(Int64Array),
    /// Unsigned integers widened to UInt64.
    Unsigned(UInt64Array),
    /// Utf8.
    Str(StringArray),
    /// LargeUtf8.
    LargeStr(LargeStringArray),
}

impl KeyColumn {
    /// Wraps `array`, widening integers to 64 bits.
    ///
    /// # Errors
    /// NotSupported for a type other than an integer, Utf8 or LargeUtf8;
    /// External when the widening cast fails.
    pub fn new(array: &ArrayRef) -> Result<KeyColumn> {
        let widen = |to: &DataType| {
            cast(array, to).map_err(|e| Error::external("widening an index key column", e))
        };
        Ok(match array.data_type() {
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
                let wide = widen(&DataType::Int64)?;
                KeyColumn::Signed(downcast::<Int64Array>(&wide)?.clone())
            }
            DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
                let wide = widen(&DataType::UInt64)?;
                KeyColumn::Unsigned(downcast::<UInt64Array>(&wide)?.clone())
            }
            DataType::Utf8 => KeyColumn::Str(downcast::<StringArray>(array)?.clone()),
            DataType::LargeUtf8 => {
                KeyColumn::LargeStr(downcast::<LargeStringArray>(array)?.clone())
            }
            other => {
                return Err(Error::not_supported(format!(
                    "scalar index keys of type {other}"
                )))
            }
        })
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        match self {
            KeyColumn::Signed(a) => a.len(),
            KeyColumn::Unsigned(a) => a.len(),
            KeyColumn::Str(a) => a.len(),
            KeyColumn::LargeStr(a) => a.len(),
        }
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True if value `i` is null. `i` must be `< len()`.
    pub fn is_null(&self, i: usize) -> bool {
        match self {
            KeyColumn::Signed(a) => a.is_null(i),
            KeyColumn::Unsigned(a) => a.is_null(i),
            KeyColumn::Str(a) => a.is_null(i),
            KeyColumn::LargeStr(a) => a.is_null(i),
        }
    }

    /// Compares value `i` (non-null, `i < len()`) with `key`. Keys of another
    /// kind compare by kind, which never happens for validated queries.
    pub fn cmp_at(&self, i: usize, key: &Key) -> Ordering {
        match (self, key) {
            (KeyColumn::Signed(a), Key::Int(k)) => i128::from(a.value(i)).cmp(k),
            (KeyColumn::Unsigned(a), Key::Int(k)) => i128::from(a.value(i)).cmp(k),
            (KeyColumn::Str(a), Key::Str(k)) => a.value(i).cmp(k.as_str()),
            (KeyColumn::LargeStr(a), Key::Str(k)) => a.value(i).cmp(k.as_str()),
            (KeyColumn::Signed(_) | KeyColumn::Unsigned(_), Key::Str(_)) => Ordering::Less,
            (KeyColumn::Str(_) | KeyColumn::LargeStr(_), Key::Int(_)) => Ordering::Greater,
        }
    }

    /// Compares values `i` and `j` (non-null, both `< len()`).
    pub fn cmp_rows(&self, i: usize, j: usize) -> Ordering {
        match self {
            KeyColumn::Signed(a) => a.value(i).cmp(&a.value(j)),
            KeyColumn::Unsigned(a) => a.value(i).cmp(&a.value(j)),
            KeyColumn::Str(a) => a.value(i).cmp(a.value(j)),
            KeyColumn::LargeStr(a) => a.value(i).cmp(a.value(j)),
        }
    }

    /// The owned key of value `i`, `None` when null. `i` must be `< len()`.
    pub fn key_at(&self, i: usize) -> Option<Key> {
        if self.is_null(i) {
            return None;
        }
        Some(match self {
            KeyColumn::Signed(a) => Key::Int(i128::from(a.value(i))),
            KeyColumn::Unsigned(a) => Key::Int(i128::from(a.value(i))),
            KeyColumn::Str(a) => Key::Str(a.value(i).to_string()),
            KeyColumn::LargeStr(a) => Key::Str(a.value(i).to_string()),
        })
    }

    /// First position in `[from, to)` (sorted, non-null) whose value is not
    /// before `bound` taken as a lower bound.
    pub fn lower_position(&self, from: usize, to: usize, bound: &Bound<Key>) -> usize {
        match bound {
            Bound::Unbounded => from,
            Bound::Included(k) => self.partition(from, to, |o| o == Ordering::Less, k),
            Bound::Excluded(k) => self.partition(from, to, |o| o != Ordering::Greater, k),
        }
    }

    /// First position in `[from, to)` (sorted, non-null) whose value is past
    /// `bound` taken as an upper bound.
    pub fn upper_position(&self, from: usize, to: usize, bound: &Bound<Key>) -> usize {
        match bound {
            Bound::Unbounded => to,
            Bound::Included(k) => self.partition(from, to, |o| o != Ordering::Greater, k),
            Bound::Excluded(k) => self.partition(from, to, |o| o == Ordering::Less, k),
        }
    }

    /// Binary search: first position in `[from, to)` where `before(cmp(value, key))` is false.
    fn partition(
        &self,
        mut from: usize,
        mut to: usize,
        before: impl Fn(Ordering) -> bool,
        key: &Key,
    ) -> usize {
        while from < to {
            let mid = from + (to - from) / 2;
            if before(self.cmp_at(mid, key)) {
                from = mid + 1;
            } else {
                to = mid;
            }
        }
        from
    }
}

/// True if the closed key interval `[min, max]` meets the range `(low, high)`.
pub fn interval_meets(min: &Key, max: &Key, low: &Bound<Key>, high: &Bound<Key>) -> bool {
    let above_low = match low {
        Bound::Unbounded => true,
        Bound::Included(k) => max >= k,
        Bound::Excluded(k) => max > k,
    };
    let below_high = match high {
        Bound::Unbounded => true,
        Bound::Included(k) => min <= k,
        Bound::Excluded(k) => min < k,
    };
    above_low && below_high
}

/// True if every key of the closed interval `[min, max]` lies in `(low, high)`.
pub fn interval_within(min: &Key, max: &Key, low: &Bound<Key>, high: &Bound<Key>) -> bool {
    interval_meets(min, min, low, high) && interval_meets(max, max, low, high)
}

/// True if the range `(low, high)` can contain no value at all.
pub fn range_is_empty(low: &Bound<Key>, high: &Bound<Key>) -> bool {
    match (low, high) {
        (Bound::Included(l), Bound::Included(h)) => l > h,
        (Bound::Included(l), Bound::Excluded(h))
        | (Bound::Excluded(l), Bound::Included(h))
        | (Bound::Excluded(l), Bound::Excluded(h)) => l >= h,
        _ => false,
    }
}

/// Downcasts with a typed error instead of a panic.
///
/// # Errors
/// Corrupt (of an index file) when `array` is not a `T`.
pub fn downcast<T: 'static>(array: &ArrayRef) -> Result<&T> {
    array.as_any().downcast_ref::<T>().ok_or_else(|| {
        Error::corrupt(
            "index file",
            format!("unexpected column type {}", array.data_type()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use arrow_array::{Int32Array, UInt64Array};
    use rstest::rstest;

    fn sorted_ints() -> KeyColumn {
        let array: ArrayRef = Arc::new(Int32Array::from(vec![1, 3, 3, 3, 7, 9]));
        KeyColumn::new(&array).unwrap()
    }

    #[rstest]
    #[case(Bound::Included(Key::Int(3)), 1)]
    #[case(Bound::Excluded(Key::Int(3)), 4)]
    #[case(Bound::Included(Key::Int(0)), 0)]
    #[case(Bound::Included(Key::Int(10)), 6)]
    #[case(Bound::Unbounded, 0)]
    fn lower_positions(#[case] bound: Bound<Key>, #[case] expected: usize) {
        assert_eq!(sorted_ints().lower_position(0, 6, &bound), expected);
    }

    #[rstest]
    #[case(Bound::Included(Key::Int(3)), 4)]
    #[case(Bound::Excluded(Key::Int(3)), 1)]
    #[case(Bound::Excluded(Key::Int(1)), 0)]
    #[case(Bound::Included(Key::Int(9)), 6)]
    #[case(Bound::Unbounded, 6)]
    fn upper_positions(#[case] bound: Bound<Key>, #[case] expected: usize) {
        assert_eq!(sorted_ints().upper_position(0, 6, &bound), expected);
    }

    #[test]
    fn unsigned_above_i64_max_compares_exactly() {
        let array: ArrayRef = Arc::new(UInt64Array::from(vec![u64::MAX]));
        let col = KeyColumn::new(&array).unwrap();
        assert_eq!(
            col.cmp_at(0, &Key::Int(i128::from(i64::MAX))),
            Ordering::Greater
        );
    }

    #[rstest]
    #[case(Bound::Included(Key::Int(5)), Bound::Included(Key::Int(5)), false)]
    #[case(Bound::Included(Key::Int(5)), Bound::Excluded(Key::Int(5)), true)]
    #[case(Bound::Excluded(Key::Int(6)), Bound::Included(Key::Int(5)), true)]
    #[case(Bound::Unbounded, Bound::Excluded(Key::Int(i128::MIN)), false)]
    fn empty_ranges(#[case] low: Bound<Key>, #[case] high: Bound<Key>, #[case] empty: bool) {
        assert_eq!(range_is_empty(&low, &high), empty);
    }

    #[test]
    fn literal_kinds_must_match() {
        assert_eq!(KeyKind::Int.literal_key(&Literal::Str("a".into())), None);
        assert_eq!(KeyKind::Str.literal_key(&Literal::Int(1)), None);
        assert_eq!(KeyKind::Int.literal_key(&Literal::Float(1.0)), None);
        assert_eq!(
            KeyKind::Int.literal_key(&Literal::Int(-4)),
            Some(Key::Int(-4))
        );
    }
}
