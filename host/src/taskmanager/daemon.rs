//! The TaskManager daemon: registers with the JobManager, heartbeats, runs
//! the subtasks the JobManager deploys to it, and reports their states.
//!
//! # Connection to the JobManager
//!
//! One QUIC connection (mutual TLS) from this TaskManager's endpoint, which
//! is also its data plane's: one UDP socket per daemon. The control stream
//! carries [`crate::rpc`] messages; each module fetch is a stream of its own.
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
//!
//! This module must not decide placement or job state: the JobManager does.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, watch};

use super::{Abort, JobMetrics, Message, TaskError};
use crate::job::{JobGraph, ModuleRef, TaskSpec, VertexKind};
use crate::jobmanager::modules::ModuleStore;
use crate::local::{Exchange, LocalCluster};
use crate::net::tls::{NodeIdentity, SERVER_NAME};
use crate::net::{ChannelOptions, DataPlane, InputKey, NetConfig};
use crate::rpc::{
    Deployment, FetchModule, JobReport, ModuleHeader, SlotRef, TaskState, ToJobManager,
    ToTaskManager, VertexReport, read_frame, write_frame,
};
use crate::wasm::Runtime;

/// Settings of `weir taskmanager`.
#[derive(Debug, Clone)]
pub struct TaskManagerConfig {
    /// Its id; `None`: the one stored in the data dir, else a new random one.
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
        let endpoint = self.inner.data.endpoint().clone();
        endpoint.close(0u32.into(), b"taskmanager shutting down");
        // Let the close reach the JobManager (it then drops this
        // TaskManager at once instead of after the heartbeat timeout).
        let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
    }
}

struct LocalJob {
    abort: Abort,
    canceled: Arc<AtomicBool>,
    metrics: Arc<JobMetrics>,
    started: Instant,
    /// Head vertex of each task with local subtasks → how many run here.
    heads: Vec<(usize, u32)>,
    vertices: usize,
}

struct Inner {
    id: String,
    slots: u32,
    buffer_size: usize,
    /// Where other TaskManagers reach this one.
    data_address: SocketAddr,
    data: DataPlane,
    cluster: LocalCluster,
    store: ModuleStore,
    jobs: Mutex<HashMap<String, LocalJob>>,
    /// Jobs canceled before (or while) they were deployed.
    canceled: Mutex<HashSet<String>>,
    /// The current control connection's outbox.
    outbox: Mutex<Option<mpsc::UnboundedSender<ToJobManager>>>,
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
        task: usize,
        subtask: u32,
        state: TaskState,
        error: Option<String>,
    ) {
        self.send(ToJobManager::TaskState {
            job: job.to_owned(),
            task: task as u32,
            subtask,
            state,
            error,
        });
    }

    fn cancel(&self, job: &str) {
        self.canceled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(job.to_owned());
        if let Some(j) = self.jobs.lock().unwrap_or_else(|p| p.into_inner()).get(job) {
            j.canceled.store(true, Ordering::Relaxed);
            j.abort.trigger();
        }
    }

    fn cancel_all(&self) {
        let jobs: Vec<String> = self
            .jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        for job in jobs {
            self.cancel(&job);
        }
    }

    fn job_reports(&self) -> Vec<JobReport> {
        let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        jobs.iter()
            .map(|(id, j)| {
                let mut vertices: Vec<VertexReport> = j
                    .metrics
                    .vertices
                    .iter()
                    .take(j.vertices)
                    .map(|m| VertexReport {
                        records_in: m.records_in.load(Ordering::Relaxed),
                        records_out: m.records_out.load(Ordering::Relaxed),
                        ..VertexReport::default()
                    })
                    .collect();
                let wall = j.started.elapsed().as_millis() as u64;
                for (head, n) in &j.heads {
                    let m = &j.metrics.vertices[*head];
                    let idle = m.idle_ns.load(Ordering::Relaxed) / 1_000_000;
                    let bp = m.backpressured_ns.load(Ordering::Relaxed) / 1_000_000;
                    let v = &mut vertices[*head];
                    v.idle_ms = idle;
                    v.backpressured_ms = bp;
                    v.busy_ms = (wall * u64::from(*n)).saturating_sub(idle + bp);
                }
                JobReport {
                    job: id.clone(),
                    vertices,
                }
            })
            .collect()
    }
}

