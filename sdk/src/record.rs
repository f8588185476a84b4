//! Records and the packed batch encoding: reading, writing, collecting.
//!
//! Owns [`Record`] (a record borrowed from a batch's buffer), [`Records`] (the
//! iterator that decodes a [`Batch`]), [`BatchBuilder`] (appends records into
//! one buffer) and [`Collector`] (main plus side outputs of one call).
//!
//! The encoding is the WIT `types.batch`, column by column: three parallel
//! lists (`timestamps`, `key_lens`, `value_lens`, one entry per record) and
//! one flat `data` buffer holding key 0, value 0, key 1, value 1, ... A key
//! length of -1 means "no key". [`Batch::records`] checks the whole batch
//! once (the three lists have the same length, the lengths add up to
//! `data.len()`, no key length below -1), so iterating never fails and never
//! allocates.

use std::borrow::Cow;
use std::fmt;

use crate::Error;
use crate::bindings::weir::operator::types::{Batch, Emitted, SideOutput};

/// One record, borrowed: from an input batch, or built by the operator.
///
/// `Record` is `Copy`; building one never allocates.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Record<'a> {
    /// The record's key, if it has one. On a keyed stream the host sets it.
    pub key: Option<&'a [u8]>,
    /// The record's value.
    pub value: &'a [u8],
    /// Event time, in milliseconds since the Unix epoch.
    pub timestamp: i64,
}

impl<'a> Record<'a> {
    /// A record without a key.
    pub fn new<V: AsRef<[u8]> + ?Sized>(value: &'a V, timestamp: i64) -> Self {
        Self {
            key: None,
            value: value.as_ref(),
            timestamp,
        }
    }

    /// A record with a key.
    pub fn keyed<K, V>(key: &'a K, value: &'a V, timestamp: i64) -> Self
    where
        K: AsRef<[u8]> + ?Sized,
        V: AsRef<[u8]> + ?Sized,
    {
        Self {
            key: Some(key.as_ref()),
            value: value.as_ref(),
            timestamp,
        }
    }

    /// This record with another value (key and timestamp kept).
    pub fn with_value<'b, V: AsRef<[u8]> + ?Sized>(self, value: &'b V) -> Record<'b>
    where
        'a: 'b,
    {
        Record {
            value: value.as_ref(),
            ..self
        }
    }

    /// This record with another key (value and timestamp kept).
    pub fn with_key<'b>(self, key: Option<&'b [u8]>) -> Record<'b>
    where
        'a: 'b,
    {
        Record { key, ..self }
    }

    /// The value as UTF-8, with invalid sequences replaced by U+FFFD.
    /// Borrows when the value is valid UTF-8.
    pub fn value_str(&self) -> Cow<'a, str> {
        String::from_utf8_lossy(self.value)
    }

    /// The key as UTF-8 (lossy, like [`Record::value_str`]).
    pub fn key_str(&self) -> Option<Cow<'a, str>> {
        self.key.map(String::from_utf8_lossy)
    }

    /// An owned copy.
    pub fn to_owned_record(&self) -> OwnedRecord {
        OwnedRecord {
            key: self.key.map(<[u8]>::to_vec),
            value: self.value.to_vec(),
            timestamp: self.timestamp,
        }
    }
}

impl fmt::Debug for Record<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Record")
            .field("key", &self.key.map(String::from_utf8_lossy))
            .field("value", &String::from_utf8_lossy(self.value))
            .field("timestamp", &self.timestamp)
            .finish()
    }
}

/// A record that owns its bytes; what the test harness returns.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnedRecord {
    /// The record's key, if it has one.
    pub key: Option<Vec<u8>>,
    /// The record's value.
    pub value: Vec<u8>,
    /// Event time, in milliseconds since the Unix epoch.
    pub timestamp: i64,
}

impl OwnedRecord {
    /// Borrows this record.
    pub fn as_record(&self) -> Record<'_> {
        Record {
            key: self.key.as_deref(),
            value: &self.value,
            timestamp: self.timestamp,
        }
    }

    /// The value as UTF-8 (lossy).
    pub fn value_str(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.value)
    }

    /// The key as UTF-8 (lossy).
    pub fn key_str(&self) -> Option<Cow<'_, str>> {
        self.key.as_deref().map(String::from_utf8_lossy)
    }
}

impl fmt::Debug for OwnedRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_record().fmt(f)
    }
}

