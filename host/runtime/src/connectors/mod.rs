//! Sources and sinks: where records enter and leave a job.
//!
//! # Key types
//!
//! - [`Source`]: produces batches until it is exhausted (`Ok(None)`).
//!   [`FileSource`] (in [`file_source`]) reads a file, a folder or a glob
//!   of files as lines, JSON lines or CSV, plain, gzip or zstd, split over
//!   parallel subtasks; [`GeneratorSource`] makes a
//!   deterministic, seeded stream (bounded or not, optionally rate-limited).
//! - [`Sink`]: consumes batches. [`FileSink`], [`StdoutSink`] and
//!   [`BlackholeSink`].
//!
//! - [`nats`]: a NATS JetStream source and sink (exactly-once through the
//!   stream's message de-duplication).
//! - [`kafka`]: a Kafka-protocol source and sink (exactly-once through one
//!   Kafka transaction per sink subtask and checkpoint).
//! - [`AllowedRoots`] (in [`confine`]): the directories file connectors may
//!   use. Every file a source reads or a sink writes is opened through it.
//!
//! Connectors are plain blocking code driven by a subtask's thread; they know
//! nothing of channels, Wasm or job graphs. A bad input record is an error
//! that names the file and line, never a panic; so is a line longer than the
//! source's cap ([`FileSource::with_max_record_bytes`]): memory per record
//! is bounded.

pub mod addresses;
pub mod confine;
pub mod file_source;
mod generator;
pub mod kafka;
pub mod nats;
mod sink;
mod wal;

pub use addresses::AllowedAddresses;
pub use confine::{AllowedRoots, ConfineError};
pub use file_source::{
    CsvFormat, DEFAULT_MAX_RECORD_BYTES, FOLLOW_POLL, FileFormat, FileSource, FileSourceConfig,
};
pub use generator::{GeneratorConfig, GeneratorKind, GeneratorSource};
pub use sink::{BlackholeSink, FileSink, OutputFormat, StdoutSink, TransactionalFileSink};

use std::path::PathBuf;

use crate::record::Batch;

/// Failure of a source or sink.
#[derive(Debug, thiserror::Error)]
pub enum ConnectorError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// An input record could not be parsed.
    #[error("{path}:{line}: {message}")]
    BadRecord {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// What is wrong.
        message: String,
    },
    /// A line is longer than the source accepts.
    #[error(
        "{path}:{line}: line longer than {limit} bytes; raise the source's max_record_bytes if such lines are expected"
    )]
    RecordTooLong {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// The cap, in bytes (without the line ending).
        limit: u64,
    },
    /// A path was refused by the allowed roots, or could not be opened.
    #[error(transparent)]
    Confined(#[from] ConfineError),
    /// Writing to standard output failed.
    #[error("stdout: {0}")]
    Stdout(std::io::Error),
    /// A checkpointed position or committable cannot be used.
    #[error("cannot restore: {0}")]
    Position(String),
    /// A NATS server could not be reached or refused a request; the
    /// message names the vertex and the server ([`nats`]).
    #[error("{0}")]
    Nats(String),
    /// Kafka brokers could not be reached or refused a request; the
    /// message names the vertex and the brokers ([`kafka`]).
    #[error("{0}")]
    Kafka(String),
}

/// Paces a source to at most `rate` records per second: batches of about
/// 10 ms worth of records, each released when the records before it are due.
#[derive(Debug, Clone)]
pub struct Throttle {
    rate: f64,
    started: std::time::Instant,
    released: u64,
}

impl Throttle {
    /// A throttle starting now.
    pub fn new(records_per_second: f64) -> Throttle {
        Throttle {
            rate: records_per_second,
            started: std::time::Instant::now(),
            released: 0,
        }
    }

    /// The largest batch to produce next (at most `max`).
    pub fn batch_limit(&self, max: usize) -> usize {
        max.min(((self.rate / 100.0) as usize).max(1))
    }

    /// Blocks until the records released so far are due.
    pub fn wait(&self) {
        let due = std::time::Duration::from_secs_f64(self.released as f64 / self.rate);
        let elapsed = self.started.elapsed();
        if due > elapsed {
            std::thread::sleep(due - elapsed);
        }
    }

