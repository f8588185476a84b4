//! The JobManager: TaskManager registry and heartbeats, the slot pool, job
//! scheduling and lifecycle, the module store, and the REST API.
//!
//! # Pieces
//!
//! - [`modules`]: the content-addressed module store on disk.
//! - [`job`]: the job lifecycle: [`JobState`] and its one table of legal
//!   moves (pure, unit-tested).
//! - [`scheduler`]: placing subtasks into slots (pure).
//! - [`rest`]: the axum router (thin: parses, calls [`JobManager`], maps
//!   errors), its HTTP server with timeouts, and [`rest::auth`]: the token
//!   (generated into the data dir by default) and the `Host` allow-list.
//! - `storage_io`: the checkpoint storage commands the JobManager decides
//!   under its lock and runs off it, one queue per job.
//! - this file: [`JobManager`], the state behind one mutex, and the RPC
//!   server TaskManagers connect to ([`weir_runtime::rpc`] protocol over QUIC with
//!   mutual TLS).
//!
//! # Lifecycle of a job
//!
//! `submit` validates the spec, refuses file sources and sinks outside the
//! allowed roots ([`JobManagerConfig::allowed_roots`]; paths must be
//! absolute), resolves every module to its content hash,
//! loads each one (compile, or take from the cache) to check it against its
//! place in the graph, places the subtasks ([`scheduler::place`]), reserves
//! the slots and sends a [`Deployment`] to every TaskManager involved. The
//! job is then `running`. TaskManagers report every subtask's state; when
//! all are finished the job is `finished` — with checkpoints, first
//! `finishing` until every TaskManager confirms the sinks' final commits
//! ([`ToJobManager::Committed`]); one lost meanwhile restarts the job. The first failure (or a lost
//! TaskManager) makes it `failing`: every TaskManager is told to cancel, and
//! once every subtask has stopped the job is `failed` with the root cause.
//! `cancel` does the same and ends in `canceled` (also while the job fails
//! or waits to restart; not while it is `finishing`). Every state change
//! goes through [`JobState::on`]. Slots are released when
//! the job ends. A failed job whose restart strategy allows it is
//! `restarting`: after the delay it is placed and deployed again, restoring
//! the latest completed checkpoint it can (`[job.checkpoints]`, driven by
//! [`weir_runtime::checkpoint::coordinator`]): one a TaskManager reports it could
//! not restore ([`ToJobManager::RestoreFailed`]: a file missing or not
//! matching its size or hash, the `_metadata` missing or not matching what
//! it was sent) is passed over for the one before.
//!
//! # Checkpoint storage, off the lock
//!
//! Checkpoint storage ([`CoreConfig::checkpoint_storage`], a directory by
//! default) may be slow (NFS, an object store), so no storage I/O happens
//! under the state lock. Under it the JobManager decides what to write and
//! delete: a completed checkpoint's `_metadata`, the files of the
//! checkpoints it subsumes (which the [`SharedStateRegistry`] says no
//! retained checkpoint references), an aborted checkpoint's uploads, the
//! sweep before a restart. These commands join the job's queue; a drain
//! task per job runs them in that order on the blocking pool, then records
//! under the lock what they did (or, with [`StorageIo::Stepped`], the
//! caller runs them: the simulation in `sim` makes storage slow that way).
//! A slow store delays only its own job's storage work; the REST API,
//! other jobs and TaskManager messages go on.
//! The order that matters is kept:
//!
//! - a checkpoint's metadata is written before the checkpoints it subsumes
//!   are deleted (one queue per job, in the coordinator's order);
//! - `latest` in [`CheckpointsView`] is a checkpoint whose metadata is in
//!   storage; TaskManagers are told a checkpoint completed at once (why:
//!   `checkpoint_actions`);
//! - a restart deploys only after the sweep of the job's shared folder has
//!   run, which is after every command queued before it: the checkpoint it
//!   restores from has its metadata, and the new attempt cannot upload a
//!   file the sweep would take for an orphan;
//! - [`JobManager::wait_until_ended`] returns once the ended job's storage
//!   work has run too.
//!
//! # Core and shells
//!
//! [`JobManager::new`] is the core: no sockets. [`start`] wraps it for the
//! `weir jobmanager` daemon (QUIC endpoint for TaskManagers, REST server);
//! `weir_host::embedded` attaches an in-process TaskManager to it
//! ([`JobManager::attach`]) for `weir run`. Both run the same job code.
//!
//! # Liveness
//!
//! A TaskManager sends a heartbeat every `heartbeat_interval`; one not heard
//! from for `heartbeat_timeout` (or whose connection closed) is declared
//! lost: its slots leave the pool and its jobs fail, naming it.
//!
//! A TaskManager registers only under the id its certificate names
//! ([`weir_runtime::net::tls::peer_role`]); its acks, declines and task states
//! count only for subtasks placed on it, and an ack naming storage paths
//! outside the job's own folders is refused (nothing it names is deleted).
//!
//! Jobs and registrations live in memory; a restarted JobManager keeps its
//! modules (on disk) and TaskManagers register again by themselves.
//!
//! This module must not run operators: TaskManagers do.

pub use weir_runtime::modules;
pub mod job;
pub mod rest;
pub mod restart;
pub mod scheduler;
#[cfg(test)]
mod sim;
mod storage_io;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use weir_runtime::checkpoint::coordinator::{
    Action, CheckpointStats, CompletedCheckpoint, Coordinator, RestoreRecord,
};
use weir_runtime::checkpoint::snapshot::{CheckpointMetadata, metadata_path};
use weir_runtime::checkpoint::{CheckpointStorage, DirStorage, SharedStateRegistry, StoragePath};
use weir_runtime::connectors::AllowedRoots;
use weir_runtime::job::{JobGraph, JobSpec, ModuleRef, TaskSpec, VertexKind, chain};
use weir_runtime::local::{LoadedModules, LocalCluster};
use weir_runtime::net::NetStats;
use weir_runtime::net::tls::{NodeIdentity, Role, peer_role};
use weir_runtime::rpc::{
    CheckpointDeploy, Deployment, FetchModule, JobReport, ModuleHeader, RestorePoint, SlotRef,
    SubtaskCheckpoint, TaskState, ToJobManager, ToTaskManager, read_frame, write_frame,
};
use weir_runtime::wasm::Runtime;

use modules::{ModuleInfo, ModuleStore, StoreError};
use rest::auth::{AuthError, RestAuth};

use job::Event;
pub use job::JobState;
pub use weir_runtime::rpc::InProcessLink;
pub use weir_runtime::start::StartError;

impl From<AuthError> for StartError {
    fn from(e: AuthError) -> Self {
        StartError::RestAuth(e.to_string())
    }
}
use restart::Restarts;
use scheduler::Strategy;
use storage_io::{Outcome, StorageCommand, StorageQueue};

/// A checked job: its graph (modules by hash), the hashes, and the loaded
/// modules.
type Prepared = (JobGraph, HashSet<String>, LoadedModules);

/// Settings of `weir jobmanager`.
#[derive(Debug, Clone)]
pub struct JobManagerConfig {
    /// Where TaskManagers connect (QUIC).
    pub rpc: SocketAddr,
    /// Where the REST API listens (HTTP).
    pub rest: SocketAddr,
    /// Module store and compiled-component cache live here.
    pub data_dir: PathBuf,
    /// The JobManager's certificate, key and cluster CA.
    pub identity: NodeIdentity,
    /// How often TaskManagers send heartbeats.
    pub heartbeat_interval: Duration,
    /// How long without a heartbeat before a TaskManager is lost.
    pub heartbeat_timeout: Duration,
    /// How slots are chosen.
    pub scheduling: Strategy,
    /// Largest module upload, in bytes.
    pub max_module_bytes: usize,
    /// How REST requests are authenticated: by default with a token
    /// generated into `<data_dir>/rest-token` (see [`rest::auth`]).
    pub rest_auth: RestAuth,
    /// How long a REST client may stall while sending a request's header
    /// or body.
    pub rest_read_timeout: Duration,
    /// Checkpoint storage root, a directory every daemon can reach
    /// (default: `<data_dir>/checkpoints`).
    pub checkpoint_dir: Option<PathBuf>,
    /// Where jobs' file sources and sinks may be (`--allow-path`); none by
    /// default. A job naming a file elsewhere is refused at submit (and its
    /// TaskManagers check again with their own roots).
    pub allowed_roots: AllowedRoots,
}

impl JobManagerConfig {
    /// Defaults for everything but addresses, data dir and identity.
    pub fn new(
        rpc: SocketAddr,
        rest: SocketAddr,
        data_dir: PathBuf,
        identity: NodeIdentity,
    ) -> Self {
        JobManagerConfig {
            rpc,
            rest,
            data_dir,
            identity,
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            heartbeat_timeout: DEFAULT_HEARTBEAT_TIMEOUT,
            scheduling: Strategy::Spread,
            max_module_bytes: DEFAULT_MAX_MODULE_MB << 20,
            rest_auth: RestAuth::Generated,
            rest_read_timeout: rest::DEFAULT_READ_TIMEOUT,
            checkpoint_dir: None,
            allowed_roots: AllowedRoots::none(),
        }
    }
}

impl JobManagerConfig {
    /// What the JobManager's core takes of these settings.
    pub fn core(&self) -> CoreConfig {
        CoreConfig {
            data_dir: self.data_dir.clone(),
            heartbeat_interval: self.heartbeat_interval,
            heartbeat_timeout: self.heartbeat_timeout,
            scheduling: self.scheduling,
            max_module_bytes: self.max_module_bytes,
            checkpoint_dir: self.checkpoint_dir.clone(),
            checkpoint_storage: None,
            allowed_roots: self.allowed_roots.clone(),
            clock: Clock::Real,
            storage_io: StorageIo::Background,
        }
    }
}

