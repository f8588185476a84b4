//! The logical job graph: what a validated job spec describes.
//!
//! A [`JobGraph`] is the Flink `JobGraph`: one [`Vertex`] per source,
//! operator and sink of the spec (sources first, then operators, then
//! sinks, each in document order), and one [`JobEdge`] per `[[edge]]` (in
//! document order), with its [`Partitioner`] decided. Vertices are
//! addressed by their index in [`JobGraph::vertices`]; [`VertexId`] is the
//! stable uid the user chose.
//!
//! The typed specs here ([`SourceSpec`], [`OperatorSpec`], [`SinkSpec`],
//! [`JobSettings`]) are what the connectors, the Wasm runtime and the
//! scheduler consume: defaults applied, relative paths resolved against the
//! spec file's directory, no stringly-typed choices left.
//!
//! Building a graph ([`JobGraph::from_spec`]) validates; see the private
//! `build` module. This file only defines the types and read-only queries,
//! and touches the file system only in [`JobGraph::check_modules_exist`].

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{JobError, JobSpec, Problem};

// Defined with the other config types, below the spec and the graph.
pub use super::config::{SinkFormat, SourceFormat, StateBackendKind};

/// The stable uid of a source, operator or sink: its `id` in the spec.
///
/// Matches `[a-z0-9][a-z0-9_-]*`, at most [`super::MAX_ID_LEN`] bytes, and
/// is unique within a job. State in checkpoints and savepoints is addressed
/// by it, so it must not change when a job is upgraded.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct VertexId(pub String);

impl VertexId {
    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for VertexId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A validated job: settings, vertices and the edges between them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobGraph {
    /// `job.name`.
    pub name: String,
    /// The spec file the graph was built from (absolute); named in errors.
    pub origin: PathBuf,
    /// Job-wide settings (`[job]`, defaults applied).
    pub settings: JobSettings,
    /// Sources, then operators, then sinks, each in document order.
    pub vertices: Vec<Vertex>,
    /// One per `[[edge]]`, in document order; `from`/`to` index `vertices`.
    pub edges: Vec<JobEdge>,
    /// Legal but suspicious things (a source or operator whose output goes
    /// nowhere). Also logged with `tracing::warn!` when the graph is built.
    pub warnings: Vec<String>,
}

/// Job-wide settings from `[job]`, with defaults applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSettings {
    /// `job.parallelism`: the default parallelism of every vertex that does
    /// not set its own (file sources are always 1).
    pub parallelism: u32,
    /// `job.max_parallelism`: the number of key groups, and the upper bound
    /// of every vertex's parallelism.
    pub max_parallelism: u32,
    /// `job.state_backend`.
    pub state_backend: StateBackendKind,
    /// `job.batch_size`: records per batch between operators.
    pub batch_size: u32,
    /// `job.channel_capacity`: batches buffered per channel.
    pub channel_capacity: u32,
    /// `job.buffer_timeout_ms`: how long a partly filled network buffer may
    /// wait before it is sent to another TaskManager (0 = after every batch).
    pub buffer_timeout_ms: u64,
    /// `job.watermark_interval_ms`: how often a source subtask emits its
    /// watermark (0 = after every batch, which makes watermarks a pure
    /// function of the input: tests use it).
    #[serde(default = "default_watermark_interval_ms")]
    pub watermark_interval_ms: u64,
    /// `job.latency_tracking_interval_ms`: how often each source subtask
    /// sends a latency marker downstream (Flink's latency tracking); 0, the
    /// default, sends none.
    #[serde(default)]
    pub latency_tracking_interval_ms: u64,
    /// `job.metrics`: whether subtasks measure more than each vertex's
    /// record counts (per-subtask records and bytes, busy, idle and
    /// backpressured time, latency markers' arrival); default true.
    #[serde(default = "default_metrics")]
    pub metrics: bool,
    /// `[job.limits]`: the sandbox of every operator instance.
    pub limits: OperatorLimits,
    /// `[job.checkpoints]`: absent, no checkpoints.
    pub checkpoints: Option<super::config::CheckpointConfig>,
    /// `[job.restart]`, default: fixed-delay with checkpoints, none without.
    pub restart: super::config::RestartStrategy,
}