impl Batch {
    /// The number of records.
    ///
    /// This is `timestamps.len()`; [`Batch::records`] checks that the other
    /// two lists agree.
    pub fn len(&self) -> usize {
        self.timestamps.len()
    }

    /// True if the batch holds no records.
    pub fn is_empty(&self) -> bool {
        self.timestamps.is_empty()
    }

    /// Checks the batch and returns an iterator over its records, which
    /// borrow from `data`.
    ///
    /// Fails if `timestamps`, `key_lens` and `value_lens` differ in length,
    /// a key length is below -1, or the lengths do not add up to
    /// `data.len()`.
    pub fn records(&self) -> Result<Records<'_>, Error> {
        let n = self.timestamps.len();
        if self.key_lens.len() != n || self.value_lens.len() != n {
            crate::bail!(
                "malformed batch: {n} timestamps, {} key lengths and {} value lengths",
                self.key_lens.len(),
                self.value_lens.len()
            );
        }
        // Two tight loops over plain integers (vectorizable); the rare error
        // path looks for the offending record afterwards.
        let mut min_key_len = 0i32;
        let mut total: u64 = 0;
        for &key_len in &self.key_lens {
            min_key_len = min_key_len.min(key_len);
            // `key_len.max(0)` is non-negative, so the cast is lossless.
            total += key_len.max(0) as u64;
        }
        if min_key_len < -1 {
            let (i, key_len) = self
                .key_lens
                .iter()
                .enumerate()
                .find(|&(_, &k)| k < -1)
                .expect("a key length below -1 was seen");
            crate::bail!("malformed batch: record {i} has key length {key_len}");
        }
        for &value_len in &self.value_lens {
            total += u64::from(value_len);
        }
        if total != self.data.len() as u64 {
            crate::bail!(
                "malformed batch: record lengths add up to {total} bytes but data holds {}",
                self.data.len()
            );
        }
        Ok(Records {
            timestamps: &self.timestamps,
            key_lens: &self.key_lens,
            value_lens: &self.value_lens,
            next: 0,
            rest: &self.data,
        })
    }

    /// Packs `records` into a new batch.
    pub fn from_records<'a>(records: impl IntoIterator<Item = Record<'a>>) -> Batch {
        let mut builder = BatchBuilder::new();
        for record in records {
            builder.push(record);
        }
        builder.finish()
    }
}

/// The records of a checked [`Batch`], in order; see [`Batch::records`].
#[derive(Clone)]
pub struct Records<'a> {
    // Checked to have the same length in `Batch::records`.
    timestamps: &'a [i64],
    key_lens: &'a [i32],
    value_lens: &'a [u32],
    next: usize,
    rest: &'a [u8],
}

impl<'a> Iterator for Records<'a> {
    type Item = Record<'a>;

    fn next(&mut self) -> Option<Record<'a>> {
        let i = self.next;
        let timestamp = *self.timestamps.get(i)?;
        let (key_len, value_len) = (self.key_lens[i], self.value_lens[i]);
        self.next = i + 1;
        // The batch was checked in `Batch::records`: the splits are in bounds.
        let key = if key_len >= 0 {
            let (key, rest) = self.rest.split_at(key_len as usize);
            self.rest = rest;
            Some(key)
        } else {
            None
        };
        let (value, rest) = self.rest.split_at(value_len as usize);
        self.rest = rest;
        Some(Record {
            key,
            value,
            timestamp,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.timestamps.len() - self.next;
        (left, Some(left))
    }
}

impl ExactSizeIterator for Records<'_> {}

/// Appends records into one packed [`Batch`]: one `data` buffer and the
/// three per-record columns, no allocation per record (beyond the buffers
/// growing).
#[derive(Default, Debug)]
pub struct BatchBuilder {
    timestamps: Vec<i64>,
    key_lens: Vec<i32>,
    value_lens: Vec<u32>,
    data: Vec<u8>,
}

impl BatchBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty builder with room for `records` records of `bytes` bytes in all.
    pub fn with_capacity(records: usize, bytes: usize) -> Self {
        Self {
            timestamps: Vec::with_capacity(records),
            key_lens: Vec::with_capacity(records),
            value_lens: Vec::with_capacity(records),
            data: Vec::with_capacity(bytes),
        }
    }

    /// Appends a copy of `record`.
    ///
    /// # Panics
    ///
    /// If the key is longer than `i32::MAX` bytes or the value longer than
    /// `u32::MAX` bytes, which the WIT encoding cannot express (and which
    /// cannot happen on `wasm32`, where no slice exceeds `i32::MAX` bytes).
    pub fn push(&mut self, record: Record<'_>) {
        self.push_with(record.key, record.timestamp, |data| {
            data.extend_from_slice(record.value)
        });
    }

