//! The JobManager: TaskManager registry and heartbeats, the slot pool, job
//! scheduling and lifecycle, the module store, and the REST API.
//!
//! # Pieces
//!
//! - this file: [`JobManager`], its TaskManager registry, and the core's
//!   entry points (`new`, `attach`, `deliver`, `tick`, `wait_until_ended`);
//!   `cell`: one job's lock and queue of events (below).
//! - [`job`]: the job lifecycle: [`JobState`] and its one table of legal
//!   moves (pure, unit-tested); `control`: carrying the moves out (cancel,
//!   failure, settling, the restart's deployment).
//! - `submit`: module upload and delete, job submission (validation,
//!   module loading, placement, deployment).
//! - `messages`: what TaskManagers send (registration, heartbeats, acks,
//!   task states, commits) and losing one.
//! - `logs`: the operators' log lines each job keeps, per subtask, in
//!   bounded rings (`GET /v1/jobs/{id}/logs`); `metrics`: the Prometheus
//!   exposition of `GET /metrics`.
//! - `checkpoints`: a job's coordinator and registry, and carrying out the
//!   coordinator's actions; `recovery`: the job store in the data dir,
//!   checkpoint metadata tags, taking jobs back after a restart.
//! - `storage_io`: the checkpoint storage commands the JobManager decides
//!   under a job's lock; `drain`: running them off it, one queue per job.
//! - `api`: [`ApiError`] and the REST views, with the queries that build
//!   them; `config`: [`JobManagerConfig`], [`CoreConfig`], defaults.
//! - `server`: [`start`], the `weir jobmanager` daemon: the QUIC endpoint
//!   TaskManagers connect to ([`weir_runtime::rpc`] protocol, mutual TLS)
//!   and the REST server.
//! - [`modules`]: the content-addressed module store on disk.
//! - [`scheduler`]: placing subtasks into slots (pure); [`restart`]: the
//!   restart strategies.
//! - [`rest`]: the axum router (thin: parses, calls [`JobManager`], maps
//!   errors), its HTTP server with timeouts, and [`rest::auth`]: the token
//!   (generated into the data dir by default) and the `Host` allow-list.
//! - [`ui`]: the web UI's page, script and style, embedded, served by the
//!   REST server; `load`: recent rates and time shares per vertex and the
//!   bottleneck (Flink's backpressure rule); `exceptions`: every job's
//!   exception history across restarts.
//! - `sim` (tests): the simulation harness, 1,000 seeded failure schedules.
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
//! # One queue per job
//!
//! There is no lock over the whole JobManager. Each job has its own lock
//! and its own queue of events ([`JobCell`]): what a TaskManager says
//! about the job, its heartbeat metrics for it, a TaskManager of it being
//! lost. A connection's reader or the clock queues an event and goes on;
//! whoever holds the job's lock takes the queued events, in order, before
//! letting go. So one job's work (a checkpoint with many files to
//! register, a large `_metadata` to encode) delays neither other jobs nor
//! the REST API (test `tests::a_busy_job_stalls_neither_the_api_nor_other_jobs`).
//! The TaskManager registry and slot pool ([`TaskManagers`]) has a lock of
//! its own, held only for a lookup, a send or a slot change. Locks are
//! taken in one order: the job index, one job, the registry.
//!
//! # Checkpoint storage, off the lock
//!
//! Checkpoint storage ([`CoreConfig::checkpoint_storage`], a directory by
//! default) may be slow (NFS, an object store), so no storage I/O happens
//! under the job's lock. Under it the JobManager decides what to write and
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
//! lost: its slots leave the pool and its jobs fail, naming it. Its control
//! stream is then closed, so a TaskManager that was only late (frozen,
//! starved) notices, cancels its subtasks and registers again with its
//! slots, as after a restart.
//!
//! A TaskManager registers only under the id its certificate names
//! ([`weir_runtime::net::tls::peer_role`]); its acks, declines and task states
//! count only for subtasks placed on it, and an ack naming storage paths
//! outside the job's own folders is refused (nothing it names is deleted).
//!
//! Jobs and registrations live in memory. A restarted JobManager keeps its
//! modules (on disk), TaskManagers register again by themselves, and
//! [`JobManager::recover`] takes back every submitted job that had not
//! ended, from its record in the data dir and its newest tagged checkpoint
//! in storage (`recovery`).
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