fn default_metrics() -> bool {
    true
}

fn default_watermark_interval_ms() -> u64 {
    super::DEFAULT_WATERMARK_INTERVAL_MS
}

/// How a source derives its watermark from the timestamps it reads (`[[source]]
/// watermark = { … }`), as Flink's `WatermarkStrategy.forBoundedOutOfOrderness`
/// with `withIdleness`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatermarkStrategy {
    /// A record may be at most this much older than the newest record
    /// before it and still be on time: the watermark is the largest
    /// timestamp seen minus this minus 1 ms (0: timestamps ascend).
    pub max_out_of_orderness_ms: u64,
    /// A source subtask that reads nothing for this long is idle: it stops
    /// holding back the watermark downstream until it reads again.
    /// `None`: never idle (an input with no data stalls event time).
    pub idle_timeout_ms: Option<u64>,
}

/// The sandbox of every operator instance (`[job.limits]`, defaults applied).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorLimits {
    /// Linear-memory cap per instance, in MiB.
    pub memory_mb: u32,
    /// CPU deadline of one guest call, in milliseconds.
    pub call_timeout_ms: u64,
    /// Most bytes one guest call may emit, in MiB.
    pub max_output_mb: u32,
}

/// A source, operator or sink, with its parallelism decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vertex {
    /// The stable uid.
    pub id: VertexId,
    /// Number of parallel subtasks (the vertex's own value, else `job.parallelism`).
    pub parallelism: u32,
    /// `slot_sharing_group` (default `"default"`): subtask i of every task in
    /// one group shares slot i; vertices of different groups never chain.
    pub slot_sharing_group: String,
    /// What the vertex is.
    pub kind: VertexKind,
    /// Sources only: how the watermark follows the timestamps read
    /// (`watermark = { … }`, default: ascending, never idle).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark: Option<WatermarkStrategy>,
}

/// What a vertex is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum VertexKind {
    /// A `[[source]]`: no inputs.
    Source(SourceSpec),
    /// An `[[operator]]`: a Wasm component.
    Operator(OperatorSpec),
    /// An `[[operator]]` with a `window`: the host's window operator.
    Window(WindowSpec),
    /// An `[[operator]]` with a `join`: the host's two-input join.
    Join(JoinSpec),
    /// A `[[sink]]`: no outputs.
    Sink(SinkSpec),
}

impl VertexKind {
    /// `"source"`, `"operator"` or `"sink"`: the spec's table name.
    pub fn role(&self) -> &'static str {
        match self {
            VertexKind::Source(_) => "source",
            VertexKind::Operator(_) | VertexKind::Window(_) | VertexKind::Join(_) => "operator",
            VertexKind::Sink(_) => "sink",
        }
    }

    /// The Wasm component the vertex runs, if any: an operator's, or a
    /// window's function.
    pub fn module_spec(&self) -> Option<&OperatorSpec> {
        match self {
            VertexKind::Operator(op) => Some(op),
            VertexKind::Window(w) => w.function.as_ref(),
            VertexKind::Source(_) | VertexKind::Join(_) | VertexKind::Sink(_) => None,
        }
    }

    /// [`VertexKind::module_spec`], to change (resolving module references).
    pub fn module_spec_mut(&mut self) -> Option<&mut OperatorSpec> {
        match self {
            VertexKind::Operator(op) => Some(op),
            VertexKind::Window(w) => w.function.as_mut(),
            VertexKind::Source(_) | VertexKind::Join(_) | VertexKind::Sink(_) => None,
        }
    }
}

/// A `[[source]]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SourceSpec {
    /// `type = "file"`: reads a file, a folder or a glob of files.
    File(FileSourceSpec),
    /// `type = "generator"`: synthesises records.
    Generator(GeneratorSpec),
    /// `type = "nats"`: reads a NATS JetStream stream.
    Nats(crate::nats::NatsSourceSpec),
    /// `type = "kafka"`: reads topics of Kafka-protocol brokers.
    Kafka(crate::kafka::KafkaSourceSpec),
}

