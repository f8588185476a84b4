//! Runs subtasks: the operator-chain driver, the partitioners on a task's
//! outputs, and the bounded channels between tasks.
//!
//! # Key types
//!
//! - [`Subtask`]: one parallel instance of a task (a chain of a source or an
//!   input gate, operators, and optionally a sink), run on a blocking thread.
//!   Its driver is the shell around the pure parts: it receives, sends,
//!   calls operators and takes snapshots.
//! - [`input::InputGate`]: a subtask's input channels as a pure state
//!   machine: checkpoint barrier alignment (and the messages it holds back)
//!   and the combined watermark. The driver feeds it every message received
//!   and carries out the [`input::GateEvent`]s it returns, in order.
//! - [`Message`]: what travels on a channel: record batches, watermarks,
//!   checkpoint barriers, and the end of a channel's input.
//! - [`Output`]: one outgoing edge of a task with its partitioner and the
//!   senders to every downstream subtask.
//! - [`JobMetrics`]: per-vertex record counters and per-edge queue depth,
//!   shared with whoever watches the job, and per vertex and subtask
//!   ([`SubtaskMetrics`]) records and bytes in and out, idle and
//!   backpressured time, and the operator's log ring and metrics.
//!
//! # Invariants
//!
//! - Channels are bounded (`channel_capacity` batches), batches are bounded
//!   (`batch_size` records on every hop the host controls), so a slow
//!   consumer blocks its producers and memory stays bounded all the way
//!   back to the sources (backpressure).
//! - Within a chain, records pass as in-memory batches, never serialized.
//! - Checkpoints are aligned, as in Flink: a subtask snapshots checkpoint
//!   `n` once every input channel has delivered barrier `n` (or ended), with
//!   exactly the records before those barriers processed, and forwards the
//!   barrier after every record emitted before it. The input gate's module
//!   docs have the rules (newer barriers overtaking, ends during alignment).
//! - A source subtask's watermark follows its strategy
//!   ([`watermarks::WatermarkGenerator`]); any other subtask's is the minimum
//!   over its active input channels (the input gate's rules); a channel that
//!   ended or is idle no longer holds it back. At the end of input every
//!   operator sees a final watermark of `i64::MAX` (firing all timers), then
//!   `close`.
//! - A failure anywhere aborts the job: every blocked send or receive wakes
//!   up through the abort signal, so no subtask is left hanging.
//!
//! The `weir taskmanager` process around them (registration, heartbeats,
//! module fetch, deployment and state reports) is the `weir-taskmanager`
//! crate, a layer above.
//!
//! The driver must not parse job specs or load modules (that is
//! [`crate::local`]'s job), and must not decide alignment or watermarks
//! itself (that is the input gate's).

pub mod input;
mod partition;
pub mod watermarks;

pub use partition::{KeyExtractor, Partitioning};

use input::{BadChannel, GateEvent, InputGate};
use watermarks::{WatermarkAction, WatermarkGenerator};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use std::time::{Duration, Instant};

use tokio::sync::mpsc;

pub use crate::channel::{Abort, Message};
use crate::connectors::{ConnectorError, Sink, Source};
use crate::join::JoinOperator;
use crate::record::{Batch, Emitted};
use crate::wasm::{OperatorError, OperatorInstance};
use crate::window::WindowOperator;

/// How often a drained source looks for the savepoint's barrier, the
/// cancel after it, or the end of the drain.
const DRAINED_POLL: Duration = Duration::from_millis(2);

/// Why a subtask failed.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// An operator failed.
    #[error(transparent)]
    Operator(OperatorError),
    /// A source or sink failed.
    #[error("{vertex}: {source}")]
    Connector {
        /// The source or sink uid.
        vertex: String,
        /// The cause.
        source: ConnectorError,
    },
    /// A record could not be partitioned (e.g. `key_by = "json:f"` on a
    /// value that is not JSON).
    #[error("edge into `{vertex}`: {message}")]
    Partition {
        /// The downstream vertex.
        vertex: String,
        /// What is wrong.
        message: String,
    },
    /// The subtask's thread panicked: a bug in the host, not in an operator.
    #[error("subtask thread panicked (a bug in Weir): {0}")]
    Panicked(String),
    /// Another subtask failed and the job is being aborted.
    #[error("aborted because another task failed")]
    Aborted,
    /// A message named an input channel this subtask does not have. The
    /// data plane refuses such messages; this is the last line behind it.
    #[error("a message for input channel {channel}, but the subtask has {channels}")]
    BadChannel {
        /// The channel the message named.
        channel: u32,
        /// The subtask's number of input channels.
        channels: u32,
    },
}

impl From<BadChannel> for TaskError {
    fn from(e: BadChannel) -> Self {
        TaskError::BadChannel {
            channel: e.channel,
            channels: e.channels,
        }
    }
}

impl From<OperatorError> for TaskError {
    /// A guest call interrupted by the job's abort is the abort's
    /// consequence, not a root cause.
    fn from(e: OperatorError) -> Self {
        if e.kind == crate::wasm::FailureKind::Cancelled {
            TaskError::Aborted
        } else {
            TaskError::Operator(e)
        }
    }
}

/// Record counters of one vertex, summed over its subtasks.
#[derive(Debug, Default)]
pub struct VertexMetrics {
    /// Records received (sources: 0).
    pub records_in: AtomicU64,
    /// Records emitted on every output (sinks: 0).
    pub records_out: AtomicU64,
    /// Head vertices of a task only: nanoseconds its subtasks spent waiting
    /// for input (idle), summed over subtasks.
    pub idle_ns: AtomicU64,
    /// Head vertices of a task only: nanoseconds its subtasks spent waiting
    /// for room in a full output channel (backpressured), summed over subtasks.
    pub backpressured_ns: AtomicU64,
    /// The current watermark of each of its subtasks running here, by
    /// subtask index (`i64::MIN` until the first).
    pub watermarks: std::sync::Mutex<std::collections::BTreeMap<u32, i64>>,
    /// Each of its subtasks running here, by subtask index.
    pub subtasks: std::sync::Mutex<std::collections::BTreeMap<u32, Arc<SubtaskMetrics>>>,
    /// Keyed operators: each of its subtasks' state backend and about how
    /// many bytes the state takes
    /// ([`crate::state::KeyedStateBackend::size_bytes`]), by subtask index,
    /// sampled every [`STATE_SIZE_INTERVAL`] (with or without
    /// `job.metrics`: the JobManager's state quota reads it too).
    pub states: std::sync::Mutex<std::collections::BTreeMap<u32, StateSize>>,
}

