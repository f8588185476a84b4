//! The in-process TaskManager of the embedded cluster
//! ([`InProcessTaskManager`]): the daemon's code (`Inner`, `dispatch`,
//! `run_job`, the checkpoint shell) attached to an in-process JobManager
//! through an [`InProcessLink`] instead of a QUIC connection. It has no
//! data plane (every channel stays in memory) and shares the JobManager's
//! module store, so it never fetches a module.
//!
//! This module must not add behaviour of its own beyond what `weir run`
//! needs to watch its job (metrics, `/metrics`, `wait_idle`,
//! `stop_sources`): the embedded mode is the cluster code path.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::watch;

use weir_runtime::local::LocalCluster;
use weir_runtime::modules::ModuleStore;
use weir_runtime::rpc::InProcessLink;
use weir_runtime::start::StartError;
use weir_runtime::taskmanager::JobMetrics;
use weir_runtime::wasm::Runtime;

use crate::InProcessConfig;
use crate::node::Inner;
use crate::session::{Upstream, dispatch, spawn_heartbeat};

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
            jobs: Default::default(),
            canceled: Default::default(),
            deploying: Default::default(),
            events: Default::default(),
            outbox: std::sync::Mutex::new(Some(link.to_jobmanager.clone())),
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

    /// Serves this TaskManager's Prometheus metrics (`GET /metrics`, as
    /// the daemon's `--metrics`) on `listener` until shutdown.
    pub fn serve_metrics(&mut self, listener: tokio::net::TcpListener) {
        let task = tokio::spawn(crate::metrics::serve(listener, self.inner.clone()));
        self.tasks.push(task);
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
        loop {
            let busy = self
                .inner
                .events
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .keys()
                .any(|k| k.job == job);
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