/// A file source (`type = "file"`): its files are split into byte ranges
/// (a compressed or CSV file is one split) spread over its subtasks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSourceSpec {
    /// A file, a folder (every file below it, hidden ones skipped) or a
    /// glob pattern, resolved against the spec file's directory.
    pub path: PathBuf,
    /// `rate`: read at most this many lines per second (replaying a file
    /// as a stream); unthrottled if absent.
    pub rate: Option<u64>,
    /// How a line becomes a record.
    pub format: SourceFormat,
    /// `json-lines` only: the top-level field whose value becomes the record key.
    pub key_field: Option<String>,
    /// `json-lines` only: the top-level field holding the event time (ms since the epoch).
    pub timestamp_field: Option<String>,
    /// `json-lines` only: the top-level field whose value becomes the
    /// record's value (a string's content, any other JSON value as text);
    /// the whole line if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_field: Option<String>,
    /// `follow`: at the end of the file, wait for more lines (as `tail -f`)
    /// instead of ending; the source then ends only when the job stops.
    #[serde(default)]
    pub follow: bool,
    /// `max_record_bytes`: the longest line accepted, without its line
    /// ending; a longer one fails the task (default
    /// [`DEFAULT_MAX_RECORD_BYTES`](super::config::DEFAULT_MAX_RECORD_BYTES)).
    #[serde(default = "default_max_record_bytes")]
    pub max_record_bytes: u64,
    /// `monitor_interval_ms`: continuous mode (Flink's
    /// `monitorContinuously`): look for new files this often; each file is
    /// read once and the source never ends. `None`: read what is there, end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monitor_interval_ms: Option<u64>,
    /// `split_bytes`: the size of the byte ranges an uncompressed file of
    /// lines is split into (default
    /// [`DEFAULT_SPLIT_BYTES`](crate::DEFAULT_SPLIT_BYTES)).
    #[serde(default = "default_split_bytes")]
    pub split_bytes: u64,
    /// `csv` only, `header`: the first row names the columns (default true).
    #[serde(default = "default_true")]
    pub header: bool,
    /// `csv` only, `delimiter`: the field separator (default `,`).
    #[serde(default = "default_delimiter")]
    pub delimiter: u8,
}

fn default_split_bytes() -> u64 {
    crate::DEFAULT_SPLIT_BYTES
}

fn default_true() -> bool {
    true
}

fn default_delimiter() -> u8 {
    b','
}

fn default_max_record_bytes() -> u64 {
    super::config::DEFAULT_MAX_RECORD_BYTES
}

/// A generator source (`type = "generator"`).
///
/// With parallelism `p`, subtask `i` emits a disjoint part of the sequence
/// (the records whose sequence number is `i` modulo `p`), so `count` and
/// `rate` are totals across all subtasks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GeneratorSpec {
    /// What to emit.
    pub kind: GeneratorKind,
    /// Total records to emit; `None` = unbounded.
    pub count: Option<u64>,
    /// Seed of the pseudo-random choices (default 0): same seed, same records.
    pub seed: u64,
    /// Total records per second; `None` = as fast as possible.
    pub rate: Option<u64>,
}

/// What a generator emits, with its kind-specific parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum GeneratorKind {
    /// `kind = "sequence"`: 0, 1, 2, … as decimal strings.
    Sequence {
        /// Pad each value to this many bytes (`record_bytes`), if set.
        record_bytes: Option<u32>,
        /// `keys`: record n gets key `n % keys` (as decimal), if set.
        keys: Option<u64>,
    },
    /// `kind = "transactions"`: payments; the record key is the account.
    Transactions {
        /// Number of distinct accounts (`accounts`, default 100).
        accounts: u64,
    },
    /// `kind = "words"`: one word per record.
    Words {
        /// Number of distinct words (`vocabulary`, default 1000).
        vocabulary: u32,
    },
    /// `kind = "nexmark"`: the Nexmark benchmark's persons, auctions and
    /// bids (the `nexmark` crate's generator) as JSON, unkeyed, with the
    /// event's `date_time` as the record's timestamp.
    Nexmark {
        /// `event_rate`: events per second of event time (default 10000).
        event_rate: u64,
    },
}