mod api;
mod cell;
mod checkpoints;
mod config;
mod control;
mod drain;
mod exceptions;
mod load;
mod logs;
mod messages;
mod metrics;
mod recovery;
mod savepoints;
mod server;
mod submit;
pub mod ui;
mod upgrade;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
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

use restart::Restarts;
use scheduler::Strategy;
use storage_io::{Outcome, StorageCommand, StorageQueue};

pub use api::*;
use cell::*;
use checkpoints::*;
pub use config::*;
use control::*;
use exceptions::{Cause, Exceptions};
pub use exceptions::{ExceptionView, MAX_EXCEPTIONS};
use load::LoadWindow;
pub use load::{Bottleneck, UpstreamPressure};
use logs::{JobLogs, JobPlacement};
pub use logs::{JobLogsView, LogLineView, LogQuery, MAX_LINES_PER_ANSWER};
pub use recovery::{JOBS_DIR, KEY_FILE, RecoveredJob};
use savepoints::*;
pub use savepoints::{FromSavepoint, SavepointStatus, SavepointView};
pub use server::{RunningJobManager, Sockets, bind, serve, start};
use upgrade::*;
pub use upgrade::{
    MigratedState, RunningModule, UpgradePlan, UpgradeRequest, UpgradeStatus, UpgradeView,
    VersionView,
};

struct Tm {
    data_address: SocketAddr,
    slots_total: u32,
    /// Occupied slot → job id.
    occupied: BTreeMap<u32, String>,
    lost: Option<String>,
    registered_at_ms: u64,
    last_heartbeat: Instant,
    net: NetStats,
    /// Its resident memory, as its latest heartbeat said.
    memory: Option<weir_runtime::telemetry::memory::ProcessMemory>,
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
    /// The declared states of every keyed operator vertex (for savepoints).
    states: HashMap<usize, Vec<weir_runtime::state::StateDescriptor>>,
    /// Its savepoints, oldest first.
    savepoints: Vec<SavepointView>,
    /// The savepoint it was submitted with: deployments restore from it
    /// until the job has a checkpoint of its own.
    from_savepoint: Option<Arc<weir_runtime::rpc::SavepointDeploy>>,
    /// The spec it was submitted with (`None` for `weir run`'s jobs), and
    /// the `--set` overrides its upgrades applied to it, in order.
    spec: Option<String>,
    overrides: Vec<(String, String)>,
    /// Its versions, oldest first: the modules it ran, since when.
    versions: Vec<VersionView>,
    /// Its upgrades, oldest first.
    upgrades: Vec<UpgradeView>,
    /// The upgrade under way.
    upgrade: Option<Box<PendingUpgrade>>,
    /// The upgrade whose rollback the next deployment restores.
    rollback_of: Option<u32>,
    /// Failed for a reason a restart cannot fix (over the cluster's state
    /// quota): it ends `failed` whatever its restart strategy says.
    fatal: bool,
    /// What its operators logged, per subtask, across its attempts.
    logs: JobLogs,
    /// Every failure, across its attempts.
    exceptions: Exceptions,
    /// Recent samples of its counters: rates, time shares, the bottleneck.
    load: LoadWindow,
    /// Where it is recorded for a restarted JobManager to take back
    /// ([`recovery`]); `None` for a job nobody takes back (`weir run`'s).
    journal: Option<Arc<recovery::JobStore>>,
    /// The attempt its record holds, once recorded.
    recorded: Option<u32>,
}

impl Job {
    /// Moves the job by `event`, which its caller knows the lifecycle
    /// allows here. An illegal move is a bug, not an outcome: it is logged
    /// and the state stays. Returns whether the job moved.
    fn advance(&mut self, event: Event) -> bool {
        match self.state.on(event) {
            Ok(next) => {
                self.state = next;
                true
            }
            Err(illegal) => {
                tracing::error!(job = %self.id, "{illegal}");
                false
            }
        }
    }