/// A keyed operator subtask's state backend and about how many bytes its
/// state takes.
pub type StateSize = (crate::state::BackendKind, u64);

/// The counters of one subtask of one vertex (Flink's per-subtask task
/// and operator metrics), and its operator's log ring and metrics. Added
/// to as the per-vertex sums are, once per batch.
#[derive(Debug)]
pub struct SubtaskMetrics {
    /// Records received (sources: 0).
    pub records_in: AtomicU64,
    /// Records emitted on every output (sinks: 0).
    pub records_out: AtomicU64,
    /// Bytes of the records received ([`Batch::byte_size`]).
    pub bytes_in: AtomicU64,
    /// Bytes of the records emitted.
    pub bytes_out: AtomicU64,
    /// Head vertices of a task only: nanoseconds spent waiting for input.
    pub idle_ns: AtomicU64,
    /// Head vertices of a task only: nanoseconds spent waiting for room in
    /// a full output channel.
    pub backpressured_ns: AtomicU64,
    /// When it was set up: its busy time is the time since, less idle and
    /// backpressured time.
    pub started: Instant,
    /// Operators: what the guest logs and measures.
    pub telemetry: Arc<crate::telemetry::OperatorTelemetry>,
    /// The latencies (ms) of the last [`LATENCY_HISTORY`] latency markers
    /// that reached it, oldest first.
    pub latency_ms: std::sync::Mutex<std::collections::VecDeque<u32>>,
    /// Head vertices of a task with an input only: messages (batches,
    /// barriers, watermarks) waiting in its input queue after its latest
    /// receive, and the queue's capacity.
    pub input_queued: AtomicU64,
    /// See `input_queued` (0: no input queue seen).
    pub input_capacity: AtomicU64,
}

/// How often a subtask samples its operators' state size while batches
/// arrive, for `/metrics` and the cluster's state quota (a handful of
/// RocksDB property reads, or one load for the heap). It is sampled after
/// each checkpoint's snapshot and at the end of input too.
pub const STATE_SIZE_INTERVAL: Duration = Duration::from_secs(1);

/// Latency markers remembered per subtask of a vertex (Flink's
/// `metrics.latency.history-size`): quantiles are over this sliding window.
pub const LATENCY_HISTORY: usize = 128;

/// Quantiles of latency samples, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LatencyQuantiles {
    /// Median.
    pub p50: u32,
    /// 95th percentile.
    pub p95: u32,
    /// 99th percentile.
    pub p99: u32,
    /// The largest.
    pub max: u32,
    /// How many samples they are over.
    pub samples: usize,
}

impl LatencyQuantiles {
    /// Nearest-rank quantiles of `samples`; `None` if there are none.
    pub fn of(samples: &[u32]) -> Option<LatencyQuantiles> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let rank = |q: f64| {
            let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
            sorted[i - 1]
        };
        Some(LatencyQuantiles {
            p50: rank(0.50),
            p95: rank(0.95),
            p99: rank(0.99),
            max: sorted[sorted.len() - 1],
            samples: sorted.len(),
        })
    }
}

impl Default for SubtaskMetrics {
    fn default() -> Self {
        SubtaskMetrics {
            records_in: AtomicU64::new(0),
            records_out: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            idle_ns: AtomicU64::new(0),
            backpressured_ns: AtomicU64::new(0),
            started: Instant::now(),
            telemetry: Arc::default(),
            latency_ms: Default::default(),
            input_queued: AtomicU64::new(0),
            input_capacity: AtomicU64::new(0),
        }
    }
}

impl SubtaskMetrics {
    fn add_in(&self, batch: &Batch) {
        self.records_in
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        self.bytes_in
            .fetch_add(batch.byte_size() as u64, Ordering::Relaxed);
    }

    fn add_out(&self, records: usize, bytes: usize) {
        self.records_out
            .fetch_add(records as u64, Ordering::Relaxed);
        self.bytes_out.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Remembers the latency of a marker made at `marked_ms` that reached
    /// it `now_ms` (a wall clock stepping back counts as 0).
    fn record_latency(&self, marked_ms: i64, now_ms: i64) {
        let ms = now_ms.saturating_sub(marked_ms).clamp(0, u32::MAX.into()) as u32;
        let mut ring = self.latency_ms.lock().unwrap_or_else(|e| e.into_inner());
        if ring.len() == LATENCY_HISTORY {
            ring.pop_front();
        }
        ring.push_back(ms);
    }

    /// Its latest latency samples (ms), oldest first.
    pub fn latency_samples(&self) -> Vec<u32> {
        let ring = self.latency_ms.lock().unwrap_or_else(|e| e.into_inner());
        ring.iter().copied().collect()
    }
}

impl VertexMetrics {
    /// The lowest watermark of its subtasks running here; `None` if none run here.
    pub fn watermark(&self) -> Option<i64> {
        let watermarks = self.watermarks.lock().unwrap_or_else(|e| e.into_inner());
        watermarks.values().copied().min()
    }

    fn set_watermark(&self, subtask: u32, watermark: i64) {
        let mut watermarks = self.watermarks.lock().unwrap_or_else(|e| e.into_inner());
        watermarks.insert(subtask, watermark);
    }

    fn set_state(&self, subtask: u32, size: StateSize) {
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        states.insert(subtask, size);
    }

    /// The latest state size sample of its subtask `index`, if it has
    /// keyed state.
    pub fn subtask_state(&self, index: u32) -> Option<StateSize> {
        let states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        states.get(&index).copied()
    }