/// An `[[operator]]`: a Wasm component and how it is fed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorSpec {
    /// The component to run.
    pub module: ModuleRef,
    /// The `config` table, flattened to what the guest's `open` receives:
    /// strings as they are, other scalars in TOML syntax, tables and arrays
    /// as JSON. Sorted by key.
    pub config: Vec<(String, String)>,
    /// `key_by`: present iff the operator's input is keyed.
    pub key_by: Option<KeySelector>,
}

/// An `[[operator]]` with a `window` table: the host's window operator
/// (Flink's `WindowOperator`: an assigner, the event-time trigger, window
/// state in the keyed backend, and an aggregate function).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowSpec {
    /// Which windows a record belongs to.
    pub assigner: WindowAssigner,
    /// What is computed per key and window.
    pub aggregate: Aggregate,
    /// `field`: where `sum`, `min`, `max` and `avg` find the number
    /// (`"value"`: the value as decimal text; `"json:<f>"`: a top-level
    /// number of a JSON value). `None` for `count`.
    pub field: Option<KeySelector>,
    /// `allowed_lateness_ms`: how long after a window fired late records
    /// still update it (and fire it again); later ones go to the side
    /// output `late`.
    pub allowed_lateness_ms: u64,
    /// `key_by` (required): windows are per key.
    pub key_by: KeySelector,
    /// `module` (and its `config`): a window function in Wasm (an aggregate
    /// or a process-window function, `wit/operator.wit` `window-function`)
    /// instead of the built-in `aggregate`, which is then unused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<OperatorSpec>,
}

/// An `[[operator]]` with a `join` table: the host's join of its two
/// inputs (edges with `input = "left"` and `input = "right"`), per key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinSpec {
    /// Which pairs join.
    pub kind: JoinKind,
    /// `key_by` (required): both inputs are keyed by it; only records with
    /// equal keys join.
    pub key_by: KeySelector,
}

/// `join = { type = … }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JoinKind {
    /// Flink's interval join: a left record at `t` joins every right record
    /// of its key whose timestamp is in `[t + lower_ms, t + upper_ms]`.
    Interval {
        /// `lower_ms` (may be negative).
        lower_ms: i64,
        /// `upper_ms`, at least `lower_ms`.
        upper_ms: i64,
    },
    /// Flink's tumbling window join: every left and right record of a key
    /// in the same window of `size_ms` join, when the window fires.
    Window {
        /// `size_ms`.
        size_ms: u64,
    },
}

/// `window = { type = … }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WindowAssigner {
    /// `[start, start + size)`, start a multiple of size.
    Tumbling {
        /// `size_ms`.
        size_ms: u64,
    },
    /// Windows of `size_ms` starting every `slide_ms`: a record is in
    /// every one that covers its timestamp.
    Sliding {
        /// `size_ms`.
        size_ms: u64,
        /// `slide_ms`.
        slide_ms: u64,
    },
    /// Per key, records less than `gap_ms` apart share a window; a record
    /// that bridges two sessions merges them.
    Session {
        /// `gap_ms`.
        gap_ms: u64,
    },
    /// One window per key that fires (and empties) every `count` records;
    /// a partial window at the end of input is dropped, as Flink's
    /// `countWindow`.
    Global {
        /// `count`.
        count: u64,
    },
}

/// The built-in aggregates (`aggregate = …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Aggregate {
    /// Records in the window.
    Count,
    /// Sum of the field.
    Sum,
    /// Smallest value of the field.
    Min,
    /// Largest value of the field.
    Max,
    /// Mean of the field.
    Avg,
}

impl Aggregate {
    /// Its name in the spec, and its field in the output record.
    pub fn name(self) -> &'static str {
        match self {
            Aggregate::Count => "count",
            Aggregate::Sum => "sum",
            Aggregate::Min => "min",
            Aggregate::Max => "max",
            Aggregate::Avg => "avg",
        }
    }
}

