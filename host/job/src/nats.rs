//! The NATS JetStream connectors as a job spec names them: the validated
//! [`NatsSourceSpec`] and [`NatsSinkSpec`] (in [`SourceSpec::Nats`] and
//! [`SinkSpec::Nats`]) and the choices `start` and `delivery`.
//!
//! Only data here: the connectors themselves (client, positions, commits)
//! are `weir_runtime::connectors::nats`; the checks of the spec's fields
//! are `build/nats.rs`.
//!
//! [`SourceSpec::Nats`]: crate::SourceSpec::Nats
//! [`SinkSpec::Nats`]: crate::SinkSpec::Nats

use serde::{Deserialize, Serialize};

/// `start`: where a NATS source without a checkpointed position begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NatsStart {
    /// The first message the stream holds.
    #[default]
    Earliest,
    /// Only messages stored after the source first starts.
    Latest,
}

/// `delivery`: what a NATS sink guarantees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NatsDelivery {
    /// With checkpoints: a checkpoint's records are published once it
    /// completes, with message ids the stream de-duplicates.
    #[default]
    ExactlyOnce,
    /// Records are published as they come; a checkpoint waits for the
    /// server's acknowledgements of everything before its barrier.
    AtLeastOnce,
}

/// A NATS JetStream source (`type = "nats"`); always parallelism 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NatsSourceSpec {
    /// `url`: the server, `nats://host:port` (or `host:port`).
    pub url: String,
    /// `stream`: the JetStream stream read.
    pub stream: String,
    /// `subject`: only messages whose subject matches this filter
    /// (wildcards allowed); every message of the stream if absent.
    pub subject: Option<String>,
    /// `start`: where to begin when no checkpoint says where.
    pub start: NatsStart,
    /// `key_header`: the header whose value becomes the record key.
    pub key_header: Option<String>,
    /// `key_subject_token`: the 0-based `.`-separated token of the
    /// subject that becomes the record key.
    pub key_subject_token: Option<u32>,
}

/// A NATS JetStream sink (`type = "nats"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NatsSinkSpec {
    /// `url`: the server.
    pub url: String,
    /// `subject`: where every record is published; a stream must capture it.
    pub subject: String,
    /// `delivery`: exactly-once (default) or at-least-once.
    pub delivery: NatsDelivery,
    /// `key_header`: the header that carries the record key, if any.
    pub key_header: Option<String>,
}