    /// Bytes of keyed state of all its subtasks here, as last sampled.
    pub fn state_bytes(&self) -> u64 {
        let states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        states.values().map(|(_, bytes)| bytes).sum()
    }

    /// The counters of its subtask `index`, created at the first call.
    pub fn subtask(&self, index: u32) -> Arc<SubtaskMetrics> {
        let mut subtasks = self.subtasks.lock().unwrap_or_else(|e| e.into_inner());
        subtasks.entry(index).or_default().clone()
    }

    /// The counters of each of its subtasks here, by subtask index.
    pub fn subtask_list(&self) -> Vec<(u32, Arc<SubtaskMetrics>)> {
        let subtasks = self.subtasks.lock().unwrap_or_else(|e| e.into_inner());
        subtasks.iter().map(|(i, m)| (*i, m.clone())).collect()
    }

    /// The latest latency samples (ms) of its subtasks here, together.
    pub fn latency_samples(&self) -> Vec<u32> {
        self.subtask_list()
            .iter()
            .flat_map(|(_, m)| m.latency_samples())
            .collect()
    }

    /// The current watermark of its subtask `index`, if it runs here.
    pub fn subtask_watermark(&self, index: u32) -> Option<i64> {
        let watermarks = self.watermarks.lock().unwrap_or_else(|e| e.into_inner());
        watermarks.get(&index).copied()
    }
}

/// Live metrics of a running job.
#[derive(Debug)]
pub struct JobMetrics {
    /// Per vertex, indexed like `JobGraph::vertices`.
    pub vertices: Vec<VertexMetrics>,
    /// Highest number of batches seen queued in any one channel.
    pub max_queued_batches: AtomicU64,
    /// Whether subtasks measure more than the per-vertex record counts
    /// (`job.metrics`): per-subtask records and bytes, busy, idle and
    /// backpressured time, latency markers' arrival. Off, they keep only
    /// `records_in`/`records_out` of each vertex (the job's summary).
    pub detailed: bool,
}

impl JobMetrics {
    /// Zeroed metrics for `vertices` vertices, detailed.
    pub fn new(vertices: usize) -> JobMetrics {
        JobMetrics {
            vertices: (0..vertices).map(|_| VertexMetrics::default()).collect(),
            max_queued_batches: AtomicU64::new(0),
            detailed: true,
        }
    }

    /// Zeroed metrics for `vertices` vertices, detailed or not
    /// ([`JobMetrics::detailed`]).
    pub fn with_detail(vertices: usize, detailed: bool) -> JobMetrics {
        JobMetrics {
            detailed,
            ..JobMetrics::new(vertices)
        }
    }
}

/// The sending side of one channel, with its index at the receiver.
#[derive(Debug, Clone)]
pub struct ChannelSender {
    /// The channel.
    pub tx: mpsc::Sender<Message>,
    /// Index of this channel among the receiver's inputs.
    pub channel: u32,
}

/// One outgoing edge of a task, seen from one subtask.
#[derive(Debug)]
pub struct Output {
    /// `None` for the main output, else the side-output tag.
    pub tag: Option<String>,
    /// How records are spread over `targets`.
    pub partitioning: Partitioning,
    /// One sender per downstream subtask (forward: just one).
    pub targets: Vec<ChannelSender>,
    /// Vertex index of the downstream head (for errors and metrics).
    pub downstream: usize,
    /// Uid of the downstream head.
    pub downstream_id: String,
    pending: Vec<Batch>,
    next: usize,
}

impl Output {
    /// An output edge.
    pub fn new(
        tag: Option<String>,
        partitioning: Partitioning,
        targets: Vec<ChannelSender>,
        downstream: usize,
        downstream_id: String,
    ) -> Output {
        let pending = targets.iter().map(|_| Batch::new()).collect();
        Output {
            tag,
            partitioning,
            targets,
            downstream,
            downstream_id,
            pending,
            next: 0,
        }
    }
}

/// A chained operator.
#[derive(Debug)]
pub struct ChainedOperator {
    /// Vertex index.
    pub vertex: usize,
    /// The instance.
    pub instance: Operator,
    /// When its state size was last sampled (`None`: not yet).
    pub state_sampled: Option<Instant>,
}

/// What a chained operator runs: a Wasm component, or one of the host's
/// operators (a window's function may be Wasm too). The driver calls them
/// the same way.
#[derive(Debug)]
pub enum Operator {
    /// A Wasm component instance.
    Wasm(OperatorInstance),
    /// The host's window operator.
    Window(WindowOperator),
    /// The host's two-input join.
    Join(JoinOperator),
}

impl Operator {
    fn open(&mut self) -> Result<(), OperatorError> {
        match self {
            Operator::Wasm(i) => i.open(),
            Operator::Window(w) => w.open(),
            Operator::Join(_) => Ok(()),
        }
    }

    /// Processes a batch that arrived on input `input` (0 but for a join).
    fn process(&mut self, input: u8, batch: &Batch) -> Result<Emitted, OperatorError> {
        match self {
            Operator::Wasm(i) => i.process_input(input, batch),
            Operator::Window(w) => w.process(batch),
            Operator::Join(j) => j.process(input, batch),
        }
    }

    fn advance_watermark(&mut self, watermark: i64) -> Result<Vec<Emitted>, OperatorError> {
        match self {
            Operator::Wasm(i) => i.advance_watermark(watermark),
            Operator::Window(w) => w.advance_watermark(watermark),
            Operator::Join(j) => j.advance_watermark(watermark),
        }
    }

    fn close(&mut self) -> Result<Emitted, OperatorError> {
        match self {
            Operator::Wasm(i) => i.close(),
            Operator::Window(_) | Operator::Join(_) => Ok(Emitted::empty()),
        }
    }

    fn flush_state(&mut self) -> Result<(), OperatorError> {
        match self {
            Operator::Wasm(i) => i.flush_state(),
            Operator::Window(w) => w.core_mut().flush(),
            Operator::Join(j) => j.core_mut().flush(),
        }
    }