/// Starts a TaskManager on the current tokio runtime. It connects to the
/// JobManager in the background; [`RunningTaskManager::registered`] waits
/// for the registration.
pub async fn start(
    config: TaskManagerConfig,
    runtime: Arc<Runtime>,
) -> Result<RunningTaskManager, crate::jobmanager::StartError> {
    use crate::jobmanager::StartError;
    let data_dir_error = |message: String| StartError::DataDir {
        path: config.data_dir.clone(),
        message,
    };
    std::fs::create_dir_all(&config.data_dir).map_err(|e| data_dir_error(e.to_string()))?;
    let id = match &config.id {
        Some(id) => id.clone(),
        None => stored_id(&config.data_dir).map_err(|e| data_dir_error(e.to_string()))?,
    };
    let store = ModuleStore::open(&config.data_dir.join("modules"))
        .map_err(|e| data_dir_error(e.to_string()))?;
    let endpoint =
        crate::net::tls::endpoint(config.bind, &config.identity).map_err(|e| StartError::Bind {
            address: config.bind,
            message: e.to_string(),
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
        cluster: LocalCluster::new(runtime, work_dir.clone(), tokio::runtime::Handle::current()),
        data,
        store,
        jobs: Mutex::new(HashMap::new()),
        canceled: Mutex::new(HashSet::new()),
        outbox: Mutex::new(None),
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

/// The id kept in `data_dir/taskmanager-id`, created on first start.
fn stored_id(data_dir: &std::path::Path) -> std::io::Result<String> {
    let path = data_dir.join("taskmanager-id");
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => Ok(id.trim().to_owned()),
        _ => {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(std::process::id());
            let id = format!("tm-{:08x}", h.finish() as u32);
            std::fs::write(&path, &id)?;
            Ok(id)
        }
    }
}

/// One connection to the JobManager, until it is lost.
async fn session(
    inner: &Arc<Inner>,
    jobmanager: SocketAddr,
    registered: &watch::Sender<u64>,
) -> Result<(), String> {
    let conn = inner
        .data
        .endpoint()
        .connect(jobmanager, SERVER_NAME)
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
    let heartbeat = {
        let inner = inner.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            loop {
                tick.tick().await;
                let message = ToJobManager::Heartbeat {
                    net: inner.data.stats(),
                    jobs: inner.job_reports(),
                };
                if tx.send(message).is_err() {
                    break;
                }
            }
        })
    };
    let result = loop {
        match read_frame::<_, ToTaskManager>(&mut recv).await {
            Ok(Some(ToTaskManager::Deploy(deployment))) => {
                let inner = inner.clone();
                let conn = conn.clone();
                tokio::spawn(async move { run_job(inner, conn, *deployment).await });
            }
            Ok(Some(ToTaskManager::Cancel { job })) => inner.cancel(&job),
            Ok(Some(other)) => tracing::debug!("ignoring {other:?}"),
            Ok(None) => break Err("the JobManager closed the connection".to_owned()),
            Err(e) => break Err(format!("connection lost: {e}")),
        }
    };
    heartbeat.abort();
    writer.abort();
    result
}

/// The exchange of one job on this TaskManager.
struct NetExchange<'a> {
    me: &'a str,
    job: &'a str,
    placement: &'a [Vec<SlotRef>],
    peers: &'a HashMap<String, SocketAddr>,
    data: &'a DataPlane,
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
        match self.peers.get(tm) {
            Some(peer) => self
                .data
                .open_channel(*peer, key, self.options, abort.clone()),
            None => {
                // The JobManager always sends every peer; a missing one is a bug.
                tracing::error!("no address for TaskManager {tm}");
                abort.trigger();
                mpsc::channel(1).0
            }
        }
    }

    fn register_input(&self, task: usize, subtask: u32, tx: mpsc::Sender<Message>) {
        self.data.register_input(
            InputKey {
                job: self.job.to_owned(),
                task: task as u32,
                subtask,
            },
            tx,
        );
    }
}

