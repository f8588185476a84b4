//! What the JobManager answers: [`ApiError`] (an HTTP status and a
//! message) and the views of the REST API ([`JobSummary`], [`JobDetail`],
//! [`CheckpointsView`], [`Overview`], …), with the queries that build them
//! (each under the locks of what it reads). `REST.md` documents them for
//! users; the `weir` client reads them with these same types, leniently:
//! fields it does not know are ignored, and the counters and lists a
//! server left out read as zero or empty (`#[serde(default)]`).

use super::*;

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

/// `GET /v1/jobs` entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    /// The content hashes (`sha256:<hex>`) of the modules it runs.
    #[serde(default)]
    pub modules: Vec<String>,
}

/// `GET /v1/jobs/{id}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobDetail {
    /// The summary fields.
    #[serde(flatten)]
    pub summary: JobSummary,
    /// Per vertex, in graph order.
    #[serde(default)]
    pub vertices: Vec<VertexDetail>,
    /// Tasks after chaining.
    #[serde(default)]
    pub tasks: u32,
    /// The deployment attempt (0, then one more per restart); the
    /// counters are the latest attempt's.
    #[serde(default)]
    pub attempt: u32,
    /// Most batches seen queued in one channel (latest attempt).
    #[serde(default)]
    pub max_queued_batches: u64,
    /// The savepoint it started from.
    #[serde(default)]
    pub from_savepoint: Option<String>,
    /// Its savepoints, newest first.
    #[serde(default)]
    pub savepoints: Vec<SavepointView>,
    /// Its versions, oldest first: which modules it runs, since when.
    #[serde(default)]
    pub versions: Vec<VersionView>,
    /// Its upgrades, newest first.
    #[serde(default)]
    pub upgrades: Vec<UpgradeView>,
    /// The edges between its vertices, in spec order.
    #[serde(default)]
    pub edges: Vec<EdgeView>,
    /// Every failure, with its root cause, newest first (across restarts).
    #[serde(default)]
    pub exceptions: Vec<ExceptionView>,
    /// Why it runs as fast as it does (Flink's backpressure rule over the
    /// last seconds); `None` until it has run a few seconds in this
    /// attempt, and once it stopped.
    #[serde(default)]
    pub bottleneck: Option<Bottleneck>,
}

/// One edge of a [`JobDetail`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EdgeView {
    /// The producing vertex.
    pub from: String,
    /// The side output it reads, if not the main output.
    #[serde(default)]
    pub from_tag: Option<String>,
    /// The consuming vertex.
    pub to: String,
    /// `forward`, `hash(...)`, `rebalance` or `broadcast`.
    pub partition: String,
    /// Fused into one task with its ends (records pass in memory).
    pub chained: bool,
}

/// One vertex of a [`JobDetail`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VertexDetail {
    /// The uid.
    pub id: String,
    /// `source`, `operator` or `sink`.
    pub role: String,
    /// Parallelism.
    pub parallelism: u32,
    /// Aggregate state of its subtasks: `failed` if one failed, else
    /// `running` if one runs, else `deploying`, `canceled`, `finished`.
    pub state: TaskState,
    /// Records received, over all subtasks.
    #[serde(default)]
    pub records_in: u64,
    /// Records emitted, over all subtasks.
    #[serde(default)]
    pub records_out: u64,
    /// Time its task's subtasks spent working, summed.
    #[serde(default)]
    pub busy_ms: u64,
    /// Time they spent blocked on full output channels.
    #[serde(default)]
    pub backpressured_ms: u64,
    /// Time they spent waiting for input.
    #[serde(default)]
    pub idle_ms: u64,
    /// Its current event-time watermark in ms since the epoch: the lowest
    /// over its subtasks (`i64::MIN`: none yet; `i64::MAX`: input ended).
    /// `None` while no subtask has reported one.
    #[serde(default)]
    pub watermark: Option<i64>,
    /// Where each subtask runs.
    #[serde(default)]
    pub subtasks: Vec<SubtaskDetail>,
    /// The task (chain of vertices run together, `a+b`) it belongs to.
    #[serde(default)]
    pub task: String,
    /// Records received per second over the last seconds.
    #[serde(default)]
    pub records_in_per_s: Option<f64>,
    /// Records emitted per second over the last seconds.
    #[serde(default)]
    pub records_out_per_s: Option<f64>,
    /// Share of its task's time spent working over the last seconds (0–1).
    #[serde(default)]
    pub busy_ratio: Option<f64>,
    /// Share spent waiting for room downstream (0–1).
    #[serde(default)]
    pub backpressured_ratio: Option<f64>,
    /// Share spent waiting for input (0–1).
    #[serde(default)]
    pub idle_ratio: Option<f64>,
    /// Source-to-here latency (ms) of the latest latency markers of its
    /// subtasks (`job.latency_tracking_interval_ms`); absent without them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<weir_runtime::taskmanager::LatencyQuantiles>,
}