    /// The keyed state's backend and about how many bytes it takes
    /// (`None`: no keyed state).
    fn state_size(&self) -> Option<StateSize> {
        match self {
            Operator::Wasm(i) => i.state_size(),
            Operator::Window(w) => w.core().state_size(),
            Operator::Join(j) => j.core().state_size(),
        }
    }

    fn snapshot_state(&mut self, dir: &std::path::Path) -> Result<bool, OperatorError> {
        match self {
            Operator::Wasm(i) => i.snapshot_state(dir),
            Operator::Window(w) => w.core_mut().snapshot(dir),
            Operator::Join(j) => j.core_mut().snapshot(dir),
        }
    }

    fn timers(&self) -> Timers {
        match self {
            Operator::Wasm(i) => i.timers(),
            Operator::Window(w) => w.core().timer_list(),
            Operator::Join(j) => j.core().timer_list(),
        }
    }

    /// The earliest processing-time timer (ms since the epoch), if any.
    fn next_processing_timer(&self) -> Option<i64> {
        match self {
            Operator::Wasm(i) => i.next_processing_timer(),
            Operator::Window(_) | Operator::Join(_) => None,
        }
    }

    /// Fires the processing-time timers due at `now`.
    fn fire_processing_timers(&mut self, now: i64) -> Result<Vec<Emitted>, OperatorError> {
        match self {
            Operator::Wasm(i) => i.fire_processing_timers(now),
            Operator::Window(_) | Operator::Join(_) => Ok(Vec::new()),
        }
    }

    /// Restores timers from a checkpoint.
    pub fn restore_timers(&mut self, timers: Timers) {
        match self {
            Operator::Wasm(i) => i.restore_timers(timers),
            Operator::Window(w) => w.core_mut().restore_timers(timers),
            Operator::Join(j) => j.core_mut().restore_timers(timers),
        }
    }
}

/// Where a subtask's records come from.
pub enum Head {
    /// A source chained at the head.
    Source {
        /// Vertex index.
        vertex: usize,
        /// Source uid.
        id: String,
        /// The connector.
        source: Box<dyn Source>,
        /// How its watermark follows the timestamps read.
        watermarks: crate::job::WatermarkStrategy,
    },
    /// Channels from upstream tasks.
    Input {
        /// The receiver shared by all input channels.
        rx: mpsc::Receiver<Message>,
        /// Number of input channels (senders that will each send `End`).
        channels: u32,
        /// The input of the head operator each channel feeds (0, or 1 for a
        /// join's right side), by channel index.
        inputs: Vec<u8>,
    },
    /// Restored from a checkpoint taken after this subtask had finished:
    /// it only ends its outputs (its results were already committed) and
    /// drains the `End`s of its inputs.
    Finished {
        /// Its input channels, if it has any.
        rx: Option<mpsc::Receiver<Message>>,
        /// How many `End`s to wait for.
        channels: u32,
    },
}

/// A subtask's part in checkpoints.
pub struct Checkpointing {
    /// Sources: the newest checkpoint the coordinator asked for (0: none
    /// yet); the source injects its barrier between two batches.
    pub requested: Arc<AtomicU64>,
    /// Scratch directory for the synchronous part of snapshots.
    pub local_dir: std::path::PathBuf,
    /// Where snapshots go once their synchronous part is done (the
    /// TaskManager uploads them and acknowledges).
    pub taken: mpsc::UnboundedSender<TakenSnapshot>,
    /// This subtask's task index.
    pub task: u32,
    /// This subtask's index.
    pub subtask: u32,
}

/// The synchronous part of one subtask's snapshot.
#[derive(Debug)]
pub struct TakenSnapshot {
    /// Checkpoint id; [`FINISHED`] for the snapshot a subtask leaves when
    /// it finishes (it stands for every later checkpoint).
    pub checkpoint: u64,
    /// Task index.
    pub task: u32,
    /// Subtask index.
    pub subtask: u32,
    /// Keyed state: (vertex, directory holding the backend's local snapshot).
    pub states: Vec<(usize, std::path::PathBuf)>,
    /// Event-time timers per chained operator (vertex) that has any.
    pub timers: Vec<(usize, Timers)>,
    /// The head source's position.
    pub source: Option<serde_json::Value>,
    /// What the head source publishes once this checkpoint completes
    /// ([`crate::connectors::Source::committable`]); not part of the
    /// checkpoint.
    pub source_commit: Option<serde_json::Value>,
    /// The tail sink's pre-committed output.
    pub sink: Option<serde_json::Value>,
    /// From the first barrier of this checkpoint to the last (inputs only).
    pub alignment: Duration,
}

/// Event-time timers of one operator: (time, key), in firing order.
pub type Timers = Vec<(i64, Vec<u8>)>;

/// The checkpoint id of a finished subtask's last snapshot.
pub const FINISHED: u64 = u64::MAX;

/// A sink chained at the tail.
pub struct TailSink {
    /// Vertex index.
    pub vertex: usize,
    /// Sink uid.
    pub id: String,
    /// The connector.
    pub sink: Box<dyn Sink>,
}

/// One parallel instance of a task.
pub struct Subtask {
    /// Name for logs, e.g. `tokenize+count (2/4)`.
    pub name: String,
    /// The task's first vertex: its metrics carry the task's idle and
    /// backpressured time.
    pub head_vertex: usize,
    /// Where records come from.
    pub head: Head,
    /// Chained operators, in order.
    pub operators: Vec<ChainedOperator>,
    /// The sink at the tail, if any.
    pub sink: Option<TailSink>,
    /// Outgoing edges of the tail vertex.
    pub outputs: Vec<Output>,
    /// This subtask's index among its task's parallel instances.
    pub index: u32,
    /// Records per batch.
    pub batch_size: usize,
    /// Sources: emit the watermark at most this often (0: after every batch).
    pub watermark_interval: Duration,
    /// Sources: send a latency marker this often (`None`: never).
    pub latency_interval: Option<Duration>,
    /// Shared metrics.
    pub metrics: Arc<JobMetrics>,
    /// Set to stop sources gracefully (Ctrl-C).
    pub stop: Arc<AtomicBool>,
    /// Set to drain sources (`weir stop --drain`): the final watermark,
    /// then idle until the savepoint's barrier (and the cancel after it).
    pub drain: Arc<AtomicBool>,
    /// The job-wide abort signal.
    pub abort: Abort,
    /// Tokio handle, to wait on channels from this blocking thread.
    pub handle: tokio::runtime::Handle,
    /// Set when the job takes checkpoints.
    pub checkpointing: Option<Checkpointing>,
    /// This subtask's counters of each vertex of its chain; filled from
    /// `metrics` when it starts running if left empty.
    pub subtask_metrics: Vec<(usize, Arc<SubtaskMetrics>)>,
}

impl Subtask {
    /// Runs to the end of input. On error, triggers the job's abort signal.
    pub fn run(mut self) -> Result<(), TaskError> {
        let result = self.run_inner();
        match &result {
            Err(TaskError::Aborted) => self.abort.trigger(),
            Err(e) => {
                // The job's owner reports the root cause; this is the trail.
                tracing::info!(subtask = %self.name, "failed: {e}");
                self.abort
                    .trigger_because(format!("subtask {} failed: {e}", self.name));
            }
            Ok(()) => {}
        }
        result
    }

