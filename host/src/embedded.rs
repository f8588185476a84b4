//! The embedded cluster behind `weir run`: a JobManager core and one
//! TaskManager core in this process, joined by in-memory channels instead
//! of QUIC (Flink's `MiniCluster`). They are the daemons' own code, so an
//! embedded job has everything a cluster job has: checkpoints
//! (`[job.checkpoints]`), restart strategies and recovery, exactly-once
//! sinks, savepoints (start from one, stop with one), and the same job
//! and checkpoint views.
//!
//! Its TaskManager offers as many slots as the job has subtasks, so every
//! channel stays in memory; it shares the JobManager's module store, so
//! modules are never copied between them, and the [`Runtime`]'s sharing of
//! loaded modules means each is compiled (or read from the cache) once.
//!
//! It must not hold job logic of its own: what it adds is wiring, waiting
//! and the graceful stop behind Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use crate::connectors::AllowedRoots;
use crate::job::{JobGraph, chain};
use crate::jobmanager::modules::ModuleStore;
use crate::jobmanager::scheduler::Strategy;
use crate::jobmanager::{
    ApiError, CheckpointsView, CoreConfig, DEFAULT_HEARTBEAT_INTERVAL, FromSavepoint, JobDetail,
    JobManager, SavepointView, StartError,
};
use crate::local::LoadedModules;
use crate::taskmanager::JobMetrics;
use crate::taskmanager::daemon::{InProcessConfig, InProcessTaskManager};
use crate::wasm::Runtime;

/// Settings of an [`EmbeddedCluster`].
#[derive(Debug, Clone)]
pub struct EmbeddedConfig {
    /// Scratch space: module store, job state. The caller removes it.
    pub work_dir: PathBuf,
    /// Where checkpoints of jobs with `[job.checkpoints]` go.
    pub checkpoint_dir: PathBuf,
    /// Where file sources and sinks may read and write.
    pub allowed_roots: AllowedRoots,
    /// Records per batch on channels.
    pub buffer_size: usize,
    /// Task slots of its TaskManager; `None`: as many as the first job has
    /// subtasks.
    pub slots: Option<u32>,
    /// Where its TaskManager serves Prometheus metrics (`GET /metrics`;
    /// port 0: any free port, see [`EmbeddedCluster::metrics_address`]);
    /// `None`: nowhere.
    pub metrics: Option<SocketAddr>,
}

/// A JobManager and a TaskManager in this process.
#[derive(Debug)]
pub struct EmbeddedCluster {
    jobmanager: Arc<JobManager>,
    taskmanager: Option<InProcessTaskManager>,
    clock: tokio::task::JoinHandle<()>,
    config: EmbeddedConfig,
    runtime: Arc<Runtime>,
    /// Bound at start (so its address is known), served once the
    /// TaskManager runs.
    metrics: Option<std::net::TcpListener>,
}

/// A job submitted to an [`EmbeddedCluster`].
#[derive(Debug)]
pub struct EmbeddedJob {
    /// The job's id.
    pub id: String,
    /// Held while the job runs: the TaskManager shares these modules.
    _modules: LoadedModules,
}

/// Heartbeat timeout of the in-process TaskManager: practically never.
const IN_PROCESS_HEARTBEAT_TIMEOUT: std::time::Duration =
    std::time::Duration::from_secs(365 * 24 * 3600);

/// The id of the embedded TaskManager.
pub const TASKMANAGER_ID: &str = "embedded";

impl EmbeddedCluster {
    /// Starts the JobManager core and its clock on the current tokio
    /// runtime. The TaskManager starts with the first job (it is sized to it).
    pub fn start(config: EmbeddedConfig, runtime: Arc<Runtime>) -> Result<Self, StartError> {
        let metrics = match config.metrics {
            Some(address) => {
                let bind_error = |e: std::io::Error| StartError::Bind {
                    address,
                    message: format!("metrics: {e}"),
                };
                let listener = std::net::TcpListener::bind(address).map_err(bind_error)?;
                listener.set_nonblocking(true).map_err(bind_error)?;
                Some(listener)
            }
            None => None,
        };
        let data_dir = config.work_dir.join("jobmanager");
        let store =
            ModuleStore::open(&data_dir.join("modules")).map_err(|e| StartError::DataDir {
                path: data_dir.clone(),
                message: e.to_string(),
            })?;
        let jobmanager = JobManager::new(
            CoreConfig {
                data_dir,
                heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
                // An in-process TaskManager cannot go silent: it is lost
                // only when its link closes. A busy machine delaying a
                // heartbeat must not fail the job.
                heartbeat_timeout: IN_PROCESS_HEARTBEAT_TIMEOUT,
                scheduling: Strategy::Pack,
                max_module_bytes: usize::MAX,
                checkpoint_dir: Some(config.checkpoint_dir.clone()),
                checkpoint_storage: None,
                allowed_roots: config.allowed_roots.clone(),
                clock: crate::jobmanager::Clock::Real,
                storage_io: crate::jobmanager::StorageIo::Background,
                max_job_state_bytes: None,
            },
            runtime.clone(),
            store,
        );
        let clock = jobmanager.clone().spawn_clock();
        Ok(EmbeddedCluster {
            jobmanager,
            taskmanager: None,
            clock,
            config,
            runtime,
            metrics,
        })
    }

