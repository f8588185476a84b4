//! The TaskManager daemon: registers with the JobManager, heartbeats, runs
//! the subtasks the JobManager deploys to it, and reports their states.
//!
//! # Connection to the JobManager
//!
//! Its id is the one in its certificate ([`weir_runtime::net::tls::Role`]); it
//! connects only to a node presenting the JobManager's certificate.
//! One QUIC connection (mutual TLS) from this TaskManager's endpoint, which
//! is also its data plane's: one UDP socket per daemon. The control stream
//! carries [`weir_runtime::rpc`] messages; each module fetch is a stream of its own.
//! When the connection is lost the TaskManager cancels every job it runs
//! (there is nobody left to coordinate them) and connects again, with
//! backoff, until a JobManager accepts its registration — so a restarted
//! JobManager gets its TaskManagers back by itself.
//!
//! # Running a job
//!
//! A [`Deployment`] carries the whole graph and every subtask's placement.
//! The TaskManager fetches the modules it lacks (verifying each one's hash),
//! loads them through its compiled-component cache, and calls
//! [`LocalCluster::deploy`] with an exchange that keeps channels between its
//! own subtasks in memory and sends the others over the [`DataPlane`].
//! File sources and sinks are checked against this TaskManager's own
//! [`AllowedRoots`] (`--allow-path`) before anything starts and again when
//! each file is opened: a JobManager's check is not relied upon.
//!
//! # Restoring
//!
//! A [`Deployment`] restarting from a checkpoint carries every subtask's
//! part of it ([`RestorePoint`]). Before its subtasks start, the
//! TaskManager reads the checkpoint's `_metadata` from checkpoint storage
//! and checks that it records exactly the parts it was sent for its own
//! subtasks ([`verify_restore`]), then downloads their state files, each
//! checked by size and SHA-256 ([`weir_runtime::checkpoint::download`]), and reads
//! their timers files (checked by SHA-256 too). Metadata
//! missing, unreadable or not matching, or a file missing or changed, is
//! reported as [`ToJobManager::RestoreFailed`] (and the subtasks fail): the
//! JobManager then restarts from the retained checkpoint before it.
//!
//! This module must not decide placement or job state: the JobManager does.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, watch};

use weir_runtime::checkpoint::acks::{AckLedger, Command};
use weir_runtime::checkpoint::snapshot::{
    StateHandle, get_checked, metadata_path, sha256_hex, verify_restore,
};
use weir_runtime::checkpoint::storage::{CheckpointStorage, DirStorage, StoragePath};
use weir_runtime::connectors::AllowedRoots;
use weir_runtime::job::{JobGraph, ModuleRef, TaskSpec, VertexKind};
use weir_runtime::local::{CheckpointSetup, DeployOptions, SubtaskRestore};
use weir_runtime::local::{Exchange, LocalCluster};
use weir_runtime::modules::ModuleStore;
use weir_runtime::net::tls::{JOBMANAGER_NAME, NodeIdentity, Role};
use weir_runtime::net::{ChannelOptions, DataPlane, Input, InputKey, NetConfig, NetStats, Peer};
use weir_runtime::rpc::InProcessLink;
use weir_runtime::rpc::{
    Deployment, FetchModule, JobReport, ModuleHeader, RestorePoint, SlotRef, SubtaskCheckpoint,
    TaskState, ToJobManager, ToTaskManager, VertexReport, read_frame, write_frame,
};
use weir_runtime::start::StartError;
use weir_runtime::taskmanager::{Abort, FINISHED, JobMetrics, Message, TakenSnapshot, TaskError};
use weir_runtime::wasm::Runtime;

/// Settings of `weir taskmanager`.
#[derive(Debug, Clone)]
pub struct TaskManagerConfig {
    /// Its id; `None`: the one in its certificate. Either way it must be
    /// the certificate's.
    pub id: Option<String>,
    /// The JobManager's RPC address.
    pub jobmanager: SocketAddr,
    /// Task slots offered.
    pub slots: u32,
    /// Module cache, compiled cache and job state live here.
    pub data_dir: PathBuf,
    /// Its certificate, key and the cluster CA.
    pub identity: NodeIdentity,
    /// Where the data plane (and the client side of the control connection) binds.
    pub bind: SocketAddr,
    /// Network buffers and credits.
    pub net: NetConfig,
    /// Where file sources and sinks may read and write (`--allow-path`);
    /// none by default. Checked again when each file is opened, whatever
    /// the JobManager checked.
    pub allowed_roots: AllowedRoots,
}

/// Largest module a TaskManager accepts from its JobManager.
const MAX_FETCH: u64 = 1 << 30;

/// A started TaskManager.
pub struct RunningTaskManager {
    /// Its id.
    pub id: String,
    /// Its data-plane address.
    pub data_address: SocketAddr,
    registrations: watch::Receiver<u64>,
    task: tokio::task::JoinHandle<()>,
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RunningTaskManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningTaskManager")
            .field("id", &self.id)
            .field("data_address", &self.data_address)
            .finish_non_exhaustive()
    }
}

impl RunningTaskManager {
    /// Waits until the TaskManager has registered `n` times in total
    /// (1: the first registration).
    pub async fn registered(&mut self, n: u64) {
        let _ = self.registrations.wait_for(|r| *r >= n).await;
    }

    /// A receiver of the registration count, for readiness messages.
    pub fn registrations(&self) -> watch::Receiver<u64> {
        self.registrations.clone()
    }

    /// Cancels every job and stops.
    pub async fn shutdown(self) {
        self.task.abort();
        self.inner.cancel_all();
        let Some(data) = &self.inner.data else {
            return;
        };
        let endpoint = data.endpoint().clone();
        endpoint.close(0u32.into(), b"taskmanager shutting down");
        // Let the close reach the JobManager (it then drops this
        // TaskManager at once instead of after the heartbeat timeout).
        let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
    }
}

struct LocalJob {
    /// The job id (the map's key adds the attempt).
    job: String,
    /// Checkpoint events for this attempt.
    events: mpsc::UnboundedSender<JobEvent>,
    abort: Abort,
    canceled: Arc<AtomicBool>,
    /// Stops the local sources gracefully (the job drains and finishes).
    stop: Arc<AtomicBool>,
    metrics: Arc<JobMetrics>,
    started: Instant,
    /// Head vertex of each task with local subtasks → how many run here.
    heads: Vec<(usize, u32)>,
    vertices: usize,
}