    /// Every vertex of this subtask's chain (the head may come twice).
    fn chain_vertices(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::once(self.head_vertex)
            .chain(self.operators.iter().map(|op| op.vertex))
            .chain(self.sink.as_ref().map(|s| s.vertex))
    }

    /// This subtask's counters of vertex `vertex` of its chain.
    fn counters(&self, vertex: usize) -> Option<&SubtaskMetrics> {
        self.subtask_metrics
            .iter()
            .find(|(v, _)| *v == vertex)
            .map(|(_, m)| &**m)
    }

    fn run_inner(&mut self) -> Result<(), TaskError> {
        let vertices: Vec<usize> = self.chain_vertices().collect();
        for v in vertices {
            self.metrics.vertices[v].set_watermark(self.index, i64::MIN);
            if self.metrics.detailed && self.counters(v).is_none() {
                let m = self.metrics.vertices[v].subtask(self.index);
                self.subtask_metrics.push((v, m));
            }
        }
        for op in &mut self.operators {
            op.instance.open()?;
        }
        match std::mem::replace(
            &mut self.head,
            Head::Input {
                rx: mpsc::channel(1).1,
                channels: 0,
                inputs: Vec::new(),
            },
        ) {
            Head::Source {
                vertex,
                id,
                mut source,
                watermarks,
            } => {
                let mut generator =
                    WatermarkGenerator::new(watermarks, self.watermark_interval, Instant::now());
                let mut barrier = 0u64;
                let mut drained = false;
                let mut next_marker = self.latency_interval.map(|i| Instant::now() + i);
                while !self.stop.load(Ordering::Relaxed) {
                    if self.abort.is_set() {
                        return Err(TaskError::Aborted);
                    }
                    // Read before `drain`: a trigger seen here was sent
                    // after a drain that must precede its barrier.
                    let requested = self
                        .checkpointing
                        .as_ref()
                        .map_or(0, |c| c.requested.load(Ordering::Acquire));
                    let draining = self.drain.load(Ordering::SeqCst);
                    if draining && !drained {
                        // Every event-time timer downstream fires before
                        // the savepoint's barrier arrives behind this.
                        drained = true;
                        generator.finish();
                        self.watermark(i64::MAX)?;
                    }
                    if requested > barrier {
                        barrier = requested;
                        let position = Some((source.position(), source.committable()));
                        self.checkpoint(barrier, position, Duration::ZERO)?;
                    }
                    if draining {
                        // Nothing more is read: waiting for the barrier,
                        // then the cancel (or to read again).
                        std::thread::sleep(DRAINED_POLL);
                        continue;
                    }
                    let batch = source.next_batch(self.batch_size).map_err(|source| {
                        TaskError::Connector {
                            vertex: id.clone(),
                            source,
                        }
                    })?;
                    let Some(batch) = batch else { break };
                    // An empty batch: a live source (a followed file) has
                    // nothing right now; it may turn idle below.
                    let now = Instant::now();
                    if generator.on_batch(batch.len(), batch.max_timestamp(), now) {
                        self.broadcast(|channel| Message::Idle {
                            channel,
                            idle: false,
                        })?;
                    }
                    if let Some(splits) = source.split_timestamps() {
                        generator.on_splits(splits, now);
                    }
                    if !batch.is_empty() {
                        self.metrics.vertices[vertex]
                            .records_out
                            .fetch_add(batch.len() as u64, Ordering::Relaxed);
                        if let Some(c) = self.counters(vertex) {
                            c.add_out(batch.len(), batch.byte_size());
                        }
                        self.push(0, batch)?;
                    }
                    if let (Some(next), Some(interval)) = (&mut next_marker, self.latency_interval)
                        && now >= *next
                    {
                        *next = now + interval;
                        self.latency_marker(crate::connectors::now_millis(), true)?;
                    }
                    self.fire_processing_timers()?;
                    // Periodic, as Flink's auto-watermark interval: each
                    // watermark costs a guest call per chained operator and
                    // a message on every channel.
                    match generator.poll(now) {
                        Some(WatermarkAction::Watermark(w)) => self.watermark(w)?,
                        Some(WatermarkAction::Idle) => {
                            self.flush_outputs()?;
                            self.broadcast(|channel| Message::Idle {
                                channel,
                                idle: true,
                            })?;
                        }
                        None => {}
                    }
                }
                let position = (source.position(), source.committable());
                return self.finish(Some(position));
            }
            Head::Finished { rx, channels } => {
                self.broadcast(|channel| Message::End { channel })?;
                if let Some(mut rx) = rx {
                    let mut ended = 0;
                    while ended < channels {
                        if let Message::End { .. } = self.recv(&mut rx)? {
                            ended += 1;
                        }
                    }
                }
                return Ok(());
            }
            Head::Input {
                mut rx,
                channels,
                inputs,
            } => {
                let mut gate = InputGate::new(channels);
                let mut alignment_started = None;
                while !gate.is_ended() {
                    // Wait for input, or for the next processing-time timer.
                    let due = self.next_processing_timer().map(|at| {
                        let wait = at.saturating_sub(crate::connectors::now_millis());
                        Duration::from_millis(wait.max(0) as u64)
                    });
                    let Some(message) = self.recv_until(&mut rx, due)? else {
                        self.fire_processing_timers()?;
                        continue;
                    };
                    for event in gate.offer(message)? {
                        match event {
                            GateEvent::Records(channel, batch) => {
                                let input = inputs.get(channel as usize).copied().unwrap_or(0);
                                self.push_at(0, input, batch)?
                            }
                            GateEvent::Watermark(watermark) => self.watermark(watermark)?,
                            GateEvent::Latency(marked_ms) => {
                                self.latency_marker(marked_ms, false)?
                            }
                            GateEvent::Idle(idle) => {
                                self.flush_outputs()?;
                                self.broadcast(|channel| Message::Idle { channel, idle })?;
                            }
                            GateEvent::AlignmentStarted { .. } => {
                                alignment_started = Some(Instant::now());
                            }
                            GateEvent::Aligned { checkpoint } => {
                                let alignment = alignment_started
                                    .take()
                                    .map_or(Duration::ZERO, |t| t.elapsed());
                                self.checkpoint(checkpoint, None, alignment)?;
                            }
                            GateEvent::Abandoned { checkpoint, by } => {
                                tracing::debug!(
                                    subtask = %self.name,
                                    "checkpoint {checkpoint} abandoned: barrier {by} overtook it"
                                );
                            }
                        }
                    }
                }
            }
        }
        self.finish(None)
    }

