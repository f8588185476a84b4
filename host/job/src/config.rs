//! Configuration types a job spec carries and lower layers read: how a job
//! checkpoints, how it restarts, the connectors' record-size default, the
//! source and sink formats and the state backend kind (shared by the spec
//! and the graph, so neither imports the other for them).
//! They live here, at the bottom of the layers, so that the spec does not
//! import the checkpoint coordinator, the JobManager or the connectors;
//! those re-export them.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Default time a checkpoint may take before it is aborted. Flink's default:
/// long enough for a first full upload of a large RocksDB state.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Default number of checkpoints pending at once. One keeps the cost of
/// checkpointing bounded; more only helps when uploads are slow.
pub const DEFAULT_MAX_CONCURRENT: u32 = 1;

/// Default minimum pause between the end of one checkpoint and the trigger
/// of the next: none, the interval alone paces checkpoints.
pub const DEFAULT_MIN_PAUSE: Duration = Duration::ZERO;

/// Default number of completed checkpoints retained: the latest, plus one to
/// fall back to if the latest cannot be read.
pub const DEFAULT_RETAIN: u32 = 2;

/// How a job checkpoints. There is no default interval: a job checkpoints
/// only when its spec sets one; the other fields default to
/// [`DEFAULT_TIMEOUT`], [`DEFAULT_MAX_CONCURRENT`], [`DEFAULT_MIN_PAUSE`]
/// and [`DEFAULT_RETAIN`].
///
/// Serialized with millisecond fields, as in the job spec:
/// `interval_ms`, `timeout_ms`, `max_concurrent`, `min_pause_ms`, `retain`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointConfig {
    /// Time between triggers (measured from the previous trigger).
    #[serde(rename = "interval_ms", with = "duration_ms")]
    pub interval: Duration,
    /// A checkpoint not complete this long after its trigger is aborted.
    #[serde(
        rename = "timeout_ms",
        with = "duration_ms",
        default = "default_timeout"
    )]
    pub timeout: Duration,
    /// Most checkpoints pending at once (at least 1).
    #[serde(default = "default_max_concurrent")]
    pub max_concurrent: u32,
    /// Least time between the end (completion or abort) of one checkpoint
    /// and the trigger of the next. Non-zero means one checkpoint at a time,
    /// whatever `max_concurrent` says.
    #[serde(rename = "min_pause_ms", with = "duration_ms", default)]
    pub min_pause: Duration,
    /// Completed checkpoints retained (at least 1); older ones are discarded.
    #[serde(default = "default_retain")]
    pub retain: u32,
}

fn default_timeout() -> Duration {
    DEFAULT_TIMEOUT
}

fn default_max_concurrent() -> u32 {
    DEFAULT_MAX_CONCURRENT
}

fn default_retain() -> u32 {
    DEFAULT_RETAIN
}

impl CheckpointConfig {
    /// Checkpoints every `interval`, everything else at its default.
    pub fn every(interval: Duration) -> Self {
        Self {
            interval,
            timeout: DEFAULT_TIMEOUT,
            max_concurrent: DEFAULT_MAX_CONCURRENT,
            min_pause: DEFAULT_MIN_PAUSE,
            retain: DEFAULT_RETAIN,
        }
    }

    /// Rejects settings that cannot work. [`Coordinator::new`] does not
    /// call this; it clamps `max_concurrent` and `retain` to at least 1.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.interval.is_zero() {
            return Err(ConfigError::ZeroInterval);
        }
        if self.timeout.is_zero() {
            return Err(ConfigError::ZeroTimeout);
        }
        if self.max_concurrent == 0 {
            return Err(ConfigError::ZeroMaxConcurrent);
        }
        if self.retain == 0 {
            return Err(ConfigError::ZeroRetain);
        }
        Ok(())
    }
}

/// An unusable [`CheckpointConfig`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// `interval_ms` is 0.
    #[error("checkpoint interval_ms must be greater than 0")]
    ZeroInterval,
    /// `timeout_ms` is 0.
    #[error("checkpoint timeout_ms must be greater than 0")]
    ZeroTimeout,
    /// `max_concurrent` is 0.
    #[error("checkpoint max_concurrent must be at least 1")]
    ZeroMaxConcurrent,
    /// `retain` is 0.
    #[error("checkpoint retain must be at least 1 (the latest checkpoint is always kept)")]
    ZeroRetain,
}

/// `Duration` as whole milliseconds, the unit of every `*_ms` spec field.
mod duration_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

/// A job's restart strategy (`[job.restart]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "strategy", rename_all = "kebab-case")]
pub enum RestartStrategy {
    /// A failure fails the job.
    None,
    /// Up to `attempts` restarts, `delay_ms` apart.
    FixedDelay {
        /// Most restarts over the job's life.
        attempts: u32,
        /// Wait before each restart, in milliseconds.
        delay_ms: u64,
    },
    /// Restarts without limit; the wait doubles (×`multiplier`) per
    /// consecutive failure up to `max_delay_ms`, and goes back to
    /// `initial_delay_ms` after `reset_after_ms` without a failure.
    ExponentialDelay {
        /// First wait, in milliseconds.
        initial_delay_ms: u64,
        /// Longest wait, in milliseconds.
        max_delay_ms: u64,
        /// Growth factor per consecutive failure (at least 1).
        multiplier: u32,
        /// Quiet time after which the wait resets, in milliseconds.
        reset_after_ms: u64,
    },
    /// Restarts after `delay_ms` unless more than `max_failures` failures
    /// happened within the last `interval_ms`.
    FailureRate {
        /// Most failures tolerated per interval.
        max_failures: u32,
        /// The interval, in milliseconds.
        interval_ms: u64,
        /// Wait before each restart, in milliseconds.
        delay_ms: u64,
    },
}

impl RestartStrategy {
    /// Flink's default for jobs with checkpoints: restart (practically)
    /// forever, one second apart.
    pub const WITH_CHECKPOINTS: RestartStrategy = RestartStrategy::FixedDelay {
        attempts: u32::MAX,
        delay_ms: 1000,
    };
}

/// Default longest line a file source accepts, without its line ending
/// (`max_record_bytes`): the default output cap of one guest call, so
/// that one record always fits a batch an operator may emit.
pub const DEFAULT_MAX_RECORD_BYTES: u64 = 16 << 20;

/// Where keyed state lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StateBackendKind {
    /// `"rocksdb"`: RocksDB, one column family per declared state (the default).
    #[serde(rename = "rocksdb")]
    RocksDb,
    /// `"heap"`: in memory; small state and tests.
    #[serde(rename = "heap")]
    Heap,
}

/// How a file source turns a line into a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourceFormat {
    /// `"lines"`: the line is the value; no key; timestamp = ingestion time.
    Lines,
    /// `"json-lines"`: the line is a JSON object and the value; key and
    /// timestamp optionally taken from its fields.
    JsonLines,
    /// `"csv"`: comma-separated values (RFC 4180 quoting), optionally with a
    /// header row; key, timestamp and value optionally taken from columns.
    Csv,
}

/// How a sink turns a record into one line of output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SinkFormat {
    /// `"value"`: the value bytes, as they are.
    Value,
    /// `"key-value"`: key, a tab, value (an absent key is empty).
    KeyValue,
    /// `"json"`: `{"key":…,"value":…,"timestamp":…}` with key and value as
    /// JSON strings (lossy UTF-8), key `null` when absent.
    Json,
}