impl LocalJob {
    /// Its metrics as the JobManager receives them.
    fn report(&self) -> JobReport {
        let mut vertices: Vec<VertexReport> = self
            .metrics
            .vertices
            .iter()
            .take(self.vertices)
            .map(|m| VertexReport {
                records_in: m.records_in.load(Ordering::Relaxed),
                records_out: m.records_out.load(Ordering::Relaxed),
                ..VertexReport::default()
            })
            .collect();
        let wall = self.started.elapsed().as_millis() as u64;
        for (head, n) in &self.heads {
            let m = &self.metrics.vertices[*head];
            let idle = m.idle_ns.load(Ordering::Relaxed) / 1_000_000;
            let bp = m.backpressured_ns.load(Ordering::Relaxed) / 1_000_000;
            let v = &mut vertices[*head];
            v.idle_ms = idle;
            v.backpressured_ms = bp;
            v.busy_ms = (wall * u64::from(*n)).saturating_sub(idle + bp);
        }
        JobReport {
            job: self.job.clone(),
            vertices,
            max_queued_batches: self.metrics.max_queued_batches.load(Ordering::Relaxed),
        }
    }
}

struct Inner {
    id: String,
    slots: u32,
    buffer_size: usize,
    /// Where other TaskManagers reach this one.
    data_address: SocketAddr,
    /// The data plane; `None` in the embedded cluster, whose channels all
    /// stay in memory.
    data: Option<DataPlane>,
    cluster: LocalCluster,
    store: ModuleStore,
    jobs: Mutex<HashMap<String, LocalJob>>,
    /// Attempts (`job#attempt`) canceled before (or while) they were deployed.
    canceled: Mutex<HashSet<String>>,
    /// The latest attempt of each job deployed here.
    deploying: Mutex<HashMap<String, u32>>,
    /// Checkpoint events of each deployment (`job#attempt`), from the
    /// moment its deployment arrives (events queue while it deploys).
    events: Mutex<HashMap<String, mpsc::UnboundedSender<JobEvent>>>,
    /// The current control connection's outbox.
    outbox: Mutex<Option<mpsc::UnboundedSender<ToJobManager>>>,
    /// Bumped whenever a deployment's `run_job` ends.
    ended: watch::Sender<u64>,
    work_dir: PathBuf,
}

impl Inner {
    fn send(&self, message: ToJobManager) {
        if let Some(tx) = self
            .outbox
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            let _ = tx.send(message);
        }
    }

    fn report(
        &self,
        job: &str,
        attempt: u32,
        task: usize,
        subtask: u32,
        state: TaskState,
        error: Option<String>,
    ) {
        self.send(ToJobManager::TaskState {
            job: job.to_owned(),
            attempt,
            task: task as u32,
            subtask,
            state,
            error,
        });
    }

    /// Cancels every attempt of `job` here, including one still being
    /// deployed.
    fn cancel(&self, job: &str) {
        if let Some(attempt) = self
            .deploying
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(job)
        {
            self.canceled
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(format!("{job}#{attempt}"));
        }
        self.for_each_attempt(job, |j| {
            j.canceled.store(true, Ordering::Relaxed);
            j.abort.trigger();
            let _ = j.events.send(JobEvent::Stop);
        });
    }

    /// Calls `f` on every attempt of `job` running here.
    fn for_each_attempt(&self, job: &str, f: impl Fn(&LocalJob)) {
        let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        jobs.values().filter(|j| j.job == job).for_each(f);
    }

    /// Passes a checkpoint event to attempt `attempt` of `job`.
    fn job_event(&self, job: &str, attempt: u32, event: JobEvent) {
        if let Some(events) = self
            .events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&format!("{job}#{attempt}"))
        {
            let _ = events.send(event);
        }
    }

    fn cancel_all(&self) {
        let jobs: Vec<String> = self
            .jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|j| j.job.clone())
            .collect();
        for job in jobs {
            self.cancel(&job);
        }
    }

    /// Stops the sources of `job` here: it drains and finishes.
    fn stop_sources(&self, job: &str) {
        self.for_each_attempt(job, |j| j.stop.store(true, Ordering::Relaxed));
    }

    fn net_stats(&self) -> NetStats {
        self.data.as_ref().map(DataPlane::stats).unwrap_or_default()
    }

    fn unregister_job(&self, key: &str) {
        if let Some(data) = &self.data {
            data.unregister_job(key);
        }
    }

    fn job_reports(&self) -> Vec<JobReport> {
        let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        jobs.values().map(LocalJob::report).collect()
    }

    /// The current report of `job` (its live attempt), if it runs here.
    fn job_report(&self, job: &str) -> Option<JobReport> {
        let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        jobs.values().find(|j| j.job == job).map(LocalJob::report)
    }
}

/// Starts a TaskManager on the current tokio runtime. It connects to the
/// JobManager in the background; [`RunningTaskManager::registered`] waits
/// for the registration.
pub async fn start(
    config: TaskManagerConfig,
    runtime: Arc<Runtime>,
) -> Result<RunningTaskManager, StartError> {
    let data_dir_error = |message: String| StartError::DataDir {
        path: config.data_dir.clone(),
        message,
    };
    std::fs::create_dir_all(&config.data_dir).map_err(|e| data_dir_error(e.to_string()))?;
    let id = certified_id(&config.identity, config.id.as_deref()).map_err(StartError::Identity)?;
    let store = ModuleStore::open(&config.data_dir.join("modules"))
        .map_err(|e| data_dir_error(e.to_string()))?;
    let endpoint =
        weir_runtime::net::tls::endpoint(config.bind, &config.identity).map_err(|e| {
            StartError::Bind {
                address: config.bind,
                message: e.to_string(),
            }
        })?;
    let data = DataPlane::new(endpoint, config.net);
    let data_address = advertised(data.local_addr(), config.jobmanager);
    let work_dir = config.data_dir.join("work");
    let _ = std::fs::remove_dir_all(&work_dir);
    let inner = Arc::new(Inner {
        id: id.clone(),
        slots: config.slots,
        buffer_size: config.net.buffer_size,
        data_address,
        cluster: LocalCluster::new(runtime, tokio::runtime::Handle::current())
            .with_allowed_roots(config.allowed_roots.clone()),
        data: Some(data),
        store,
        jobs: Mutex::new(HashMap::new()),
        canceled: Mutex::new(HashSet::new()),
        deploying: Mutex::new(HashMap::new()),
        events: Mutex::new(HashMap::new()),
        outbox: Mutex::new(None),
        ended: watch::Sender::new(0),
        work_dir,
    });
    let (registered_tx, registrations) = watch::channel(0u64);
    let task = {
        let inner = inner.clone();
        let jobmanager = config.jobmanager;
        tokio::spawn(async move {
            let mut backoff = Duration::from_millis(200);
            loop {
                match session(&inner, jobmanager, &registered_tx).await {
                    Ok(()) => backoff = Duration::from_millis(200),
                    Err(e) => {
                        tracing::info!(taskmanager = %inner.id, "jobmanager {jobmanager}: {e}")
                    }
                }
                *inner.outbox.lock().unwrap_or_else(|p| p.into_inner()) = None;
                inner.cancel_all();
                // Reconnect with backoff (a retry delay, not a synchronization).
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        })
    };
    Ok(RunningTaskManager {
        id,
        data_address,
        registrations,
        task,
        inner,
    })
}

/// Settings of an in-process TaskManager (the embedded cluster).
#[derive(Debug, Clone)]
pub struct InProcessConfig {
    /// Its id.
    pub id: String,
    /// Task slots offered.
    pub slots: u32,
    /// Job state lives here (`work/` under it).
    pub data_dir: PathBuf,
    /// The JobManager's module store folder: shared, so nothing is fetched.
    pub modules_dir: PathBuf,
    /// Where file sources and sinks may read and write.
    pub allowed_roots: AllowedRoots,
    /// Records per batch on channels (as [`NetConfig::buffer_size`]).
    pub buffer_size: usize,
}

/// A TaskManager running in this process, attached to an in-process
/// JobManager (`JobManager::attach`): the same code
/// as the daemon's, without a network.
pub struct InProcessTaskManager {
    inner: Arc<Inner>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    forwarder: tokio::task::AbortHandle,
}

impl std::fmt::Debug for InProcessTaskManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcessTaskManager")
            .field("id", &self.inner.id)
            .finish_non_exhaustive()
    }
}

