//! Fuzz properties of the data plane's decoders: the message [`Decoder`]
//! and the stream header ([`wire`]), fed arbitrary bytes, mutated valid
//! streams (truncated, bit-flipped, length fields set to huge values) and
//! valid streams cut anywhere. See `weir_fuzz` for how to run them
//! longer.
//!
//! What must hold: no panic; a corrupt length is refused from the header
//! alone, before anything is buffered for it; what the decoder holds is
//! never more than what it was fed; every batch it returns is valid; and
//! valid streams decode to what was encoded.

use proptest::prelude::*;

use super::codec::{Decoder, MAX_MESSAGE_BYTES, encode};
use super::{InputKey, wire};
use crate::channel::Message;
use crate::record::Batch;
use weir_fuzz::{config, cuts, mutate, mutations, split};

fn batch() -> impl Strategy<Value = Batch> {
    prop::collection::vec(
        (
            prop::option::of(prop::collection::vec(any::<u8>(), 0..8)),
            prop::collection::vec(any::<u8>(), 0..24),
            any::<i64>(),
        ),
        0..40,
    )
    .prop_map(|records| {
        let mut batch = Batch::new();
        for (key, value, timestamp) in &records {
            batch.push(key.as_deref(), value, *timestamp);
        }
        batch
    })
}

fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        (any::<u32>(), batch()).prop_map(|(channel, batch)| Message::Records { channel, batch }),
        (any::<u32>(), any::<i64>())
            .prop_map(|(channel, watermark)| Message::Watermark { channel, watermark }),
        (any::<u32>(), any::<u64>()).prop_map(|(channel, checkpoint)| Message::Barrier {
            channel,
            checkpoint
        }),
        (any::<u32>(), any::<i64>())
            .prop_map(|(channel, marked_ms)| Message::Latency { channel, marked_ms }),
        any::<u32>().prop_map(|channel| Message::End { channel }),
    ]
}

fn encode_all(messages: &[Message]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for m in messages {
        encode(m, &mut bytes);
    }
    bytes
}

/// Feeds `pieces` to a fresh decoder as the receiver does (stopping at the
/// first error), checking the decoder's invariants after every piece.
/// Returns the messages and whether the stream was refused.
fn feed(pieces: &[&[u8]]) -> (Vec<Message>, Option<String>, Decoder) {
    let mut decoder = Decoder::new();
    let mut out = Vec::new();
    let mut fed = 0usize;
    for piece in pieces {
        fed += piece.len();
        let result = decoder.feed(piece, &mut out);
        for m in &out {
            if let Message::Records { batch, .. } = m {
                assert_eq!(batch.validate(), Ok(()), "the decoder returned a bad batch");
            }
        }
        assert!(
            decoder.pending_bytes() <= fed,
            "holds {} bytes after being fed {fed}",
            decoder.pending_bytes()
        );
        assert!(decoder.pending_bytes() as u64 <= MAX_MESSAGE_BYTES);
        if let Err(e) = result {
            return (out, Some(e.0), decoder);
        }
    }
    (out, None, decoder)
}

/// The stream header as the receiver reads it: 7 bytes, then the job name
/// and the indexes. `Ok(None)`: more bytes needed.
fn read_header(bytes: &[u8]) -> Result<Option<InputKey>, String> {
    let Some(start) = bytes.first_chunk::<7>() else {
        return Ok(None);
    };
    let len = wire::header_start(start)?;
    let Some(rest) = bytes[7..].get(..len + 8) else {
        return Ok(None);
    };
    wire::header_rest(rest).map(Some)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_never_panic_the_decoder(
        bytes in prop::collection::vec(any::<u8>(), 0..512),
        cuts in cuts(),
    ) {
        feed(&split(&bytes, &cuts));
    }

    #[test]
    fn bytes_after_a_valid_tag_never_panic_the_decoder(
        tag in 0..4u8,
        bytes in prop::collection::vec(any::<u8>(), 0..256),
        cuts in cuts(),
    ) {
        let mut stream = vec![tag];
        stream.extend_from_slice(&bytes);
        feed(&split(&stream, &cuts));
    }

    #[test]
    fn mutated_streams_never_panic_the_decoder(
        messages in prop::collection::vec(message(), 1..6),
        mutations in mutations(),
        cuts in cuts(),
    ) {
        let bytes = mutate(encode_all(&messages), &mutations);
        feed(&split(&bytes, &cuts));
    }

    #[test]
    fn valid_streams_round_trip_whatever_the_cuts(
        messages in prop::collection::vec(message(), 0..8),
        cuts in cuts(),
    ) {
        let bytes = encode_all(&messages);
        let (out, error, decoder) = feed(&split(&bytes, &cuts));
        prop_assert_eq!(error, None);
        prop_assert!(decoder.is_idle());
        prop_assert_eq!(out.len(), messages.len());
        // The encoding is injective: equal bytes are equal messages.
        prop_assert_eq!(encode_all(&out), bytes);
    }

    #[test]
    fn a_huge_batch_is_refused_from_its_header_alone(
        channel in any::<u32>(),
        n in any::<u32>(),
        data_len in any::<u32>(),
        cuts in cuts(),
    ) {
        let total = 13 + u64::from(n) * 16 + u64::from(data_len);
        prop_assume!(total > MAX_MESSAGE_BYTES);
        let mut header = vec![0u8];
        header.extend_from_slice(&channel.to_le_bytes());
        header.extend_from_slice(&n.to_le_bytes());
        header.extend_from_slice(&data_len.to_le_bytes());
        let (out, error, decoder) = feed(&split(&header, &cuts));
        prop_assert!(out.is_empty());
        let error = error.expect("refused");
        prop_assert!(error.contains("exceeds"), "{}", error);
        prop_assert!(decoder.pending_bytes() <= 13, "nothing buffered past the header");
    }

    #[test]
    fn arbitrary_stream_headers_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let _ = read_header(&bytes);
        let _ = wire::header_rest(&bytes);
    }

    #[test]
    fn stream_headers_round_trip_and_survive_mutation(
        job in "\\PC{0,40}",
        task in any::<u32>(),
        subtask in any::<u32>(),
        mutations in mutations(),
    ) {
        let key = InputKey { job, task, subtask };
        let bytes = wire::header(&key);
        prop_assert_eq!(read_header(&bytes), Ok(Some(key)));
        if let Ok(Some(key)) = read_header(&mutate(bytes, &mutations)) {
            prop_assert!(key.job.len() <= wire::MAX_JOB_NAME);
        }
    }
}
