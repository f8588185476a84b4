//! The state one TaskManager's session, deployments and checkpoint shells
//! share: [`Inner`].
//!
//! It owns what runs here ([`LocalJob`], one per deployment: one attempt
//! of a job), the bookkeeping that lets a cancel reach an attempt still
//! being deployed, each deployment's queue of checkpoint events, and the
//! outbox to the JobManager (none while disconnected: messages are then
//! dropped, and every job here is canceled).
//!
//! Each map has its own lock, held only to read or change it, never
//! across an `.await`; the one nesting is `deploying` then `canceled`
//! (in [`Inner::cancel`]).
//!
//! A deployment is named by a [`DeploymentKey`] (job and attempt), never
//! by a string put together from them; its `job#attempt` spelling is only
//! for the data plane and the work directory.
//!
//! This module must not talk to the network or run jobs itself: the
//! session and `deploy` do.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::{mpsc, watch};

use weir_runtime::local::LocalCluster;
use weir_runtime::modules::ModuleStore;
use weir_runtime::net::{DataPlane, NetStats};
use weir_runtime::rpc::{
    JobReport, MAX_LOG_BYTES_PER_REPORT, SubtaskLogs, TaskState, ToJobManager, VertexReport,
};
use weir_runtime::taskmanager::{Abort, JobMetrics};

use crate::checkpoints::JobEvent;

/// One deployment: attempt `attempt` of job `job`.
///
/// Its [`Display`](fmt::Display) form, `job#attempt`, names the
/// deployment's inputs on the data plane, where every TaskManager of the
/// job must spell it the same, and its work directory.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct DeploymentKey {
    /// The job id.
    pub(crate) job: String,
    /// The attempt (the JobManager counts them per job).
    pub(crate) attempt: u32,
}

impl DeploymentKey {
    /// Attempt `attempt` of `job`.
    pub(crate) fn new(job: &str, attempt: u32) -> DeploymentKey {
        DeploymentKey {
            job: job.to_owned(),
            attempt,
        }
    }
}

impl fmt::Display for DeploymentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.job, self.attempt)
    }
}

/// One deployment running here, from the moment its subtasks are deployed
/// until its `run_job` ends.
pub(crate) struct LocalJob {
    /// The job id (the map's key adds the attempt).
    pub(crate) job: String,
    /// Checkpoint events for this attempt.
    pub(crate) events: mpsc::UnboundedSender<JobEvent>,
    pub(crate) abort: Abort,
    pub(crate) canceled: Arc<AtomicBool>,
    /// Stops the local sources gracefully (the job drains and finishes).
    pub(crate) stop: Arc<AtomicBool>,
    /// Drains the local sources: final watermark, then idle.
    pub(crate) drain: Arc<AtomicBool>,
    /// The deployment attempt.
    pub(crate) attempt: u32,
    pub(crate) metrics: Arc<JobMetrics>,
    pub(crate) started: Instant,
    /// Head vertex of each task with local subtasks → how many run here.
    pub(crate) heads: Vec<(usize, u32)>,
    pub(crate) vertices: usize,
    /// The job's name (`job.name`), for metric labels.
    pub(crate) name: String,
    /// Every vertex's uid, indexed like the graph's vertices.
    pub(crate) vertex_ids: Vec<String>,
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
                watermark: m.watermark(),
                latency_ms: m.latency_samples(),
                ..VertexReport::default()
            })
            .collect();
        let wall = self.started.elapsed().as_millis() as u64;
        // Without `job.metrics` nothing is timed: no busy time either.
        let timed = self.heads.iter().filter(|_| self.metrics.detailed);
        for (head, n) in timed {
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
            logs: self.unshipped_logs(),
            state_bytes: self.metrics.vertices.iter().map(|v| v.state_bytes()).sum(),
        }
    }

    /// The operators' log lines not sent to the JobManager yet, within
    /// [`MAX_LOG_BYTES_PER_REPORT`]; the rest wait for the next report.
    fn unshipped_logs(&self) -> Vec<SubtaskLogs> {
        let mut budget = MAX_LOG_BYTES_PER_REPORT;
        let mut logs = Vec::new();
        for (v, vertex) in self.metrics.vertices.iter().enumerate().take(self.vertices) {
            for (subtask, m) in vertex.subtask_list() {
                let new = m.telemetry.take_unshipped(&mut budget);
                if !new.lines.is_empty() || new.dropped > 0 {
                    logs.push(SubtaskLogs {
                        vertex: v as u32,
                        subtask,
                        lines: new.lines,
                        dropped: new.dropped,
                    });
                }
            }
        }
        logs
    }
}

