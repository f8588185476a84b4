//! The job spec as written: the TOML document, deserialised.
//!
//! [`JobSpec`] is the document after `--set` overrides, before validation:
//! paths are still relative, ids still unchecked. Every table is
//! deserialised with `deny_unknown_fields`, and every closed set of choices
//! (`type`, `format`, `kind`, `partition`, `state_backend`) is an enum, so a
//! typo fails here with toml's line and column. What needs more than one
//! field to judge (ids, edges, parallelism, key_by, …) is checked when the
//! [`JobGraph`](super::JobGraph) is built.
//!
//! The reference for users is `host/job/src/SPEC.md`, included below;
//! keep the two in step.
//!
#![doc = include_str!("SPEC.md")]

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::JobError;
use super::config::{SinkFormat, SourceFormat, StateBackendKind};

/// A parsed job spec: the document plus the file it came from.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// The spec file, absolute. Relative paths in the document are resolved
    /// against its directory; errors name it.
    pub path: PathBuf,
    pub(super) doc: Document,
}

impl JobSpec {
    /// Reads and parses the spec at `path`, applying `overrides` (from the
    /// CLI's `--set key=value`; `--parallelism N` is `job.parallelism=N`)
    /// to the TOML document before deserialising it.
    pub fn from_file(
        path: impl AsRef<Path>,
        overrides: &[(String, String)],
    ) -> Result<JobSpec, JobError> {
        let path = absolute(path.as_ref());
        let text = std::fs::read_to_string(&path).map_err(|source| JobError::Io {
            path: path.clone(),
            source,
        })?;
        JobSpec::parse(&text, &path, overrides)
    }

    /// Parses `text` as if it were the file at `path` (which need not
    /// exist: it names the spec in errors and anchors relative paths).
    pub fn parse(
        text: &str,
        path: impl AsRef<Path>,
        overrides: &[(String, String)],
    ) -> Result<JobSpec, JobError> {
        let path = absolute(path.as_ref());
        let parse_error = |error: toml::de::Error| JobError::Parse {
            path: path.clone(),
            message: error.to_string().trim_end().to_owned(),
        };
        let doc = if overrides.is_empty() {
            toml::from_str::<Document>(text).map_err(parse_error)?
        } else {
            let mut table: toml::Table = toml::from_str(text).map_err(parse_error)?;
            for (key, value) in overrides {
                super::overrides::apply(&mut table, key, value).map_err(|message| {
                    JobError::Override {
                        path: path.clone(),
                        key: key.clone(),
                        message,
                    }
                })?;
            }
            match table.try_into::<Document>() {
                Ok(doc) => doc,
                // Deserialising a `toml::Table` loses positions. When the
                // document as written has the same problem, report that
                // error: it has line and column.
                Err(error) => match toml::from_str::<Document>(text) {
                    Err(original) if original.message() == error.message() => {
                        return Err(parse_error(original));
                    }
                    _ => {
                        return Err(JobError::Parse {
                            path: path.clone(),
                            message: format!(
                                "{} (after applying the --set overrides)",
                                error.to_string().trim_end()
                            ),
                        });
                    }
                },
            }
        };
        Ok(JobSpec { path, doc })
    }

    /// `job.name`.
    pub fn name(&self) -> &str {
        &self.doc.job.name
    }

    /// The `path` of every file source and sink given as a relative path,
    /// with the field that holds it (`source[0] "lines".path`).
    pub fn relative_file_paths(&self) -> Vec<(String, PathBuf)> {
        let sources = self.doc.sources.iter().enumerate().filter_map(|(i, t)| {
            let path = t.path.as_ref().filter(|p| p.is_relative())?;
            Some((format!("source[{i}] {:?}.path", t.id), path.clone()))
        });
        let sinks = self.doc.sinks.iter().enumerate().filter_map(|(i, t)| {
            let path = t.path.as_ref().filter(|p| p.is_relative())?;
            Some((format!("sink[{i}] {:?}.path", t.id), path.clone()))
        });
        sources.chain(sinks).collect()
    }

    /// The directory relative paths are resolved against.
    pub fn base_dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("/"))
    }
}

/// Splits a CLI `--set` argument `key=value` at the first `=`; usable as a
/// clap `value_parser`.
pub fn parse_override(arg: &str) -> Result<(String, String), String> {
    match arg.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_owned(), value.to_owned()))
        }
        _ => Err(format!(
            "expected key=value (like job.parallelism=4 or operator.count.parallelism=2), found {arg:?}"
        )),
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

/// The whole document.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Document {
    pub job: JobTable,
    #[serde(default, rename = "source")]
    pub sources: Vec<SourceTable>,
    #[serde(default, rename = "operator")]
    pub operators: Vec<OperatorTable>,
    #[serde(default, rename = "sink")]
    pub sinks: Vec<SinkTable>,
    #[serde(default, rename = "edge")]
    pub edges: Vec<EdgeTable>,
}

/// `[job]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct JobTable {
    pub name: String,
    pub parallelism: Option<u32>,
    pub max_parallelism: Option<u32>,
    pub state_backend: Option<StateBackendKind>,
    pub batch_size: Option<u32>,
    pub channel_capacity: Option<u32>,
    pub buffer_timeout_ms: Option<u64>,
    pub watermark_interval_ms: Option<u64>,
    pub latency_tracking_interval_ms: Option<u64>,
    pub metrics: Option<bool>,
    pub limits: Option<LimitsTable>,
    pub checkpoints: Option<super::config::CheckpointConfig>,
    pub restart: Option<super::config::RestartStrategy>,
}

