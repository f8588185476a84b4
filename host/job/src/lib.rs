//! Jobs: the job spec (TOML), its validation, the logical [`JobGraph`] and
//! the chaining of that graph into tasks.
//!
//! A user describes a job in one TOML file (the *job spec*, reference in
//! `host/job/src/SPEC.md`): sources, operators (Wasm components), sinks
//! and the edges between them. This module turns that file into the
//! structures the rest of the host schedules and runs:
//!
//! ```text
//! word-count.toml ──JobSpec::from_file──▶ JobSpec ──JobGraph::from_spec──▶ JobGraph ──chain──▶ Vec<TaskSpec>
//!   (+ --set overrides)                   (the document,     (validated,          (fused operator chains,
//!                                          as written)        paths resolved)      + task_edges between them)
//! ```
//!
//! # Layout
//!
//! * [`spec`]: [`JobSpec`], the deserialised document (`deny_unknown_fields`
//!   everywhere) and the `--set key=value` overrides applied before
//!   deserialisation.
//! * [`graph`]: the validated logical graph — [`JobGraph`], [`Vertex`],
//!   [`JobEdge`], [`Partitioner`] — and the typed source, operator and sink
//!   specs the connectors and the Wasm runtime consume.
//! * `build` (private): validation of a [`JobSpec`] and construction of the
//!   [`JobGraph`]; every problem found is reported, not only the first.
//! * [`config`]: the configuration types the spec carries and lower layers
//!   read (checkpoints, restarts, record-size default).
//! * [`mod@chain`]: operator chaining into [`TaskSpec`]s and the [`TaskEdge`]s
//!   that cross task boundaries.
//!
//! # Invariants of a [`JobGraph`]
//!
//! * Vertex ids are unique, well formed, and stable: they are the operator
//!   uids that address state in checkpoints and savepoints.
//! * Edges go from a source or operator to an operator or sink; the graph is
//!   acyclic; every operator and sink has at least one input.
//! * `1 <= parallelism <= max_parallelism` for every vertex; NATS sources
//!   have parallelism 1.
//! * Every input of an operator with `key_by` is [`Partitioner::Hash`] with
//!   that key; a [`Partitioner::Forward`] edge joins vertices of equal
//!   parallelism.
//!
//! # What this module does not touch
//!
//! It reads the spec file and nothing else: it does not open sources, load
//! or compile modules (only [`JobGraph::check_modules_exist`] looks at the
//! file system, on request), start tasks, or know about slots and
//! TaskManagers. Errors are [`JobError`]s — user errors, all of them.

pub mod chain;
pub mod config;
pub mod graph;
pub mod kafka;
pub mod nats;
pub mod spec;

mod build;
mod overrides;

use std::fmt;
use std::path::PathBuf;

pub use chain::{TaskEdge, TaskId, TaskSpec, chain, check_tasks, task_edges};
pub use graph::{
    Aggregate, FileSinkSpec, FileSourceSpec, GeneratorKind, GeneratorSpec, JobEdge, JobGraph,
    JobSettings, JoinKind, JoinSpec, KeySelector, ModuleRef, OperatorLimits, OperatorSpec,
    Partitioner, SinkFormat, SinkSpec, SourceFormat, SourceSpec, StateBackendKind, Vertex,
    VertexId, VertexKind, WatermarkStrategy, WindowAssigner, WindowSpec,
};
pub use kafka::{KafkaDelivery, KafkaPartitioning, KafkaSinkSpec, KafkaSourceSpec, KafkaStart};
pub use nats::{NatsDelivery, NatsSinkSpec, NatsSourceSpec, NatsStart};
pub use spec::{JobSpec, parse_override};

/// Everything that can be wrong with a job spec.
///
/// Every variant names the spec file. All of them are the user's to fix:
/// none is worth retrying.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The spec file could not be read.
    #[error("cannot read job spec {}", path.display())]
    Io {
        /// The spec file.
        path: PathBuf,
        /// Why reading failed.
        source: std::io::Error,
    },
    /// The spec is not valid TOML, or does not have the shape of a job spec
    /// (unknown field, wrong type, unknown `type`/`format`/... value).
    #[error("cannot parse job spec {}:\n{message}", path.display())]
    Parse {
        /// The spec file.
        path: PathBuf,
        /// toml's message, with line, column and the offending line when known.
        message: String,
    },
    /// A `--set key=value` override could not be applied.
    #[error("job spec {}: cannot apply --set {key}: {message}", path.display())]
    Override {
        /// The spec file.
        path: PathBuf,
        /// The key as given, e.g. `operator.count.parallelism`.
        key: String,
        /// What is wrong with it.
        message: String,
    },
    /// The spec parsed but describes an invalid job. Holds every problem found.
    #[error("{}", display_invalid(path, problems))]
    Invalid {
        /// The spec file.
        path: PathBuf,
        /// What is wrong, in document order (job, sources, operators, sinks, edges, graph).
        problems: Vec<Problem>,
    },
}

impl JobError {
    /// The problems of an [`JobError::Invalid`]; empty for the other variants.
    pub fn problems(&self) -> &[Problem] {
        match self {
            JobError::Invalid { problems, .. } => problems,
            _ => &[],
        }
    }
}