impl InProcessTaskManager {
    /// Starts it on the current tokio runtime, reading and answering the
    /// JobManager through `link`.
    pub fn start(
        config: InProcessConfig,
        runtime: Arc<Runtime>,
        link: InProcessLink,
    ) -> Result<InProcessTaskManager, StartError> {
        let data_dir_error = |message: String| StartError::DataDir {
            path: config.data_dir.clone(),
            message,
        };
        std::fs::create_dir_all(&config.data_dir).map_err(|e| data_dir_error(e.to_string()))?;
        let store =
            ModuleStore::open(&config.modules_dir).map_err(|e| data_dir_error(e.to_string()))?;
        let work_dir = config.data_dir.join("work");
        let inner = Arc::new(Inner {
            id: config.id,
            slots: config.slots,
            buffer_size: config.buffer_size,
            data_address: SocketAddr::from(([0, 0, 0, 0], 0)),
            data: None,
            cluster: LocalCluster::new(runtime, tokio::runtime::Handle::current())
                .with_allowed_roots(config.allowed_roots),
            store,
            jobs: Mutex::new(HashMap::new()),
            canceled: Mutex::new(HashSet::new()),
            deploying: Mutex::new(HashMap::new()),
            events: Mutex::new(HashMap::new()),
            outbox: Mutex::new(Some(link.to_jobmanager.clone())),
            ended: watch::Sender::new(0),
            work_dir,
        });
        let heartbeat = spawn_heartbeat(inner.clone(), link.to_jobmanager, link.heartbeat_interval);
        let reader = {
            let inner = inner.clone();
            let mut from_jobmanager = link.from_jobmanager;
            tokio::spawn(async move {
                while let Some(message) = from_jobmanager.recv().await {
                    dispatch(&inner, &Upstream::InProcess, message);
                }
            })
        };
        Ok(InProcessTaskManager {
            inner,
            tasks: vec![heartbeat, reader],
            forwarder: link.forwarder,
        })
    }

    /// Stops the sources of `job`: it drains and finishes normally (what
    /// Ctrl-C does to `weir run`).
    pub fn stop_sources(&self, job: &str) {
        self.inner.stop_sources(job);
    }

    /// Live metrics of the attempt of `job` running here.
    pub fn metrics(&self, job: &str) -> Option<Arc<JobMetrics>> {
        let jobs = self.inner.jobs.lock().unwrap_or_else(|p| p.into_inner());
        jobs.values()
            .find(|j| j.job == job)
            .map(|j| j.metrics.clone())
    }

    /// Waits until no attempt of `job` runs here (its last `run_job` ended:
    /// a finished job's sinks have committed).
    pub async fn wait_idle(&self, job: &str) {
        let mut ended = self.inner.ended.subscribe();
        let prefix = format!("{job}#");
        loop {
            let busy = self
                .inner
                .events
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .keys()
                .any(|k| k.starts_with(&prefix));
            if !busy || ended.changed().await.is_err() {
                return;
            }
        }
    }

    /// Cancels every job and stops talking to the JobManager.
    pub fn shutdown(self) {
        self.forwarder.abort();
        for t in &self.tasks {
            t.abort();
        }
        *self.inner.outbox.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.inner.cancel_all();
    }
}

/// The address other TaskManagers use to reach `bound`: itself, unless it
/// is a wildcard (`0.0.0.0`), then the local address on the route to the
/// JobManager (the interface the cluster's traffic uses), same port.
fn advertised(bound: SocketAddr, jobmanager: SocketAddr) -> SocketAddr {
    if !bound.ip().is_unspecified() {
        return bound;
    }
    let any: SocketAddr = if jobmanager.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    // Connecting a UDP socket sends nothing; it only picks the route.
    let ip = std::net::UdpSocket::bind(any)
        .and_then(|s| s.connect(jobmanager).and_then(|()| s.local_addr()))
        .map(|a| a.ip())
        .unwrap_or(bound.ip());
    SocketAddr::new(ip, bound.port())
}

/// The id in `identity`'s certificate, which `wanted` (if given) must
/// equal: the JobManager accepts a TaskManager only under that id.
fn certified_id(identity: &NodeIdentity, wanted: Option<&str>) -> Result<String, String> {
    match (identity.role(), wanted) {
        (Some(Role::TaskManager(id)), None) => Ok(id),
        (Some(Role::TaskManager(id)), Some(wanted)) if id == wanted => Ok(id),
        (Some(Role::TaskManager(id)), Some(wanted)) => Err(format!(
            "the id is `{wanted}` but the certificate is TaskManager `{id}`'s"
        )),
        (Some(Role::JobManager), _) => {
            Err("the certificate is the JobManager's, not a TaskManager's".to_owned())
        }
        (None, _) => Err(format!(
            "the certificate names no TaskManager (a shared `taskmanager.pem` from an older \
             `weir cluster init`?): issue one per TaskManager with `weir cluster issue DIR \
             --taskmanager {}`",
            wanted.unwrap_or("ID")
        )),
    }
}