    /// Takes the synchronous part of checkpoint `id`: flushes and snapshots
    /// every chained operator's state, records timers, the source position
    /// and the sink's pre-committed output, hands it to the TaskManager, and
    /// forwards the barrier downstream. `source`: the head source's position
    /// and its [`crate::connectors::Source::committable`].
    fn checkpoint(
        &mut self,
        id: u64,
        source: Option<(serde_json::Value, Option<serde_json::Value>)>,
        alignment: Duration,
    ) -> Result<(), TaskError> {
        let Some(c) = &self.checkpointing else {
            return Ok(());
        };
        let (task, subtask) = (c.task, c.subtask);
        let dir = c.local_dir.join(id.to_string());
        let mut states = Vec::new();
        let mut timers = Vec::new();
        for i in 0..self.operators.len() {
            let op = &mut self.operators[i];
            let state_dir = dir.join(op.vertex.to_string());
            if op.instance.snapshot_state(&state_dir)? {
                states.push((op.vertex, state_dir));
                self.sample_state(i);
            }
            let op = &self.operators[i];
            let t = op.instance.timers();
            if !t.is_empty() {
                timers.push((op.vertex, t));
            }
        }
        let sink = match &mut self.sink {
            Some(tail) => tail
                .sink
                .pre_commit(id)
                .map_err(|source| TaskError::Connector {
                    vertex: tail.id.clone(),
                    source,
                })?,
            None => None,
        };
        // Records emitted before the barrier go first.
        self.flush_outputs()?;
        self.broadcast(|channel| Message::Barrier {
            channel,
            checkpoint: id,
        })?;
        if let Some(c) = &self.checkpointing {
            let (source, source_commit) = source.unzip();
            let _ = c.taken.send(TakenSnapshot {
                checkpoint: id,
                task,
                subtask,
                states,
                timers,
                source,
                source_commit: source_commit.flatten(),
                sink,
                alignment,
            });
        }
        Ok(())
    }

    /// End of input: final watermark, close every operator (its output goes
    /// down the rest of the chain), flush the sink, end every output channel.
    /// `source` as for [`Self::checkpoint`].
    fn finish(
        &mut self,
        source: Option<(serde_json::Value, Option<serde_json::Value>)>,
    ) -> Result<(), TaskError> {
        self.watermark(i64::MAX)?;
        for i in 0..self.operators.len() {
            let emitted = self.operators[i].instance.close()?;
            self.operators[i].instance.flush_state()?;
            self.sample_state(i);
            self.route(i, emitted)?;
        }
        let mut sink = None;
        if let Some(tail) = &mut self.sink {
            let connector = |source| TaskError::Connector {
                vertex: tail.id.clone(),
                source,
            };
            tail.sink.finish().map_err(connector)?;
            if self.checkpointing.is_some() {
                // The last output is committed with the first checkpoint
                // (or the job's end) that sees this subtask finished.
                sink = tail
                    .sink
                    .pre_commit(FINISHED)
                    .map_err(|source| TaskError::Connector {
                        vertex: tail.id.clone(),
                        source,
                    })?;
            }
        }
        self.flush_outputs()?;
        self.broadcast(|channel| Message::End { channel })?;
        if let Some(c) = &self.checkpointing {
            let (source, source_commit) = source.unzip();
            let _ = c.taken.send(TakenSnapshot {
                checkpoint: FINISHED,
                task: c.task,
                subtask: c.subtask,
                states: Vec::new(),
                timers: Vec::new(),
                source,
                source_commit: source_commit.flatten(),
                sink,
                alignment: Duration::ZERO,
            });
        }
        Ok(())
    }

    /// Passes `batch` through operators `from..`, then to the sink or outputs.
    fn push(&mut self, from: usize, batch: Batch) -> Result<(), TaskError> {
        self.push_at(from, 0, batch)
    }