/// The settings of a JobManager's core ([`JobManager::new`]): everything
/// but its sockets and identity.
#[derive(Debug, Clone)]
pub struct CoreConfig {
    /// Its work directory (module checks) and default checkpoint root.
    pub data_dir: PathBuf,
    /// How often TaskManagers send heartbeats.
    pub heartbeat_interval: Duration,
    /// How long without a heartbeat before a TaskManager is lost.
    pub heartbeat_timeout: Duration,
    /// How slots are chosen.
    pub scheduling: Strategy,
    /// Largest module upload, in bytes.
    pub max_module_bytes: usize,
    /// Checkpoint storage root (default: `<data_dir>/checkpoints`).
    pub checkpoint_dir: Option<PathBuf>,
    /// What the JobManager reads and writes checkpoint files through
    /// (checkpoint metadata, deletes of discarded checkpoints); `None`: a
    /// [`DirStorage`] at the checkpoint root. TaskManagers keep using a
    /// [`DirStorage`] at the root, so this must show the same files: a
    /// wrapper of one (instrumented, slowed down, as in tests), not a
    /// different store.
    pub checkpoint_storage: Option<Arc<dyn CheckpointStorage>>,
    /// Where jobs' file sources and sinks may be.
    pub allowed_roots: AllowedRoots,
    /// Its clock.
    pub clock: Clock,
    /// Who runs its checkpoint storage commands.
    pub storage_io: StorageIo,
}

/// Who runs the JobManager's checkpoint storage commands (see the module
/// docs: decided under the state lock, run off it, in order per job).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StorageIo {
    /// A drain task per job, on the runtime's blocking pool.
    #[default]
    Background,
    /// The caller, with [`JobManager::run_storage`]: a simulation steps
    /// storage as it steps its [`Clock`], and can make it slow. Nothing
    /// else runs them ([`JobManager::wait_until_ended`] waits for them).
    Stepped,
}

/// The JobManager's clock: the real one, or one a test moves
/// ([`Clock::simulated`]) so that heartbeat timeouts, checkpoint intervals
/// and restart delays run on simulated time.
#[derive(Debug, Clone, Default)]
pub enum Clock {
    /// `Instant::now()`.
    #[default]
    Real,
    /// Whatever the test last set.
    Simulated(Arc<Mutex<Instant>>),
}

impl Clock {
    /// A simulated clock starting now, and its hand.
    pub fn simulated() -> (Clock, Arc<Mutex<Instant>>) {
        let hand = Arc::new(Mutex::new(Instant::now()));
        (Clock::Simulated(hand.clone()), hand)
    }

    /// The time.
    pub fn now(&self) -> Instant {
        match self {
            Clock::Real => Instant::now(),
            Clock::Simulated(hand) => *hand.lock().unwrap_or_else(|p| p.into_inner()),
        }
    }
}

/// Default heartbeat interval.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);
/// Default heartbeat timeout: ten missed heartbeats (Flink uses 50 s for
/// slower, larger clusters; a lost machine here should fail its jobs fast).
pub const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default upload limit, in MiB (a Python component is ~20 MiB).
pub const DEFAULT_MAX_MODULE_MB: usize = 256;

/// An error for an API caller: an HTTP status and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status code.
    pub status: u16,
    /// What is wrong, for a human.
    pub message: String,
}

impl ApiError {
    /// 400.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError {
            status: 400,
            message: message.into(),
        }
    }
    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError {
            status: 404,
            message: message.into(),
        }
    }
    /// 409.
    pub fn conflict(message: impl Into<String>) -> Self {
        ApiError {
            status: 409,
            message: message.into(),
        }
    }
    /// 500.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError {
            status: 500,
            message: message.into(),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        ApiError {
            status: e.http_status(),
            message: e.to_string(),
        }
    }
}

/// Whether a job spec can refer to a module named `name` (`name@version`):
/// the spec's id rule, stricter than the store's.
fn check_spec_name(name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= weir_runtime::job::MAX_ID_LEN
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "bad module name `{name}`: expected [a-z0-9][a-z0-9_-]*, at most {} bytes, \
             so that a job spec can name it as \"name@version\"",
            weir_runtime::job::MAX_ID_LEN
        )))
    }
}

/// `GET /v1/jobs` entry.
#[derive(Debug, Clone, Serialize)]
pub struct JobSummary {
    /// Job id.
    pub id: String,
    /// `job.name`.
    pub name: String,
    /// Current state.
    pub state: JobState,
    /// Submission time, Unix ms.
    pub submitted_at_ms: u64,
    /// End time, Unix ms.
    pub ended_at_ms: Option<u64>,
    /// Root cause of a failure.
    pub failure: Option<String>,
}

/// `GET /v1/jobs/{id}`.
#[derive(Debug, Clone, Serialize)]
pub struct JobDetail {
    /// The summary fields.
    #[serde(flatten)]
    pub summary: JobSummary,
    /// Per vertex, in graph order.
    pub vertices: Vec<VertexDetail>,
    /// Tasks after chaining.
    pub tasks: u32,
    /// The deployment attempt (0, then one more per restart); the
    /// counters are the latest attempt's.
    pub attempt: u32,
    /// Most batches seen queued in one channel (latest attempt).
    pub max_queued_batches: u64,
}

/// One vertex of a [`JobDetail`].
#[derive(Debug, Clone, Serialize)]
pub struct VertexDetail {
    /// The uid.
    pub id: String,
    /// `source`, `operator` or `sink`.
    pub role: &'static str,
    /// Parallelism.
    pub parallelism: u32,
    /// Aggregate state of its subtasks.
    pub state: &'static str,
    /// Records received, over all subtasks.
    pub records_in: u64,
    /// Records emitted, over all subtasks.
    pub records_out: u64,
    /// Time its task's subtasks spent working, summed.
    pub busy_ms: u64,
    /// Time they spent blocked on full output channels.
    pub backpressured_ms: u64,
    /// Time they spent waiting for input.
    pub idle_ms: u64,
    /// Where each subtask runs.
    pub subtasks: Vec<SubtaskDetail>,
}

/// One subtask of a [`VertexDetail`].
#[derive(Debug, Clone, Serialize)]
pub struct SubtaskDetail {
    /// Subtask index.
    pub index: u32,
    /// The TaskManager it runs on.
    pub taskmanager: String,
    /// Its state.
    pub state: TaskState,
}

/// `GET /v1/jobs/{id}/checkpoints`.
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointsView {
    /// Whether the job takes checkpoints.
    pub enabled: bool,
    /// The newest retained checkpoint whose metadata
    /// (`<job>/chk-<n>/_metadata`) is in storage. A checkpoint every
    /// subtask acked shows as `completed` in `history` a little earlier,
    /// while its metadata is being written.
    pub latest: Option<u64>,
    /// Newest first: pending, completed and aborted checkpoints.
    pub history: Vec<CheckpointStats>,
    /// Every restart, with the checkpoint it restored from.
    pub restores: Vec<RestoreRecord>,
}

/// `POST /v1/jobs` answer.
#[derive(Debug, Clone, Serialize)]
pub struct JobCreated {
    /// The new job's id.
    pub id: String,
    /// `job.name`.
    pub name: String,
}

/// `GET /v1/taskmanagers` entry.
#[derive(Debug, Clone, Serialize)]
pub struct TaskManagerInfo {
    /// Its id.
    pub id: String,
    /// Its data-plane address.
    pub data_address: String,
    /// Slots it offers.
    pub slots_total: u32,
    /// Slots no job uses.
    pub slots_free: u32,
    /// `active` or `lost`.
    pub state: &'static str,
    /// Why it was lost.
    pub lost_reason: Option<String>,
    /// Registration time, Unix ms.
    pub registered_at_ms: u64,
    /// Milliseconds since its last heartbeat.
    pub last_heartbeat_ms_ago: u64,
    /// Its data plane's counters.
    pub net: NetStats,
}

/// `GET /v1/overview`.
#[derive(Debug, Clone, Serialize)]
pub struct Overview {
    /// Weir's version.
    pub version: &'static str,
    /// Active TaskManagers.
    pub taskmanagers: u32,
    /// Slots of active TaskManagers.
    pub slots_total: u32,
    /// Of which free.
    pub slots_free: u32,
    /// Jobs by state.
    pub jobs: JobCounts,
    /// Entries in the module store.
    pub modules: u32,
}

/// Jobs by state, for [`Overview`].
#[derive(Debug, Clone, Default, Serialize)]
pub struct JobCounts {
    /// Running, failing or canceling.
    pub running: u32,
    /// Finished.
    pub finished: u32,
    /// Failed.
    pub failed: u32,
    /// Canceled.
    pub canceled: u32,
}

struct Tm {
    data_address: SocketAddr,
    slots_total: u32,
    /// Occupied slot → job id.
    occupied: BTreeMap<u32, String>,
    lost: Option<String>,
    registered_at_ms: u64,
    last_heartbeat: Instant,
    net: NetStats,
    tx: mpsc::UnboundedSender<ToTaskManager>,
    /// Distinguishes a TaskManager's successive connections.
    session: u64,
}

struct Job {
    id: String,
    name: String,
    graph: JobGraph,
    tasks: Vec<TaskSpec>,
    placement: Vec<Vec<SlotRef>>,
    subtasks: Vec<Vec<TaskState>>,
    state: JobState,
    failure: Option<String>,
    /// Whether `failure` is a root cause (not just "aborted").
    failure_is_root: bool,
    submitted_at_ms: u64,
    ended_at_ms: Option<u64>,
    /// Module hashes it uses.
    modules: HashSet<String>,
    /// Latest metrics per TaskManager.
    reports: HashMap<String, JobReport>,
    /// Deployment attempt (0, then +1 per restart).
    attempt: u32,
    /// Restart strategy and history.
    restarts: Restarts,
    /// When a `restarting` job is due to be deployed again.
    restart_at: Option<Instant>,
    /// Set when the job takes checkpoints.
    checkpoints: Option<JobCheckpoints>,
    /// Coordinator actions to carry out at the next tick.
    deferred: Vec<Action<SubtaskCheckpoint>>,
    /// While `finishing`: the TaskManagers whose final commits are not
    /// confirmed yet.
    committing: BTreeSet<String>,
    /// Checkpoint storage commands decided, not yet run ([`storage_io`]).
    storage: StorageQueue,
    /// The sweep of the shared folder before the next attempt.
    sweep: Option<Sweep>,
}

/// Where the sweep before a restart stands: requested or done, for the
/// attempt it prepares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sweep {
    Requested(u32),
    Done(u32),
}