/// One connection to the JobManager, until it is lost.
async fn session(
    inner: &Arc<Inner>,
    jobmanager: SocketAddr,
    registered: &watch::Sender<u64>,
) -> Result<(), String> {
    let Some(data) = &inner.data else {
        return Err("no network endpoint".to_owned());
    };
    let conn = data
        .endpoint()
        .connect(jobmanager, JOBMANAGER_NAME)
        .map_err(|e| format!("cannot connect: {e}"))?
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
    write_frame(
        &mut send,
        &ToJobManager::Register {
            id: inner.id.clone(),
            slots: inner.slots,
            data_address: inner.data_address,
            version: env!("CARGO_PKG_VERSION").to_owned(),
        },
    )
    .await
    .map_err(|e| e.to_string())?;
    let interval = match read_frame::<_, ToTaskManager>(&mut recv).await {
        Ok(Some(ToTaskManager::Registered {
            heartbeat_interval_ms,
        })) => Duration::from_millis(heartbeat_interval_ms.max(10)),
        Ok(Some(ToTaskManager::Rejected { reason })) => return Err(format!("rejected: {reason}")),
        Ok(_) => return Err("no registration answer".to_owned()),
        Err(e) => return Err(format!("registration failed: {e}")),
    };
    tracing::info!(taskmanager = %inner.id, %jobmanager, "registered");
    let (tx, mut rx) = mpsc::unbounded_channel::<ToJobManager>();
    *inner.outbox.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx.clone());
    registered.send_modify(|n| *n += 1);

    let writer = tokio::spawn(async move {
        while let Some(message) = rx.recv().await {
            if write_frame(&mut send, &message).await.is_err() {
                break;
            }
        }
    });
    let heartbeat = spawn_heartbeat(inner.clone(), tx, interval);
    let upstream = Upstream::Quic(conn);
    let result = loop {
        match read_frame::<_, ToTaskManager>(&mut recv).await {
            Ok(Some(message)) => dispatch(inner, &upstream, message),
            Ok(None) => break Err("the JobManager closed the connection".to_owned()),
            Err(e) => break Err(format!("connection lost: {e}")),
        }
    };
    heartbeat.abort();
    writer.abort();
    result
}

/// How a TaskManager reaches its JobManager: over QUIC, or in the same
/// process (the embedded cluster, which shares the JobManager's module
/// store, so nothing is ever fetched).
#[derive(Clone)]
enum Upstream {
    Quic(quinn::Connection),
    InProcess,
}

/// Sends a heartbeat with every job's metrics each `interval`, until the
/// outbox closes.
fn spawn_heartbeat(
    inner: Arc<Inner>,
    tx: mpsc::UnboundedSender<ToJobManager>,
    interval: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        loop {
            tick.tick().await;
            let message = ToJobManager::Heartbeat {
                net: inner.net_stats(),
                jobs: inner.job_reports(),
            };
            if tx.send(message).is_err() {
                break;
            }
        }
    })
}

/// Carries out one message of the JobManager.
fn dispatch(inner: &Arc<Inner>, upstream: &Upstream, message: ToTaskManager) {
    match message {
        ToTaskManager::Deploy(deployment) => {
            inner
                .deploying
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(deployment.job.clone(), deployment.attempt);
            let (events_tx, events_rx) = mpsc::unbounded_channel();
            inner
                .events
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(
                    format!("{}#{}", deployment.job, deployment.attempt),
                    events_tx,
                );
            let inner = inner.clone();
            let upstream = upstream.clone();
            tokio::spawn(async move { run_job(inner, upstream, *deployment, events_rx).await });
        }
        ToTaskManager::Cancel { job } => inner.cancel(&job),
        ToTaskManager::TriggerCheckpoint {
            job,
            attempt,
            checkpoint,
        } => inner.job_event(&job, attempt, JobEvent::Trigger(checkpoint)),
        ToTaskManager::CheckpointComplete {
            job,
            attempt,
            checkpoint,
        } => inner.job_event(&job, attempt, JobEvent::Complete(checkpoint)),
        ToTaskManager::CheckpointAborted {
            job,
            attempt,
            checkpoint,
        } => inner.job_event(&job, attempt, JobEvent::Aborted(checkpoint)),
        ToTaskManager::JobFinished { job, attempt } => {
            inner.job_event(&job, attempt, JobEvent::JobFinished)
        }
        other => tracing::debug!("ignoring {other:?}"),
    }
}

/// The exchange of one job on this TaskManager.
struct NetExchange<'a> {
    me: &'a str,
    job: &'a str,
    placement: &'a [Vec<SlotRef>],
    peers: &'a HashMap<String, SocketAddr>,
    /// The TaskManagers of the placement: the only ones whose data streams
    /// this job's inputs accept.
    senders: Arc<BTreeSet<String>>,
    data: Option<&'a DataPlane>,
    options: ChannelOptions,
}

impl Exchange for NetExchange<'_> {
    fn is_local(&self, task: usize, subtask: u32) -> bool {
        self.placement[task][subtask as usize].taskmanager == self.me
    }

    fn remote_sender(&self, task: usize, subtask: u32, abort: &Abort) -> mpsc::Sender<Message> {
        let tm = &self.placement[task][subtask as usize].taskmanager;
        let key = InputKey {
            job: self.job.to_owned(),
            task: task as u32,
            subtask,
        };
        match (self.peers.get(tm), self.data) {
            (Some(addr), Some(data)) => {
                let peer = Peer {
                    id: tm.clone(),
                    addr: *addr,
                };
                data.open_channel(peer, key, self.options, abort.clone())
            }
            _ => {
                // The JobManager always sends every peer, and places an
                // embedded job on its one TaskManager: a bug.
                tracing::error!("no way to reach TaskManager {tm}");
                abort.trigger();
                mpsc::channel(1).0
            }
        }
    }

    fn register_input(&self, task: usize, subtask: u32, channels: u32, tx: mpsc::Sender<Message>) {
        let Some(data) = self.data else {
            return;
        };
        data.register_input(
            InputKey {
                job: self.job.to_owned(),
                task: task as u32,
                subtask,
            },
            Input {
                tx,
                channels,
                senders: self.senders.clone(),
            },
        );
    }
}

/// Whether `tasks` is a chaining of `graph` ([`weir_runtime::job::check_tasks`])
/// and `placement` names a slot for every subtask of every task, and no
/// more.
fn check_deployment(
    graph: &JobGraph,
    tasks: &[TaskSpec],
    placement: &[Vec<SlotRef>],
) -> Result<(), String> {
    weir_runtime::job::check_tasks(graph, tasks)?;
    if placement.len() != tasks.len() {
        return Err(format!(
            "{} tasks, placement for {}",
            tasks.len(),
            placement.len()
        ));
    }
    match tasks
        .iter()
        .zip(placement)
        .position(|(t, p)| p.len() != t.parallelism as usize)
    {
        Some(t) => Err(format!(
            "task {t} has {} subtasks, placement for {}",
            tasks[t].parallelism,
            placement[t].len()
        )),
        None => Ok(()),
    }
}

