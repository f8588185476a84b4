//! The binary encoding of a [`Message`] on a data channel (pure: no I/O).
//!
//! Every message starts with a tag byte; all integers are little-endian.
//!
//! | tag | message | body |
//! |---|---|---|
//! | 0 | `Records` | `channel: u32`, `n: u32`, `data_len: u32`, `n × i64` timestamps, `n × i32` key lengths, `n × u32` value lengths, `data_len` bytes |
//! | 1 | `Watermark` | `channel: u32`, `watermark: i64` |
//! | 2 | `End` | `channel: u32` |
//! | 3 | `Barrier` | `channel: u32`, `checkpoint: u64` |
//! | 4 | `Idle` | `channel: u32`, `idle: u8` (1 idle, 0 active) |
//!
//! The batch travels in its own columnar layout, so encoding is a few bulk
//! copies. Messages form one continuous byte stream per channel, which the
//! channel cuts into network buffers without regard for message boundaries
//! ([`Encoder`] yields it piece by piece, so a large batch never needs a
//! second, serialized copy in memory); the [`Decoder`] reassembles messages
//! across buffers. A batch whose encoding is longer than [`SPLIT_BYTES`]
//! goes as several `Records` messages (between records, in order), so a
//! receiver can refuse any message longer than that or than one of the
//! job's longest records ([`max_message_bytes`], [`Decoder::with_limit`]).
//!
//! Decoding validates every length (a batch must pass [`Batch::validate`])
//! and returns a [`DecodeError`] on corrupt input; it never panics.

use crate::channel::Message;
use crate::record::Batch;

const TAG_RECORDS: u8 = 0;
const TAG_WATERMARK: u8 = 1;
const TAG_END: u8 = 2;
const TAG_BARRIER: u8 = 3;
const TAG_IDLE: u8 = 4;
const TAG_LATENCY: u8 = 5;

/// Largest encoded message a [`Decoder`] accepts unless told a smaller
/// limit: anything near it is corruption, not data. It bounds what a
/// corrupt length could make a decoder without a limit buffer.
pub const MAX_MESSAGE_BYTES: u64 = 1 << 30;

/// A batch whose encoding is longer than this goes on the wire as several
/// `Records` messages (cut between records, in order), so what a receiver
/// holds of one message is bounded by this or by one record, whichever is
/// larger ([`max_message_bytes`]).
pub const SPLIT_BYTES: usize = 4 << 20;

/// Bytes of a `Records` message's header.
const RECORDS_HEAD: usize = 13;
/// Column bytes per record (timestamp, key length, value length).
const COLUMN_BYTES: usize = 16;

/// The longest message a sender that splits at [`SPLIT_BYTES`] and sends
/// no record (key and value) larger than `max_record_bytes` puts on the
/// wire: what a receiver's [`Decoder::with_limit`] must accept.
pub fn max_message_bytes(max_record_bytes: u64) -> u64 {
    (SPLIT_BYTES as u64).max((RECORDS_HEAD + COLUMN_BYTES) as u64 + max_record_bytes)
}

/// The first record of `batch` whose key and value together are longer
/// than `limit` bytes, as `(index, bytes)`.
pub fn record_over(batch: &Batch, limit: u64) -> Option<(usize, u64)> {
    if batch.data.len() as u64 <= limit {
        return None;
    }
    batch
        .key_lens
        .iter()
        .zip(&batch.value_lens)
        .map(|(&k, &v)| record_bytes(k, v) as u64)
        .enumerate()
        .find(|&(_, bytes)| bytes > limit)
}

fn record_bytes(key_len: i32, value_len: u32) -> usize {
    key_len.max(0) as usize + value_len as usize
}

/// Column entries converted per piece by the [`Encoder`] (`× 8` bytes of
/// scratch at most).
const COLUMN_CHUNK: usize = 1024;

/// Corrupt input on a data channel.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("corrupt message: {0}")]
pub struct DecodeError(pub String);

/// Encodes one message into `out` (whole; tests and small messages).
pub fn encode(msg: &Message, out: &mut Vec<u8>) {
    let mut encoder = Encoder::new(msg);
    let mut scratch = Vec::new();
    while let Some(piece) = encoder.next_piece(&mut scratch) {
        out.extend_from_slice(piece);
    }
}