/// Which Wasm component an operator runs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ModuleRef {
    /// A `.wasm` file, resolved against the spec file's directory.
    Path(PathBuf),
    /// `name@version`: a module uploaded to the cluster.
    Named {
        /// The module's name.
        name: String,
        /// Its version.
        version: String,
    },
    /// `sha256:<64 hex>`: a module in the cluster's store, by content.
    Hash(String),
}

impl fmt::Display for ModuleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModuleRef::Path(path) => write!(f, "{}", path.display()),
            ModuleRef::Named { name, version } => write!(f, "{name}@{version}"),
            ModuleRef::Hash(hash) => f.write_str(hash),
        }
    }
}

/// What a keyed operator's input is keyed by (`key_by`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum KeySelector {
    /// `"key"`: the record's key.
    RecordKey,
    /// `"value"`: the whole value.
    Value,
    /// `"json:<field>"`: a top-level field of a JSON value.
    JsonField(String),
}

impl fmt::Display for KeySelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySelector::RecordKey => f.write_str("key"),
            KeySelector::Value => f.write_str("value"),
            KeySelector::JsonField(field) => write!(f, "json:{field}"),
        }
    }
}

/// A `[[sink]]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SinkSpec {
    /// `type = "file"`: one file per subtask.
    File(FileSinkSpec),
    /// `type = "stdout"`: the process's standard output.
    Stdout {
        /// How a record becomes a line.
        format: SinkFormat,
    },
    /// `type = "blackhole"`: discards everything (benchmarks).
    Blackhole {
        /// `rate`: consume at most this many records per second (a
        /// deliberately slow consumer, to observe backpressure).
        rate: Option<u64>,
    },
    /// `type = "nats"`: publishes to a NATS JetStream subject.
    Nats(crate::nats::NatsSinkSpec),
    /// `type = "kafka"`: writes to a topic of Kafka-protocol brokers.
    Kafka(crate::kafka::KafkaSinkSpec),
}

/// A file sink (`type = "file"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSinkSpec {
    /// The file of subtask 0, resolved against the spec file's directory.
    pub path: PathBuf,
    /// How a record becomes a line.
    pub format: SinkFormat,
}

impl FileSinkSpec {
    /// The file subtask `subtask` writes: `path` for subtask 0, `path.1`,
    /// `path.2`, … for the others (the subtask index appended to the whole
    /// file name: `counts.txt` → `counts.txt.1`).
    pub fn subtask_path(&self, subtask: u32) -> PathBuf {
        if subtask == 0 {
            return self.path.clone();
        }
        let mut name = self.path.as_os_str().to_owned();
        name.push(format!(".{subtask}"));
        PathBuf::from(name)
    }
}

/// An edge of the job graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEdge {
    /// Index of the producing vertex (a source or operator).
    pub from: usize,
    /// The side output it reads (`from = "op:tag"`), `None` for the main output.
    pub from_tag: Option<String>,
    /// Index of the consuming vertex (an operator or sink).
    pub to: usize,
    /// How records are distributed among the consumer's subtasks.
    pub partitioner: Partitioner,
    /// Which input of the consumer it feeds: 0 (`"left"`, and every edge
    /// into a one-input vertex) or 1 (`"right"`).
    #[serde(default)]
    pub input: u8,
}

/// How an edge distributes records among the consumer's subtasks.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Partitioner {
    /// Subtask `i` sends to subtask `i`; requires equal parallelism.
    Forward,
    /// By key group of the selected key: the consumer is keyed.
    Hash(KeySelector),
    /// Round-robin over all consumer subtasks.
    Rebalance,
    /// Every record to every consumer subtask.
    Broadcast,
}

impl fmt::Display for Partitioner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Partitioner::Forward => f.write_str("forward"),
            Partitioner::Hash(key) => write!(f, "hash({key})"),
            Partitioner::Rebalance => f.write_str("rebalance"),
            Partitioner::Broadcast => f.write_str("broadcast"),
        }
    }
}

