//! The JobManager: TaskManager registry and heartbeats, the slot pool, job
//! scheduling and lifecycle, the module store, and the REST API.
//!
//! # Pieces
//!
//! - [`modules`]: the content-addressed module store on disk.
//! - [`scheduler`]: placing subtasks into slots (pure).
//! - [`rest`]: the axum router (thin: parses, calls [`JobManager`], maps errors).
//! - this file: [`JobManager`], the state behind one mutex, and the RPC
//!   server TaskManagers connect to ([`crate::rpc`] protocol over QUIC with
//!   mutual TLS).
//!
//! # Lifecycle of a job
//!
//! `submit` validates the spec, resolves every module to its content hash,
//! loads each one (compile, or take from the cache) to check it against its
//! place in the graph, places the subtasks ([`scheduler::place`]), reserves
//! the slots and sends a [`Deployment`] to every TaskManager involved. The
//! job is then `running`. TaskManagers report every subtask's state; when
//! all are finished the job is `finished`. The first failure (or a lost
//! TaskManager) makes it `failing`: every TaskManager is told to cancel, and
//! once every subtask has stopped the job is `failed` with the root cause.
//! `cancel` does the same and ends in `canceled`. Slots are released when
//! the job ends. There is no recovery yet (checkpoints come next): a failed
//! job stays failed.
//!
//! # Liveness
//!
//! A TaskManager sends a heartbeat every `heartbeat_interval`; one not heard
//! from for `heartbeat_timeout` (or whose connection closed) is declared
//! lost: its slots leave the pool and its jobs fail, naming it.
//!
//! Jobs and registrations live in memory; a restarted JobManager keeps its
//! modules (on disk) and TaskManagers register again by themselves.
//!
//! This module must not run operators: TaskManagers do.

pub mod modules;
pub mod rest;
pub mod scheduler;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use crate::job::{JobGraph, JobSpec, ModuleRef, TaskSpec, VertexKind, chain};
use crate::local::LocalCluster;
use crate::net::NetStats;
use crate::net::tls::NodeIdentity;
use crate::rpc::{
    Deployment, FetchModule, JobReport, ModuleHeader, SlotRef, TaskState, ToJobManager,
    ToTaskManager, read_frame, write_frame,
};
use crate::wasm::Runtime;

use modules::{ModuleInfo, ModuleStore, StoreError};
use scheduler::Strategy;

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
    /// When set, every REST request must send `Authorization: Bearer <token>`.
    pub rest_token: Option<String>,
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
            rest_token: None,
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
        && name.len() <= crate::job::MAX_ID_LEN
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
            crate::job::MAX_ID_LEN
        )))
    }
}

/// The state of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Deployed; subtasks running (or starting).
    Running,
    /// A subtask failed; the others are being canceled.
    Failing,
    /// Canceled by a user; subtasks are stopping.
    Canceling,
    /// Every subtask finished.
    Finished,
    /// Failed; `failure` says why.
    Failed,
    /// Canceled by a user.
    Canceled,
}

impl JobState {
    /// Whether the job has ended.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Finished | JobState::Failed | JobState::Canceled
        )
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
}