/// One TaskManager: what it runs and how it reaches its JobManager.
pub(crate) struct Inner {
    pub(crate) id: String,
    pub(crate) slots: u32,
    pub(crate) buffer_size: usize,
    /// Where other TaskManagers reach this one.
    pub(crate) data_address: SocketAddr,
    /// The data plane; `None` in the embedded cluster, whose channels all
    /// stay in memory.
    pub(crate) data: Option<DataPlane>,
    pub(crate) cluster: LocalCluster,
    pub(crate) store: ModuleStore,
    pub(crate) jobs: Mutex<HashMap<DeploymentKey, LocalJob>>,
    /// Attempts canceled before (or while) they were deployed.
    pub(crate) canceled: Mutex<HashSet<DeploymentKey>>,
    /// The latest attempt of each job deployed here.
    pub(crate) deploying: Mutex<HashMap<String, u32>>,
    /// Checkpoint events of each deployment, from the moment it arrives
    /// (events queue while it deploys).
    pub(crate) events: Mutex<HashMap<DeploymentKey, mpsc::UnboundedSender<JobEvent>>>,
    /// The current control connection's outbox.
    pub(crate) outbox: Mutex<Option<mpsc::UnboundedSender<ToJobManager>>>,
    /// Bumped whenever a deployment's `run_job` ends.
    pub(crate) ended: watch::Sender<u64>,
    pub(crate) work_dir: PathBuf,
}

impl Inner {
    /// Sends `message` to the JobManager, if connected.
    pub(crate) fn send(&self, message: ToJobManager) {
        if let Some(tx) = self
            .outbox
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            let _ = tx.send(message);
        }
    }

    /// Reports the state of one subtask to the JobManager.
    pub(crate) fn report(
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
    pub(crate) fn cancel(&self, job: &str) {
        if let Some(attempt) = self
            .deploying
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(job)
        {
            self.canceled
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(DeploymentKey::new(job, *attempt));
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
    pub(crate) fn job_event(&self, job: &str, attempt: u32, event: JobEvent) {
        if let Some(events) = self
            .events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&DeploymentKey::new(job, attempt))
        {
            let _ = events.send(event);
        }
    }

    /// Cancels every job running here.
    pub(crate) fn cancel_all(&self) {
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

    /// Drains (or, with `drain` false, resumes) the sources of attempt
    /// `attempt` of `job` here (`ToTaskManager::Drain`).
    pub(crate) fn drain_sources(&self, job: &str, attempt: u32, drain: bool) {
        self.for_each_attempt(job, |j| {
            if j.attempt == attempt {
                j.drain.store(drain, Ordering::SeqCst);
            }
        });
    }

    /// Stops the sources of `job` here: it drains and finishes.
    pub(crate) fn stop_sources(&self, job: &str) {
        self.for_each_attempt(job, |j| j.stop.store(true, Ordering::Relaxed));
    }

    /// This TaskManager's data-plane counters (zero without a data plane).
    pub(crate) fn net_stats(&self) -> NetStats {
        self.data.as_ref().map(DataPlane::stats).unwrap_or_default()
    }

    /// Forgets the data-plane inputs of deployment `key`.
    pub(crate) fn unregister_job(&self, key: &DeploymentKey) {
        if let Some(data) = &self.data {
            data.unregister_job(&key.to_string());
        }
    }

    /// The current report of every deployment here.
    pub(crate) fn job_reports(&self) -> Vec<JobReport> {
        let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        jobs.values().map(LocalJob::report).collect()
    }

    /// The current report of `job` (its live attempt), if it runs here.
    pub(crate) fn job_report(&self, job: &str) -> Option<JobReport> {
        let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        jobs.values().find(|j| j.job == job).map(LocalJob::report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The data plane names a deployment `job#attempt`: every TaskManager
    /// of the job must spell its channels' key the same way.
    #[test]
    fn a_deployment_key_is_spelled_job_hash_attempt() {
        assert_eq!(
            DeploymentKey::new("wordcount", 3).to_string(),
            "wordcount#3"
        );
    }
}