async fn run_job(
    inner: Arc<Inner>,
    upstream: Upstream,
    deployment: Deployment,
    events_rx: mpsc::UnboundedReceiver<JobEvent>,
) {
    let Deployment {
        job,
        mut graph,
        tasks,
        placement,
        peers,
        attempt,
        checkpoints,
        restore,
    } = deployment;
    let key = format!("{job}#{attempt}");
    let _events_guard = EventsGuard(inner.clone(), key.clone());
    let local: Vec<(usize, u32)> = placement
        .iter()
        .enumerate()
        .flat_map(|(t, slots)| {
            slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.taskmanager == inner.id)
                .map(move |(s, _)| (t, s as u32))
        })
        .collect();
    let fail_all = |error: String| {
        for (t, s) in &local {
            inner.report(
                &job,
                attempt,
                *t,
                *s,
                TaskState::Failed,
                Some(error.clone()),
            );
        }
    };
    // The task list and the placement must fit the graph before anything
    // indexes into them.
    if let Err(why) = check_deployment(&graph, &tasks, &placement) {
        fail_all(format!("the deployment does not fit its graph: {why}"));
        return;
    }
    if let Err(e) = fetch_modules(&inner, &upstream, &mut graph).await {
        fail_all(e);
        return;
    }
    let job_dir = inner.work_dir.join(&key);
    let storage: Option<Arc<dyn CheckpointStorage>> = checkpoints
        .as_ref()
        .map(|c| Arc::new(DirStorage::new(c.storage.clone())) as Arc<dyn CheckpointStorage>);
    // Download what the local subtasks restore.
    let restored = match (&restore, &storage) {
        (Some(point), Some(storage)) => {
            let checkpoint = point.checkpoint;
            let storage = storage.clone();
            let point = point.clone();
            let local = local.clone();
            let dir = job_dir.join("restore");
            let job_id = job.clone();
            let downloaded = tokio::task::spawn_blocking(move || {
                download_restore(&job_id, &point, &local, storage.as_ref(), &dir)
            })
            .await;
            match downloaded {
                Ok(Ok(r)) => Some(r),
                Ok(Err(e)) => {
                    inner.send(ToJobManager::RestoreFailed {
                        job: job.clone(),
                        attempt,
                        checkpoint,
                        reason: e.to_string(),
                    });
                    fail_all(format!("cannot restore checkpoint: {e}"));
                    return;
                }
                Err(e) => {
                    fail_all(format!("restore panicked: {e}"));
                    return;
                }
            }
        }
        _ => None,
    };
    let (taken_tx, taken_rx) = mpsc::unbounded_channel();
    let deployed = {
        let inner = inner.clone();
        let key = key.clone();
        let graph = graph.clone();
        let tasks = tasks.clone();
        let job_dir = job_dir.clone();
        let restored = restored.clone();
        let with_checkpoints = storage.is_some();
        tokio::task::spawn_blocking(move || {
            let modules = inner.cluster.load_modules(&graph)?;
            let options = ChannelOptions {
                buffer_size: inner.buffer_size,
                buffer_timeout: Duration::from_millis(graph.settings.buffer_timeout_ms),
            };
            let exchange = NetExchange {
                me: &inner.id,
                job: &key,
                placement: &placement,
                peers: &peers,
                senders: Arc::new(
                    placement
                        .iter()
                        .flatten()
                        .map(|slot| slot.taskmanager.clone())
                        .collect(),
                ),
                data: inner.data.as_ref(),
                options,
            };
            let restore_map = restored.as_ref().map(|r| &r.subtasks);
            let deploy_options = DeployOptions {
                checkpoints: with_checkpoints.then(|| CheckpointSetup {
                    local_dir: job_dir.join("snapshots"),
                    taken: taken_tx,
                }),
                restore: restore_map,
                attempt,
            };
            inner.cluster.deploy(
                &graph,
                &tasks,
                &modules,
                job_dir.join("state"),
                &exchange,
                &deploy_options,
            )
        })
        .await
    };
    let deployed = match deployed {
        Ok(Ok(d)) => d,
        Ok(Err(e)) => {
            inner.unregister_job(&key);
            fail_all(e.to_string());
            return;
        }
        Err(e) => {
            inner.unregister_job(&key);
            fail_all(format!("deployment panicked: {e}"));
            return;
        }
    };
    let canceled = Arc::new(AtomicBool::new(false));
    let mut heads: HashMap<usize, u32> = HashMap::new();
    for s in &deployed.subtasks {
        *heads.entry(tasks[s.task].head()).or_default() += 1;
    }
    let events_tx = inner
        .events
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .cloned()
        .unwrap_or_else(|| mpsc::unbounded_channel().0);
    inner.jobs.lock().unwrap_or_else(|p| p.into_inner()).insert(
        key.clone(),
        LocalJob {
            job: job.clone(),
            abort: deployed.abort.clone(),
            canceled: canceled.clone(),
            stop: deployed.stop.clone(),
            metrics: deployed.metrics.clone(),
            started: deployed.started,
            heads: heads.into_iter().collect(),
            vertices: graph.vertices.len(),
            events: events_tx,
        },
    );
    if inner
        .canceled
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(&key)
    {
        canceled.store(true, Ordering::Relaxed);
        deployed.abort.trigger();
    }
    // Checkpoint bookkeeping of this attempt, on its own task.
    let checkpointer = storage.map(|storage| {
        let ctx = JobCheckpoints {
            inner: inner.clone(),
            job: job.clone(),
            attempt,
            storage,
            backend: match graph.settings.state_backend {
                weir_runtime::job::StateBackendKind::RocksDb => {
                    weir_runtime::state::BackendKind::RocksDb
                }
                weir_runtime::job::StateBackendKind::Heap => weir_runtime::state::BackendKind::Heap,
            },
            triggers: deployed.triggers.clone(),
            finished: restored
                .as_ref()
                .map(|r| r.finished.clone())
                .unwrap_or_default(),
            previous: restored
                .as_ref()
                .map(|r| r.previous.clone())
                .unwrap_or_default(),
        };
        tokio::spawn(ctx.run(taken_rx, events_rx))
    });
    for s in &deployed.subtasks {
        inner.report(&job, attempt, s.task, s.subtask, TaskState::Running, None);
    }
    let mut waits = Vec::new();
    for s in deployed.subtasks {
        let inner = inner.clone();
        let job = job.clone();
        let canceled = canceled.clone();
        waits.push(tokio::spawn(async move {
            let result = match s.join.await {
                Ok(r) => r,
                Err(e) => Err(TaskError::Panicked(e.to_string())),
            };
            let (state, error) = match result {
                Ok(()) => (TaskState::Finished, None),
                Err(TaskError::Aborted) => {
                    let why = if canceled.load(Ordering::Relaxed) {
                        "canceled by the JobManager"
                    } else {
                        "aborted: a network channel or another subtask of the job failed"
                    };
                    (TaskState::Canceled, Some(why.to_owned()))
                }
                Err(e) => (TaskState::Failed, Some(e.to_string())),
            };
            // Metrics first, on the same ordered stream: when the
            // JobManager sees the last subtask end, it has the final counts.
            if let Some(report) = inner.job_report(&job) {
                inner.send(ToJobManager::Heartbeat {
                    net: inner.net_stats(),
                    jobs: vec![report],
                });
            }
            inner.report(&job, attempt, s.task, s.subtask, state, error);
        }));
    }
    for w in waits {
        let _ = w.await;
    }
    // Keep the checkpoint task until the JobManager says the job finished
    // (final commits) or cancels it; an ended attempt has nothing to do.
    let events = inner
        .jobs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .map(|j| j.events.clone());
    if let (Some(checkpointer), Some(events)) = (checkpointer, events) {
        if canceled.load(Ordering::Relaxed) || deployed.abort.is_set() {
            let _ = events.send(JobEvent::Stop);
        }
        let _ = checkpointer.await;
    }
    inner
        .jobs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&key);
    inner
        .canceled
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&key);
    inner.unregister_job(&key);
    let _ = std::fs::remove_dir_all(&job_dir);
}