    /// Where its TaskManager serves `/metrics` (`config.metrics`, with the
    /// port chosen if it was 0).
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.metrics.as_ref()?.local_addr().ok()
    }

    /// The JobManager core (job and checkpoint views).
    pub fn jobmanager(&self) -> &Arc<JobManager> {
        &self.jobmanager
    }

    /// Checks and deploys `graph`: loads its modules (compiling where not
    /// cached) and starts its subtasks. Bad input is an error with status
    /// 400, as a cluster's REST API would answer.
    pub async fn submit(
        &mut self,
        graph: JobGraph,
        from: Option<FromSavepoint>,
    ) -> Result<EmbeddedJob, ApiError> {
        let slots = self
            .config
            .slots
            .unwrap_or_else(|| chain(&graph).iter().map(|t| t.parallelism).sum());
        self.start_taskmanager(slots)?;
        let (created, modules) = self.jobmanager.submit_graph(graph, from).await?;
        Ok(EmbeddedJob {
            id: created.id,
            _modules: modules,
        })
    }

    /// Submits a job spec as a cluster's REST API takes it (its modules
    /// uploaded before, named `name@version`; file paths absolute): such a
    /// job can be upgraded in place ([`JobManager::upgrade`]). The
    /// TaskManager starts with `config.slots` slots (else 8).
    pub async fn submit_spec(&mut self, spec: String) -> Result<EmbeddedJob, ApiError> {
        self.start_taskmanager(self.config.slots.unwrap_or(8))?;
        let created = self.jobmanager.submit(spec, None).await?;
        Ok(EmbeddedJob {
            id: created.id,
            _modules: LoadedModules::default(),
        })
    }

    /// Starts the TaskManager with `slots` slots unless it runs.
    fn start_taskmanager(&mut self, slots: u32) -> Result<(), ApiError> {
        if self.taskmanager.is_none() {
            let link = self.jobmanager.attach(TASKMANAGER_ID, slots.max(1));
            let mut taskmanager = InProcessTaskManager::start(
                InProcessConfig {
                    id: TASKMANAGER_ID.to_owned(),
                    slots: slots.max(1),
                    data_dir: self.config.work_dir.join("taskmanager"),
                    modules_dir: self.config.work_dir.join("jobmanager").join("modules"),
                    allowed_roots: self.config.allowed_roots.clone(),
                    buffer_size: self.config.buffer_size,
                },
                self.runtime.clone(),
                link,
            )
            .map_err(|e| ApiError::internal(e.to_string()))?;
            if let Some(listener) = &self.metrics {
                let listener = listener
                    .try_clone()
                    .and_then(tokio::net::TcpListener::from_std)
                    .map_err(|e| ApiError::internal(format!("metrics listener: {e}")))?;
                taskmanager.serve_metrics(listener);
            }
            self.taskmanager = Some(taskmanager);
        }
        Ok(())
    }

    /// Stops the job's sources: it drains, commits and finishes.
    pub fn stop(&self, job: &EmbeddedJob) {
        if let Some(tm) = &self.taskmanager {
            tm.stop_sources(&job.id);
        }
    }

    /// Live metrics of the job's current attempt, while it runs.
    pub fn metrics(&self, job: &EmbeddedJob) -> Option<Arc<JobMetrics>> {
        self.taskmanager.as_ref()?.metrics(&job.id)
    }

    /// Waits until the job has ended and its TaskManager is done with it
    /// (a finished job's sinks have committed); returns the job then.
    pub async fn wait(&self, job: &EmbeddedJob) -> Result<JobDetail, ApiError> {
        let detail = self.jobmanager.wait_until_ended(&job.id).await?;
        if let Some(tm) = &self.taskmanager {
            tm.wait_idle(&job.id).await;
        }
        Ok(detail)
    }

    /// Takes a savepoint of the job into `dir` and stops it there (its
    /// sinks commit exactly what the savepoint records); returns once the
    /// savepoint is written or failed (then the job goes on).
    pub async fn stop_with_savepoint(
        &self,
        job: &EmbeddedJob,
        dir: &std::path::Path,
    ) -> Result<SavepointView, ApiError> {
        let view = self.jobmanager.trigger_savepoint(&job.id, dir, true)?;
        self.jobmanager.wait_savepoint(&job.id, view.id).await
    }

    /// The job's checkpoint history and restores.
    pub fn checkpoints(&self, job: &EmbeddedJob) -> Result<CheckpointsView, ApiError> {
        self.jobmanager.checkpoints(&job.id)
    }

    /// Stops everything.
    pub fn shutdown(mut self) {
        if let Some(tm) = self.taskmanager.take() {
            tm.shutdown();
        }
        self.clock.abort();
    }
}