    /// Counts `n` more records as released.
    pub fn released(&mut self, n: usize) {
        self.released += n as u64;
    }

    /// Starts over from now (after a source seeks: the rate applies from there).
    pub fn restart(&mut self) {
        self.started = std::time::Instant::now();
        self.released = 0;
    }
}

/// A source of records.
pub trait Source: Send {
    /// The next batch of at most `max` records, or `None` at the end of input.
    fn next_batch(&mut self, max: usize) -> Result<Option<Batch>, ConnectorError>;

    /// Where the source stands: enough to resume right after the last
    /// record returned (recorded in checkpoints).
    fn position(&self) -> serde_json::Value {
        serde_json::Value::Null
    }

    /// For per-split watermarks, after each batch: every split the source
    /// reads now (a Kafka source: its partitions not at their end), each
    /// with the largest timestamp of its records in that batch (`None`:
    /// none). `None` (the default): the source has no splits, and its
    /// watermark follows all its records.
    fn split_timestamps(&self) -> Option<&[(u64, Option<i64>)]> {
        None
    }

    /// What to publish once the checkpoint taken at the current
    /// [`Source::position`] completes, through [`commit`]: a Kafka
    /// source's offsets, committed to its consumer group for monitoring
    /// (the checkpoint's position stays the truth). `None` by default.
    fn committable(&self) -> Option<serde_json::Value> {
        None
    }

    /// Resumes after `position` (an earlier [`Source::position`]).
    fn seek(&mut self, position: &serde_json::Value) -> Result<(), ConnectorError> {
        match position {
            serde_json::Value::Null => Ok(()),
            other => Err(ConnectorError::Position(format!(
                "this source cannot resume from {other}"
            ))),
        }
    }
}

/// A sink for records.
pub trait Sink: Send {
    /// Writes a batch.
    fn write(&mut self, batch: &Batch) -> Result<(), ConnectorError>;
    /// Flushes everything written; called once at the end of input.
    fn finish(&mut self) -> Result<(), ConnectorError>;

    /// Two-phase commit, phase one, at a checkpoint barrier (or, with
    /// [`crate::taskmanager::FINISHED`], at the end of input): makes what
    /// was written since the last call durable but not yet visible, and
    /// returns what [`commit`] needs to publish it. `None`: nothing to
    /// commit (or a sink without transactions).
    fn pre_commit(
        &mut self,
        _checkpoint: u64,
    ) -> Result<Option<serde_json::Value>, ConnectorError> {
        Ok(None)
    }
}

/// Two-phase commit, phase two: publishes what a sink's
/// [`Sink::pre_commit`] (or a source's [`Source::committable`]) returned,
/// once its checkpoint completed. Idempotent:
/// committing twice (after a restore) is harmless. Every part must be
/// where `roots` allow.
pub fn commit(committable: &serde_json::Value, roots: &AllowedRoots) -> Result<(), ConnectorError> {
    if nats::is_committable(committable) {
        return nats::commit(committable);
    }
    if kafka::is_committable(committable) {
        return kafka::commit(committable);
    }
    if kafka::is_group_offsets(committable) {
        kafka::commit_group_offsets(committable);
        return Ok(());
    }
    sink::commit_files(committable, roots)
}

/// A source's positions, one per subtask of an earlier run (`None`: that
/// subtask recorded none), as the position every subtask of a run at
/// another parallelism resumes from; `None` when the source's positions
/// cannot be dealt out again. Only Kafka sources' can: their partitions
/// are merged, and each new subtask keeps the ones it owns.
pub fn rescaled_source_position(saved: &[Option<&serde_json::Value>]) -> Option<serde_json::Value> {
    let positions: Vec<&serde_json::Value> = saved.iter().flatten().copied().collect();
    if positions.is_empty() || !positions.iter().all(|p| kafka::is_position(p)) {
        return None;
    }
    Some(kafka::merge_positions(positions))
}

/// The text of a JSON value used as a key: strings without quotes, anything
/// else as compact JSON.
pub fn json_key_bytes(v: &serde_json::Value) -> Vec<u8> {
    match v {
        serde_json::Value::String(s) => s.as_bytes().to_vec(),
        other => other.to_string().into_bytes(),
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