/// Forgets a deployment's event queue when its `run_job` ends, however it ends.
struct EventsGuard(Arc<Inner>, String);

impl Drop for EventsGuard {
    fn drop(&mut self) {
        self.0
            .events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.1);
        self.0.ended.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// What a TaskManager restores for its subtasks of one deployment.
#[derive(Debug, Clone, Default)]
struct Restored {
    subtasks: HashMap<(usize, u32), SubtaskRestore>,
    /// Subtasks that had finished, with their (already committed) part.
    finished: HashMap<(u32, u32), SubtaskCheckpoint>,
    /// The restored state handles: the base of the next incremental upload.
    previous: HashMap<(usize, u32), StateHandle>,
}

/// Downloads what the `local` subtasks of job `job` restore from `point`
/// into `dir`. First reads the checkpoint's `_metadata` and checks that it
/// records the very parts this TaskManager was sent for them
/// ([`verify_restore`]); then downloads their state files (each checked by
/// size and hash) and reads their timers. Any failure is why the
/// checkpoint cannot be restored ([`ToJobManager::RestoreFailed`]).
fn download_restore(
    job: &str,
    point: &RestorePoint,
    local: &[(usize, u32)],
    storage: &dyn CheckpointStorage,
    dir: &std::path::Path,
) -> Result<Restored, String> {
    let parts: Vec<((u32, u32), &SubtaskCheckpoint)> = point
        .subtasks
        .iter()
        .filter(|((t, s), _)| local.contains(&(*t as usize, *s)))
        .map(|(id, part)| (*id, part))
        .collect();
    if !parts.is_empty() {
        let path = metadata_path(job, point.checkpoint).map_err(|e| e.to_string())?;
        let bytes = storage.get_bytes(&path).map_err(|e| e.to_string())?;
        verify_restore(&path, &bytes, job, point.checkpoint, &parts).map_err(|e| e.to_string())?;
    }
    let mut out = Restored::default();
    for ((t, s), part) in &point.subtasks {
        let (t, s) = (*t as usize, *s);
        if !local.contains(&(t, s)) {
            continue;
        }
        let mut restore = SubtaskRestore {
            finished: part.finished,
            source: part.source.clone(),
            sink: part.sink.clone(),
            ..SubtaskRestore::default()
        };
        if part.finished {
            out.finished.insert(
                (t as u32, s),
                SubtaskCheckpoint {
                    finished: true,
                    source: part.source.clone(),
                    ..SubtaskCheckpoint::default()
                },
            );
        }
        for (vertex, handle) in &part.states {
            let to = dir.join(format!("{t}-{s}-{vertex}"));
            weir_runtime::checkpoint::snapshot::download(handle, storage, &to)
                .map_err(|e| e.to_string())?;
            restore.states.insert(*vertex, to);
            out.previous.insert((*vertex, s), handle.clone());
        }
        if let Some(path) = &part.timers {
            let bytes = get_checked(storage, path, part.timers_sha256.as_deref())
                .map_err(|e| e.to_string())?;
            let timers: Vec<(usize, weir_runtime::taskmanager::Timers)> =
                serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.as_str()))?;
            restore.timers = timers.into_iter().collect();
        }
        out.subtasks.insert((t, s), restore);
    }
    Ok(out)
}

/// Events of one deployment's checkpoints, in order.
#[derive(Debug)]
enum JobEvent {
    Trigger(u64),
    Complete(u64),
    Aborted(u64),
    /// Every subtask of the job finished: commit everything pending.
    JobFinished,
    /// The attempt ended without finishing: drop everything.
    Stop,
}

/// The outcome of one background upload: (checkpoint, subtask, the part to
/// acknowledge, alignment), or why it failed.
type Uploaded = Result<(u64, (u32, u32), SubtaskCheckpoint, Duration), (u64, (u32, u32), String)>;

/// The shell of one deployment's checkpoint bookkeeping: feeds its
/// [`AckLedger`] the snapshots local subtasks take, the outcomes of their
/// uploads and the JobManager's checkpoint events, and carries out the
/// ledger's commands (uploads run on the blocking pool).
struct JobCheckpoints {
    inner: Arc<Inner>,
    job: String,
    attempt: u32,
    storage: Arc<dyn CheckpointStorage>,
    backend: weir_runtime::state::BackendKind,
    triggers: HashMap<(usize, u32), Arc<std::sync::atomic::AtomicU64>>,
    /// Restored: finished subtasks' last parts (the ledger starts from them).
    finished: HashMap<(u32, u32), SubtaskCheckpoint>,
    /// Restored: the state handles (the ledger starts from them).
    previous: HashMap<(usize, u32), StateHandle>,
}

impl JobCheckpoints {
    async fn run(
        mut self,
        mut taken: mpsc::UnboundedReceiver<TakenSnapshot>,
        mut events: mpsc::UnboundedReceiver<JobEvent>,
    ) {
        let mut ledger = AckLedger::new(
            std::mem::take(&mut self.finished),
            std::mem::take(&mut self.previous),
        );
        let (uploaded_tx, mut uploaded_rx) = mpsc::unbounded_channel();
        loop {
            let commands = tokio::select! {
                Some(snapshot) = taken.recv() => {
                    let subtask = (snapshot.task, snapshot.subtask);
                    if snapshot.checkpoint == FINISHED {
                        ledger.finished(subtask, snapshot.source, snapshot.sink)
                    } else {
                        let base = ledger.taken(
                            snapshot.checkpoint,
                            subtask,
                            snapshot.states.iter().map(|(v, _)| *v),
                            snapshot.sink.clone(),
                        );
                        self.upload(snapshot, base, &uploaded_tx);
                        Vec::new()
                    }
                }
                Some(done) = uploaded_rx.recv() => match done {
                    Ok((id, subtask, part, alignment)) => ledger.uploaded(id, subtask, part, alignment),
                    Err((id, subtask, reason)) => ledger.upload_failed(id, subtask, reason),
                },
                event = events.recv() => match event {
                    Some(JobEvent::Trigger(id)) => ledger.trigger(id),
                    Some(JobEvent::Complete(id)) => ledger.complete(id),
                    Some(JobEvent::Aborted(id)) => {
                        ledger.aborted(id);
                        Vec::new()
                    }
                    Some(JobEvent::JobFinished) => {
                        let error = self.carry_out(ledger.job_finished());
                        self.drain(&mut ledger, uploaded_tx, uploaded_rx).await;
                        self.inner.send(ToJobManager::Committed {
                            job: self.job.clone(),
                            attempt: self.attempt,
                            error,
                        });
                        return;
                    }
                    Some(JobEvent::Stop) | None => {
                        ledger.stop();
                        self.drain(&mut ledger, uploaded_tx, uploaded_rx).await;
                        return;
                    }
                },
            };
            self.carry_out(commands);
        }
    }