impl Job {
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
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock is a bug; keep serving the rest.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
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
        let (graph, modules) = tokio::task::spawn_blocking(move || this.prepare(&spec))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))??;
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
        let free: BTreeMap<String, Vec<u32>> = state
            .taskmanagers
            .iter()
            .filter(|(_, tm)| tm.lost.is_none())
            .map(|(id, tm)| {
                let free = (0..tm.slots_total)
                    .filter(|s| !tm.occupied.contains_key(s))
                    .collect();
                (id.clone(), free)
            })
            .collect();
        let placement =
            scheduler::place(&graph, &tasks, &free, self.scheduling).map_err(|m| ApiError {
                status: 503,
                message: m,
            })?;
        let id = loop {
            let id = format!("{:016x}", random_u64());
            if !state.jobs.contains_key(&id) {
                break id;
            }
        };
        for slot in placement.iter().flatten() {
            if let Some(tm) = state.taskmanagers.get_mut(&slot.taskmanager) {
                tm.occupied.insert(slot.slot, id.clone());
            }
        }
        let peers: HashMap<String, SocketAddr> = placement
            .iter()
            .flatten()
            .filter_map(|s| {
                state
                    .taskmanagers
                    .get(&s.taskmanager)
                    .map(|tm| (s.taskmanager.clone(), tm.data_address))
            })
            .collect();
        let deployment = Deployment {
            job: id.clone(),
            graph: graph.clone(),
            placement: placement.clone(),
            peers,
        };
        let job = Job {
            id: id.clone(),
            name: graph.name.clone(),
            subtasks: tasks
                .iter()
                .map(|t| vec![TaskState::Deploying; t.parallelism as usize])
                .collect(),
            tasks,
            placement,
            graph,
            state: JobState::Running,
            failure: None,
            failure_is_root: false,
            submitted_at_ms: now_ms(),
            ended_at_ms: None,
            modules,
            reports: HashMap::new(),
        };
        for tm in job.taskmanagers() {
            if let Some(tm) = state.taskmanagers.get(tm) {
                let _ = tm
                    .tx
                    .send(ToTaskManager::Deploy(Box::new(deployment.clone())));
            }
        }
        tracing::info!(job = %id, name = %job.name, "submitted");
        let created = JobCreated {
            id: id.clone(),
            name: job.name.clone(),
        };
        state.jobs.insert(id, job);
        Ok(created)
    }

    /// Parses and checks a spec; resolves its modules to hashes.
    fn prepare(&self, spec: &str) -> Result<(JobGraph, HashSet<String>), ApiError> {
        // Relative paths in a submitted spec resolve against the
        // JobManager's working directory (`weir submit` sends absolute ones).
        let origin = std::env::current_dir()
            .unwrap_or_default()
            .join("submitted-job.toml");
        let spec =
            JobSpec::parse(spec, &origin, &[]).map_err(|e| ApiError::bad_request(e.to_string()))?;
        let mut graph =
            JobGraph::from_spec(spec).map_err(|e| ApiError::bad_request(e.to_string()))?;
        let mut hashes = HashSet::new();
        let mut local = graph.clone();
        for (v, vertex) in graph.vertices.iter_mut().enumerate() {
            let VertexKind::Operator(op) = &mut vertex.kind else {
                continue;
            };
            let reference = match &op.module {
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
        self.checker
            .load_modules(&local)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        Ok((graph, hashes))
    }

    /// Cancels a job.
    pub fn cancel(&self, id: &str) -> Result<JobSummary, ApiError> {
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
        if job.state == JobState::Running {
            job.state = JobState::Canceling;
            send_cancel(taskmanagers, job);
        }
        settle(taskmanagers, job);
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
        let state = self.lock();
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
                let sum = |f: &dyn Fn(&crate::rpc::VertexReport) -> u64, at: usize| -> u64 {
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
            lose(&mut state, id, "registered again (restarted)".to_owned());
        }
        state.taskmanagers.insert(
            id.to_owned(),
            Tm {
                data_address,
                slots_total: slots,
                occupied: BTreeMap::new(),
                lost: None,
                registered_at_ms: now_ms(),
                last_heartbeat: Instant::now(),
                net: NetStats::default(),
                tx,
                session,
            },
        );
        tracing::info!(taskmanager = id, %data_address, slots, "registered");
    }

    fn on_message(&self, tm_id: &str, session: u64, message: ToJobManager) {
        let mut state = self.lock();
        let State { taskmanagers, jobs } = &mut *state;
        let Some(tm) = taskmanagers
            .get_mut(tm_id)
            .filter(|tm| tm.session == session && tm.lost.is_none())
        else {
            return;
        };
        tm.last_heartbeat = Instant::now();
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
            ToJobManager::TaskState {
                job,
                task,
                subtask,
                state: new,
                error,
            } => {
                let Some(job) = jobs.get_mut(&job) else {
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
                    ),
                    TaskState::Canceled if job.state == JobState::Running => fail(
                        taskmanagers,
                        job,
                        format!(
                            "{name} on {tm_id} was aborted: {}",
                            error.as_deref().unwrap_or("no reason given")
                        ),
                        false,
                    ),
                    _ => {}
                }
                settle(taskmanagers, job);
            }
        }
    }

    fn lose_if_current(&self, tm_id: &str, session: u64, reason: String) {
        let mut state = self.lock();
        if state
            .taskmanagers
            .get(tm_id)
            .is_some_and(|tm| tm.session == session && tm.lost.is_none())
        {
            lose(&mut state, tm_id, reason);
        }
    }

    fn check_heartbeats(&self) {
        let mut state = self.lock();
        let timeout = self.heartbeat_timeout;
        let late: Vec<(String, Duration)> = state
            .taskmanagers
            .iter()
            .filter(|(_, tm)| tm.lost.is_none() && tm.last_heartbeat.elapsed() > timeout)
            .map(|(id, tm)| (id.clone(), tm.last_heartbeat.elapsed()))
            .collect();
        for (id, silent) in late {
            let reason = format!(
                "no heartbeat for {:.1} s (timeout {:.1} s)",
                silent.as_secs_f64(),
                timeout.as_secs_f64()
            );
            lose(&mut state, &id, reason);
        }
    }
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
fn lose(state: &mut State, tm_id: &str, reason: String) {
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
            fail(taskmanagers, job, message, true);
            settle(taskmanagers, job);
        }
    }
}

