//! What a data stream carries besides messages: the writer's header, the
//! receiver's credit grant, the buffer framing and the refusal codes.
//!
//! Writer → receiver: `"WEIR"`, version `u8`, job length `u16`, job (UTF-8),
//! task `u32`, subtask `u32`; then buffers, each a `u32` length and that
//! many bytes of the channel's message stream ([`super::codec`]); then the
//! stream's end.
//!
//! Receiver → writer: buffer size `u32` and initial credits `u32`; then a
//! `u32` count of returned credits each time buffers are consumed; then the
//! stream's end, after the last credit. All integers little-endian.

use super::InputKey;

/// First bytes of every data stream.
pub const MAGIC: &[u8; 4] = b"WEIR";

/// Version of this framing; bumped on any incompatible change.
pub const VERSION: u8 = 1;

/// Longest job name in a header; a longer one is a corrupt header.
pub const MAX_JOB_NAME: usize = 1024;

/// Application error codes of a reset or stopped data stream (and of a
/// closed connection).
pub mod code {
    /// The endpoint is shutting down.
    pub const SHUTDOWN: u32 = 0;
    /// No input was registered for the stream's key in time.
    pub const UNKNOWN_INPUT: u32 = 1;
    /// The receiving TaskManager dropped the job.
    pub const JOB_UNREGISTERED: u32 = 2;
    /// The stream's bytes are not valid Weir framing or messages.
    pub const CORRUPT: u32 = 3;
    /// The receiving subtask's input is closed (the subtask ended).
    pub const INPUT_CLOSED: u32 = 4;
    /// The writer's job aborted.
    pub const ABORTED: u32 = 5;
    /// The sending TaskManager is not in the job's placement.
    pub const FORBIDDEN: u32 = 6;
    /// Too many streams of the sending TaskManager already wait for their
    /// input's registration.
    pub const BUSY: u32 = 7;
}

/// What a refusal code means, for error messages.
pub fn describe(code: u64) -> String {
    match code as u32 {
        code::SHUTDOWN => "the peer is shutting down".into(),
        code::UNKNOWN_INPUT => "no such input was registered at the receiver in time".into(),
        code::JOB_UNREGISTERED => "the receiver dropped the job".into(),
        code::CORRUPT => "the receiver found corrupt data".into(),
        code::INPUT_CLOSED => "the receiving subtask's input is closed".into(),
        code::ABORTED => "the sender aborted".into(),
        code::FORBIDDEN => {
            "the receiver does not accept this job's data from this TaskManager".into()
        }
        code::BUSY => "too many of this TaskManager's streams already wait for their \
                       input's registration at the receiver"
            .into(),
        other => format!("unknown error code {other}"),
    }
}

/// Encodes a stream header for `key`.
pub fn header(key: &InputKey) -> Vec<u8> {
    let mut out = Vec::with_capacity(15 + key.job.len());
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&(key.job.len() as u16).to_le_bytes());
    out.extend_from_slice(key.job.as_bytes());
    out.extend_from_slice(&key.task.to_le_bytes());
    out.extend_from_slice(&key.subtask.to_le_bytes());
    out
}

/// Checks the fixed start of a header; returns the job name's length.
pub fn header_start(bytes: &[u8; 7]) -> Result<usize, String> {
    if &bytes[..4] != MAGIC {
        return Err("not a Weir data stream".into());
    }
    if bytes[4] != VERSION {
        return Err(format!(
            "data stream version {} (this node speaks {VERSION})",
            bytes[4]
        ));
    }
    let len = u16::from_le_bytes([bytes[5], bytes[6]]) as usize;
    if len > MAX_JOB_NAME {
        return Err(format!("job name of {len} bytes"));
    }
    Ok(len)
}

/// The rest of a header: the job name and the task and subtask indexes
/// (`bytes` is the job name's length from [`header_start`] plus 8).
pub fn header_rest(bytes: &[u8]) -> Result<InputKey, String> {
    let Some((job, ids)) = bytes.split_last_chunk::<8>() else {
        return Err(format!("header of {} bytes is too short", bytes.len()));
    };
    let job = std::str::from_utf8(job).map_err(|_| "job name is not UTF-8".to_string())?;
    let (task, subtask) = ids.split_at(4);
    Ok(InputKey {
        job: job.to_string(),
        task: u32::from_le_bytes(task.try_into().expect("4 bytes")),
        subtask: u32::from_le_bytes(subtask.try_into().expect("4 bytes")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_rejects_strangers() {
        let key = InputKey {
            job: "wörd-count".into(),
            task: 3,
            subtask: 7,
        };
        let bytes = header(&key);
        let len = header_start(bytes[..7].try_into().unwrap()).unwrap();
        assert_eq!(header_rest(&bytes[7..7 + len + 8]).unwrap(), key);
        let mut bad = bytes.clone();
        bad[0] = b'X';
        assert!(header_start(bad[..7].try_into().unwrap()).is_err());
        let mut bad = bytes.clone();
        bad[4] = 99;
        assert!(
            header_start(bad[..7].try_into().unwrap())
                .unwrap_err()
                .contains("version 99")
        );
        let mut bad = bytes;
        bad[5..7].copy_from_slice(&u16::MAX.to_le_bytes());
        assert!(header_start(bad[..7].try_into().unwrap()).is_err());
        assert!(header_rest(&[0xff, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
    }

    /// Found by `net::fuzz_tests::arbitrary_stream_headers_never_panic`:
    /// fewer than the 8 bytes of the indexes panicked (`mid > len`). The
    /// receiver always passes enough bytes, so this was not reachable from
    /// a peer; the decoder no longer relies on its caller for it.
    #[test]
    fn a_header_too_short_for_its_indexes_is_an_error_not_a_panic() {
        for len in 0..8 {
            assert!(
                header_rest(&vec![0; len])
                    .unwrap_err()
                    .contains("too short"),
                "{len} bytes"
            );
        }
        assert_eq!(
            header_rest(&[0; 8]).unwrap(),
            InputKey {
                job: String::new(),
                task: 0,
                subtask: 0
            }
        );
    }
}
