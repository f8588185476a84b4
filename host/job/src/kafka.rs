//! The Kafka-protocol connectors as a job spec names them: the validated
//! [`KafkaSourceSpec`] and [`KafkaSinkSpec`] (in [`SourceSpec::Kafka`] and
//! [`SinkSpec::Kafka`]) and the choices `start`, `delivery` and
//! `partitioning`.
//!
//! Only data here: the connectors themselves (client, offsets, transactions)
//! are `weir_runtime::connectors::kafka`; the checks of the spec's fields
//! are `build/kafka.rs`.
//!
//! [`SourceSpec::Kafka`]: crate::SourceSpec::Kafka
//! [`SinkSpec::Kafka`]: crate::SinkSpec::Kafka

use serde::{Deserialize, Serialize};

/// Where a Kafka source begins reading a partition that no checkpoint
/// names (`start`, with `start_timestamp_ms` for [`KafkaStart::Timestamp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KafkaStart {
    /// The partition's first record.
    #[default]
    Earliest,
    /// Only records written after the source first starts.
    Latest,
    /// The offsets committed to the source's `group_id` (earliest where
    /// the group has none).
    Committed,
    /// The first record whose timestamp is at or after this many
    /// milliseconds since the Unix epoch.
    Timestamp(i64),
}

/// `delivery`: what a Kafka sink guarantees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KafkaDelivery {
    /// With checkpoints: each checkpoint's records are written in one
    /// Kafka transaction per subtask, committed once the checkpoint
    /// completed; `read_committed` consumers see each record once. Needs
    /// brokers with transactions (refused where they have none).
    ExactlyOnce,
    /// Records are written as they come; a checkpoint waits until the
    /// broker acknowledged everything before its barrier.
    #[default]
    AtLeastOnce,
    /// Records are written as they come, nothing is waited for.
    None,
}

/// `partitioning`: which partition of the topic a record goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KafkaPartitioning {
    /// By a hash of the record key (murmur2, as Kafka's Java client: the
    /// same key lands in the same partition from any client); records
    /// without a key are spread at random.
    #[default]
    KeyHash,
    /// Each subtask writes to the partitions in turn, record by record.
    RoundRobin,
}

/// A Kafka-protocol source (`type = "kafka"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaSourceSpec {
    /// `bootstrap_servers`: `host:port[,host:port…]`.
    pub bootstrap_servers: String,
    /// `topics` (or `topic`): the topics read, every partition of each;
    /// empty with a `topic_pattern`.
    pub topics: Vec<String>,
    /// `topic_pattern`: instead of `topics`, every topic whose whole name
    /// matches this regular expression (Flink's `setTopicPattern`); an
    /// unbounded source also finds topics created later. Valid: checked
    /// when the spec is built ([`topic_pattern`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_pattern: Option<String>,
    /// `group_id`: the consumer group whose committed offsets `start =
    /// "committed"` begins from, and to which the offsets of each completed
    /// checkpoint are committed. Positions live in checkpoints either way.
    pub group_id: Option<String>,
    /// `start`: where a partition begins when no checkpoint says where.
    pub start: KafkaStart,
    /// `bounded`: read each partition until it reaches the end of its log,
    /// then finish (a batch job over a topic); otherwise read on.
    pub bounded: bool,
    /// `partition_discovery_ms`: how often an unbounded source looks for
    /// new partitions (0: never).
    pub partition_discovery_ms: u64,
    /// `envelope`: each record's value is a JSON object with the message's
    /// topic, partition, offset, timestamp, key, value and headers, instead
    /// of the bare payload.
    #[serde(default)]
    pub envelope: bool,
}

/// A Kafka-protocol sink (`type = "kafka"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaSinkSpec {
    /// `bootstrap_servers`: `host:port[,host:port…]`.
    pub bootstrap_servers: String,
    /// `topic`: where every record is written; it must exist.
    pub topic: String,
    /// `delivery`: at-least-once (default), exactly-once or none.
    pub delivery: KafkaDelivery,
    /// `partitioning`: by key hash (default) or round-robin.
    pub partitioning: KafkaPartitioning,
    /// `transaction_timeout_ms`: the broker aborts a transaction of this
    /// sink left open longer than this.
    pub transaction_timeout_ms: u64,
}

/// The longest `topic_pattern` accepted, in bytes.
pub const MAX_TOPIC_PATTERN_BYTES: usize = 1024;

/// `topic_pattern` compiled to match whole topic names, within a bounded
/// size (a pattern comes from a job spec: untrusted), or why it is not a
/// pattern. Internal topics (`__consumer_offsets`, …) are never matched
/// by the caller, whatever the pattern.
pub fn topic_pattern(pattern: &str) -> Result<regex::Regex, String> {
    if pattern.len() > MAX_TOPIC_PATTERN_BYTES {
        return Err(format!(
            "is {} bytes, expected at most {MAX_TOPIC_PATTERN_BYTES}",
            pattern.len()
        ));
    }
    regex::RegexBuilder::new(&format!("^(?:{pattern})$"))
        .size_limit(1 << 20)
        .build()
        .map_err(|e| format!("is not a regular expression: {e}"))
}

/// Default of `partition_discovery_ms`.
pub const DEFAULT_PARTITION_DISCOVERY_MS: u64 = 10_000;

/// Default of `transaction_timeout_ms`.
pub const DEFAULT_TRANSACTION_TIMEOUT_MS: u64 = 60_000;