/// Records a failure of `job` and cancels its other subtasks.
fn fail(taskmanagers: &BTreeMap<String, Tm>, job: &mut Job, reason: String, root: bool) {
    if job.failure.is_none() || (root && !job.failure_is_root) {
        job.failure = Some(reason);
        job.failure_is_root = root;
    }
    if job.state == JobState::Running {
        job.state = JobState::Failing;
        send_cancel(taskmanagers, job);
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

/// Ends the job once every subtask has stopped, and frees its slots.
fn settle(taskmanagers: &mut BTreeMap<String, Tm>, job: &mut Job) {
    if job.state.is_terminal() || !job.subtasks.iter().flatten().all(|s| s.is_terminal()) {
        return;
    }
    job.state = match job.state {
        JobState::Running
            if job
                .subtasks
                .iter()
                .flatten()
                .all(|s| *s == TaskState::Finished) =>
        {
            JobState::Finished
        }
        JobState::Canceling => JobState::Canceled,
        _ => JobState::Failed,
    };
    if job.state == JobState::Canceled {
        job.failure = None;
    }
    job.ended_at_ms = Some(now_ms());
    for tm in taskmanagers.values_mut() {
        tm.occupied.retain(|_, j| *j != job.id);
    }
    tracing::info!(job = %job.id, state = ?job.state, "ended");
}

/// A started JobManager.
pub struct RunningJobManager {
    /// The JobManager.
    pub jobmanager: Arc<JobManager>,
    /// Where TaskManagers connect.
    pub rpc_address: SocketAddr,
    /// Where the REST API listens.
    pub rest_address: SocketAddr,
    endpoint: quinn::Endpoint,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for RunningJobManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningJobManager")
            .field("rpc_address", &self.rpc_address)
            .field("rest_address", &self.rest_address)
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

/// Why a daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A socket could not be bound.
    #[error("cannot listen on {address}: {message}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// Why.
        message: String,
    },
    /// The data directory is unusable.
    #[error("data directory {}: {message}", path.display())]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The Wasm runtime could not start.
    #[error("wasm runtime: {0}")]
    Runtime(String),
}

/// Starts a JobManager on the current tokio runtime: RPC endpoint, REST
/// server and heartbeat monitor. `runtime` compiles uploaded modules to
/// validate them (its cache should live in the data dir).
pub async fn start(
    config: JobManagerConfig,
    runtime: Arc<Runtime>,
) -> Result<RunningJobManager, StartError> {
    std::fs::create_dir_all(&config.data_dir).map_err(|e| StartError::DataDir {
        path: config.data_dir.clone(),
        message: e.to_string(),
    })?;
    let store =
        ModuleStore::open(&config.data_dir.join("modules")).map_err(|e| StartError::DataDir {
            path: config.data_dir.clone(),
            message: e.to_string(),
        })?;
    let endpoint =
        crate::net::tls::endpoint(config.rpc, &config.identity).map_err(|e| StartError::Bind {
            address: config.rpc,
            message: e.to_string(),
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
    let jm = Arc::new(JobManager {
        state: Mutex::new(State::default()),
        store,
        checker: LocalCluster::new(
            runtime.clone(),
            config.data_dir.join("work"),
            tokio::runtime::Handle::current(),
        ),
        runtime,
        heartbeat_interval: config.heartbeat_interval,
        heartbeat_timeout: config.heartbeat_timeout,
        scheduling: config.scheduling,
        max_module_bytes: config.max_module_bytes,
    });
    let mut tasks = Vec::new();
    let router = rest::router(jm.clone(), config.rest_token.clone());
    tasks.push(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::error!("REST server stopped: {e}");
        }
    }));
    let monitor = jm.clone();
    tasks.push(tokio::spawn(async move {
        let period = (monitor.heartbeat_timeout / 4)
            .clamp(Duration::from_millis(50), Duration::from_secs(1));
        let mut tick = tokio::time::interval(period);
        loop {
            tick.tick().await;
            monitor.check_heartbeats();
        }
    }));
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
        endpoint,
        tasks,
    })
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
                if version != env!("CARGO_PKG_VERSION") {
                    let reason = format!(
                        "version mismatch: TaskManager {version}, JobManager {}",
                        env!("CARGO_PKG_VERSION")
                    );
                    let _ = write_frame(
                        &mut send,
                        &ToTaskManager::Rejected {
                            reason: reason.clone(),
                        },
                    )
                    .await;
                    let _ = send.finish();
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