/// Encoded size of `msg` in bytes.
pub fn encoded_len(msg: &Message) -> usize {
    match msg {
        Message::Records { batch: b, .. } => encoded_len_of(b),
        Message::Watermark { .. } => 13,
        Message::End { .. } => 5,
        Message::Idle { .. } => 6,
        Message::Barrier { .. } => 13,
        Message::Latency { .. } => 13,
    }
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Head,
    Timestamps(usize),
    KeyLens(usize),
    ValueLens(usize),
    Data,
    Done,
}

/// The records of a batch one `Records` message carries: `first..end`,
/// whose keys and values are `data_from..data_to` of the batch's data.
#[derive(Debug, Clone, Copy, Default)]
struct Segment {
    first: usize,
    end: usize,
    data_from: usize,
    data_to: usize,
}

impl Segment {
    /// The records after `self` whose encoding fits `split` bytes (at
    /// least one record, however long).
    fn next(self, b: &Batch, split: usize) -> Segment {
        let (first, data_from) = (self.end, self.data_to);
        if first == 0 && encoded_len_of(b) <= split {
            return Segment {
                first,
                end: b.len(),
                data_from,
                data_to: b.data.len(),
            };
        }
        let mut seg = Segment {
            first,
            end: first,
            data_from,
            data_to: data_from,
        };
        let mut size = RECORDS_HEAD;
        while seg.end < b.len() {
            let bytes = COLUMN_BYTES + record_bytes(b.key_lens[seg.end], b.value_lens[seg.end]);
            if seg.end > first && size + bytes > split {
                break;
            }
            size += bytes;
            seg.data_to += bytes - COLUMN_BYTES;
            seg.end += 1;
        }
        seg
    }
}

fn encoded_len_of(b: &Batch) -> usize {
    RECORDS_HEAD + b.len() * COLUMN_BYTES + b.data.len()
}

/// Yields a message's encoding as a sequence of byte slices, each either
/// borrowed from the batch or converted into a bounded scratch buffer.
#[derive(Debug)]
pub struct Encoder<'m> {
    msg: &'m Message,
    step: Step,
    /// A batch whose encoding is longer goes as several messages.
    split: usize,
    /// The records of the `Records` message being encoded.
    segment: Segment,
}

