//! Records and batches as they flow between operators.
//!
//! A [`Batch`] is the WIT type `weir:operator/types.batch`, packed column by
//! column: timestamps, key lengths and value lengths (one entry per record)
//! plus one flat byte buffer holding every key and value back to back. The
//! host uses that same type internally, so a batch crosses the Wasm boundary
//! as four bulk copies, and chained operators hand batches to each other
//! without re-encoding. `wit/README.md` has the measurements behind this
//! layout.
//!
//! Invariant of a valid batch: the three per-record lists have the same
//! length, the sum of its key (where `key_len >= 0`) and value lengths equals
//! `data.len()`, and no key length is below -1.

pub use crate::contract::weir::operator::types::{Batch, Emitted, SideOutput};

/// `key_len` of a record without a key.
pub const NO_KEY: i32 = -1;

/// Bytes of one record's metadata in guest memory (s64 + s32 + u32).
pub const META_BYTES: usize = 16;

/// A record borrowed from a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// The key, if the record has one.
    pub key: Option<&'a [u8]>,
    /// The value.
    pub value: &'a [u8],
    /// Event time, ms since the Unix epoch.
    pub timestamp: i64,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Batch {
        Batch {
            timestamps: Vec::new(),
            key_lens: Vec::new(),
            value_lens: Vec::new(),
            data: Vec::new(),
        }
    }

    /// An empty batch with room for `records` records of `bytes` bytes in all.
    pub fn with_capacity(records: usize, bytes: usize) -> Batch {
        Batch {
            timestamps: Vec::with_capacity(records),
            key_lens: Vec::with_capacity(records),
            value_lens: Vec::with_capacity(records),
            data: Vec::with_capacity(bytes),
        }
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.timestamps.len()
    }

    /// True if the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.timestamps.is_empty()
    }

    /// Bytes the batch occupies on the wire and in guest memory.
    pub fn byte_size(&self) -> usize {
        self.data.len() + self.len() * META_BYTES
    }

    /// Appends a record.
    pub fn push(&mut self, key: Option<&[u8]>, value: &[u8], timestamp: i64) {
        let key_len = match key {
            Some(k) => {
                self.data.extend_from_slice(k);
                k.len() as i32
            }
            None => NO_KEY,
        };
        self.data.extend_from_slice(value);
        self.timestamps.push(timestamp);
        self.key_lens.push(key_len);
        self.value_lens.push(value.len() as u32);
    }

    /// Appends a record borrowed from another batch.
    pub fn push_ref(&mut self, r: RecordRef<'_>) {
        self.push(r.key, r.value, r.timestamp);
    }

    /// Removes every record, keeping the allocations.
    pub fn clear(&mut self) {
        self.timestamps.clear();
        self.key_lens.clear();
        self.value_lens.clear();
        self.data.clear();
    }

    /// Moves all records of `other` to the end of `self`.
    pub fn append(&mut self, other: &mut Batch) {
        self.timestamps.append(&mut other.timestamps);
        self.key_lens.append(&mut other.key_lens);
        self.value_lens.append(&mut other.value_lens);
        self.data.append(&mut other.data);
    }

    /// Iterates over the records. The batch must be valid (see [`Batch::validate`]).
    pub fn iter(&self) -> BatchIter<'_> {
        BatchIter {
            batch: self,
            index: 0,
            offset: 0,
        }
    }

    /// Checks the batch's invariant; the error says which record is wrong.
    pub fn validate(&self) -> Result<(), String> {
        let n = self.timestamps.len();
        if self.key_lens.len() != n || self.value_lens.len() != n {
            return Err(format!(
                "{n} timestamps but {} key lengths and {} value lengths",
                self.key_lens.len(),
                self.value_lens.len()
            ));
        }
        let mut total: usize = 0;
        for (i, (&key_len, &value_len)) in self.key_lens.iter().zip(&self.value_lens).enumerate() {
            if key_len < NO_KEY {
                return Err(format!("record {i} has key length {key_len}"));
            }
            total = total
                .checked_add(key_len.max(0) as usize + value_len as usize)
                .ok_or_else(|| format!("record {i}: lengths overflow"))?;
            if total > self.data.len() {
                return Err(format!(
                    "record {i} ends at byte {total}, past the {} bytes of data",
                    self.data.len()
                ));
            }
        }
        if total != self.data.len() {
            return Err(format!(
                "records cover {total} bytes but the data buffer holds {}",
                self.data.len()
            ));
        }
        Ok(())
    }

    /// The largest timestamp in the batch.
    pub fn max_timestamp(&self) -> Option<i64> {
        self.timestamps.iter().copied().max()
    }
}

impl Default for Batch {
    fn default() -> Self {
        Batch::new()
    }
}

/// Iterator over a batch's records.
#[derive(Debug)]
pub struct BatchIter<'a> {
    batch: &'a Batch,
    index: usize,
    offset: usize,
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = RecordRef<'a>;

    fn next(&mut self) -> Option<RecordRef<'a>> {
        let i = self.index;
        let timestamp = *self.batch.timestamps.get(i)?;
        let (key_len, value_len) = (self.batch.key_lens[i], self.batch.value_lens[i]);
        self.index += 1;
        let data = &self.batch.data;
        let key = if key_len >= 0 {
            let end = self.offset + key_len as usize;
            let k = &data[self.offset..end];
            self.offset = end;
            Some(k)
        } else {
            None
        };
        let end = self.offset + value_len as usize;
        let value = &data[self.offset..end];
        self.offset = end;
        Some(RecordRef {
            key,
            value,
            timestamp,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.batch.timestamps.len() - self.index;
        (n, Some(n))
    }
}

impl ExactSizeIterator for BatchIter<'_> {}

impl<'a> IntoIterator for &'a Batch {
    type Item = RecordRef<'a>;
    type IntoIter = BatchIter<'a>;
    fn into_iter(self) -> BatchIter<'a> {
        self.iter()
    }
}

impl Emitted {
    /// Nothing emitted.
    pub fn empty() -> Emitted {
        Emitted {
            main: Batch::new(),
            side: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_and_iterate_round_trip() {
        let mut b = Batch::new();
        b.push(Some(b"k1"), b"v1", 1);
        b.push(None, b"value-two", 2);
        b.push(Some(b""), b"", 3);
        b.validate().unwrap();
        let got: Vec<_> = b.iter().collect();
        assert_eq!(
            got,
            vec![
                RecordRef {
                    key: Some(b"k1"),
                    value: b"v1",
                    timestamp: 1
                },
                RecordRef {
                    key: None,
                    value: b"value-two",
                    timestamp: 2
                },
                RecordRef {
                    key: Some(b""),
                    value: b"",
                    timestamp: 3
                },
            ]
        );
        assert_eq!(b.max_timestamp(), Some(3));
    }

    #[test]
    fn validate_rejects_inconsistent_lengths() {
        let mut b = Batch::new();
        b.push(Some(b"k"), b"v", 0);
        b.data.push(0);
        assert!(b.validate().unwrap_err().contains("data buffer holds 3"));
        let mut b = Batch::new();
        b.push(None, b"v", 0);
        b.value_lens[0] = 10;
        assert!(
            b.validate()
                .unwrap_err()
                .contains("record 0 ends at byte 10")
        );
        b.key_lens[0] = -2;
        assert!(b.validate().unwrap_err().contains("key length -2"));
        b.key_lens.pop();
        assert!(
            b.validate()
                .unwrap_err()
                .contains("1 timestamps but 0 key lengths")
        );
    }
}