/// One subtask of a [`VertexDetail`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubtaskDetail {
    /// Subtask index.
    pub index: u32,
    /// The TaskManager it runs on.
    pub taskmanager: String,
    /// Its state.
    pub state: TaskState,
}

/// `GET /v1/jobs/{id}/checkpoints`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckpointsView {
    /// Whether the job takes checkpoints.
    pub enabled: bool,
    /// The newest retained checkpoint whose metadata
    /// (`<job>/chk-<n>/_metadata`) is in storage. A checkpoint every
    /// subtask acked shows as `completed` in `history` a little earlier,
    /// while its metadata is being written.
    pub latest: Option<u64>,
    /// Newest first: pending, completed and aborted checkpoints.
    #[serde(default)]
    pub history: Vec<CheckpointStats>,
    /// Every restart, with the checkpoint it restored from.
    #[serde(default)]
    pub restores: Vec<RestoreRecord>,
}

/// `POST /v1/jobs` answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobCreated {
    /// The new job's id.
    pub id: String,
    /// `job.name`.
    pub name: String,
}

/// `GET /v1/taskmanagers` entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    pub state: String,
    /// Why it was lost.
    pub lost_reason: Option<String>,
    /// Registration time, Unix ms.
    #[serde(default)]
    pub registered_at_ms: u64,
    /// Milliseconds since its last heartbeat.
    #[serde(default)]
    pub last_heartbeat_ms_ago: u64,
    /// Its data plane's counters.
    #[serde(default)]
    pub net: NetStats,
    /// Its process's resident memory, as its latest heartbeat said (absent
    /// before the first, or off Linux).
    #[serde(default)]
    pub memory: Option<weir_runtime::telemetry::memory::ProcessMemory>,
    /// Its occupied slots and the job in each, by slot index.
    #[serde(default)]
    pub occupied: Vec<OccupiedSlot>,
}

/// A slot a job holds, in [`TaskManagerInfo`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OccupiedSlot {
    /// The slot's index on its TaskManager.
    pub slot: u32,
    /// The job id.
    pub job: String,
}

/// `GET /v1/overview`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Overview {
    /// Weir's version.
    pub version: String,
    /// Active TaskManagers.
    pub taskmanagers: u32,
    /// Slots of active TaskManagers.
    pub slots_total: u32,
    /// Of which free.
    pub slots_free: u32,
    /// Jobs by state.
    #[serde(default)]
    pub jobs: JobCounts,
    /// Entries in the module store.
    #[serde(default)]
    pub modules: u32,
}

/// Jobs by state, for [`Overview`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
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

impl JobManager {
    /// Every job, newest first.
    pub fn jobs(&self) -> Vec<JobSummary> {
        let mut jobs: Vec<JobSummary> = self
            .job_cells()
            .iter()
            .map(|cell| self.lock_job(cell).summary())
            .collect();
        jobs.sort_by_key(|j| std::cmp::Reverse(j.submitted_at_ms));
        jobs
    }

    /// One job with per-vertex state and metrics.
    pub fn job(&self, id: &str) -> Result<JobDetail, ApiError> {
        let cell = self.job_cell(id)?;
        Ok(job_detail(&self.lock_job(&cell)))
    }

    /// A job's checkpoint history and restores (`GET /v1/jobs/{id}/checkpoints`).
    pub fn checkpoints(&self, id: &str) -> Result<CheckpointsView, ApiError> {
        let cell = self.job_cell(id)?;
        let job = self.lock_job(&cell);
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
        self.taskmanagers
            .lock()
            .iter()
            .map(|(id, tm)| TaskManagerInfo {
                id: id.clone(),
                data_address: tm.data_address.to_string(),
                slots_total: tm.slots_total,
                slots_free: tm.slots_total - tm.occupied.len() as u32,
                state: if tm.lost.is_some() { "lost" } else { "active" }.into(),
                lost_reason: tm.lost.clone(),
                registered_at_ms: tm.registered_at_ms,
                last_heartbeat_ms_ago: tm.last_heartbeat.elapsed().as_millis() as u64,
                net: tm.net.clone(),
                memory: tm.memory,
                occupied: tm
                    .occupied
                    .iter()
                    .map(|(slot, job)| OccupiedSlot {
                        slot: *slot,
                        job: job.clone(),
                    })
                    .collect(),
            })
            .collect()
    }