    /// After the attempt ended: waits for the uploads still running and
    /// acks each, so the JobManager deletes what nobody will reference.
    async fn drain(
        &self,
        ledger: &mut AckLedger,
        uploaded_tx: mpsc::UnboundedSender<Uploaded>,
        mut uploaded_rx: mpsc::UnboundedReceiver<Uploaded>,
    ) {
        // Only the uploads hold senders now: should one die without
        // reporting, `recv` ends instead of waiting forever.
        drop(uploaded_tx);
        while !ledger.quiet() {
            let commands = match uploaded_rx.recv().await {
                Some(Ok((id, subtask, part, alignment))) => {
                    ledger.uploaded(id, subtask, part, alignment)
                }
                Some(Err((id, subtask, reason))) => ledger.upload_failed(id, subtask, reason),
                None => return,
            };
            self.carry_out(commands);
        }
    }

    /// Carries out the ledger's commands, in order; returns why a commit
    /// failed, if one did.
    fn carry_out(&self, commands: Vec<Command>) -> Option<String> {
        let mut failed = None;
        for command in commands {
            match command {
                Command::InjectBarrier { checkpoint } => {
                    for trigger in self.triggers.values() {
                        trigger.fetch_max(checkpoint, Ordering::AcqRel);
                    }
                }
                Command::Ack {
                    checkpoint,
                    subtask: (task, subtask),
                    part,
                    alignment,
                } => self.inner.send(ToJobManager::Ack {
                    job: self.job.clone(),
                    attempt: self.attempt,
                    checkpoint,
                    task,
                    subtask,
                    snapshot: part,
                    alignment_ms: alignment.as_millis() as u64,
                }),
                Command::Decline {
                    checkpoint,
                    subtask: (task, subtask),
                    reason,
                } => self.inner.send(ToJobManager::Decline {
                    job: self.job.clone(),
                    attempt: self.attempt,
                    checkpoint,
                    task,
                    subtask,
                    reason,
                }),
                Command::Commit(committable) => {
                    if let Err(e) = weir_runtime::connectors::commit(
                        &committable,
                        self.inner.cluster.allowed_roots(),
                    ) {
                        // The data stays pending; a restore commits it again.
                        tracing::error!(job = %self.job, "sink commit failed: {e}");
                        failed.get_or_insert_with(|| format!("sink commit failed: {e}"));
                    }
                }
            }
        }
        failed
    }

    /// Uploads `snapshot` on the blocking pool, each vertex's state
    /// incrementally from `base`, then deletes the local snapshot and
    /// reports the outcome on `uploaded`.
    fn upload(
        &self,
        snapshot: TakenSnapshot,
        base: HashMap<usize, StateHandle>,
        uploaded: &mpsc::UnboundedSender<Uploaded>,
    ) {
        let storage = self.storage.clone();
        let job = self.job.clone();
        let backend = self.backend;
        let uploaded = uploaded.clone();
        tokio::task::spawn_blocking(move || {
            let id = snapshot.checkpoint;
            let subtask = (snapshot.task, snapshot.subtask);
            let result = upload_snapshot(&snapshot, storage.as_ref(), &job, backend, &base);
            let message = match result {
                Ok(part) => Ok((id, subtask, part, snapshot.alignment)),
                Err(e) => Err((id, subtask, e)),
            };
            // The local snapshot (hard links) is no longer needed.
            if let Some(dir) = snapshot.states.first().and_then(|(_, d)| d.parent()) {
                let _ = std::fs::remove_dir_all(dir);
            }
            let _ = uploaded.send(message);
        });
    }
}

/// Uploads one subtask's synchronous snapshot: state, timers.
fn upload_snapshot(
    snapshot: &TakenSnapshot,
    storage: &dyn CheckpointStorage,
    job: &str,
    backend: weir_runtime::state::BackendKind,
    previous: &HashMap<usize, StateHandle>,
) -> Result<SubtaskCheckpoint, String> {
    let e = |e: weir_runtime::checkpoint::CheckpointError| e.to_string();
    let (t, s, id) = (snapshot.task, snapshot.subtask, snapshot.checkpoint);
    let private = StoragePath::new(format!("{job}/chk-{id}/{t}-{s}")).map_err(e)?;
    let shared = StoragePath::new(format!("{job}/shared")).map_err(e)?;
    let mut states = Vec::new();
    for (vertex, dir) in &snapshot.states {
        let handle = weir_runtime::checkpoint::snapshot::upload(
            dir,
            storage,
            &private.join(&vertex.to_string()).map_err(e)?,
            &shared,
            previous.get(vertex),
            backend,
        )
        .map_err(e)?;
        states.push((*vertex, handle));
    }
    let (timers, timers_sha256) = if snapshot.timers.is_empty() {
        (None, None)
    } else {
        let path = private.join("timers.json").map_err(e)?;
        let bytes = serde_json::to_vec(&snapshot.timers).map_err(|e| e.to_string())?;
        storage.put_bytes(&path, &bytes).map_err(e)?;
        (Some(path), Some(sha256_hex(&bytes)))
    };
    Ok(SubtaskCheckpoint {
        finished: false,
        states,
        timers,
        timers_sha256,
        source: snapshot.source.clone(),
        sink: snapshot.sink.clone(),
    })
}

/// Makes every operator module of `graph` a local file: fetches the ones not
/// cached yet (verifying their hash) and rewrites `sha256:` references to paths.
async fn fetch_modules(
    inner: &Arc<Inner>,
    upstream: &Upstream,
    graph: &mut JobGraph,
) -> Result<(), String> {
    for vertex in &mut graph.vertices {
        let VertexKind::Operator(op) = &mut vertex.kind else {
            continue;
        };
        let ModuleRef::Hash(hash) = &op.module else {
            return Err(format!(
                "operator `{}`: module {} is not a content hash (a JobManager bug)",
                vertex.id, op.module
            ));
        };
        let path = inner.store.blob_path(hash);
        if !path.exists() {
            let Upstream::Quic(conn) = upstream else {
                return Err(format!(
                    "operator `{}`: module {hash} is missing from the embedded module store",
                    vertex.id
                ));
            };
            let bytes = fetch(conn, hash).await.map_err(|e| {
                format!("operator `{}`: cannot fetch module {hash}: {e}", vertex.id)
            })?;
            let store_hash = hash.clone();
            let inner2 = inner.clone();
            tokio::task::spawn_blocking(move || inner2.store.put_blob(&store_hash, &bytes))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("operator `{}`: module {hash}: {e}", vertex.id))?;
        }
        op.module = ModuleRef::Path(path);
    }
    Ok(())
}