impl<'m> Encoder<'m> {
    /// Starts encoding `msg` as one message.
    pub fn new(msg: &'m Message) -> Encoder<'m> {
        Encoder::splitting(msg, usize::MAX)
    }

    /// Starts encoding `msg`; a batch whose encoding is longer than
    /// `split` bytes becomes several `Records` messages of at most `split`
    /// bytes each (or of one record, if that alone is longer).
    pub fn splitting(msg: &'m Message, split: usize) -> Encoder<'m> {
        Encoder {
            msg,
            step: Step::Head,
            split,
            segment: Segment::default(),
        }
    }

    /// The next piece, or `None` when the message is complete.
    pub fn next_piece<'a>(&mut self, scratch: &'a mut Vec<u8>) -> Option<&'a [u8]>
    where
        'm: 'a,
    {
        scratch.clear();
        loop {
            let seg = self.segment;
            match (self.step, self.msg) {
                (Step::Head, msg) => {
                    match msg {
                        Message::Records { channel, batch: b } => {
                            let seg = seg.next(b, self.split);
                            self.segment = seg;
                            scratch.push(TAG_RECORDS);
                            scratch.extend_from_slice(&channel.to_le_bytes());
                            scratch
                                .extend_from_slice(&((seg.end - seg.first) as u32).to_le_bytes());
                            scratch.extend_from_slice(
                                &((seg.data_to - seg.data_from) as u32).to_le_bytes(),
                            );
                            self.step = Step::Timestamps(0);
                        }
                        Message::Watermark { channel, watermark } => {
                            scratch.push(TAG_WATERMARK);
                            scratch.extend_from_slice(&channel.to_le_bytes());
                            scratch.extend_from_slice(&watermark.to_le_bytes());
                            self.step = Step::Done;
                        }
                        Message::Barrier {
                            channel,
                            checkpoint,
                        } => {
                            scratch.push(TAG_BARRIER);
                            scratch.extend_from_slice(&channel.to_le_bytes());
                            scratch.extend_from_slice(&checkpoint.to_le_bytes());
                            self.step = Step::Done;
                        }
                        Message::End { channel } => {
                            scratch.push(TAG_END);
                            scratch.extend_from_slice(&channel.to_le_bytes());
                            self.step = Step::Done;
                        }
                        Message::Idle { channel, idle } => {
                            scratch.push(TAG_IDLE);
                            scratch.extend_from_slice(&channel.to_le_bytes());
                            scratch.push(u8::from(*idle));
                            self.step = Step::Done;
                        }
                        Message::Latency { channel, marked_ms } => {
                            scratch.push(TAG_LATENCY);
                            scratch.extend_from_slice(&channel.to_le_bytes());
                            scratch.extend_from_slice(&marked_ms.to_le_bytes());
                            self.step = Step::Done;
                        }
                    }
                    return Some(scratch);
                }
                (Step::Timestamps(i), Message::Records { batch: b, .. }) => {
                    let Some(chunk) = next_chunk(&b.timestamps[seg.first..seg.end], i) else {
                        self.step = Step::KeyLens(0);
                        continue;
                    };
                    chunk
                        .iter()
                        .for_each(|v| scratch.extend_from_slice(&v.to_le_bytes()));
                    self.step = Step::Timestamps(i + chunk.len());
                    return Some(scratch);
                }
                (Step::KeyLens(i), Message::Records { batch: b, .. }) => {
                    let Some(chunk) = next_chunk(&b.key_lens[seg.first..seg.end], i) else {
                        self.step = Step::ValueLens(0);
                        continue;
                    };
                    chunk
                        .iter()
                        .for_each(|v| scratch.extend_from_slice(&v.to_le_bytes()));
                    self.step = Step::KeyLens(i + chunk.len());
                    return Some(scratch);
                }
                (Step::ValueLens(i), Message::Records { batch: b, .. }) => {
                    let Some(chunk) = next_chunk(&b.value_lens[seg.first..seg.end], i) else {
                        self.step = Step::Data;
                        continue;
                    };
                    chunk
                        .iter()
                        .for_each(|v| scratch.extend_from_slice(&v.to_le_bytes()));
                    self.step = Step::ValueLens(i + chunk.len());
                    return Some(scratch);
                }
                (Step::Data, Message::Records { batch: b, .. }) => {
                    // The next message starts with the next record, if any.
                    self.step = if seg.end < b.len() {
                        Step::Head
                    } else {
                        Step::Done
                    };
                    if seg.data_to == seg.data_from {
                        continue;
                    }
                    return Some(&b.data[seg.data_from..seg.data_to]);
                }
                _ => return None,
            }
        }
    }
}

fn next_chunk<T>(column: &[T], from: usize) -> Option<&[T]> {
    let rest = column.get(from..)?;
    (!rest.is_empty()).then(|| &rest[..rest.len().min(COLUMN_CHUNK)])
}

/// Reassembles messages from a channel's byte stream, whatever the cuts.
#[derive(Debug)]
pub struct Decoder {
    /// The start of a message whose end has not arrived yet.
    pending: Vec<u8>,
    /// The longest message accepted.
    limit: u64,
}

impl Default for Decoder {
    fn default() -> Decoder {
        Decoder::with_limit(MAX_MESSAGE_BYTES)
    }
}

impl Decoder {
    /// A decoder at a message boundary, accepting messages up to
    /// [`MAX_MESSAGE_BYTES`].
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// A decoder that fails on a message longer than `limit` bytes (as
    /// soon as its header announces it), so it never holds more than that
    /// of one message.
    pub fn with_limit(limit: u64) -> Decoder {
        Decoder {
            pending: Vec::new(),
            limit: limit.min(MAX_MESSAGE_BYTES),
        }
    }

    /// True at a message boundary (no partial message held).
    pub fn is_idle(&self) -> bool {
        self.pending.is_empty()
    }

    /// Bytes of a partial message held.
    pub fn pending_bytes(&self) -> usize {
        self.pending.len()
    }