impl JobGraph {
    /// [`JobSpec::from_file`] then [`JobGraph::from_spec`].
    pub fn from_file(
        path: impl AsRef<Path>,
        overrides: &[(String, String)],
    ) -> Result<JobGraph, JobError> {
        JobGraph::from_spec(JobSpec::from_file(path, overrides)?)
    }

    /// The index of the vertex with uid `id`.
    pub fn vertex_index(&self, id: &str) -> Option<usize> {
        self.vertices.iter().position(|v| v.id.0 == id)
    }

    /// The edges into vertex `v`, in document order (the order of its inputs).
    pub fn inputs(&self, v: usize) -> impl Iterator<Item = &JobEdge> + '_ {
        self.edges.iter().filter(move |e| e.to == v)
    }

    /// The edges out of vertex `v`, in document order.
    pub fn outputs(&self, v: usize) -> impl Iterator<Item = &JobEdge> + '_ {
        self.edges.iter().filter(move |e| e.from == v)
    }

    /// All vertex indices, producers before consumers. Deterministic: among
    /// the vertices ready at a step, the lowest index comes first (so
    /// sources, in document order, lead).
    pub fn topological_order(&self) -> Vec<usize> {
        let mut order = topological_order(
            self.vertices.len(),
            self.edges.iter().map(|e| (e.from, e.to)),
        );
        // A built graph is acyclic (checked in `build`), so every vertex is placed.
        debug_assert_eq!(order.len(), self.vertices.len());
        order.truncate(self.vertices.len());
        order
    }

    /// The longest record (key and value bytes) that may travel between
    /// TaskManagers in this job: `job.limits.max_output_mb` (no guest call
    /// emits more), or twice the longest record a source of the job makes,
    /// if larger (a line, plus at most a key taken from it). A receiver
    /// holds no more than about this of one message; a longer record fails
    /// its channel at the sender, naming its size.
    pub fn max_record_bytes(&self) -> u64 {
        let sources = self.vertices.iter().map(|v| match &v.kind {
            VertexKind::Source(SourceSpec::File(f)) => f.max_record_bytes,
            VertexKind::Source(SourceSpec::Generator(GeneratorSpec {
                kind:
                    GeneratorKind::Sequence {
                        record_bytes: Some(bytes),
                        ..
                    },
                ..
            })) => u64::from(*bytes),
            _ => 0,
        });
        let output = u64::from(self.settings.limits.max_output_mb) << 20;
        sources
            .map(|bytes| bytes.saturating_mul(2))
            .fold(output, u64::max)
    }

    /// Checks that every operator's module given as a path exists and is a
    /// file. Named modules (`name@version`) are not checked here. Reports
    /// every missing module, naming the operator and the path.
    pub fn check_modules_exist(&self) -> Result<(), JobError> {
        let problems: Vec<Problem> = self
            .vertices
            .iter()
            .filter_map(|v| match &v.kind {
                VertexKind::Operator(OperatorSpec {
                    module: ModuleRef::Path(path),
                    ..
                }) if !path.is_file() => Some(Problem::new(
                    format!("operator {:?}.module", v.id.0),
                    format!(
                        "module file {} not found (build the operator, or fix the path: \
                         relative paths are resolved against the spec file's directory)",
                        path.display()
                    ),
                )),
                _ => None,
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(JobError::Invalid {
                path: self.origin.clone(),
                problems,
            })
        }
    }
}

/// Kahn's algorithm over `n` vertices, lowest ready index first. Returns
/// fewer than `n` indices when there is a cycle (the missing ones are on or
/// behind it).
pub(super) fn topological_order(
    n: usize,
    edges: impl Iterator<Item = (usize, usize)> + Clone,
) -> Vec<usize> {
    let mut in_degree = vec![0usize; n];
    for (_, to) in edges.clone() {
        in_degree[to] += 1;
    }
    let mut ready: std::collections::BTreeSet<usize> =
        (0..n).filter(|&v| in_degree[v] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(v) = ready.pop_first() {
        order.push(v);
        for (_, to) in edges.clone().filter(|&(from, _)| from == v) {
            in_degree[to] -= 1;
            if in_degree[to] == 0 {
                ready.insert(to);
            }
        }
    }
    order
}