async fn run_job(inner: Arc<Inner>, conn: quinn::Connection, deployment: Deployment) {
    let Deployment {
        job,
        mut graph,
        placement,
        peers,
    } = deployment;
    let tasks: Vec<TaskSpec> = crate::job::chain(&graph);
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
            inner.report(&job, *t, *s, TaskState::Failed, Some(error.clone()));
        }
    };
    if let Err(e) = fetch_modules(&inner, &conn, &mut graph).await {
        fail_all(e);
        return;
    }
    let deployed = {
        let inner = inner.clone();
        let job = job.clone();
        let graph = graph.clone();
        tokio::task::spawn_blocking(move || {
            let modules = inner.cluster.load_modules(&graph)?;
            let options = ChannelOptions {
                buffer_size: inner.buffer_size,
                buffer_timeout: Duration::from_millis(graph.settings.buffer_timeout_ms),
            };
            let exchange = NetExchange {
                me: &inner.id,
                job: &job,
                placement: &placement,
                peers: &peers,
                data: &inner.data,
                options,
            };
            inner
                .cluster
                .deploy(&graph, &modules, inner.work_dir.join(&job), &exchange)
        })
        .await
    };
    let deployed = match deployed {
        Ok(Ok(d)) => d,
        Ok(Err(e)) => {
            inner.data.unregister_job(&job);
            fail_all(e.to_string());
            return;
        }
        Err(e) => {
            inner.data.unregister_job(&job);
            fail_all(format!("deployment panicked: {e}"));
            return;
        }
    };
    let canceled = Arc::new(AtomicBool::new(false));
    let mut heads: HashMap<usize, u32> = HashMap::new();
    for s in &deployed.subtasks {
        *heads.entry(tasks[s.task].head()).or_default() += 1;
    }
    inner.jobs.lock().unwrap_or_else(|p| p.into_inner()).insert(
        job.clone(),
        LocalJob {
            abort: deployed.abort.clone(),
            canceled: canceled.clone(),
            metrics: deployed.metrics.clone(),
            started: deployed.started,
            heads: heads.into_iter().collect(),
            vertices: graph.vertices.len(),
        },
    );
    if inner
        .canceled
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(&job)
    {
        canceled.store(true, Ordering::Relaxed);
        deployed.abort.trigger();
    }
    for s in &deployed.subtasks {
        inner.report(&job, s.task, s.subtask, TaskState::Running, None);
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
            if let Some(report) = inner.job_reports().into_iter().find(|r| r.job == job) {
                inner.send(ToJobManager::Heartbeat {
                    net: inner.data.stats(),
                    jobs: vec![report],
                });
            }
            inner.report(&job, s.task, s.subtask, state, error);
        }));
    }
    for w in waits {
        let _ = w.await;
    }
    inner
        .jobs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&job);
    inner
        .canceled
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&job);
    inner.data.unregister_job(&job);
    let _ = std::fs::remove_dir_all(&deployed.work_dir);
}

/// Makes every operator module of `graph` a local file: fetches the ones not
/// cached yet (verifying their hash) and rewrites `sha256:` references to paths.
async fn fetch_modules(
    inner: &Arc<Inner>,
    conn: &quinn::Connection,
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

    #[test]
    fn a_wildcard_bind_advertises_the_route_to_the_jobmanager() {
        let jm: SocketAddr = "127.0.0.1:6123".parse().unwrap();
        let bound: SocketAddr = "0.0.0.0:4000".parse().unwrap();
        assert_eq!(advertised(bound, jm), "127.0.0.1:4000".parse().unwrap());
        let exact: SocketAddr = "127.0.0.2:4000".parse().unwrap();
        assert_eq!(advertised(exact, jm), exact);
    }
}