fn display_invalid(path: &std::path::Path, problems: &[Problem]) -> String {
    match problems {
        [one] => format!("invalid job spec {}: {one}", path.display()),
        many => {
            let mut out = format!(
                "invalid job spec {} ({} problems):",
                path.display(),
                many.len()
            );
            for problem in many {
                out.push_str("\n  - ");
                out.push_str(&problem.to_string());
            }
            out
        }
    }
}

/// One thing wrong (or, in [`JobGraph::warnings`], suspicious) in a job spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where: `job.parallelism`, `operator[1] "count".parallelism`,
    /// `edge[3].from`, ... Array indices are 0-based within their kind.
    pub field: String,
    /// What was found and what was expected.
    pub message: String,
}

impl Problem {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Default parallelism of every vertex when `job.parallelism` is absent.
pub const DEFAULT_PARALLELISM: u32 = 1;
/// Default number of key groups. Flink's default: enough to rescale a keyed
/// operator up to 128 subtasks, few enough that per-key-group overhead
/// (one range per subtask, one state-file prefix per group) stays small.
pub const DEFAULT_MAX_PARALLELISM: u32 = 128;
/// Upper bound of `job.max_parallelism`: Flink's bound (2^15), so a key-group
/// index always fits in the two-byte prefix of a state key.
pub const MAX_MAX_PARALLELISM: u32 = 32_768;
/// Default records per batch between operators: large enough to amortise a
/// call into the guest, small enough to keep latency and buffers low.
pub const DEFAULT_BATCH_SIZE: u32 = 1024;
/// Upper bound of `job.batch_size`: beyond this a batch costs more memory
/// than it saves in calls.
pub const MAX_BATCH_SIZE: u32 = 65_536;
/// Default batches buffered per channel before the sender blocks (backpressure).
pub const DEFAULT_CHANNEL_CAPACITY: u32 = 8;
/// Default buffer timeout between TaskManagers, in milliseconds: Flink's
/// default. At high rates buffers fill (and leave) long before it; at low
/// rates it bounds how long a record waits in a half-empty buffer. Latency-
/// sensitive jobs set 1–5 ms and pay with more, smaller network writes.
pub const DEFAULT_BUFFER_TIMEOUT_MS: u64 = 100;
/// Default `job.watermark_interval_ms`: Flink's auto-watermark interval.
/// Each watermark costs a guest call per chained operator and a message on
/// every channel; timers and windows fire at most this much late.
pub const DEFAULT_WATERMARK_INTERVAL_MS: u64 = 200;
/// Upper bound of `job.watermark_interval_ms`, `max_out_of_orderness_ms`
/// and `idle_timeout_ms`: a day. Longer is a typo, not a strategy.
pub const MAX_WATERMARK_MS: u64 = 86_400_000;
/// Upper bound of window sizes, slides, gaps and allowed lateness: a year.
pub const MAX_WINDOW_MS: u64 = 366 * 86_400_000;
/// Most sliding windows one record may belong to (`size_ms / slide_ms`):
/// each costs a state update per record.
pub const MAX_WINDOWS_PER_RECORD: u64 = 1000;
/// The slot sharing group of vertices that name none.
pub const DEFAULT_SLOT_SHARING_GROUP: &str = "default";
/// Default linear-memory cap per operator instance, in MiB.
pub const DEFAULT_MEMORY_MB: u32 = 64;
/// Upper bound of `job.limits.memory_mb`: a wasm32 memory cannot exceed 4 GiB.
pub const MAX_MEMORY_MB: u32 = 4096;
/// Default CPU deadline of one guest call, in milliseconds: generous for a
/// batch, short enough that a looping guest fails its task quickly.
pub const DEFAULT_CALL_TIMEOUT_MS: u64 = 10_000;
/// Upper bound of `job.limits.call_timeout_ms`: a guest call that runs for
/// a minute holds a slot's thread and a core; no batch needs that long.
pub const MAX_CALL_TIMEOUT_MS: u64 = 60_000;
/// Default cap on the bytes one guest call may emit, in MiB.
pub const DEFAULT_MAX_OUTPUT_MB: u32 = 16;
/// Longest vertex id (and job name): ids appear in file names, metric names
/// and state addresses.
pub const MAX_ID_LEN: usize = 64;
/// Largest `max_record_bytes` of a file source: a line is held whole in
/// memory (and in a batch), so one must stay far below a TaskManager's
/// memory.
pub const MAX_FILE_RECORD_BYTES: u64 = 1 << 30;

/// Default `split_bytes` of a file source: the size of the byte ranges an
/// uncompressed file of lines is split into for parallel reading (as
/// Flink's local file system block size, 32 MiB: large enough that a split
/// costs nothing to open, small enough to spread one big file).
pub const DEFAULT_SPLIT_BYTES: u64 = 32 << 20;
/// Largest `record_bytes` of a sequence generator: one record must stay far
/// below the per-call output cap.
pub const MAX_RECORD_BYTES: u32 = 1 << 20;

#[cfg(test)]
mod tests;
