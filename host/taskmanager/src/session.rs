//! The daemon's session with its JobManager: [`start`] binds the endpoint
//! and keeps one connection up (connect, register, heartbeat; when it is
//! lost, cancel everything and reconnect with backoff), and [`dispatch`]
//! carries out each message of the JobManager, for the daemon and the
//! in-process TaskManager alike.
//!
//! Its id is the one in its certificate (`certified_id`); the data plane
//! advertises the address on the route to the JobManager when bound to a
//! wildcard (`advertised`).
//!
//! This module must not run jobs itself: a deployment runs on a task of
//! its own (`deploy::run_job`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use weir_runtime::local::LocalCluster;
use weir_runtime::modules::ModuleStore;
use weir_runtime::net::DataPlane;
use weir_runtime::net::tls::{JOBMANAGER_NAME, NodeIdentity, Role};
use weir_runtime::rpc::{FrameError, ToJobManager, ToTaskManager, read_frame, write_frame};
use weir_runtime::start::StartError;
use weir_runtime::telemetry::memory::ProcessMemory;
use weir_runtime::wasm::Runtime;

use crate::TaskManagerConfig;
use crate::checkpoints::JobEvent;
use crate::deploy::run_job;
use crate::node::{DeploymentKey, Inner};

/// A started TaskManager.
pub struct RunningTaskManager {
    /// Its id.
    pub id: String,
    /// Its data-plane address.
    pub data_address: SocketAddr,
    /// Where it serves `GET /metrics`, if it does (`--metrics`).
    pub metrics_address: Option<SocketAddr>,
    registrations: watch::Receiver<u64>,
    task: tokio::task::JoinHandle<()>,
    metrics_task: Option<tokio::task::JoinHandle<()>>,
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RunningTaskManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningTaskManager")
            .field("id", &self.id)
            .field("data_address", &self.data_address)
            .field("metrics_address", &self.metrics_address)
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
        if let Some(metrics) = &self.metrics_task {
            metrics.abort();
        }
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

/// Starts a TaskManager on the current tokio runtime: binds its QUIC
/// endpoint at `config.bind`, then [`serve`]s on it.
pub async fn start(
    config: TaskManagerConfig,
    runtime: Arc<Runtime>,
) -> Result<RunningTaskManager, StartError> {
    // The identity first: nothing is bound for a certificate that is not
    // this TaskManager's.
    certified_id(&config.identity, config.id.as_deref())
        .map_err(|e| StartError::Identity(e.to_string()))?;
    let endpoint =
        weir_runtime::net::tls::endpoint(config.bind, &config.identity).map_err(|e| {
            StartError::Bind {
                address: config.bind,
                message: e.to_string(),
            }
        })?;
    serve(endpoint, config, runtime).await
}

/// Runs a TaskManager on `endpoint`, the one QUIC endpoint it owns (the
/// control connection to the JobManager and the data plane share it),
/// configured with `config.identity` (see
/// [`weir_runtime::net::tls::endpoint`]); `config.bind` is not used. The
/// daemon binds no socket it was not given. It connects to the JobManager
/// in the background; [`RunningTaskManager::registered`] waits for the
/// registration.
pub async fn serve(
    endpoint: quinn::Endpoint,
    config: TaskManagerConfig,
    runtime: Arc<Runtime>,
) -> Result<RunningTaskManager, StartError> {
    let data_dir_error = |message: String| StartError::DataDir {
        path: config.data_dir.clone(),
        message,
    };
    let id = certified_id(&config.identity, config.id.as_deref())
        .map_err(|e| StartError::Identity(e.to_string()))?;
    std::fs::create_dir_all(&config.data_dir).map_err(|e| data_dir_error(e.to_string()))?;
    // Bound before anything runs: a taken port is a start error.
    let metrics = match config.metrics {
        Some(address) => {
            let refused = |e: std::io::Error| StartError::Bind {
                address,
                message: format!("the metrics listener (--metrics): {e}"),
            };
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .map_err(refused)?;
            let bound = listener.local_addr().map_err(refused)?;
            Some((listener, bound))
        }
        None => None,
    };
    let store = ModuleStore::open(&config.data_dir.join("modules"))
        .map_err(|e| data_dir_error(e.to_string()))?;
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
        jobs: Default::default(),
        canceled: Default::default(),
        deploying: Default::default(),
        events: Default::default(),
        outbox: Default::default(),
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
    let (metrics_address, metrics_task) = match metrics {
        Some((listener, address)) => {
            let task = tokio::spawn(crate::metrics::serve(listener, inner.clone()));
            (Some(address), Some(task))
        }
        None => (None, None),
    };
    Ok(RunningTaskManager {
        id,
        data_address,
        metrics_address,
        registrations,
        task,
        metrics_task,
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

/// Why a certificate cannot be this TaskManager's
/// ([`StartError::Identity`] carries its message).
#[derive(Debug, thiserror::Error)]
enum IdentityError {
    /// It is another TaskManager's.
    #[error("the id is `{wanted}` but the certificate is TaskManager `{id}`'s")]
    OtherTaskManager {
        /// The id asked for (`--id`).
        wanted: String,
        /// The certificate's.
        id: String,
    },
    /// It is the JobManager's.
    #[error("the certificate is the JobManager's, not a TaskManager's")]
    JobManager,
    /// It names no role.
    #[error(
        "the certificate names no TaskManager (a shared `taskmanager.pem` from an older \
         `weir cluster init`?): issue one per TaskManager with `weir cluster issue DIR \
         --taskmanager {}`",
        .wanted.as_deref().unwrap_or("ID")
    )]
    NoRole {
        /// The id asked for, if any.
        wanted: Option<String>,
    },
}

/// The id in `identity`'s certificate, which `wanted` (if given) must
/// equal: the JobManager accepts a TaskManager only under that id.
fn certified_id(identity: &NodeIdentity, wanted: Option<&str>) -> Result<String, IdentityError> {
    match (identity.role(), wanted) {
        (Some(Role::TaskManager(id)), None) => Ok(id),
        (Some(Role::TaskManager(id)), Some(wanted)) if id == wanted => Ok(id),
        (Some(Role::TaskManager(id)), Some(wanted)) => Err(IdentityError::OtherTaskManager {
            wanted: wanted.to_owned(),
            id,
        }),
        (Some(Role::JobManager), _) => Err(IdentityError::JobManager),
        (None, _) => Err(IdentityError::NoRole {
            wanted: wanted.map(str::to_owned),
        }),
    }
}

/// Why a session with the JobManager ended (logged; the TaskManager then
/// connects again).
#[derive(Debug, thiserror::Error)]
enum SessionError {
    /// The embedded cluster's TaskManager has no endpoint (never happens:
    /// it has no session).
    #[error("no network endpoint")]
    NoEndpoint,
    /// The connection could not be started.
    #[error("cannot connect: {0}")]
    Connect(quinn::ConnectError),
    /// The handshake failed (the JobManager is down, or its certificate is
    /// not the cluster's JobManager's).
    #[error("cannot connect: {0}")]
    Handshake(quinn::ConnectionError),
    /// The control stream could not be opened.
    #[error("{0}")]
    Open(quinn::ConnectionError),
    /// The registration could not be sent.
    #[error("{0}")]
    SendRegister(FrameError),
    /// The JobManager refused the registration.
    #[error("rejected: {0}")]
    Rejected(String),
    /// The JobManager answered something else, or closed the stream.
    #[error("no registration answer")]
    NoAnswer,
    /// The answer to the registration could not be read.
    #[error("registration failed: {0}")]
    Registration(FrameError),
    /// The JobManager closed the control stream.
    #[error("the JobManager closed the connection")]
    Closed,
    /// The control stream failed.
    #[error("connection lost: {0}")]
    Lost(FrameError),
}

/// One connection to the JobManager, until it is lost.
async fn session(
    inner: &Arc<Inner>,
    jobmanager: SocketAddr,
    registered: &watch::Sender<u64>,
) -> Result<(), SessionError> {
    let Some(data) = &inner.data else {
        return Err(SessionError::NoEndpoint);
    };
    let conn = data
        .endpoint()
        .connect(jobmanager, JOBMANAGER_NAME)
        .map_err(SessionError::Connect)?
        .await
        .map_err(SessionError::Handshake)?;
    let (mut send, mut recv) = conn.open_bi().await.map_err(SessionError::Open)?;
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
    .map_err(SessionError::SendRegister)?;
    let interval = match read_frame::<_, ToTaskManager>(&mut recv).await {
        Ok(Some(ToTaskManager::Registered {
            heartbeat_interval_ms,
        })) => Duration::from_millis(heartbeat_interval_ms.max(10)),
        Ok(Some(ToTaskManager::Rejected { reason })) => return Err(SessionError::Rejected(reason)),
        Ok(_) => return Err(SessionError::NoAnswer),
        Err(e) => return Err(SessionError::Registration(e)),
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
            Ok(None) => break Err(SessionError::Closed),
            Err(e) => break Err(SessionError::Lost(e)),
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
pub(crate) enum Upstream {
    Quic(quinn::Connection),
    InProcess,
}

/// Sends a heartbeat with every job's metrics each `interval`, until the
/// outbox closes.
pub(crate) fn spawn_heartbeat(
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
                memory: ProcessMemory::current(),
            };
            if tx.send(message).is_err() {
                break;
            }
        }
    })
}

