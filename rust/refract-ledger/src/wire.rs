//! A minimal protobuf wire-format walker.
//!
//! prost merges repeated occurrences of a singular field and silently skips
//! unknown fields. The ledger needs to see both: "exactly one content field",
//! "exactly one mapping" and "a transition carrying a field this build does not
//! know is unsupported". This walker yields each top-level field of a message
//! with its payload, borrowing from the input, and never allocates.

/// Protobuf wire types used by proto3 (groups are rejected).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Payload<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1.
    Fixed64,
    /// Wire type 2.
    Bytes(&'a [u8]),
    /// Wire type 5.
    Fixed32,
}

/// One top-level field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Field<'a> {
    pub number: u32,
    pub payload: Payload<'a>,
}

/// Iterates the top-level fields of one encoded message.
pub(crate) struct FieldIter<'a> {
    rest: &'a [u8],
    failed: bool,
}

/// Walks the fields of `bytes`.
pub(crate) fn fields(bytes: &[u8]) -> FieldIter<'_> {
    FieldIter {
        rest: bytes,
        failed: false,
    }
}

impl<'a> Iterator for FieldIter<'a> {
    type Item = Result<Field<'a>, String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        let result = self.read_field();
        if result.is_err() {
            self.failed = true;
        }
        Some(result)
    }
}

impl<'a> FieldIter<'a> {
    fn read_field(&mut self) -> Result<Field<'a>, String> {
        let key = self.read_varint()?;
        let number =
            u32::try_from(key >> 3).map_err(|_| "field number out of range".to_string())?;
        if number == 0 {
            return Err("field number 0".to_string());
        }
        let payload = match key & 0x7 {
            0 => Payload::Varint(self.read_varint()?),
            1 => {
                self.take(8)?;
                Payload::Fixed64
            }
            2 => {
                let len = self.read_varint()?;
                let len =
                    usize::try_from(len).map_err(|_| "length prefix too large".to_string())?;
                Payload::Bytes(self.take(len)?)
            }
            5 => {
                self.take(4)?;
                Payload::Fixed32
            }
            other => return Err(format!("unsupported wire type {other} for field {number}")),
        };
        Ok(Field { number, payload })
    }

    fn read_varint(&mut self) -> Result<u64, String> {
        let mut value: u64 = 0;
        for (i, byte) in self.rest.iter().enumerate().take(10) {
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                // A 10th byte may only carry the top bit of a u64.
                if i == 9 && *byte > 1 {
                    return Err("varint overflows u64".to_string());
                }
                // `i < rest.len()` because `i` came from iterating `rest`.
                self.rest = &self.rest[i + 1..];
                return Ok(value);
            }
        }
        Err("truncated or overlong varint".to_string())
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], String> {
        if len > self.rest.len() {
            return Err(format!(
                "field needs {len} bytes but only {} remain",
                self.rest.len()
            ));
        }
        let (head, tail) = self.rest.split_at(len);
        self.rest = tail;
        Ok(head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_varint_bytes_and_fixed_fields() {
        // field 1 varint 150, field 2 bytes "ab", field 3 fixed32, field 4 fixed64.
        let bytes = [
            0x08, 0x96, 0x01, 0x12, 0x02, b'a', b'b', 0x1d, 1, 2, 3, 4, 0x21, 0, 0, 0, 0, 0, 0, 0,
            0,
        ];
        let got: Vec<_> = fields(&bytes).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            got,
            vec![
                Field {
                    number: 1,
                    payload: Payload::Varint(150)
                },
                Field {
                    number: 2,
                    payload: Payload::Bytes(b"ab")
                },
                Field {
                    number: 3,
                    payload: Payload::Fixed32
                },
                Field {
                    number: 4,
                    payload: Payload::Fixed64
                },
            ]
        );
    }

    #[test]
    fn rejects_truncation_groups_and_huge_lengths() {
        assert!(fields(&[0x12, 0x05, b'a']).next().unwrap().is_err());
        assert!(fields(&[0x0b]).next().unwrap().is_err());
        assert!(
            fields(&[0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01])
                .next()
                .unwrap()
                .is_err()
        );
        assert!(fields(&[0x08, 0xff]).next().unwrap().is_err());
        // After an error the iterator stops.
        let mut it = fields(&[0x0b, 0x08, 0x01]);
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none());
    }
}