    /// Records what a storage command of the job did ([`JobManager::drain`]).
    fn record(&mut self, outcome: Outcome, taskmanagers: &TaskManagers) {
        match outcome {
            Outcome::MetadataStored(id) => {
                if let Some(c) = self.checkpoints.as_mut()
                    && c.coordinator.retained().any(|r| r.id == id)
                {
                    c.stored.insert(id);
                }
                self.announce_stored(taskmanagers, id);
            }
            // Told all the same: the next checkpoints' uploads need it as
            // their base (`checkpoint_actions`). Only a restarted
            // JobManager cannot restore it.
            Outcome::MetadataFailed(id) => self.announce_stored(taskmanagers, id),
            Outcome::Swept(attempt) => {
                if self.sweep == Some(Sweep::Requested(attempt)) {
                    self.sweep = Some(Sweep::Done(attempt));
                }
            }
            Outcome::Nothing => {}
        }
    }

    /// Announces checkpoint `id` if it waited for its metadata.
    fn announce_stored(&mut self, taskmanagers: &TaskManagers, id: u64) {
        if self
            .checkpoints
            .as_ref()
            .is_some_and(|c| c.unannounced.contains(&id))
        {
            announce(taskmanagers, self, id);
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

    /// Samples its counters for [`LoadWindow`] (after a report arrived).
    fn sample_load(&mut self, now: Instant) {
        let mut head_of = vec![0; self.graph.vertices.len()];
        for task in &self.tasks {
            for v in &task.vertices {
                head_of[*v] = task.head();
            }
        }
        self.load.sample(
            self.attempt,
            now,
            self.graph.vertices.len(),
            &head_of,
            self.reports.values(),
        );
    }

    fn summary(&self) -> JobSummary {
        JobSummary {
            id: self.id.clone(),
            name: self.name.clone(),
            state: self.state,
            submitted_at_ms: self.submitted_at_ms,
            ended_at_ms: self.ended_at_ms,
            failure: self.failure.clone(),
            modules: {
                let mut m: Vec<String> = self.modules.iter().cloned().collect();
                m.sort();
                m
            },
        }
    }
}

/// The TaskManager registry and slot pool, behind its own lock.
///
/// Locks are taken in one order: the job index ([`JobManager::jobs`]
/// field), then one job, then this registry; each may be skipped, none
/// taken out of order, never two jobs at once. The registry's lock is
/// held only for a lookup, a send (an unbounded channel: no waiting) or a
/// slot change, never across a job's work.
#[derive(Default)]
pub(crate) struct TaskManagers(Mutex<BTreeMap<String, Tm>>);

impl TaskManagers {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Tm>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether TaskManager `id` is live in session `session`.
    pub(crate) fn is_current(&self, id: &str, session: u64) -> bool {
        self.lock()
            .get(id)
            .is_some_and(|tm| tm.session == session && tm.lost.is_none())
    }

    /// Whether TaskManager `id` is registered and not lost.
    pub(crate) fn is_live(&self, id: &str) -> bool {
        self.lock().get(id).is_some_and(|tm| tm.lost.is_none())
    }

    /// Sends `message` to TaskManager `id` unless it is lost.
    pub(crate) fn send(&self, id: &str, message: ToTaskManager) {
        if let Some(tm) = self.lock().get(id).filter(|tm| tm.lost.is_none()) {
            let _ = tm.tx.send(message);
        }
    }

    /// Places `job`'s subtasks into free slots of live TaskManagers and
    /// reserves them, at once; returns the placement and the data-plane
    /// address of every TaskManager in it.
    pub(crate) fn reserve(&self, job: &Job, scheduling: Strategy) -> Result<Reserved, String> {
        let mut taskmanagers = self.lock();
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
        let mut peers = HashMap::new();
        for slot in placement.iter().flatten() {
            if let Some(tm) = taskmanagers.get_mut(&slot.taskmanager) {
                tm.occupied.insert(slot.slot, job.id.clone());
                peers.insert(slot.taskmanager.clone(), tm.data_address);
            }
        }
        Ok((placement, peers))
    }

    /// Frees every slot job `job` holds.
    pub(crate) fn release(&self, job: &str) {
        for tm in self.lock().values_mut() {
            tm.occupied.retain(|_, j| j != job);
        }
    }
}

/// A job's placement and the data-plane address of every TaskManager in it.
pub(crate) type Reserved = (Vec<Vec<SlotRef>>, HashMap<String, SocketAddr>);

/// The JobManager's state and operations; the RPC server and the REST API
/// call into it.
pub struct JobManager {
    /// Every job by id, each behind its own lock (the lock order:
    /// [`TaskManagers`]).
    jobs: Mutex<BTreeMap<String, Arc<JobCell>>>,
    taskmanagers: TaskManagers,
    store: ModuleStore,
    runtime: Arc<Runtime>,
    checker: LocalCluster,
    heartbeat_interval: Duration,
    heartbeat_timeout: Duration,
    scheduling: Strategy,
    max_module_bytes: usize,
    checkpoint_root: PathBuf,
    /// Where savepoints written from retained checkpoints go
    /// (`--from-checkpoint`): `DATA_DIR/restored`.
    restored_dir: PathBuf,
    /// Where upgrades' savepoints go: `DATA_DIR/upgrades`.
    upgrades_dir: PathBuf,
    /// See [`CoreConfig::max_job_state_bytes`].
    max_job_state_bytes: Option<u64>,
    /// Turns for checking a job (submission or upgrade): loading its
    /// modules instantiates each within its memory cap, so this bounds
    /// what concurrent checks can make resident ([`MAX_CONCURRENT_CHECKS`]).
    checks: tokio::sync::Semaphore,
    /// Used only by drain tasks, off the job's lock ([`storage_io`]).
    storage: Arc<dyn CheckpointStorage>,
    /// Bumped after anything may have changed a job.
    changes: tokio::sync::watch::Sender<u64>,
    clock: Clock,
    /// Who runs storage commands.
    storage_io: StorageIo,
    /// Itself, for the drain tasks it starts under the job's lock.
    me: Weak<JobManager>,
    /// The runtime its drain tasks and their blocking I/O run on.
    handle: tokio::runtime::Handle,
    /// Where submitted jobs are recorded and checkpoint metadata keyed,
    /// once [`JobManager::recover`] opened it (the daemon); unset, jobs
    /// live in memory only (`weir run`).
    journal: std::sync::OnceLock<Arc<recovery::JobStore>>,
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

/// Jobs checked (submitted or upgraded: their modules loaded and
/// instantiated) at once; more wait their turn. As module uploads (two at
/// a time, `rest`), so that many submissions at once raise the
/// JobManager's memory by two jobs' checks, not by all of them.
pub const MAX_CONCURRENT_CHECKS: usize = 2;

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
            jobs: Mutex::default(),
            taskmanagers: TaskManagers::default(),
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
            restored_dir: config.data_dir.join("restored"),
            upgrades_dir: config.data_dir.join("upgrades"),
            max_job_state_bytes: config.max_job_state_bytes,
            checks: tokio::sync::Semaphore::new(MAX_CONCURRENT_CHECKS),
            changes: tokio::sync::watch::Sender::new(0),
            clock: config.clock,
            storage_io: config.storage_io,
            me: me.clone(),
            handle: tokio::runtime::Handle::current(),
            journal: std::sync::OnceLock::new(),
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
    /// Called after the locks are released.
    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Waits until job `id` has ended and the checkpoint storage work it
    /// left has run (metadata written, discarded checkpoints deleted);
    /// returns it then.
    pub async fn wait_until_ended(&self, id: &str) -> Result<JobDetail, ApiError> {
        self.watch(|| {
            let cell = self.job_cell(id)?;
            let job = self.lock_job(&cell);
            let settled = job.deferred.is_empty() && job.storage.is_idle();
            Ok((job.state.is_terminal() && settled).then(|| job_detail(&job)))
        })
        .await
    }

    /// Calls `look` now and after every change until it answers something.
    /// Subscribed before the first look: no change is missed.
    pub(crate) async fn watch<T>(
        &self,
        mut look: impl FnMut() -> Result<Option<T>, ApiError>,
    ) -> Result<T, ApiError> {
        let mut changes = self.changes.subscribe();
        loop {
            if let Some(found) = look()? {
                return Ok(found);
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

    /// The job index; held only to look up, add or list jobs.
    fn index(&self) -> MutexGuard<'_, BTreeMap<String, Arc<JobCell>>> {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Job `id`'s cell, or 404.
    fn job_cell(&self, id: &str) -> Result<Arc<JobCell>, ApiError> {
        self.index()
            .get(id)
            .cloned()
            .ok_or_else(|| ApiError::not_found(format!("no job with id {id:?}")))
    }

    /// Every job's cell, in id order (the index released).
    fn job_cells(&self) -> Vec<Arc<JobCell>> {
        self.index().values().cloned().collect()
    }
}