    /// Cluster overview.
    pub fn overview(&self) -> Overview {
        let (mut n, mut total, mut free) = (0, 0, 0);
        for tm in self.taskmanagers.lock().values() {
            if tm.lost.is_none() {
                n += 1;
                total += tm.slots_total;
                free += tm.slots_total - tm.occupied.len() as u32;
            }
        }
        let mut jobs = JobCounts::default();
        for cell in self.job_cells() {
            match self.lock_job(&cell).state {
                JobState::Finished => jobs.finished += 1,
                JobState::Failed => jobs.failed += 1,
                JobState::Canceled => jobs.canceled += 1,
                _ => jobs.running += 1,
            }
        }
        Overview {
            version: env!("CARGO_PKG_VERSION").into(),
            taskmanagers: n,
            slots_total: total,
            slots_free: free,
            jobs,
            modules: self.store.list().len() as u32,
        }
    }
}

/// `job` with per-vertex state and metrics.
pub(crate) fn job_detail(job: &Job) -> JobDetail {
    // Rates and shares only while it runs: an ended job's window is stale.
    let loads = (job.state == JobState::Running)
        .then(|| job.load.loads())
        .flatten();
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
            let load = loads.as_ref().and_then(|l| l.get(v)).copied();
            VertexDetail {
                id: vertex.id.0.clone(),
                role: vertex.kind.role().into(),
                parallelism: vertex.parallelism,
                state: aggregate_state(states),
                records_in: sum(&|r| r.records_in, v),
                records_out: sum(&|r| r.records_out, v),
                busy_ms: sum(&|r| r.busy_ms, head),
                backpressured_ms: sum(&|r| r.backpressured_ms, head),
                idle_ms: sum(&|r| r.idle_ms, head),
                watermark: job
                    .reports
                    .values()
                    .filter_map(|r| r.vertices.get(v).and_then(|r| r.watermark))
                    .min(),
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
                task: job.tasks[t].id.as_str().to_owned(),
                records_in_per_s: load.map(|l| l.records_in_per_s),
                records_out_per_s: load.map(|l| l.records_out_per_s),
                busy_ratio: load.map(|l| l.busy),
                backpressured_ratio: load.map(|l| l.backpressured),
                idle_ratio: load.map(|l| l.idle),
                latency_ms: weir_runtime::taskmanager::LatencyQuantiles::of(
                    &job.reports
                        .values()
                        .filter_map(|r| r.vertices.get(v))
                        .flat_map(|r| r.latency_ms.iter().copied())
                        .collect::<Vec<_>>(),
                ),
            }
        })
        .collect();
    let bottleneck = loads.as_ref().map(|l| {
        if job.graph.settings.metrics {
            load::find_bottleneck(&load::task_loads(&job.graph, &job.tasks, l))
        } else {
            load::Bottleneck::unmeasured()
        }
    });
    let edges = job
        .graph
        .edges
        .iter()
        .map(|e| EdgeView {
            from: job.graph.vertices[e.from].id.0.clone(),
            from_tag: e.from_tag.clone(),
            to: job.graph.vertices[e.to].id.0.clone(),
            partition: e.partitioner.to_string(),
            chained: weir_runtime::job::chain::is_chained(&job.graph, e),
        })
        .collect();
    JobDetail {
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
        from_savepoint: job
            .from_savepoint
            .as_ref()
            .map(|s| s.dir.display().to_string()),
        savepoints: job.savepoints.iter().rev().cloned().collect(),
        versions: job.versions.clone(),
        upgrades: job.upgrades.iter().rev().cloned().collect(),
        edges,
        exceptions: job.exceptions.newest_first(),
        bottleneck,
    }
}

pub(crate) fn aggregate_state(states: &[TaskState]) -> TaskState {
    use TaskState::*;
    [Failed, Running, Deploying, Canceled]
        .into_iter()
        .find(|s| states.contains(s))
        .unwrap_or(Finished)
}