    /// Passes `batch`, which arrived on input `input` of operator `from`
    /// (0 but for the head of a two-input task), down the chain.
    fn push_at(&mut self, from: usize, input: u8, batch: Batch) -> Result<(), TaskError> {
        if from < self.operators.len() {
            let vertex = self.operators[from].vertex;
            self.metrics.vertices[vertex]
                .records_in
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            if let Some(c) = self.counters(vertex) {
                c.add_in(&batch);
            }
            let op = &mut self.operators[from];
            // State is not flushed per batch: the backend's write-back
            // buffer flushes itself by size, and the end of input (later:
            // every checkpoint) flushes it completely.
            let emitted = op.instance.process(input, &batch)?;
            if op
                .state_sampled
                .is_none_or(|t| t.elapsed() >= STATE_SIZE_INTERVAL)
            {
                self.sample_state(from);
            }
            return self.route(from, emitted);
        }
        if let Some(tail) = &mut self.sink {
            self.metrics.vertices[tail.vertex]
                .records_in
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            if let Some(c) = self.subtask_metrics.iter().find(|(v, _)| *v == tail.vertex) {
                c.1.add_in(&batch);
            }
            return tail
                .sink
                .write(&batch)
                .map_err(|source| TaskError::Connector {
                    vertex: tail.id.clone(),
                    source,
                });
        }
        self.emit(None, batch)?;
        self.flush_outputs()
    }

    /// Routes what operator `i` emitted.
    fn route(&mut self, i: usize, emitted: Emitted) -> Result<(), TaskError> {
        let vertex = self.operators[i].vertex;
        let mut n = emitted.main.len();
        n += emitted.side.iter().map(|s| s.records.len()).sum::<usize>();
        self.metrics.vertices[vertex]
            .records_out
            .fetch_add(n as u64, Ordering::Relaxed);
        if let Some(c) = self.counters(vertex) {
            let mut bytes = emitted.main.byte_size();
            bytes += emitted
                .side
                .iter()
                .map(|s| s.records.byte_size())
                .sum::<usize>();
            c.add_out(n, bytes);
        }
        let last = i + 1 == self.operators.len();
        if !emitted.main.is_empty() {
            self.push(i + 1, emitted.main)?;
        }
        if last {
            // Side outputs leave the chain (chaining never fuses past an
            // operator with side-output edges); tags nobody consumes are dropped.
            for side in emitted.side {
                if !side.records.is_empty() {
                    self.emit(Some(&side.tag), side.records)?;
                }
            }
            self.flush_outputs()?;
        }
        Ok(())
    }

    /// Advances the watermark through the chain, then downstream.
    fn watermark(&mut self, watermark: i64) -> Result<(), TaskError> {
        for v in self.chain_vertices() {
            self.metrics.vertices[v].set_watermark(self.index, watermark);
        }
        for i in 0..self.operators.len() {
            let emitted = self.operators[i].instance.advance_watermark(watermark)?;
            for e in emitted {
                self.route(i, e)?;
            }
        }
        self.broadcast(|channel| Message::Watermark { channel, watermark })
    }