/// A job's checkpoint coordinator and the shared files its checkpoints use.
struct JobCheckpoints {
    coordinator: Coordinator<SubtaskCheckpoint>,
    registry: SharedStateRegistry,
    /// Retained checkpoints a TaskManager could not restore (a file missing
    /// or corrupt in storage, its `_metadata` missing or not matching):
    /// restarts pass over them to an older one.
    unrestorable: BTreeSet<u64>,
    /// Retained checkpoints whose metadata is in storage.
    stored: BTreeSet<u64>,
}

impl JobCheckpoints {
    /// The checkpoint a restart restores from: the newest retained one not
    /// known to be unrestorable; with the newer ones passed over, newest
    /// first.
    fn restore_point(&self) -> (Option<&CompletedCheckpoint<SubtaskCheckpoint>>, Vec<u64>) {
        let mut skipped = Vec::new();
        for c in self.coordinator.retained().rev() {
            if self.unrestorable.contains(&c.id) {
                skipped.push(c.id);
            } else {
                return (Some(c), skipped);
            }
        }
        (None, skipped)
    }
}

impl Job {
    /// Records what a storage command of the job did ([`JobManager::drain`]).
    fn record(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::MetadataStored(id) => {
                if let Some(c) = self.checkpoints.as_mut()
                    && c.coordinator.retained().any(|r| r.id == id)
                {
                    c.stored.insert(id);
                }
            }
            Outcome::Swept(attempt) => {
                if self.sweep == Some(Sweep::Requested(attempt)) {
                    self.sweep = Some(Sweep::Done(attempt));
                }
            }
            Outcome::Nothing => {}
        }
    }

    /// Whether subtask (`task`, `subtask`) runs on TaskManager `tm`: a
    /// TaskManager reports only on its own subtasks.
    fn placed_on(&self, task: u32, subtask: u32, tm: &str) -> bool {
        self.placement
            .get(task as usize)
            .and_then(|slots| slots.get(subtask as usize))
            .is_some_and(|slot| slot.taskmanager == tm)
    }

    fn taskmanagers(&self) -> HashSet<&str> {
        self.placement
            .iter()
            .flatten()
            .map(|s| s.taskmanager.as_str())
            .collect()
    }

    fn subtask_name(&self, task: usize, subtask: u32) -> String {
        format!(
            "{} ({}/{})",
            self.tasks[task].id.as_str(),
            subtask + 1,
            self.tasks[task].parallelism
        )
    }

    fn summary(&self) -> JobSummary {
        JobSummary {
            id: self.id.clone(),
            name: self.name.clone(),
            state: self.state,
            submitted_at_ms: self.submitted_at_ms,
            ended_at_ms: self.ended_at_ms,
            failure: self.failure.clone(),
        }
    }
}

#[derive(Default)]
struct State {
    taskmanagers: BTreeMap<String, Tm>,
    jobs: BTreeMap<String, Job>,
}

/// The JobManager's state and operations; the RPC server and the REST API
/// call into it.
pub struct JobManager {
    state: Mutex<State>,
    store: ModuleStore,
    runtime: Arc<Runtime>,
    checker: LocalCluster,
    heartbeat_interval: Duration,
    heartbeat_timeout: Duration,
    scheduling: Strategy,
    max_module_bytes: usize,
    checkpoint_root: PathBuf,
    /// Used only by drain tasks, off the state lock ([`storage_io`]).
    storage: Arc<dyn CheckpointStorage>,
    /// Bumped after anything may have changed a job.
    changes: tokio::sync::watch::Sender<u64>,
    clock: Clock,
    /// Who runs storage commands.
    storage_io: StorageIo,
    /// Itself, for the drain tasks it starts under the state lock.
    me: Weak<JobManager>,
    /// The runtime its drain tasks and their blocking I/O run on.
    handle: tokio::runtime::Handle,
}