    /// Appends a record whose value `write_value` writes directly at the end
    /// of the batch's buffer (it must only append). Saves building the value
    /// elsewhere and copying it. Returns what `write_value` returns.
    ///
    /// # Panics
    ///
    /// As [`BatchBuilder::push`]; and if `write_value` shrinks the buffer.
    pub fn push_with<R>(
        &mut self,
        key: Option<&[u8]>,
        timestamp: i64,
        write_value: impl FnOnce(&mut Vec<u8>) -> R,
    ) -> R {
        let key_len = match key {
            Some(key) => {
                self.data.extend_from_slice(key);
                i32::try_from(key.len()).expect("record key longer than i32::MAX bytes")
            }
            None => -1,
        };
        let start = self.data.len();
        let result = write_value(&mut self.data);
        let value_len = self
            .data
            .len()
            .checked_sub(start)
            .expect("write_value must only append to the buffer");
        self.timestamps.push(timestamp);
        self.key_lens.push(key_len);
        self.value_lens
            .push(u32::try_from(value_len).expect("record value longer than u32::MAX bytes"));
        result
    }

    /// The number of records so far.
    pub fn len(&self) -> usize {
        self.timestamps.len()
    }

    /// True if no record was pushed.
    pub fn is_empty(&self) -> bool {
        self.timestamps.is_empty()
    }

    /// The number of bytes of keys and values so far.
    pub fn data_len(&self) -> usize {
        self.data.len()
    }

    /// Drops all records, keeping the buffers' capacity.
    pub fn clear(&mut self) {
        self.timestamps.clear();
        self.key_lens.clear();
        self.value_lens.clear();
        self.data.clear();
    }

    /// The packed batch.
    pub fn finish(self) -> Batch {
        Batch {
            timestamps: self.timestamps,
            key_lens: self.key_lens,
            value_lens: self.value_lens,
            data: self.data,
        }
    }

    /// Takes the packed batch out, leaving this builder empty with room for
    /// as much as was taken (the next output is usually of similar size).
    pub fn take(&mut self) -> Batch {
        let records = self.timestamps.len();
        let bytes = self.data.len();
        Batch {
            timestamps: std::mem::replace(&mut self.timestamps, Vec::with_capacity(records)),
            key_lens: std::mem::replace(&mut self.key_lens, Vec::with_capacity(records)),
            value_lens: std::mem::replace(&mut self.value_lens, Vec::with_capacity(records)),
            data: std::mem::replace(&mut self.data, Vec::with_capacity(bytes)),
        }
    }
}

/// Everything one call of an operator emits: the main output and side
/// outputs by tag. Flink's `Collector` plus `Context.output(tag, ...)`.
///
/// Records are copied into one packed buffer per output as they are
/// collected; nothing is allocated per record.
#[derive(Default, Debug)]
pub struct Collector {
    main: BatchBuilder,
    /// Side outputs in the order their tags were first used; a handful at most,
    /// so a linear search beats a map.
    side: Vec<(String, BatchBuilder)>,
}

impl Collector {
    /// An empty collector.
    pub fn new() -> Self {
        Self::default()
    }

    /// Emits `record` on the main output.
    ///
    /// # Panics
    ///
    /// As [`BatchBuilder::push`].
    pub fn collect(&mut self, record: Record<'_>) {
        self.main.push(record);
    }

    /// Emits a record on the main output whose value `write_value` appends
    /// directly into the output buffer (see [`BatchBuilder::push_with`]).
    pub fn collect_with<R>(
        &mut self,
        key: Option<&[u8]>,
        timestamp: i64,
        write_value: impl FnOnce(&mut Vec<u8>) -> R,
    ) -> R {
        self.main.push_with(key, timestamp, write_value)
    }

    /// Emits `record` on the side output `tag` (Flink's `ctx.output(tag, value)`).
    /// The job spec routes a side output with an edge `from = "op:tag"`.
    pub fn output(&mut self, tag: &str, record: Record<'_>) {
        self.side_builder(tag).push(record);
    }

    /// Like [`Collector::output`], with the value written in place.
    pub fn output_with<R>(
        &mut self,
        tag: &str,
        key: Option<&[u8]>,
        timestamp: i64,
        write_value: impl FnOnce(&mut Vec<u8>) -> R,
    ) -> R {
        self.side_builder(tag)
            .push_with(key, timestamp, write_value)
    }