    /// Consumes `input`, appending every message it completes to `out`.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<Message>) -> Result<(), DecodeError> {
        // Finish the message started in earlier input.
        while !self.pending.is_empty() && !input.is_empty() {
            let want = match message_len(&self.pending, self.limit)? {
                Some(total) => total - self.pending.len(),
                // Header incomplete: move just enough to complete it.
                None => head_len(self.pending[0])? - self.pending.len(),
            };
            let n = want.min(input.len());
            self.pending.extend_from_slice(&input[..n]);
            input = &input[n..];
            if let Some(total) = message_len(&self.pending, self.limit)?
                && total == self.pending.len()
            {
                out.push(decode_exact(&self.pending)?);
                self.pending.clear();
            }
        }
        // Whole messages straight from the input; keep the tail.
        while !input.is_empty() {
            match message_len(input, self.limit)? {
                Some(total) if total <= input.len() => {
                    out.push(decode_exact(&input[..total])?);
                    input = &input[total..];
                }
                _ => {
                    self.pending.extend_from_slice(input);
                    break;
                }
            }
        }
        Ok(())
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Length of the fixed header of a message with `tag`.
fn head_len(tag: u8) -> Result<usize, DecodeError> {
    match tag {
        TAG_RECORDS => Ok(RECORDS_HEAD),
        TAG_WATERMARK => Ok(13),
        TAG_END => Ok(5),
        TAG_IDLE => Ok(6),
        TAG_BARRIER => Ok(13),
        TAG_LATENCY => Ok(13),
        t => Err(DecodeError(format!("unknown message tag {t}"))),
    }
}

/// The total encoded length of the message `bytes` starts with, once its
/// header is complete; an error if it is longer than `limit`.
fn message_len(bytes: &[u8], limit: u64) -> Result<Option<usize>, DecodeError> {
    let Some(&tag) = bytes.first() else {
        return Ok(None);
    };
    let head = head_len(tag)?;
    if bytes.len() < head {
        return Ok(None);
    }
    if tag != TAG_RECORDS {
        return Ok(Some(head));
    }
    let n = u64::from(u32_at(bytes, 5));
    let data_len = u64::from(u32_at(bytes, 9));
    let total = RECORDS_HEAD as u64 + n * COLUMN_BYTES as u64 + data_len;
    if total > limit {
        return Err(DecodeError(format!(
            "batch of {n} records and {data_len} data bytes exceeds the {limit}-byte limit"
        )));
    }
    Ok(Some(total as usize))
}

/// Decodes one message from exactly its encoding (as sized by `message_len`).
fn decode_exact(bytes: &[u8]) -> Result<Message, DecodeError> {
    match bytes[0] {
        TAG_WATERMARK => Ok(Message::Watermark {
            channel: u32_at(bytes, 1),
            watermark: i64::from_le_bytes(bytes[5..13].try_into().expect("8 bytes")),
        }),
        TAG_END => Ok(Message::End {
            channel: u32_at(bytes, 1),
        }),
        TAG_IDLE => match bytes[5] {
            flag @ (0 | 1) => Ok(Message::Idle {
                channel: u32_at(bytes, 1),
                idle: flag == 1,
            }),
            other => Err(DecodeError(format!("idle flag {other}, expected 0 or 1"))),
        },
        TAG_BARRIER => Ok(Message::Barrier {
            channel: u32_at(bytes, 1),
            checkpoint: u64::from_le_bytes(bytes[5..13].try_into().expect("8 bytes")),
        }),
        TAG_LATENCY => Ok(Message::Latency {
            channel: u32_at(bytes, 1),
            marked_ms: i64::from_le_bytes(bytes[5..13].try_into().expect("8 bytes")),
        }),
        _ => {
            let channel = u32_at(bytes, 1);
            let n = u32_at(bytes, 5) as usize;
            let (ts, rest) = bytes[13..].split_at(n * 8);
            let (kl, rest) = rest.split_at(n * 4);
            let (vl, data) = rest.split_at(n * 4);
            let batch = Batch {
                timestamps: ts
                    .chunks_exact(8)
                    .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
                    .collect(),
                key_lens: kl
                    .chunks_exact(4)
                    .map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes")))
                    .collect(),
                value_lens: vl
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
                    .collect(),
                data: data.to_vec(),
            };
            batch.validate().map_err(DecodeError)?;
            Ok(Message::Records { channel, batch })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Message> {
        let mut big = Batch::new();
        for i in 0..3000 {
            let key = format!("k{i}");
            big.push(
                (i % 3 != 0).then_some(key.as_bytes()),
                &vec![i as u8; i % 17],
                i as i64 - 5,
            );
        }
        let mut small = Batch::new();
        small.push(Some(b"key"), b"value", 7);
        vec![
            Message::Records {
                channel: 0,
                batch: small,
            },
            Message::Watermark {
                channel: 3,
                watermark: i64::MIN,
            },
            Message::Records {
                channel: 0,
                batch: Batch::new(),
            },
            Message::Records {
                channel: 0,
                batch: big,
            },
            Message::End { channel: 9 },
            Message::Idle {
                channel: 2,
                idle: true,
            },
            Message::Idle {
                channel: 2,
                idle: false,
            },
            Message::Barrier {
                channel: 4,
                checkpoint: 1 << 40,
            },
            Message::Latency {
                channel: 5,
                marked_ms: 1_796_183_353_909,
            },
        ]
    }

    fn same(a: &Message, b: &Message) -> bool {
        match (a, b) {
            (
                Message::Records {
                    channel: c1,
                    batch: x,
                },
                Message::Records {
                    channel: c2,
                    batch: y,
                },
            ) => c1 == c2 && x == y,
            (
                Message::Watermark {
                    channel: c1,
                    watermark: w1,
                },
                Message::Watermark {
                    channel: c2,
                    watermark: w2,
                },
            ) => c1 == c2 && w1 == w2,
            (Message::End { channel: c1 }, Message::End { channel: c2 }) => c1 == c2,
            (
                Message::Latency {
                    channel: c1,
                    marked_ms: m1,
                },
                Message::Latency {
                    channel: c2,
                    marked_ms: m2,
                },
            ) => c1 == c2 && m1 == m2,
            (
                Message::Idle {
                    channel: c1,
                    idle: i1,
                },
                Message::Idle {
                    channel: c2,
                    idle: i2,
                },
            ) => c1 == c2 && i1 == i2,
            (
                Message::Barrier {
                    channel: c1,
                    checkpoint: k1,
                },
                Message::Barrier {
                    channel: c2,
                    checkpoint: k2,
                },
            ) => c1 == c2 && k1 == k2,
            _ => false,
        }
    }

    #[test]
    fn round_trips_whatever_the_cuts() {
        let msgs = sample();
        let mut bytes = Vec::new();
        for m in &msgs {
            let before = bytes.len();
            encode(m, &mut bytes);
            assert_eq!(bytes.len() - before, encoded_len(m));
        }
        for cut in [1, 2, 5, 13, 100, 4096, bytes.len()] {
            let mut decoder = Decoder::new();
            let mut out = Vec::new();
            for piece in bytes.chunks(cut) {
                decoder.feed(piece, &mut out).unwrap();
            }
            assert!(decoder.is_idle(), "cut {cut}");
            assert_eq!(out.len(), msgs.len(), "cut {cut}");
            for (a, b) in msgs.iter().zip(&out) {
                assert!(same(a, b), "cut {cut}: {a:?} != {b:?}");
            }
        }
    }

    #[test]
    fn encoder_pieces_are_bounded() {
        let msgs = sample();
        let Message::Records { batch: big, .. } = &msgs[3] else {
            unreachable!()
        };
        let mut enc = Encoder::new(&msgs[3]);
        let mut scratch = Vec::new();
        while let Some(piece) = enc.next_piece(&mut scratch) {
            assert!(piece.len() <= (COLUMN_CHUNK * 8).max(big.data.len()));
        }
        assert!(scratch.capacity() <= COLUMN_CHUNK * 8 * 2);
    }

    /// Encodes `msg` cut at `split`, decodes it with `limit`.
    fn split_round_trip(msg: &Message, split: usize, limit: u64) -> Vec<Message> {
        let mut encoder = Encoder::splitting(msg, split);
        let mut scratch = Vec::new();
        let mut bytes = Vec::new();
        while let Some(piece) = encoder.next_piece(&mut scratch) {
            bytes.extend_from_slice(piece);
        }
        let mut decoder = Decoder::with_limit(limit);
        let mut out = Vec::new();
        for piece in bytes.chunks(977) {
            decoder.feed(piece, &mut out).unwrap();
        }
        assert!(decoder.is_idle());
        out
    }

    #[test]
    fn a_long_batch_goes_as_several_messages_no_longer_than_the_split_or_one_record() {
        let msgs = sample();
        let Message::Records { batch: big, .. } = &msgs[3] else {
            unreachable!()
        };
        // One record far longer than the split, among short ones.
        let mut batch = big.clone();
        batch.push(Some(b"long"), &[7; 5000], 99);
        batch.push(None, b"after", 100);
        let whole = RECORDS_HEAD + batch.len() * COLUMN_BYTES + batch.data.len();
        let msg = Message::Records { channel: 6, batch };
        for split in [1, 40, 1000, whole - 1, whole, usize::MAX] {
            let longest = (split as u64).max((RECORDS_HEAD + COLUMN_BYTES + 5004) as u64);
            let out = split_round_trip(&msg, split, longest);
            let mut joined = Batch::new();
            for m in &out {
                let Message::Records { channel: 6, batch } = m else {
                    panic!("split {split}: {m:?}");
                };
                assert!(!batch.is_empty(), "split {split}: an empty message");
                let len = RECORDS_HEAD + batch.len() * COLUMN_BYTES + batch.data.len();
                assert!(
                    len <= split || batch.len() == 1,
                    "split {split}: a message of {} records, {len} bytes",
                    batch.len()
                );
                for r in batch.iter() {
                    joined.push(r.key, r.value, r.timestamp);
                }
            }
            let Message::Records { batch, .. } = &msg else {
                unreachable!()
            };
            assert_eq!(&joined, batch, "split {split}");
            assert_eq!(
                out.len() == 1,
                split >= whole,
                "split {split}: {} messages",
                out.len()
            );
        }
        // An empty batch is still one (empty) message.
        let empty = Message::Records {
            channel: 1,
            batch: Batch::new(),
        };
        assert!(same(&split_round_trip(&empty, 1, 13)[0], &empty));
    }

    #[test]
    fn a_decoder_with_a_limit_refuses_a_longer_message_from_its_header() {
        let mut b = Batch::new();
        b.push(Some(b"k"), &[1; 100], 1);
        let msg = Message::Records {
            channel: 0,
            batch: b,
        };
        let len = encoded_len(&msg) as u64;
        assert_eq!(split_round_trip(&msg, usize::MAX, len).len(), 1);
        let mut bytes = Vec::new();
        encode(&msg, &mut bytes);
        // Only the header has arrived: refused before anything is held.
        let err = Decoder::with_limit(len - 1)
            .feed(&bytes[..RECORDS_HEAD], &mut Vec::new())
            .unwrap_err();
        assert!(
            err.0
                .contains(&format!("exceeds the {}-byte limit", len - 1)),
            "{err}"
        );
        assert_eq!(max_message_bytes(0), SPLIT_BYTES as u64);
        assert_eq!(
            max_message_bytes(16 << 20),
            (16 << 20) + (RECORDS_HEAD + COLUMN_BYTES) as u64
        );
    }

    #[test]
    fn record_over_names_the_first_record_longer_than_the_limit() {
        let mut b = Batch::new();
        b.push(Some(b"key"), b"12345", 1);
        b.push(None, b"123456789", 2);
        b.push(Some(b"k"), b"1234567890", 3);
        assert_eq!(record_over(&b, 100), None);
        assert_eq!(record_over(&b, 9), Some((2, 11)));
        assert_eq!(record_over(&b, 8), Some((1, 9)));
    }

    #[test]
    fn corrupt_input_is_an_error_not_a_panic() {
        let decode = |bytes: &[u8]| {
            let mut out = Vec::new();
            Decoder::new().feed(bytes, &mut out).map(|_| out.len())
        };
        // Unknown tag (0–5 are records, watermark, end, barrier, idle,
        // latency marker).
        assert!(decode(&[6]).unwrap_err().0.contains("tag 6"));
        assert!(
            decode(&[4, 0, 0, 0, 0, 2])
                .unwrap_err()
                .0
                .contains("idle flag 2")
        );
        assert!(decode(&[0xff, 1, 2]).is_err());
        // A batch whose lengths do not add up to its data.
        let mut b = Batch::new();
        b.push(Some(b"k"), b"value", 1);
        let mut bytes = Vec::new();
        encode(
            &Message::Records {
                channel: 0,
                batch: b.clone(),
            },
            &mut bytes,
        );
        let value_len_at = 13 + 8 + 4;
        bytes[value_len_at] = 200;
        assert!(decode(&bytes).unwrap_err().0.contains("record 0"));
        // A key length below -1.
        let mut bytes = Vec::new();
        encode(
            &Message::Records {
                channel: 0,
                batch: b,
            },
            &mut bytes,
        );
        bytes[13 + 8..13 + 12].copy_from_slice(&(-7i32).to_le_bytes());
        assert!(decode(&bytes).unwrap_err().0.contains("key length -7"));
        // Absurd sizes are refused from the header alone.
        let mut huge = vec![TAG_RECORDS];
        huge.extend_from_slice(&0u32.to_le_bytes());
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&huge).unwrap_err().0.contains("exceeds"));
        // Truncated input is not an error by itself: the decoder waits.
        let mut decoder = Decoder::new();
        decoder.feed(&[TAG_END, 1], &mut Vec::new()).unwrap();
        assert!(!decoder.is_idle());
        // Garbage after a valid message.
        let mut bytes = Vec::new();
        encode(&Message::End { channel: 1 }, &mut bytes);
        bytes.push(77);
        assert!(decode(&bytes).is_err());
    }
}