impl std::fmt::Debug for JobManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobManager").finish_non_exhaustive()
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A random 64-bit value (std's per-process random hasher keys, no extra crate).
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

impl JobManager {
    /// The JobManager's core: no sockets, no clock running yet
    /// ([`JobManager::spawn_clock`]). TaskManagers reach it over QUIC
    /// ([`start`]) or in-process ([`JobManager::attach`]).
    pub fn new(config: CoreConfig, runtime: Arc<Runtime>, store: ModuleStore) -> Arc<JobManager> {
        let checkpoint_root = config
            .checkpoint_dir
            .clone()
            .unwrap_or_else(|| config.data_dir.join("checkpoints"));
        Arc::new_cyclic(|me| JobManager {
            state: Mutex::new(State::default()),
            store,
            checker: LocalCluster::new(runtime.clone(), tokio::runtime::Handle::current())
                .with_allowed_roots(config.allowed_roots),
            runtime,
            heartbeat_interval: config.heartbeat_interval,
            heartbeat_timeout: config.heartbeat_timeout,
            scheduling: config.scheduling,
            max_module_bytes: config.max_module_bytes,
            storage: config
                .checkpoint_storage
                .unwrap_or_else(|| Arc::new(DirStorage::new(checkpoint_root.clone()))),
            checkpoint_root,
            changes: tokio::sync::watch::Sender::new(0),
            clock: config.clock,
            storage_io: config.storage_io,
            me: me.clone(),
            handle: tokio::runtime::Handle::current(),
        })
    }

    /// Starts the clock that checks heartbeats and drives checkpoints and
    /// restarts (at most 50 ms late), on the current tokio runtime.
    pub fn spawn_clock(self: Arc<Self>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            loop {
                tick.tick().await;
                self.tick();
            }
        })
    }

    /// Registers an in-process TaskManager (the embedded cluster): no
    /// network, no certificate. The TaskManager reads what the JobManager
    /// says from the returned receiver and answers into the sender; when it
    /// drops the sender, it is lost.
    pub fn attach(self: &Arc<Self>, id: &str, slots: u32) -> InProcessLink {
        let (session, from_jobmanager) = self.register_in_process(id, slots);
        let (to_jobmanager, mut rx) = mpsc::unbounded_channel::<ToJobManager>();
        let jm = self.clone();
        let id = id.to_owned();
        let forwarder = tokio::spawn(async move {
            while let Some(message) = rx.recv().await {
                jm.on_message(&id, session, message);
            }
            jm.lose_if_current(&id, session, "the in-process TaskManager stopped".into());
        });
        InProcessLink {
            from_jobmanager,
            to_jobmanager,
            heartbeat_interval: self.heartbeat_interval,
            forwarder: forwarder.abort_handle(),
        }
    }

    /// Wakes whoever waits for a job to change ([`JobManager::wait_until_ended`]).
    /// Called after the state lock is released.
    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Waits until job `id` has ended and the checkpoint storage work it
    /// left has run (metadata written, discarded checkpoints deleted);
    /// returns it then.
    pub async fn wait_until_ended(&self, id: &str) -> Result<JobDetail, ApiError> {
        // Subscribed before the first look: no change is missed.
        let mut changes = self.changes.subscribe();
        loop {
            let (job, settled) = {
                let state = self.lock();
                let settled = state
                    .jobs
                    .get(id)
                    .is_some_and(|j| j.deferred.is_empty() && j.storage.is_idle());
                (job_detail(&state, id)?, settled)
            };
            if job.summary.state.is_terminal() && settled {
                return Ok(job);
            }
            if changes.changed().await.is_err() {
                return Err(ApiError::internal("the JobManager stopped"));
            }
        }
    }

    /// Registers a TaskManager without a network (no data plane: its
    /// channels stay in memory); returns its session and what the
    /// JobManager tells it. Its messages go to [`JobManager::deliver`].
    pub fn register_in_process(
        &self,
        id: &str,
        slots: u32,
    ) -> (u64, mpsc::UnboundedReceiver<ToTaskManager>) {
        let session = random_u64();
        let (tx, rx) = mpsc::unbounded_channel::<ToTaskManager>();
        let nowhere = SocketAddr::from(([0, 0, 0, 0], 0));
        self.register(id, slots, nowhere, tx, session);
        self.changed();
        (session, rx)
    }

    /// A message of TaskManager `id` in session `session` (ignored unless
    /// that is its current, live session).
    pub fn deliver(&self, id: &str, session: u64, message: ToJobManager) {
        self.on_message(id, session, message);
    }

    /// TaskManager `id`'s session `session` ended (its connection closed):
    /// it is lost, with its jobs' subtasks.
    pub fn disconnect(&self, id: &str, session: u64, reason: &str) {
        self.lose_if_current(id, session, reason.to_owned());
    }

    /// One tick of the clock: heartbeat check, checkpoint triggers and
    /// timeouts, due restarts. [`JobManager::spawn_clock`] calls it every
    /// 50 ms; a simulation calls it after moving its [`Clock`].
    pub fn tick(&self) {
        self.check_heartbeats();
        self.tick_jobs();
        self.changed();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock is a bug; keep serving the rest.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a storage command of `job`, to run after those queued before
    /// it, and starts the job's drain task if none runs. Called under the
    /// state lock: it does no I/O.
    fn enqueue(&self, job: &mut Job, command: StorageCommand) {
        if job.storage.push(command)
            && self.storage_io == StorageIo::Background
            && let Some(jm) = self.me.upgrade()
        {
            self.handle.spawn(jm.drain(job.id.clone()));
        }
    }

    /// Job `id`'s drain task: runs its storage commands in order on the
    /// blocking pool, without the state lock, and records what they did,
    /// until none is left.
    async fn drain(self: Arc<Self>, id: String) {
        let mut batch = self.take_storage(&id);
        while let Some(commands) = batch {
            let storage = self.storage.clone();
            let job = id.clone();
            let outcomes = self
                .handle
                .spawn_blocking(move || {
                    commands
                        .into_iter()
                        .map(|c| storage_io::run(&job, c, storage.as_ref()))
                        .collect::<Vec<_>>()
                })
                .await
                .unwrap_or_default();
            batch = self.record_storage(&id, outcomes);
            self.changed();
        }
    }

    /// Runs every queued storage command on this thread, in order per job,
    /// without the state lock ([`StorageIo::Stepped`]); returns how many
    /// ran.
    pub fn run_storage(&self) -> usize {
        let mut ran = 0;
        let busy: Vec<String> = self
            .lock()
            .jobs
            .values()
            .filter(|j| !j.storage.is_idle())
            .map(|j| j.id.clone())
            .collect();
        for id in busy {
            let mut batch = self.take_storage(&id);
            while let Some(commands) = batch {
                ran += commands.len();
                let outcomes = commands
                    .into_iter()
                    .map(|c| storage_io::run(&id, c, self.storage.as_ref()))
                    .collect();
                batch = self.record_storage(&id, outcomes);
            }
        }
        self.changed();
        ran
    }

    /// Takes job `id`'s queued storage commands; `None` (and the queue
    /// idle) when there are none.
    fn take_storage(&self, id: &str) -> Option<Vec<StorageCommand>> {
        self.lock().jobs.get_mut(id).and_then(|j| j.storage.take())
    }

    /// Records what job `id`'s storage commands did; takes the commands
    /// queued meanwhile.
    fn record_storage(&self, id: &str, outcomes: Vec<Outcome>) -> Option<Vec<StorageCommand>> {
        let mut state = self.lock();
        let job = state.jobs.get_mut(id)?;
        for outcome in outcomes {
            job.record(outcome);
        }
        job.storage.take()
    }

    /// The module store.
    pub fn store(&self) -> &ModuleStore {
        &self.store
    }

    /// The largest module upload, in bytes.
    pub fn max_module_bytes(&self) -> usize {
        self.max_module_bytes
    }

    // ---- modules ----------------------------------------------------------

    /// Validates `bytes` as an operator component and stores it.
    pub async fn upload_module(
        self: &Arc<Self>,
        name: String,
        version: Option<String>,
        bytes: Vec<u8>,
    ) -> Result<(ModuleInfo, bool), ApiError> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            // Check the names first: compiling is the expensive part.
            check_spec_name(&name)?;
            if let Some(v) = &version {
                modules::check_name("version", v)?;
            }
            let module = this
                .runtime
                .load_bytes(&name, &bytes)
                .map_err(|e| ApiError::bad_request(format!("{name}: {}", e.message)))?;
            this.runtime
                .describe(&module)
                .map_err(|e| ApiError::bad_request(format!("{name}: {e}")))?;
            Ok(this.store.put(&bytes, &name, version.as_deref())?)
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
    }

    /// Deletes a module entry unless a job that has not ended uses it.
    pub fn delete_module(&self, reference: &str) -> Result<Vec<ModuleInfo>, ApiError> {
        let info = self.store.resolve(reference)?;
        let state = self.lock();
        // A bare hash deletes every entry with it; a name@version only that
        // one, but the blob goes with its last entry: refuse either way
        // while a live job needs the content.
        if let Some(job) = state
            .jobs
            .values()
            .find(|j| !j.state.is_terminal() && j.modules.contains(&info.hash))
        {
            return Err(ApiError::conflict(format!(
                "module {}@{} is used by job {} ({}), which is {}; cancel it first",
                info.name,
                info.version,
                job.id,
                job.name,
                serde_json::to_value(job.state)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            )));
        }
        Ok(self.store.delete(reference)?)
    }

    // ---- jobs -------------------------------------------------------------

    /// Validates, schedules and deploys a job.
    pub async fn submit(self: &Arc<Self>, spec: String) -> Result<JobCreated, ApiError> {
        let this = self.clone();
        let (graph, modules, _loaded) = tokio::task::spawn_blocking(move || this.prepare(&spec))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))??;
        self.admit(graph, modules)
    }

    /// Validates, schedules and deploys a job of the embedded cluster
    /// (`weir run`): its operators may name `.wasm` files, which are put
    /// into the module store by content. Returns the checked modules too:
    /// while the caller holds them, the TaskManager's load of the same
    /// bytes shares them ([`Runtime::load_bytes`]) instead of loading again.
    pub async fn submit_graph(
        self: &Arc<Self>,
        graph: JobGraph,
    ) -> Result<(JobCreated, LoadedModules), ApiError> {
        let this = self.clone();
        let (graph, modules, loaded) =
            tokio::task::spawn_blocking(move || this.prepare_graph(graph, true))
                .await
                .map_err(|e| ApiError::internal(e.to_string()))??;
        Ok((self.admit(graph, modules)?, loaded))
    }

    /// Admits a prepared job: reserves its slots and deploys it.
    fn admit(&self, graph: JobGraph, modules: HashSet<String>) -> Result<JobCreated, ApiError> {
        let tasks = chain(&graph);
        let mut state = self.lock();
        // A module deleted since `prepare` looked it up (deletion holds the
        // state lock too, so after this check it stays until the job ends).
        for hash in &modules {
            if !self.store.blob_path(hash).exists() {
                return Err(ApiError::conflict(format!(
                    "module {hash} was deleted while the job was being submitted; upload it again"
                )));
            }
        }
        let id = loop {
            let id = format!("{:016x}", random_u64());
            if !state.jobs.contains_key(&id) {
                break id;
            }
        };
        let now = self.clock.now();
        let checkpoints = graph.settings.checkpoints.clone().map(|config| {
            let subtasks = tasks
                .iter()
                .enumerate()
                .flat_map(|(t, spec)| (0..spec.parallelism).map(move |s| (t as u32, s)))
                .collect();
            JobCheckpoints {
                coordinator: Coordinator::new(config, subtasks, 1, now, now_ms()),
                registry: SharedStateRegistry::new(),
                unrestorable: BTreeSet::new(),
                stored: BTreeSet::new(),
            }
        });
        let mut job = Job {
            id: id.clone(),
            name: graph.name.clone(),
            subtasks: Vec::new(),
            restarts: Restarts::new(graph.settings.restart),
            tasks,
            placement: Vec::new(),
            graph,
            state: JobState::Running,
            failure: None,
            failure_is_root: false,
            submitted_at_ms: now_ms(),
            ended_at_ms: None,
            modules,
            reports: HashMap::new(),
            attempt: 0,
            restart_at: None,
            checkpoints,
            deferred: Vec::new(),
            committing: BTreeSet::new(),
            storage: StorageQueue::default(),
            sweep: None,
        };
        deploy(
            &mut state.taskmanagers,
            &mut job,
            self.scheduling,
            &self.checkpoint_root,
        )
        .map_err(|m| ApiError {
            status: 503,
            message: m,
        })?;
        tracing::info!(job = %id, name = %job.name, "submitted");
        let created = JobCreated {
            id: id.clone(),
            name: job.name.clone(),
        };
        state.jobs.insert(id, job);
        Ok(created)
    }

    /// Parses and checks a spec; resolves its modules to hashes.
    fn prepare(&self, spec: &str) -> Result<Prepared, ApiError> {
        // A submitted spec has no folder of its own: its file paths must be
        // absolute (`weir submit` makes them so), never resolved against
        // this daemon's working directory, which messages do not reveal.
        let origin = std::path::Path::new("/submitted-job.toml");
        let spec =
            JobSpec::parse(spec, origin, &[]).map_err(|e| ApiError::bad_request(e.to_string()))?;
        if let Some((field, path)) = spec.relative_file_paths().into_iter().next() {
            return Err(ApiError::bad_request(format!(
                "{field}: found the relative path {:?}; a job submitted to a cluster names \
                 its files by absolute path (`weir submit` makes the paths of a spec \
                 absolute, against the spec's folder)",
                path.display().to_string()
            )));
        }
        let graph = JobGraph::from_spec(spec).map_err(|e| ApiError::bad_request(e.to_string()))?;
        self.prepare_graph(graph, false)
    }

    /// Checks a job graph; resolves its modules to hashes (with
    /// `embedded`, a `.wasm` path is read and stored by content), and
    /// loads each one to check it against its place in the graph.
    fn prepare_graph(&self, mut graph: JobGraph, embedded: bool) -> Result<Prepared, ApiError> {
        // Refused here, before any TaskManager is involved: files outside
        // the allowed roots (or not regular files, where this host sees them).
        weir_runtime::local::check_file_connectors(&graph, self.checker.allowed_roots())
            .map_err(|m| ApiError::bad_request(format!("job `{}` refused: {m}", graph.name)))?;
        let mut hashes = HashSet::new();
        let mut local = graph.clone();
        for (v, vertex) in graph.vertices.iter_mut().enumerate() {
            let VertexKind::Operator(op) = &mut vertex.kind else {
                continue;
            };
            let reference = match &op.module {
                ModuleRef::Path(p) if embedded => {
                    let bytes = std::fs::read(p).map_err(|e| {
                        ApiError::bad_request(format!(
                            "operator `{}`: cannot read module {}: {e}",
                            vertex.id,
                            p.display()
                        ))
                    })?;
                    let hash = modules::sha256_ref(&bytes);
                    self.store.put_blob(&hash, &bytes)?;
                    // The check below loads it by its own path, so errors
                    // name the file the user wrote.
                    op.module = ModuleRef::Hash(hash.clone());
                    hashes.insert(hash);
                    continue;
                }
                ModuleRef::Path(p) => {
                    return Err(ApiError::bad_request(format!(
                        "operator `{}`: module {} is a file path; upload it first \
                         (`weir upload FILE --name N`) and refer to it as \"name@version\", \
                         or use `weir submit`, which uploads the files a spec names",
                        vertex.id,
                        p.display()
                    )));
                }
                other => other.to_string(),
            };
            let info = self.store.resolve(&reference).map_err(|e| match e {
                StoreError::NotFound(_) => ApiError::bad_request(format!(
                    "operator `{}`: unknown module `{reference}`; upload it with \
                     `weir upload FILE --name N --version V` (`weir modules` lists the uploaded ones)",
                    vertex.id
                )),
                other => ApiError::from(other),
            })?;
            op.module = ModuleRef::Hash(info.hash.clone());
            if let VertexKind::Operator(lop) = &mut local.vertices[v].kind {
                lop.module = ModuleRef::Path(self.store.blob_path(&info.hash));
            }
            hashes.insert(info.hash);
        }
        // Load every module (compiled cache) and check it against the graph,
        // so a bad job is refused here rather than failing on TaskManagers.
        let loaded = self
            .checker
            .load_modules(&local)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        Ok((graph, hashes, loaded))
    }

    /// Cancels a job.
    pub fn cancel(&self, id: &str) -> Result<JobSummary, ApiError> {
        let result = self.cancel_locked(id);
        self.changed();
        result
    }

    fn cancel_locked(&self, id: &str) -> Result<JobSummary, ApiError> {
        let mut state = self.lock();
        let State { taskmanagers, jobs } = &mut *state;
        let job = jobs
            .get_mut(id)
            .ok_or_else(|| ApiError::not_found(format!("no job with id {id:?}")))?;
        if job.state.is_terminal() {
            return Err(ApiError::conflict(format!(
                "job {id} ({}) already ended: {}",
                job.name,
                serde_json::to_value(job.state)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            )));
        }
        // Finishing: the final output is being published; the cancel is
        // refused by the lifecycle and the job finishes.
        if let Ok(next) = job.state.on(Event::Cancel) {
            match std::mem::replace(&mut job.state, next) {
                JobState::Running => send_cancel(taskmanagers, job),
                // Nothing runs: it settles at once.
                JobState::Restarting => job.restart_at = None,
                // Failing: its subtasks are being canceled already.
                _ => {}
            }
        }
        settle(taskmanagers, job, self.clock.now());
        Ok(job.summary())
    }

    /// Every job, newest first.
    pub fn jobs(&self) -> Vec<JobSummary> {
        let state = self.lock();
        let mut jobs: Vec<JobSummary> = state.jobs.values().map(Job::summary).collect();
        jobs.sort_by_key(|j| std::cmp::Reverse(j.submitted_at_ms));
        jobs
    }

    /// One job with per-vertex state and metrics.
    pub fn job(&self, id: &str) -> Result<JobDetail, ApiError> {
        job_detail(&self.lock(), id)
    }

    /// A job's checkpoint history and restores (`GET /v1/jobs/{id}/checkpoints`).
    pub fn checkpoints(&self, id: &str) -> Result<CheckpointsView, ApiError> {
        let state = self.lock();
        let job = state
            .jobs
            .get(id)
            .ok_or_else(|| ApiError::not_found(format!("no job with id {id:?}")))?;
        let Some(c) = &job.checkpoints else {
            return Ok(CheckpointsView {
                enabled: false,
                latest: None,
                history: Vec::new(),
                restores: Vec::new(),
            });
        };
        Ok(CheckpointsView {
            enabled: true,
            latest: c
                .coordinator
                .retained()
                .rev()
                .map(|r| r.id)
                .find(|id| c.stored.contains(id)),
            history: c.coordinator.history(),
            restores: c.coordinator.restores().to_vec(),
        })
    }

    /// Every TaskManager ever registered since start (lost ones too).
    pub fn taskmanagers(&self) -> Vec<TaskManagerInfo> {
        let state = self.lock();
        state
            .taskmanagers
            .iter()
            .map(|(id, tm)| TaskManagerInfo {
                id: id.clone(),
                data_address: tm.data_address.to_string(),
                slots_total: tm.slots_total,
                slots_free: tm.slots_total - tm.occupied.len() as u32,
                state: if tm.lost.is_some() { "lost" } else { "active" },
                lost_reason: tm.lost.clone(),
                registered_at_ms: tm.registered_at_ms,
                last_heartbeat_ms_ago: tm.last_heartbeat.elapsed().as_millis() as u64,
                net: tm.net.clone(),
            })
            .collect()
    }

    /// Cluster overview.
    pub fn overview(&self) -> Overview {
        let state = self.lock();
        let active = state.taskmanagers.values().filter(|t| t.lost.is_none());
        let (mut n, mut total, mut free) = (0, 0, 0);
        for tm in active {
            n += 1;
            total += tm.slots_total;
            free += tm.slots_total - tm.occupied.len() as u32;
        }
        let mut jobs = JobCounts::default();
        for job in state.jobs.values() {
            match job.state {
                JobState::Finished => jobs.finished += 1,
                JobState::Failed => jobs.failed += 1,
                JobState::Canceled => jobs.canceled += 1,
                _ => jobs.running += 1,
            }
        }
        Overview {
            version: env!("CARGO_PKG_VERSION"),
            taskmanagers: n,
            slots_total: total,
            slots_free: free,
            jobs,
            modules: self.store.list().len() as u32,
        }
    }

    // ---- TaskManagers -----------------------------------------------------

    fn register(
        &self,
        id: &str,
        slots: u32,
        data_address: SocketAddr,
        tx: mpsc::UnboundedSender<ToTaskManager>,
        session: u64,
    ) {
        let mut state = self.lock();
        if state
            .taskmanagers
            .get(id)
            .is_some_and(|tm| tm.lost.is_none())
        {
            // Same id, new connection: the old process is gone (restarted).
            lose(
                &mut state,
                id,
                "registered again (restarted)".to_owned(),
                self.clock.now(),
            );
        }
        state.taskmanagers.insert(
            id.to_owned(),
            Tm {
                data_address,
                slots_total: slots,
                occupied: BTreeMap::new(),
                lost: None,
                registered_at_ms: now_ms(),
                last_heartbeat: self.clock.now(),
                net: NetStats::default(),
                tx,
                session,
            },
        );
        tracing::info!(taskmanager = id, %data_address, slots, "registered");
    }

    fn on_message(&self, tm_id: &str, session: u64, message: ToJobManager) {
        self.on_message_locked(tm_id, session, message);
        self.changed();
    }

    fn on_message_locked(&self, tm_id: &str, session: u64, message: ToJobManager) {
        let mut state = self.lock();
        let State { taskmanagers, jobs } = &mut *state;
        let Some(tm) = taskmanagers
            .get_mut(tm_id)
            .filter(|tm| tm.session == session && tm.lost.is_none())
        else {
            return;
        };
        let now = self.clock.now();
        tm.last_heartbeat = now;
        match message {
            ToJobManager::Register { .. } => {}
            ToJobManager::Heartbeat { net, jobs: reports } => {
                tm.net = net;
                for report in reports {
                    if let Some(job) = jobs.get_mut(&report.job) {
                        job.reports.insert(tm_id.to_owned(), report);
                    }
                }
            }
            ToJobManager::Ack {
                job,
                attempt,
                checkpoint,
                task,
                subtask,
                snapshot,
                alignment_ms,
            } => {
                let Some(job) = jobs.get_mut(&job) else {
                    return;
                };
                if job.attempt != attempt {
                    // An attempt that was canceled finished an upload
                    // after the restart's sweep: its files are nobody's.
                    // (Only files of the job's own folders, and none a
                    // retained checkpoint uses, are deleted.)
                    if job.checkpoints.is_some()
                        && snapshot.foreign_path(&job.id, checkpoint).is_none()
                    {
                        let shared: Vec<StoragePath> = snapshot.shared_paths().cloned().collect();
                        discard_uploads(self, job, checkpoint, &shared);
                    }
                    return;
                }
                if !job.placed_on(task, subtask, tm_id) {
                    return;
                }
                let Some(c) = job.checkpoints.as_mut() else {
                    return;
                };
                if let Some(path) = snapshot.foreign_path(&job.id, checkpoint) {
                    // Refused whole: nothing it names is registered, restored
                    // from or deleted; the checkpoint fails.
                    let reason = format!(
                        "TaskManager {tm_id} acked with storage path `{path}`, outside the \
                         job's own folder"
                    );
                    tracing::warn!(job = %job.id, checkpoint, "{reason}");
                    let actions = c
                        .coordinator
                        .decline(checkpoint, (task, subtask), reason, now);
                    checkpoint_actions(taskmanagers, job, self, actions);
                    return;
                }
                if !c.coordinator.pending().any(|p| p == checkpoint) {
                    // Late: the checkpoint was aborted; drop its uploads.
                    let shared: Vec<StoragePath> = snapshot.shared_paths().cloned().collect();
                    discard_uploads(self, job, checkpoint, &shared);
                    return;
                }
                let actions = c.coordinator.ack(
                    checkpoint,
                    (task, subtask),
                    snapshot,
                    Duration::from_millis(alignment_ms),
                    now,
                );
                checkpoint_actions(taskmanagers, job, self, actions);
            }
            ToJobManager::RestoreFailed {
                job,
                attempt,
                checkpoint,
                reason,
            } => {
                let Some(job) = jobs.get_mut(&job).filter(|j| j.attempt == attempt) else {
                    return;
                };
                if let Some(c) = job.checkpoints.as_mut()
                    && c.coordinator.retained().any(|r| r.id == checkpoint)
                {
                    tracing::warn!(
                        job = %job.id, checkpoint, taskmanager = %tm_id,
                        "checkpoint cannot be restored, restarts fall back to an older one: {reason}"
                    );
                    c.unrestorable.insert(checkpoint);
                }
            }
            ToJobManager::Decline {
                job,
                attempt,
                checkpoint,
                task,
                subtask,
                reason,
            } => {
                let Some(job) = jobs
                    .get_mut(&job)
                    .filter(|j| j.attempt == attempt && j.placed_on(task, subtask, tm_id))
                else {
                    return;
                };
                if let Some(c) = job.checkpoints.as_mut() {
                    let actions = c
                        .coordinator
                        .decline(checkpoint, (task, subtask), reason, now);
                    checkpoint_actions(taskmanagers, job, self, actions);
                }
            }
            ToJobManager::Committed {
                job,
                attempt,
                error,
            } => {
                let Some(job) = jobs
                    .get_mut(&job)
                    .filter(|j| j.attempt == attempt && j.state == JobState::Finishing)
                else {
                    return;
                };
                if let Some(error) = error {
                    let reason = format!("TaskManager {tm_id}: {error}");
                    not_committed(taskmanagers, job, reason, now);
                } else if job.committing.remove(tm_id) {
                    let last = job.committing.is_empty();
                    if let Ok(next) = job.state.on(Event::Committed { last }) {
                        job.state = next;
                    }
                    if job.state == JobState::Finished {
                        job.ended_at_ms = Some(now_ms());
                        tracing::info!(job = %job.id, "finished: every final commit is done");
                    }
                }
            }
            ToJobManager::TaskState {
                job,
                attempt,
                task,
                subtask,
                state: new,
                error,
            } => {
                let Some(job) = jobs
                    .get_mut(&job)
                    .filter(|j| j.attempt == attempt && j.placed_on(task, subtask, tm_id))
                else {
                    return;
                };
                let (t, s) = (task as usize, subtask as usize);
                let Some(current) = job.subtasks.get_mut(t).and_then(|v| v.get_mut(s)) else {
                    return;
                };
                if current.is_terminal() {
                    return;
                }
                *current = new;
                let name = job.subtask_name(t, subtask);
                match new {
                    TaskState::Failed => fail(
                        taskmanagers,
                        job,
                        format!(
                            "{name} on {tm_id}: {}",
                            error.as_deref().unwrap_or("failed")
                        ),
                        true,
                        now,
                    ),
                    TaskState::Canceled if job.state == JobState::Running => fail(
                        taskmanagers,
                        job,
                        format!(
                            "{name} on {tm_id} was aborted: {}",
                            error.as_deref().unwrap_or("no reason given")
                        ),
                        false,
                        now,
                    ),
                    _ => {}
                }
                settle(taskmanagers, job, now);
            }
        }
    }

    fn lose_if_current(&self, tm_id: &str, session: u64, reason: String) {
        {
            let mut state = self.lock();
            if state
                .taskmanagers
                .get(tm_id)
                .is_some_and(|tm| tm.session == session && tm.lost.is_none())
            {
                lose(&mut state, tm_id, reason, self.clock.now());
            }
        }
        self.changed();
    }

    /// Drives checkpoint coordinators and restarts.
    fn tick_jobs(&self) {
        let mut state = self.lock();
        let State { taskmanagers, jobs } = &mut *state;
        let now = self.clock.now();
        for job in jobs.values_mut() {
            let deferred = std::mem::take(&mut job.deferred);
            checkpoint_actions(taskmanagers, job, self, deferred);
            match job.state {
                JobState::Running => {
                    // Checkpoints start once every subtask runs (a trigger
                    // during deployment could not reach the sources).
                    let deployed = job
                        .subtasks
                        .iter()
                        .flatten()
                        .all(|s| matches!(s, TaskState::Running | TaskState::Finished));
                    if let Some(c) = job.checkpoints.as_mut().filter(|_| deployed) {
                        let actions = c.coordinator.tick(now);
                        checkpoint_actions(taskmanagers, job, self, actions);
                    }
                }
                JobState::Restarting => {
                    // Deployed once the sweep has run (see `swept`), and due.
                    if !self.swept(job) || job.restart_at.is_none_or(|t| now < t) {
                        continue;
                    }
                    job.attempt += 1;
                    match deploy(taskmanagers, job, self.scheduling, &self.checkpoint_root) {
                        Ok(()) => {
                            job.restart_at = None;
                            job.state = job.state.on(Event::Redeployed).unwrap_or(job.state);
                            job.reports.clear();
                            // The next failure is reported as itself.
                            job.failure = None;
                            job.failure_is_root = false;
                            if let Some(c) = job.checkpoints.as_mut() {
                                let (from, skipped) = c.restore_point();
                                let from = from.map(|l| l.id);
                                c.coordinator.record_restore_skipping(
                                    from,
                                    skipped,
                                    now_ms(),
                                    job.attempt,
                                );
                                c.coordinator.resume(now);
                            }
                            tracing::info!(job = %job.id, attempt = job.attempt, "restarted");
                        }
                        Err(why) => {
                            // Not enough slots yet: wait for a TaskManager.
                            job.attempt -= 1;
                            // Ticks are 50 ms apart: a TaskManager that
                            // registers is used within a tick or two.
                            job.restart_at = Some(now + Duration::from_millis(100));
                            tracing::debug!(job = %job.id, "restart waits: {why}");
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// Whether a restarting job's shared folder has been swept for its
    /// next attempt; if not, requests the sweep (once).
    ///
    /// The failed attempt may have uploaded files it never acked (a
    /// TaskManager killed mid-upload); the sweep deletes whatever in the
    /// job's shared folder no retained checkpoint references. It lists the
    /// folder, so it must run before the new attempt can upload anything:
    /// the restart waits for it. Being behind every storage command the
    /// job queued before, it also means the metadata of the checkpoint the
    /// restart restores from has been written. The registry does not
    /// change meanwhile: nothing completes while the job is restarting.
    fn swept(&self, job: &mut Job) -> bool {
        let next = job.attempt + 1;
        let Some(c) = &job.checkpoints else {
            return true;
        };
        match job.sweep {
            Some(Sweep::Done(a)) if a == next => true,
            Some(Sweep::Requested(a)) if a == next => false,
            _ => {
                let Ok(prefix) = StoragePath::new(format!("{}/shared", job.id)) else {
                    return true;
                };
                let keep = c.registry.referenced().into_iter().collect();
                job.sweep = Some(Sweep::Requested(next));
                self.enqueue(
                    job,
                    StorageCommand::Sweep {
                        prefix,
                        keep,
                        attempt: next,
                    },
                );
                false
            }
        }
    }

    fn check_heartbeats(&self) {
        let mut state = self.lock();
        let timeout = self.heartbeat_timeout;
        let now = self.clock.now();
        let late: Vec<(String, Duration)> = state
            .taskmanagers
            .iter()
            .map(|(id, tm)| (id, tm, now.saturating_duration_since(tm.last_heartbeat)))
            .filter(|(_, tm, silent)| tm.lost.is_none() && *silent > timeout)
            .map(|(id, _, silent)| (id.clone(), silent))
            .collect();
        for (id, silent) in late {
            let reason = format!(
                "no heartbeat for {:.1} s (timeout {:.1} s)",
                silent.as_secs_f64(),
                timeout.as_secs_f64()
            );
            lose(&mut state, &id, reason, now);
        }
    }
}

/// Job `id` with per-vertex state and metrics.
fn job_detail(state: &State, id: &str) -> Result<JobDetail, ApiError> {
    let job = state
        .jobs
        .get(id)
        .ok_or_else(|| ApiError::not_found(format!("no job with id {id:?}")))?;
    let task_of: HashMap<usize, usize> = job
        .tasks
        .iter()
        .enumerate()
        .flat_map(|(t, spec)| spec.vertices.iter().map(move |v| (*v, t)))
        .collect();
    let vertices = job
        .graph
        .vertices
        .iter()
        .enumerate()
        .map(|(v, vertex)| {
            let t = task_of[&v];
            let head = job.tasks[t].head();
            let sum = |f: &dyn Fn(&weir_runtime::rpc::VertexReport) -> u64, at: usize| -> u64 {
                job.reports
                    .values()
                    .filter_map(|r| r.vertices.get(at))
                    .map(f)
                    .sum()
            };
            let states = &job.subtasks[t];
            VertexDetail {
                id: vertex.id.0.clone(),
                role: vertex.kind.role(),
                parallelism: vertex.parallelism,
                state: aggregate_state(states),
                records_in: sum(&|r| r.records_in, v),
                records_out: sum(&|r| r.records_out, v),
                busy_ms: sum(&|r| r.busy_ms, head),
                backpressured_ms: sum(&|r| r.backpressured_ms, head),
                idle_ms: sum(&|r| r.idle_ms, head),
                subtasks: job.placement[t]
                    .iter()
                    .zip(states)
                    .enumerate()
                    .map(|(i, (slot, st))| SubtaskDetail {
                        index: i as u32,
                        taskmanager: slot.taskmanager.clone(),
                        state: *st,
                    })
                    .collect(),
            }
        })
        .collect();
    Ok(JobDetail {
        summary: job.summary(),
        vertices,
        tasks: job.tasks.len() as u32,
        attempt: job.attempt,
        max_queued_batches: job
            .reports
            .values()
            .map(|r| r.max_queued_batches)
            .max()
            .unwrap_or(0),
    })
}

fn aggregate_state(states: &[TaskState]) -> &'static str {
    let any = |s: TaskState| states.contains(&s);
    if any(TaskState::Failed) {
        "failed"
    } else if any(TaskState::Running) {
        "running"
    } else if any(TaskState::Deploying) {
        "deploying"
    } else if any(TaskState::Canceled) {
        "canceled"
    } else {
        "finished"
    }
}

/// Declares a TaskManager lost: its slots leave the pool, its subtasks
/// count as failed, its jobs fail.
fn lose(state: &mut State, tm_id: &str, reason: String, now: Instant) {
    let State { taskmanagers, jobs } = state;
    let Some(tm) = taskmanagers.get_mut(tm_id) else {
        return;
    };
    tracing::warn!(taskmanager = tm_id, "lost: {reason}");
    let address = tm.data_address;
    tm.lost = Some(reason.clone());
    tm.occupied.clear();
    for job in jobs.values_mut().filter(|j| !j.state.is_terminal()) {
        let mut hit = false;
        for (t, slots) in job.placement.iter().enumerate() {
            for (s, slot) in slots.iter().enumerate() {
                if slot.taskmanager == tm_id && !job.subtasks[t][s].is_terminal() {
                    job.subtasks[t][s] = TaskState::Failed;
                    hit = true;
                }
            }
        }
        if hit {
            let message = format!("TaskManager {tm_id} ({address}) lost: {reason}");
            fail(taskmanagers, job, message, true, now);
            settle(taskmanagers, job, now);
        } else if job.state == JobState::Finishing && job.committing.contains(tm_id) {
            let message = format!(
                "TaskManager {tm_id} ({address}) lost before committing the final output: {reason}"
            );
            not_committed(taskmanagers, job, message, now);
        } else if job.state == JobState::Running
            && job.checkpoints.is_some()
            && job.taskmanagers().contains(tm_id)
        {
            // Its subtasks had all finished, but their sinks' final output
            // waits for the job's end to be committed there: it never will.
            let message = format!(
                "TaskManager {tm_id} ({address}) lost with its subtasks' final output \
                 uncommitted: {reason}"
            );
            fail(taskmanagers, job, message, true, now);
            settle(taskmanagers, job, now);
        }
    }
}

/// A `finishing` job whose final commit did not happen on one of its
/// TaskManagers: it fails, and restarts as its strategy says (the restored
/// sinks commit again; parts committed since are rolled back and produced
/// again).
fn not_committed(
    taskmanagers: &mut BTreeMap<String, Tm>,
    job: &mut Job,
    reason: String,
    now: Instant,
) {
    job.committing.clear();
    job.failure = Some(reason);
    job.failure_is_root = true;
    job.state = job.state.on(Event::CommitFailed).unwrap_or(job.state);
    settle(taskmanagers, job, now);
}

/// Records a failure of `job` and cancels its other subtasks.
fn fail(
    taskmanagers: &BTreeMap<String, Tm>,
    job: &mut Job,
    reason: String,
    root: bool,
    now: Instant,
) {
    if job.failure.is_none() || (root && !job.failure_is_root) {
        job.failure = Some(reason);
        job.failure_is_root = root;
    }
    if let Ok(next) = job.state.on(Event::TaskFailed) {
        job.state = next;
        send_cancel(taskmanagers, job);
        if let Some(c) = job.checkpoints.as_mut() {
            let actions = c.coordinator.suspend("a task failed", now);
            job.deferred.extend(actions);
        }
    }
}

fn send_cancel(taskmanagers: &BTreeMap<String, Tm>, job: &Job) {
    for tm in job.taskmanagers() {
        if let Some(tm) = taskmanagers.get(tm).filter(|tm| tm.lost.is_none()) {
            let _ = tm.tx.send(ToTaskManager::Cancel {
                job: job.id.clone(),
            });
        }
    }
}

/// Once every subtask has stopped: ends the job, or schedules its restart
/// (the restart strategy decides), and frees its slots.
fn settle(taskmanagers: &mut BTreeMap<String, Tm>, job: &mut Job, now: Instant) {
    if job.state.is_terminal()
        || matches!(job.state, JobState::Restarting | JobState::Finishing)
        || !job.subtasks.iter().flatten().all(|s| s.is_terminal())
    {
        return;
    }

    let all_finished = job
        .subtasks
        .iter()
        .flatten()
        .all(|s| *s == TaskState::Finished);
    let mut committers = 0;
    let mut restart = false;
    match job.state {
        JobState::Running if all_finished => {
            // Sinks commit what they pre-committed at the end of input.
            tell(taskmanagers, job, |job, attempt| {
                ToTaskManager::JobFinished { job, attempt }
            });
            if job.checkpoints.is_some() {
                // Finished once every TaskManager confirms its commits: a
                // reader of the output, or a TaskManager lost meanwhile
                // (then the job restarts), never misses the last part.
                job.committing = job
                    .taskmanagers()
                    .into_iter()
                    .filter(|tm| taskmanagers.get(*tm).is_some_and(|t| t.lost.is_none()))
                    .map(str::to_owned)
                    .collect();
                committers = job.committing.len();
            }
        }
        JobState::Canceling => {}
        // The attempt failed: the restart strategy decides (and counts).
        _ => match job.restarts.on_failure(now) {
            Ok(delay) => {
                job.restart_at = Some(now + delay);
                restart = true;
                tracing::info!(
                    job = %job.id,
                    "failed ({}); restarting in {delay:?}",
                    job.failure.as_deref().unwrap_or("?")
                );
            }
            Err(why) => {
                if job.restarts.count() > 0 {
                    let failure = job.failure.take().unwrap_or_default();
                    job.failure = Some(format!("{failure} (not restarted: {why})"));
                }
            }
        },
    }
    let stopped = Event::Stopped {
        all_finished,
        committers,
        restart,
    };
    match job.state.on(stopped) {
        Ok(next) => job.state = next,
        Err(illegal) => {
            // Every non-ended state but Restarting and Finishing (returned
            // above) takes `Stopped`.
            tracing::error!(job = %job.id, "{illegal}");
            return;
        }
    }
    if let Some(c) = job.checkpoints.as_mut() {
        let reason = match job.state {
            JobState::Restarting => "the job is restarting",
            _ => "the job ended",
        };
        let actions = c.coordinator.suspend(reason, now);
        job.deferred.extend(actions);
    }
    if job.state == JobState::Canceled {
        job.failure = None;
    }
    if job.state.is_terminal() {
        job.ended_at_ms = Some(now_ms());
    }
    for tm in taskmanagers.values_mut() {
        tm.occupied.retain(|_, j| *j != job.id);
    }
    tracing::info!(job = %job.id, state = ?job.state, "settled");
}

/// Places a job's subtasks (again, for a restart) and sends the deployment,
/// restoring from the latest completed checkpoint if there is one.
fn deploy(
    taskmanagers: &mut BTreeMap<String, Tm>,
    job: &mut Job,
    scheduling: Strategy,
    checkpoint_root: &std::path::Path,
) -> Result<(), String> {
    let free: BTreeMap<String, Vec<u32>> = taskmanagers
        .iter()
        .filter(|(_, tm)| tm.lost.is_none())
        .map(|(id, tm)| {
            let free = (0..tm.slots_total)
                .filter(|s| !tm.occupied.contains_key(s))
                .collect();
            (id.clone(), free)
        })
        .collect();
    let placement = scheduler::place(&job.graph, &job.tasks, &free, scheduling)?;
    for slot in placement.iter().flatten() {
        if let Some(tm) = taskmanagers.get_mut(&slot.taskmanager) {
            tm.occupied.insert(slot.slot, job.id.clone());
        }
    }
    let peers: HashMap<String, SocketAddr> = placement
        .iter()
        .flatten()
        .filter_map(|s| {
            taskmanagers
                .get(&s.taskmanager)
                .map(|tm| (s.taskmanager.clone(), tm.data_address))
        })
        .collect();
    let restore = job.checkpoints.as_ref().and_then(|c| {
        c.restore_point().0.map(|latest| RestorePoint {
            checkpoint: latest.id,
            subtasks: latest.acks.iter().map(|(k, v)| (*k, v.clone())).collect(),
        })
    });
    let deployment = Deployment {
        job: job.id.clone(),
        graph: job.graph.clone(),
        placement: placement.clone(),
        peers,
        attempt: job.attempt,
        checkpoints: job.checkpoints.as_ref().map(|_| CheckpointDeploy {
            storage: checkpoint_root.to_path_buf(),
        }),
        restore,
    };
    job.placement = placement;
    job.subtasks = job
        .tasks
        .iter()
        .map(|t| vec![TaskState::Deploying; t.parallelism as usize])
        .collect();
    for tm in job.taskmanagers() {
        if let Some(tm) = taskmanagers.get(tm) {
            let _ = tm
                .tx
                .send(ToTaskManager::Deploy(Box::new(deployment.clone())));
        }
    }
    Ok(())
}

/// Sends `message(job id, attempt)` to every live TaskManager of the job.
fn tell(
    taskmanagers: &BTreeMap<String, Tm>,
    job: &Job,
    message: impl Fn(String, u32) -> ToTaskManager,
) {
    for tm in job.taskmanagers() {
        if let Some(tm) = taskmanagers.get(tm).filter(|tm| tm.lost.is_none()) {
            let _ = tm.tx.send(message(job.id.clone(), job.attempt));
        }
    }
}

/// Carries out what the coordinator decided, under the state lock:
/// TaskManagers are told at once, storage work is queued for the job's
/// drain task ([`storage_io`]) in the order the coordinator gave it.
///
/// `CheckpointComplete` is sent when the checkpoint completes, not after
/// its metadata is written: nothing restores from `_metadata` alone (a
/// restart restores from the retained handles in memory, which each
/// TaskManager checks against `_metadata`, after its sweep, which runs
/// after the metadata write), and a subtask that learned of a
/// completion only after storage caught up could take its next
/// incremental checkpoint on an older base, the case the registry cannot
/// see ([`weir_runtime::checkpoint::registry`]). Its place among the other
/// messages to TaskManagers (triggers, cancels, `JobFinished`) stays
/// what it was.
fn checkpoint_actions(
    taskmanagers: &BTreeMap<String, Tm>,
    job: &mut Job,
    jm: &JobManager,
    actions: Vec<Action<SubtaskCheckpoint>>,
) {
    let chk_dir = |job: &str, id: u64| StoragePath::new(format!("{job}/chk-{id}"));
    for action in actions {
        match action {
            Action::Trigger { id, .. } => {
                tell(taskmanagers, job, |job, attempt| {
                    ToTaskManager::TriggerCheckpoint {
                        job,
                        attempt,
                        checkpoint: id,
                    }
                });
            }
            Action::Complete(done) => {
                let Some(c) = job.checkpoints.as_mut() else {
                    continue;
                };
                let handles = || {
                    done.acks
                        .values()
                        .flat_map(|a| a.states.iter().map(|(_, h)| h))
                };
                let full: u64 = handles().map(|h| h.full_size).sum();
                let incremental: u64 = handles().map(|h| h.incremental_size).sum();
                c.coordinator.set_sizes(done.id, full, incremental);
                c.registry
                    .register(done.id, handles().flat_map(|h| h.shared_paths().cloned()));
                let metadata = CheckpointMetadata {
                    job: job.id.clone(),
                    checkpoint: done.id,
                    triggered_at_ms: done.triggered_at_ms,
                    completed_at_ms: done.completed_at_ms,
                    subtasks: done.acks.iter().map(|(id, a)| (*id, a.clone())).collect(),
                };
                if let (Ok(path), Ok(bytes)) = (
                    metadata_path(&job.id, done.id),
                    serde_json::to_vec(&metadata),
                ) {
                    jm.enqueue(
                        job,
                        StorageCommand::WriteMetadata {
                            checkpoint: done.id,
                            path,
                            bytes,
                        },
                    );
                }
                tracing::info!(job = %job.id, checkpoint = done.id, full, incremental, "checkpoint completed");
                tell(taskmanagers, job, |job, attempt| {
                    ToTaskManager::CheckpointComplete {
                        job,
                        attempt,
                        checkpoint: done.id,
                    }
                });
            }
            Action::Discard(old) => {
                let Some(c) = job.checkpoints.as_mut() else {
                    continue;
                };
                c.stored.remove(&old.id);
                // Decided here, under the lock: after the checkpoint that
                // subsumes it was registered, so these are files no
                // retained checkpoint references.
                let unused = c.registry.release(old.id);
                for file in unused {
                    jm.enqueue(job, StorageCommand::Delete(file));
                }
                if let Ok(dir) = chk_dir(&job.id, old.id) {
                    jm.enqueue(job, StorageCommand::DeletePrefix(dir));
                }
            }
            Action::Abort { id, reason, acked } => {
                tracing::info!(job = %job.id, checkpoint = id, "checkpoint aborted: {reason}");
                tell(taskmanagers, job, |job, attempt| {
                    ToTaskManager::CheckpointAborted {
                        job,
                        attempt,
                        checkpoint: id,
                    }
                });
                let uploaded: Vec<StoragePath> = acked
                    .iter()
                    .flat_map(|(_, a)| a.shared_paths().cloned())
                    .collect();
                discard_uploads(jm, job, id, &uploaded);
            }
        }
    }
}

/// Queues the deletion of what was uploaded for a checkpoint that will
/// never complete: its private directory and the shared files no completed
/// checkpoint uses (decided now, under the lock).
fn discard_uploads(jm: &JobManager, job: &mut Job, id: u64, shared: &[StoragePath]) {
    // Only the job's own shared files (acks naming others are refused
    // before they get here; this keeps it so).
    let own = StoragePath::new(format!("{}/shared", job.id));
    let shared: Vec<StoragePath> = shared
        .iter()
        .filter(|f| own.as_ref().is_ok_and(|own| f.starts_with(own)))
        .cloned()
        .collect();
    let Some(c) = &job.checkpoints else {
        return;
    };
    let orphans = c.registry.orphans(&shared);
    // Never a completed checkpoint's own folder.
    let retained = c.coordinator.retained().any(|r| r.id == id);
    for file in orphans {
        jm.enqueue(job, StorageCommand::Delete(file));
    }
    if !retained && let Ok(dir) = StoragePath::new(format!("{}/chk-{id}", job.id)) {
        jm.enqueue(job, StorageCommand::DeletePrefix(dir));
    }
}

/// A started JobManager.
pub struct RunningJobManager {
    /// The JobManager.
    pub jobmanager: Arc<JobManager>,
    /// Where TaskManagers connect.
    pub rpc_address: SocketAddr,
    /// Where the REST API listens.
    pub rest_address: SocketAddr,
    /// The file holding the REST token, when it was generated (or reused
    /// from an earlier start) rather than given.
    pub rest_token_file: Option<PathBuf>,
    /// Whether this start generated that token.
    pub rest_token_created: bool,
    endpoint: quinn::Endpoint,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for RunningJobManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningJobManager")
            .field("rpc_address", &self.rpc_address)
            .field("rest_address", &self.rest_address)
            .field("rest_token_file", &self.rest_token_file)
            .finish_non_exhaustive()
    }
}

impl RunningJobManager {
    /// Stops serving: closes every TaskManager connection and the REST socket.
    pub async fn shutdown(self) {
        self.endpoint
            .close(0u32.into(), b"jobmanager shutting down");
        for t in &self.tasks {
            t.abort();
        }
        self.endpoint.wait_idle().await;
    }
}

/// Starts a JobManager on the current tokio runtime: RPC endpoint, REST
/// server and heartbeat monitor. `runtime` compiles uploaded modules to
/// validate them (its cache should live in the data dir).
pub async fn start(
    config: JobManagerConfig,
    runtime: Arc<Runtime>,
) -> Result<RunningJobManager, StartError> {
    // Before touching the disk: an empty token or an insecure non-loopback
    // address is refused whatever else is wrong.
    config.rest_auth.check(config.rest)?;
    if config.identity.role() != Some(Role::JobManager) {
        return Err(StartError::Identity(
            "the certificate is not the JobManager's (TaskManagers would refuse it): issue \
             one with `weir cluster issue DIR --jobmanager`"
                .into(),
        ));
    }
    std::fs::create_dir_all(&config.data_dir).map_err(|e| StartError::DataDir {
        path: config.data_dir.clone(),
        message: e.to_string(),
    })?;
    let auth = config.rest_auth.resolve(config.rest, &config.data_dir)?;
    let store =
        ModuleStore::open(&config.data_dir.join("modules")).map_err(|e| StartError::DataDir {
            path: config.data_dir.clone(),
            message: e.to_string(),
        })?;
    let endpoint = weir_runtime::net::tls::endpoint(config.rpc, &config.identity).map_err(|e| {
        StartError::Bind {
            address: config.rpc,
            message: e.to_string(),
        }
    })?;
    let rpc_address = endpoint.local_addr().map_err(|e| StartError::Bind {
        address: config.rpc,
        message: e.to_string(),
    })?;
    let listener = tokio::net::TcpListener::bind(config.rest)
        .await
        .map_err(|e| StartError::Bind {
            address: config.rest,
            message: e.to_string(),
        })?;
    let rest_address = listener.local_addr().map_err(|e| StartError::Bind {
        address: config.rest,
        message: e.to_string(),
    })?;
    let jm = JobManager::new(config.core(), runtime, store);
    let mut tasks = vec![jm.clone().spawn_clock()];
    let router = rest::router(
        jm.clone(),
        rest::RestOptions {
            token: auth.token,
            listen: rest_address,
            read_timeout: config.rest_read_timeout,
        },
    );
    tasks.push(tokio::spawn(rest::serve(
        listener,
        router,
        config.rest_read_timeout,
    )));
    let accept = endpoint.clone();
    let server = jm.clone();
    tasks.push(tokio::spawn(async move {
        while let Some(incoming) = accept.accept().await {
            let jm = server.clone();
            tokio::spawn(async move {
                match incoming.await {
                    Ok(conn) => serve_taskmanager(jm, conn).await,
                    Err(e) => tracing::info!("refused a connection: {e}"),
                }
            });
        }
    }));
    Ok(RunningJobManager {
        jobmanager: jm,
        rpc_address,
        rest_address,
        rest_token_file: auth.token_file,
        rest_token_created: auth.created,
        endpoint,
        tasks,
    })
}

/// Why a TaskManager claiming `id` may not register with the certificate
/// of `role`; `None` if it may (the certificate is TaskManager `id`'s).
fn certificate_refuses(role: Option<Role>, id: &str) -> Option<String> {
    match role {
        Some(Role::TaskManager(certified)) if certified == id => None,
        Some(Role::TaskManager(certified)) => Some(format!(
            "TaskManager `{certified}`'s certificate cannot register as `{id}`"
        )),
        Some(Role::JobManager) => Some(format!(
            "the JobManager's certificate cannot register as TaskManager `{id}`"
        )),
        None => Some(format!(
            "the certificate of TaskManager `{id}` names no TaskManager (a shared \
             `taskmanager.pem` from an older `weir cluster init`?): issue one per TaskManager \
             with `weir cluster issue DIR --taskmanager {id}`"
        )),
    }
}

/// How long a new connection may take to register.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);

async fn serve_taskmanager(jm: Arc<JobManager>, conn: quinn::Connection) {
    let remote = conn.remote_address();
    let registered = tokio::time::timeout(REGISTER_TIMEOUT, async {
        let (mut send, mut recv) = conn.accept_bi().await.map_err(|e| e.to_string())?;
        let first: Option<ToJobManager> = read_frame(&mut recv).await.map_err(|e| e.to_string())?;
        match first {
            Some(ToJobManager::Register {
                id,
                slots,
                data_address,
                version,
            }) => {
                let refusal = if version != env!("CARGO_PKG_VERSION") {
                    Some(format!(
                        "version mismatch: TaskManager {version}, JobManager {}",
                        env!("CARGO_PKG_VERSION")
                    ))
                } else {
                    certificate_refuses(peer_role(&conn), &id)
                };
                if let Some(reason) = refusal {
                    let _ = write_frame(
                        &mut send,
                        &ToTaskManager::Rejected {
                            reason: reason.clone(),
                        },
                    )
                    .await;
                    let _ = send.finish();
                    // Let the answer arrive before the connection closes.
                    let _ = tokio::time::timeout(Duration::from_secs(2), send.stopped()).await;
                    return Err(reason);
                }
                Ok((send, recv, id, slots, data_address))
            }
            _ => Err("the first control message was not a registration".to_owned()),
        }
    })
    .await;
    let (mut send, mut recv, id, slots, data_address) = match registered {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            tracing::info!(%remote, "registration failed: {e}");
            conn.close(1u32.into(), b"registration failed");
            return;
        }
        Err(_) => {
            tracing::info!(%remote, "no registration within {REGISTER_TIMEOUT:?}");
            conn.close(1u32.into(), b"registration timeout");
            return;
        }
    };
    let session = random_u64();
    let (tx, mut rx) = mpsc::unbounded_channel::<ToTaskManager>();
    let _ = tx.send(ToTaskManager::Registered {
        heartbeat_interval_ms: jm.heartbeat_interval.as_millis() as u64,
    });
    jm.register(&id, slots, data_address, tx, session);

    // Writer: everything the JobManager says to this TaskManager.
    let writer = tokio::spawn(async move {
        while let Some(message) = rx.recv().await {
            if write_frame(&mut send, &message).await.is_err() {
                break;
            }
        }
        let _ = send.shutdown().await;
    });
    // Module fetches on further streams.
    let fetches = {
        let conn = conn.clone();
        let jm = jm.clone();
        tokio::spawn(async move {
            while let Ok((send, recv)) = conn.accept_bi().await {
                let jm = jm.clone();
                tokio::spawn(serve_fetch(jm, send, recv));
            }
        })
    };
    let reason = loop {
        match read_frame::<_, ToJobManager>(&mut recv).await {
            Ok(Some(message)) => jm.on_message(&id, session, message),
            Ok(None) => break "the TaskManager closed its control stream".to_owned(),
            Err(e) => break format!("connection lost: {e}"),
        }
    };
    jm.lose_if_current(&id, session, reason);
    writer.abort();
    fetches.abort();
    conn.close(0u32.into(), b"bye");
}

async fn serve_fetch(
    jm: Arc<JobManager>,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
) {
    let request: FetchModule = match read_frame(&mut recv).await {
        Ok(Some(r)) => r,
        _ => return,
    };
    let bytes = {
        let jm = jm.clone();
        let hash = request.hash.clone();
        tokio::task::spawn_blocking(move || jm.store.read(&hash)).await
    };
    let result = match bytes {
        Ok(Ok(bytes)) => {
            let header = ModuleHeader {
                size: Some(bytes.len() as u64),
                error: None,
            };
            match write_frame(&mut send, &header).await {
                Ok(()) => send.write_all(&bytes).await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            }
        }
        Ok(Err(e)) => write_frame(
            &mut send,
            &ModuleHeader {
                size: None,
                error: Some(e.to_string()),
            },
        )
        .await
        .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = result {
        tracing::info!(hash = %request.hash, "module fetch failed: {e}");
    }
    let _ = send.finish();
}