async fn fetch(conn: &quinn::Connection, hash: &str) -> Result<Vec<u8>, String> {
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
    write_frame(
        &mut send,
        &FetchModule {
            hash: hash.to_owned(),
        },
    )
    .await
    .map_err(|e| e.to_string())?;
    let _ = send.finish();
    let header: ModuleHeader = read_frame(&mut recv)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the JobManager closed the stream")?;
    let size = match (header.size, header.error) {
        (Some(size), _) if size <= MAX_FETCH => size,
        (Some(size), _) => return Err(format!("module of {size} bytes is over {MAX_FETCH}")),
        (None, error) => return Err(error.unwrap_or_else(|| "refused".to_owned())),
    };
    let mut bytes = Vec::with_capacity(size as usize);
    (&mut recv)
        .take(size)
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 != size {
        return Err(format!("got {} of {size} bytes", bytes.len()));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A restore point of checkpoint 3 of job `j` with two subtasks, each
    /// with a state file uploaded to `storage`.
    fn restore_point(tmp: &std::path::Path, storage: &DirStorage) -> RestorePoint {
        let subtasks = (0..2u32)
            .map(|s| {
                let local = tmp.join(format!("snap-{s}"));
                std::fs::create_dir_all(&local).unwrap();
                std::fs::write(local.join("heap.snapshot"), format!("state of {s}")).unwrap();
                let handle = weir_runtime::checkpoint::upload(
                    &local,
                    storage,
                    &StoragePath::new(format!("j/chk-3/0-{s}/1")).unwrap(),
                    &StoragePath::new("j/shared").unwrap(),
                    None,
                    weir_runtime::state::BackendKind::Heap,
                )
                .unwrap();
                let timers = StoragePath::new(format!("j/chk-3/0-{s}/timers.json")).unwrap();
                let bytes = format!("[[1,[[{s},[1,2]]]]]").into_bytes();
                storage.put_bytes(&timers, &bytes).unwrap();
                let part = SubtaskCheckpoint {
                    states: vec![(1, handle)],
                    timers: Some(timers),
                    timers_sha256: Some(sha256_hex(&bytes)),
                    source: Some(serde_json::json!({ "next": s })),
                    ..SubtaskCheckpoint::default()
                };
                ((0, s), part)
            })
            .collect();
        RestorePoint {
            checkpoint: 3,
            subtasks,
        }
    }

    fn write_metadata(storage: &DirStorage, point: &RestorePoint) {
        let metadata = weir_runtime::checkpoint::snapshot::CheckpointMetadata {
            job: "j".into(),
            checkpoint: point.checkpoint,
            triggered_at_ms: 1,
            completed_at_ms: 2,
            subtasks: point.subtasks.clone(),
        };
        storage
            .put_bytes(
                &metadata_path("j", point.checkpoint).unwrap(),
                &serde_json::to_vec(&metadata).unwrap(),
            )
            .unwrap();
    }

    #[test]
    fn a_restore_matching_the_checkpoints_metadata_downloads_its_subtasks() {
        let tmp = tempfile::tempdir().unwrap();
        let storage = DirStorage::new(tmp.path().join("storage"));
        let point = restore_point(tmp.path(), &storage);
        write_metadata(&storage, &point);
        let dir = tmp.path().join("restore");
        let restored = download_restore("j", &point, &[(0, 1)], &storage, &dir).unwrap();
        assert_eq!(restored.subtasks.len(), 1, "only the local subtask");
        assert_eq!(
            std::fs::read(dir.join("0-1-1/heap.snapshot")).unwrap(),
            b"state of 1"
        );
        assert_eq!(
            restored.subtasks[&(0, 1)].timers,
            HashMap::from([(1, vec![(1, vec![1, 2])])])
        );
    }

    #[test]
    fn a_timers_file_changed_in_storage_fails_the_restore() {
        let tmp = tempfile::tempdir().unwrap();
        let storage = DirStorage::new(tmp.path().join("storage"));
        let point = restore_point(tmp.path(), &storage);
        write_metadata(&storage, &point);
        // Same length, another timer.
        let timers = point.subtasks[1].1.timers.clone().unwrap();
        storage.put_bytes(&timers, b"[[1,[[7,[1,2]]]]]").unwrap();
        let dir = tmp.path().join("restore");
        let err = download_restore("j", &point, &[(0, 1)], &storage, &dir).unwrap_err();
        assert!(
            err.contains("`j/chk-3/0-1/timers.json` has SHA-256"),
            "{err}"
        );
    }

    /// A checkpoint whose `_metadata` was deleted is not restored from:
    /// the restore fails (reported as `RestoreFailed`, so the JobManager
    /// falls back) before any state file is downloaded.
    #[test]
    fn a_checkpoint_whose_metadata_is_deleted_is_not_restored() {
        let tmp = tempfile::tempdir().unwrap();
        let storage = DirStorage::new(tmp.path().join("storage"));
        let point = restore_point(tmp.path(), &storage);
        write_metadata(&storage, &point);
        storage
            .delete(&metadata_path("j", point.checkpoint).unwrap())
            .unwrap();
        let dir = tmp.path().join("restore");
        let err = download_restore("j", &point, &[(0, 0), (0, 1)], &storage, &dir).unwrap_err();
        assert!(err.contains("`j/chk-3/_metadata` not found"), "{err}");
        assert!(!dir.exists(), "nothing was downloaded");
    }

    #[test]
    fn a_restore_not_matching_the_checkpoints_metadata_fails() {
        let tmp = tempfile::tempdir().unwrap();
        let storage = DirStorage::new(tmp.path().join("storage"));
        let point = restore_point(tmp.path(), &storage);
        // The metadata records another position for subtask 0/1 than the
        // part this TaskManager was sent.
        let mut recorded = point.clone();
        recorded.subtasks[1].1.source = Some(serde_json::json!({ "next": 99 }));
        write_metadata(&storage, &recorded);
        let dir = tmp.path().join("restore");
        // Subtask 0/0 alone matches ...
        download_restore("j", &point, &[(0, 0)], &storage, &dir.join("a")).unwrap();
        // ... 0/1 does not.
        let err = download_restore("j", &point, &[(0, 1)], &storage, &dir.join("b")).unwrap_err();
        assert!(err.contains("subtask 0/1"), "{err}");
        assert!(err.contains("`j/chk-3/_metadata`"), "{err}");
    }

    #[test]
    fn a_wildcard_bind_advertises_the_route_to_the_jobmanager() {
        let jm: SocketAddr = "127.0.0.1:6123".parse().unwrap();
        let bound: SocketAddr = "0.0.0.0:4000".parse().unwrap();
        assert_eq!(advertised(bound, jm), "127.0.0.1:4000".parse().unwrap());
        let exact: SocketAddr = "127.0.0.2:4000".parse().unwrap();
        assert_eq!(advertised(exact, jm), exact);
    }
}