    /// Sends a control message to every downstream subtask of every output.
    /// A latency marker made at `marked_ms` reached this subtask: each
    /// vertex of the chain but a source records its latency (the chain is
    /// synchronous: the records before the marker went all the way
    /// through), then it goes on behind the records emitted so far to one
    /// channel of each output, a different one from marker to marker (as
    /// Flink's: markers sample the paths, they need not take all of them).
    fn latency_marker(&mut self, marked_ms: i64, at_source: bool) -> Result<(), TaskError> {
        let now = crate::connectors::now_millis();
        let mut vertices: Vec<usize> = self.chain_vertices().collect();
        vertices.dedup();
        for v in vertices {
            if at_source && v == self.head_vertex {
                continue;
            }
            if let Some(c) = self.counters(v) {
                c.record_latency(marked_ms, now);
            }
        }
        // Which channel: a hash of the marker's time, so that markers made
        // at a regular interval still spread over every channel.
        let spread = ((marked_ms as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize;
        self.flush_outputs()?;
        for output in &self.outputs {
            if output.targets.is_empty() {
                continue;
            }
            let target = &output.targets[spread % output.targets.len()];
            self.send(
                target,
                Message::Latency {
                    channel: target.channel,
                    marked_ms,
                },
            )?;
        }
        Ok(())
    }

    fn broadcast(&self, message: impl Fn(u32) -> Message) -> Result<(), TaskError> {
        for target in self.outputs.iter().flat_map(|o| &o.targets) {
            self.send(target, message(target.channel))?;
        }
        Ok(())
    }

    /// Partitions `batch` into the pending buffers of every output with `tag`.
    fn emit(&mut self, tag: Option<&str>, batch: Batch) -> Result<(), TaskError> {
        let Some(last) = self.outputs.iter().rposition(|o| o.tag.as_deref() == tag) else {
            return Ok(());
        };
        let mut batch = Some(batch);
        for o in 0..=last {
            if self.outputs[o].tag.as_deref() != tag {
                continue;
            }
            // Every matching output but the last gets a copy.
            let b = if o == last {
                batch.take().unwrap_or_default()
            } else {
                batch.clone().unwrap_or_default()
            };
            let out = &mut self.outputs[o];
            out.partitioning
                .partition(b, &mut out.pending, &mut out.next)
                .map_err(|message| TaskError::Partition {
                    vertex: out.downstream_id.clone(),
                    message,
                })?;
        }
        Ok(())
    }

    /// Sends every non-empty pending batch.
    fn flush_outputs(&mut self) -> Result<(), TaskError> {
        for o in 0..self.outputs.len() {
            for t in 0..self.outputs[o].targets.len() {
                if self.outputs[o].pending[t].is_empty() {
                    continue;
                }
                let batch = std::mem::take(&mut self.outputs[o].pending[t]);
                let target = &self.outputs[o].targets[t];
                self.send(
                    target,
                    Message::Records {
                        channel: target.channel,
                        batch,
                    },
                )?;
            }
        }
        Ok(())
    }

    fn send(&self, target: &ChannelSender, msg: Message) -> Result<(), TaskError> {
        let msg = match target.tx.try_send(msg) {
            Ok(()) => None,
            Err(mpsc::error::TrySendError::Full(msg)) => Some(msg),
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(TaskError::Aborted),
        };
        let sent = match msg {
            None => Ok(()),
            Some(msg) => {
                // The channel is full: wait for room, and count the wait as
                // backpressure.
                let waited = self.metrics.detailed.then(Instant::now);
                let sent = self.handle.block_on(async {
                    tokio::select! {
                        biased;
                        _ = self.abort.triggered() => Err(TaskError::Aborted),
                        r = target.tx.send(msg) => r.map_err(|_| TaskError::Aborted),
                    }
                });
                self.count_wait(waited, |v| &v.backpressured_ns, |c| &c.backpressured_ns);
                sent
            }
        };
        let queued = (target.tx.max_capacity() - target.tx.capacity()) as u64;
        self.metrics
            .max_queued_batches
            .fetch_max(queued, Ordering::Relaxed);
        sent
    }

    /// The earliest processing-time timer of the chain.
    fn next_processing_timer(&self) -> Option<i64> {
        self.operators
            .iter()
            .filter_map(|op| op.instance.next_processing_timer())
            .min()
    }

    /// Fires every processing-time timer of the chain that is due (Flink
    /// fires them between records, on the task's thread, as here).
    fn fire_processing_timers(&mut self) -> Result<(), TaskError> {
        let Some(next) = self.next_processing_timer() else {
            return Ok(());
        };
        let now = crate::connectors::now_millis();
        if next > now {
            return Ok(());
        }
        for i in 0..self.operators.len() {
            let emitted = self.operators[i].instance.fire_processing_timers(now)?;
            for e in emitted {
                self.route(i, e)?;
            }
        }
        Ok(())
    }

    /// Receives the next message, or `None` once `timeout` (if any) passed.
    /// Time spent waiting counts as idle.
    fn recv_until(
        &self,
        rx: &mut mpsc::Receiver<Message>,
        timeout: Option<Duration>,
    ) -> Result<Option<Message>, TaskError> {
        if self.abort.is_set() {
            return Err(TaskError::Aborted);
        }
        match rx.try_recv() {
            Ok(m) => {
                self.note_queue(rx);
                return Ok(Some(m));
            }
            Err(mpsc::error::TryRecvError::Disconnected) => return Err(TaskError::Aborted),
            Err(mpsc::error::TryRecvError::Empty) if timeout.is_some_and(|t| t.is_zero()) => {
                return Ok(None);
            }
            Err(mpsc::error::TryRecvError::Empty) => {}
        }
        // Nothing queued: wait, and count the wait as idle time.
        let waited = self.metrics.detailed.then(Instant::now);
        let got = self.handle.block_on(async {
            let timeout = async {
                match timeout {
                    Some(t) => tokio::time::sleep(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = self.abort.triggered() => Err(TaskError::Aborted),
                m = rx.recv() => m.map(Some).ok_or(TaskError::Aborted),
                _ = timeout => Ok(None),
            }
        });
        self.count_wait(waited, |v| &v.idle_ns, |c| &c.idle_ns);
        self.note_queue(rx);
        got
    }

    /// Adds the time since `started` (`None`: not timed, without
    /// `job.metrics`) to the head vertex's counter `vertex` and to this
    /// subtask's counter `subtask` of it.
    fn count_wait(
        &self,
        started: Option<Instant>,
        vertex: fn(&VertexMetrics) -> &AtomicU64,
        subtask: fn(&SubtaskMetrics) -> &AtomicU64,
    ) {
        let Some(started) = started else {
            return;
        };
        let ns = started.elapsed().as_nanos() as u64;
        vertex(&self.metrics.vertices[self.head_vertex]).fetch_add(ns, Ordering::Relaxed);
        if let Some(c) = self.counters(self.head_vertex) {
            subtask(c).fetch_add(ns, Ordering::Relaxed);
        }
    }

    /// Samples operator `i`'s state size into its vertex's metrics (if it
    /// has keyed state).
    fn sample_state(&mut self, i: usize) {
        let op = &mut self.operators[i];
        op.state_sampled = Some(Instant::now());
        if let Some(size) = op.instance.state_size() {
            self.metrics.vertices[op.vertex].set_state(self.index, size);
        }
    }

    /// Remembers how full the input queue is, for `/metrics` (the head's
    /// counters; none without `job.metrics`).
    fn note_queue(&self, rx: &mpsc::Receiver<Message>) {
        if let Some(c) = self.counters(self.head_vertex) {
            c.input_queued.store(rx.len() as u64, Ordering::Relaxed);
            c.input_capacity
                .store(rx.max_capacity() as u64, Ordering::Relaxed);
        }
    }

    fn recv(&self, rx: &mut mpsc::Receiver<Message>) -> Result<Message, TaskError> {
        loop {
            if let Some(message) = self.recv_until(rx, None)? {
                return Ok(message);
            }
        }
    }
}

#[cfg(test)]
mod latency_tests {
    use super::*;

    #[test]
    fn latency_quantiles_are_nearest_rank_and_none_without_samples() {
        assert_eq!(LatencyQuantiles::of(&[]), None);
        let one = LatencyQuantiles::of(&[7]).unwrap();
        assert_eq!((one.p50, one.p99, one.max, one.samples), (7, 7, 7, 1));
        // 1..=100 shuffled: the q-th quantile by nearest rank is 100 q.
        let samples: Vec<u32> = (1..=100).map(|i| (i * 37) % 100 + 1).collect();
        let q = LatencyQuantiles::of(&samples).unwrap();
        assert_eq!(
            (q.p50, q.p95, q.p99, q.max, q.samples),
            (50, 95, 99, 100, 100)
        );
    }

    #[test]
    fn a_subtask_keeps_the_latest_latencies_only() {
        let m = SubtaskMetrics::default();
        for i in 0..(LATENCY_HISTORY as i64 + 10) {
            m.record_latency(1_000, 1_000 + i);
        }
        // A clock that stepped back counts as no latency.
        m.record_latency(2_000, 1_000);
        let samples = m.latency_samples();
        assert_eq!(samples.len(), LATENCY_HISTORY);
        assert_eq!(samples[0], 11);
        assert_eq!(samples[LATENCY_HISTORY - 1], 0);
    }
}