/// `[job.limits]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LimitsTable {
    pub memory_mb: Option<u32>,
    pub call_timeout_ms: Option<u64>,
    pub max_output_mb: Option<u32>,
}

/// `[[source]]`: the fields of every source type; which apply to which
/// type is checked when the graph is built, with a message naming both.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SourceTable {
    pub id: String,
    #[serde(rename = "type")]
    pub source_type: SourceType,
    pub parallelism: Option<u32>,
    pub slot_sharing_group: Option<String>,
    // file
    pub path: Option<PathBuf>,
    pub format: Option<SourceFormat>,
    pub key_field: Option<String>,
    pub timestamp_field: Option<String>,
    pub value_field: Option<String>,
    pub max_record_bytes: Option<u64>,
    pub follow: Option<bool>,
    pub monitor_interval_ms: Option<u64>,
    pub split_bytes: Option<u64>,
    pub header: Option<bool>,
    pub delimiter: Option<String>,
    // any type
    pub watermark: Option<WatermarkTable>,
    // nats (also `subject`, below the sink's)
    pub url: Option<String>,
    pub stream: Option<String>,
    pub subject: Option<String>,
    pub start: Option<StartName>,
    pub key_header: Option<String>,
    pub key_subject_token: Option<u32>,
    // kafka (also `start`, above)
    pub bootstrap_servers: Option<String>,
    pub topics: Option<Vec<String>>,
    pub topic: Option<String>,
    pub topic_pattern: Option<String>,
    pub group_id: Option<String>,
    pub start_timestamp_ms: Option<i64>,
    pub bounded: Option<bool>,
    pub partition_discovery_ms: Option<u64>,
    pub envelope: Option<bool>,
    // generator
    pub kind: Option<GeneratorKindName>,
    pub count: Option<u64>,
    pub seed: Option<u64>,
    pub rate: Option<u64>,
    pub accounts: Option<u64>,
    pub record_bytes: Option<u32>,
    pub keys: Option<u64>,
    pub vocabulary: Option<u32>,
    pub event_rate: Option<u64>,
}

/// `[[source]] watermark = { … }`.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WatermarkTable {
    pub max_out_of_orderness_ms: Option<u64>,
    pub idle_timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum SourceType {
    File,
    Generator,
    Nats,
    Kafka,
}

/// `[[source]] start`: the union of what NATS and Kafka sources accept;
/// each source type refuses the ones it does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum StartName {
    Earliest,
    Latest,
    Committed,
    Timestamp,
}

/// `[[sink]] delivery`: the union of what NATS and Kafka sinks accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum DeliveryName {
    ExactlyOnce,
    AtLeastOnce,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum GeneratorKindName {
    Sequence,
    Transactions,
    Words,
    Nexmark,
}

/// `[[operator]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct OperatorTable {
    pub id: String,
    pub module: Option<String>,
    pub window: Option<WindowTable>,
    pub join: Option<JoinTable>,
    pub aggregate: Option<AggregateName>,
    pub field: Option<String>,
    pub allowed_lateness_ms: Option<u64>,
    #[serde(default)]
    pub config: toml::Table,
    pub key_by: Option<String>,
    pub parallelism: Option<u32>,
    pub slot_sharing_group: Option<String>,
}

/// `[[operator]] window = { type = …, … }`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub(super) enum WindowTable {
    Tumbling { size_ms: u64 },
    Sliding { size_ms: u64, slide_ms: u64 },
    Session { gap_ms: u64 },
    Global { count: u64 },
}

/// `[[operator]] join = { type = …, … }`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub(super) enum JoinTable {
    Interval { lower_ms: i64, upper_ms: i64 },
    Window { size_ms: u64 },
}

/// `[[edge]] input = "left" | "right" | 0 | 1`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum InputName {
    Index(i64),
    Name(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum AggregateName {
    Count,
    Sum,
    Min,
    Max,
    Avg,
}

/// `[[sink]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SinkTable {
    pub id: String,
    #[serde(rename = "type")]
    pub sink_type: SinkType,
    pub path: Option<PathBuf>,
    pub format: Option<SinkFormat>,
    pub parallelism: Option<u32>,
    pub slot_sharing_group: Option<String>,
    /// Blackhole only: consume at most this many records per second.
    pub rate: Option<u64>,
    // nats
    pub url: Option<String>,
    pub subject: Option<String>,
    pub delivery: Option<DeliveryName>,
    pub key_header: Option<String>,
    // kafka (also `delivery`, above)
    pub bootstrap_servers: Option<String>,
    pub topic: Option<String>,
    pub partitioning: Option<crate::kafka::KafkaPartitioning>,
    pub transaction_timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum SinkType {
    File,
    Stdout,
    Blackhole,
    Nats,
    Kafka,
}

/// `[[edge]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EdgeTable {
    pub from: String,
    pub to: String,
    pub partition: Option<PartitionName>,
    pub input: Option<InputName>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum PartitionName {
    Forward,
    Hash,
    Rebalance,
    Broadcast,
}