/// Carries out one message of the JobManager.
pub(crate) fn dispatch(inner: &Arc<Inner>, upstream: &Upstream, message: ToTaskManager) {
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
                    DeploymentKey::new(&deployment.job, deployment.attempt),
                    events_tx,
                );
            let inner = inner.clone();
            let upstream = upstream.clone();
            tokio::spawn(async move { run_job(inner, upstream, *deployment, events_rx).await });
        }
        ToTaskManager::Cancel { job } => inner.cancel(&job),
        // Set here, before any later trigger reaches the sources: the
        // barrier of the savepoint follows the final watermark.
        ToTaskManager::Drain {
            job,
            attempt,
            drain,
        } => inner.drain_sources(&job, attempt, drain),
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

#[cfg(test)]
mod tests {
    use super::*;
    use weir_runtime::net::tls::ClusterCa;

    /// The messages `weir taskmanager` fails to start with (an e2e test
    /// waits for the first one).
    #[test]
    fn a_certificate_must_be_this_taskmanagers() {
        let ca = ClusterCa::generate().unwrap();
        let tm2 = ca.issue_taskmanager("tm-2").unwrap();
        assert_eq!(certified_id(&tm2, None).unwrap(), "tm-2");
        assert_eq!(certified_id(&tm2, Some("tm-2")).unwrap(), "tm-2");
        assert_eq!(
            certified_id(&tm2, Some("tm-1")).unwrap_err().to_string(),
            "the id is `tm-1` but the certificate is TaskManager `tm-2`'s"
        );
        let jm = ca.issue_jobmanager().unwrap();
        assert_eq!(
            certified_id(&jm, Some("tm-1")).unwrap_err().to_string(),
            "the certificate is the JobManager's, not a TaskManager's"
        );
    }

    #[test]
    fn a_certificate_without_a_role_says_how_to_issue_one() {
        let message = |wanted: Option<&str>| {
            IdentityError::NoRole {
                wanted: wanted.map(str::to_owned),
            }
            .to_string()
        };
        assert_eq!(
            message(Some("tm-1")),
            "the certificate names no TaskManager (a shared `taskmanager.pem` from an older \
             `weir cluster init`?): issue one per TaskManager with `weir cluster issue DIR \
             --taskmanager tm-1`"
        );
        assert!(
            message(None).ends_with("--taskmanager ID`"),
            "{}",
            message(None)
        );
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