    fn side_builder(&mut self, tag: &str) -> &mut BatchBuilder {
        let index = match self.side.iter().position(|(t, _)| t == tag) {
            Some(index) => index,
            None => {
                self.side.push((tag.to_owned(), BatchBuilder::new()));
                self.side.len() - 1
            }
        };
        &mut self.side[index].1
    }

    /// The number of records on the main output so far.
    pub fn len(&self) -> usize {
        self.main.len()
    }

    /// True if nothing was emitted on any output.
    pub fn is_empty(&self) -> bool {
        self.main.is_empty() && self.side.iter().all(|(_, b)| b.is_empty())
    }

    /// Drops everything collected so far.
    pub fn clear(&mut self) {
        self.main.clear();
        for (_, builder) in &mut self.side {
            builder.clear();
        }
    }

    /// Takes what was collected as the WIT `emitted`, leaving the collector
    /// empty (with room for a similar output next time).
    pub fn take(&mut self) -> Emitted {
        let main = self.main.take();
        let mut side = Vec::new();
        for (tag, builder) in &mut self.side {
            if !builder.is_empty() {
                side.push(SideOutput {
                    tag: tag.clone(),
                    records: builder.take(),
                });
            }
        }
        Emitted { main, side }
    }
}

impl Emitted {
    /// `batch` as the main output, no side outputs.
    pub fn main(batch: Batch) -> Self {
        Emitted {
            main: batch,
            side: Vec::new(),
        }
    }

    /// Nothing.
    pub fn empty() -> Self {
        Emitted::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_round_trips_keys_values_and_timestamps() {
        let input = [
            Record::keyed("k1", "v1", 1),
            Record::new("no key", 2),
            Record::keyed("", "", -3),
            Record::new("", i64::MAX),
        ];
        let batch = Batch::from_records(input);
        assert_eq!(batch.len(), 4);
        assert_eq!(batch.data, b"k1v1no key");
        assert_eq!(batch.key_lens, [2, -1, 0, -1]);
        assert_eq!(batch.value_lens, [2, 6, 0, 0]);
        assert_eq!(batch.timestamps, [1, 2, -3, i64::MAX]);
        let back: Vec<Record<'_>> = batch.records().unwrap().collect();
        assert_eq!(back, input);
    }

    #[test]
    fn malformed_batches_are_errors() {
        let mut batch = Batch::from_records([Record::keyed("k", "v", 1)]);
        batch.data.push(0);
        let err = batch.records().err().unwrap();
        assert!(err.message().contains("add up to 2 bytes but data holds 3"));

        let mut batch = Batch::from_records([Record::keyed("k", "v", 1)]);
        batch.key_lens[0] = -2;
        let err = batch.records().err().unwrap();
        assert!(err.message().contains("record 0 has key length -2"));

        let mut batch = Batch::from_records([Record::new("v", 1)]);
        batch.value_lens[0] = u32::MAX;
        assert!(batch.records().is_err());

        // The three columns must have the same length.
        let mut batch = Batch::from_records([Record::new("v", 1), Record::new("w", 2)]);
        batch.timestamps.pop();
        let err = batch.records().err().unwrap();
        assert!(
            err.message()
                .contains("1 timestamps, 2 key lengths and 2 value lengths")
        );
        let mut batch = Batch::from_records([Record::new("v", 1)]);
        batch.value_lens.push(0);
        assert!(batch.records().is_err());
    }

    #[test]
    fn collector_groups_side_outputs_by_tag() {
        let mut out = Collector::new();
        out.collect(Record::new("a", 1));
        out.output("late", Record::new("b", 2));
        out.output("errors", Record::new("c", 3));
        out.output("late", Record::new("d", 4));
        out.collect_with(Some(b"k"), 5, |buf| buf.extend_from_slice(b"e"));
        let emitted = out.take();
        let main: Vec<_> = emitted.main.records().unwrap().collect();
        assert_eq!(main, [Record::new("a", 1), Record::keyed("k", "e", 5)]);
        assert_eq!(emitted.side.len(), 2);
        assert_eq!(emitted.side[0].tag, "late");
        assert_eq!(emitted.side[0].records.len(), 2);
        assert_eq!(emitted.side[1].tag, "errors");
        // Taking leaves the collector empty; unused tags are not sent.
        assert!(out.is_empty());
        assert_eq!(out.take(), Emitted::empty());
    }
}
