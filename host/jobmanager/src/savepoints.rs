//! Savepoints on the JobManager: triggering one (the job keeps running, or
//! stops at it), writing it from the completed checkpoint it rides on, and
//! checking a savepoint a job is submitted with.
//!
//! A savepoint is a checkpoint triggered now ([`Coordinator::trigger_now`])
//! and, once every subtask acked it, written out in the canonical format
//! ([`weir_runtime::checkpoint::savepoint::directory::materialize`]) on the
//! blocking pool, off the job's lock. Meanwhile the job takes no other
//! checkpoint, so none subsumes (and deletes) the one being read and its
//! sinks publish nothing past it. With `stop`, the job is canceled once
//! the savepoint is written: the sinks have committed exactly what it
//! records, and what they wrote since is never published (a resume rolls
//! it back). If the write fails, the job goes on. A job whose input ends
//! meanwhile is canceled rather than finished, for the same reason.
//!
//! The savepoint directory is the user's: it must lie under the cluster's
//! allowed directories ([`JobManagerConfig::allowed_roots`]) and be empty
//! or absent. The savepoint needs `[job.checkpoints]` in the job's spec.

use super::*;

use weir_runtime::checkpoint::savepoint::SavedState;
use weir_runtime::checkpoint::savepoint::directory::{
    CheckpointSource, SavepointMetadata, materialize, read_metadata, verify,
};
use weir_runtime::rpc::SavepointDeploy;
use weir_runtime::state::StateDescriptor;

/// Savepoints a job remembers (`GET /v1/jobs/{id}/savepoints`), newest.
const MAX_SAVEPOINT_HISTORY: usize = 100;

/// Where a savepoint stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SavepointStatus {
    /// Its checkpoint is being taken.
    Pending,
    /// Its checkpoint completed; its files are being written.
    Writing,
    /// Written: the directory can be restored from.
    Completed,
    /// It failed; `failure` says why. Nothing was stopped.
    Failed,
}

/// One savepoint of a job (`GET /v1/jobs/{id}/savepoints`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavepointView {
    /// 1 for the job's first savepoint, then +1.
    pub id: u32,
    /// Its directory.
    pub dir: String,
    /// Whether the job stops at it.
    pub stop: bool,
    /// Whether the job's sources were drained first (final watermark).
    #[serde(default)]
    pub drain: bool,
    /// Where it stands.
    pub status: SavepointStatus,
    /// The checkpoint it rides on.
    #[serde(default)]
    pub checkpoint: Option<u64>,
    /// When it was requested, Unix ms.
    pub requested_at_ms: u64,
    /// When it completed or failed, Unix ms.
    #[serde(default)]
    pub ended_at_ms: Option<u64>,
    /// Bytes written so far.
    #[serde(default)]
    pub bytes: u64,
    /// Why it failed.
    #[serde(default)]
    pub failure: Option<String>,
}

impl SavepointStatus {
    /// Its name in the REST API and on the terminal.
    pub fn as_str(self) -> &'static str {
        match self {
            SavepointStatus::Pending => "pending",
            SavepointStatus::Writing => "writing",
            SavepointStatus::Completed => "completed",
            SavepointStatus::Failed => "failed",
        }
    }
}

impl SavepointView {
    fn is_running(&self) -> bool {
        matches!(
            self.status,
            SavepointStatus::Pending | SavepointStatus::Writing
        )
    }
}

/// A job's savepoints while it runs (at most one at a time).
impl Job {
    /// Whether a savepoint of the job is being taken or written.
    pub(crate) fn savepoint_running(&self) -> bool {
        self.savepoints.iter().any(SavepointView::is_running)
    }

    /// Whether the job is to stop at a savepoint being written.
    pub(crate) fn stopping_at_savepoint(&self) -> bool {
        self.savepoints
            .iter()
            .any(|s| s.stop && s.status == SavepointStatus::Writing)
    }
}

/// What a job is submitted with to start from a savepoint (or a retained
/// checkpoint: `from_checkpoint` in the REST API).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct FromSavepoint {
    /// The savepoint directory (absolute, under the allowed directories).
    pub path: PathBuf,
    /// Start even if the savepoint holds state no vertex of the new job
    /// takes (it is dropped).
    #[serde(default)]
    pub allow_non_restored_state: bool,
    /// Written by this JobManager from a retained checkpoint
    /// ([`JobManager::savepoint_from_checkpoint`]): not in the allowed
    /// directories, and not the user's to name.
    #[serde(skip)]
    pub(crate) written_here: bool,
}

impl FromSavepoint {
    /// The savepoint in directory `path`.
    pub fn at(path: PathBuf, allow_non_restored_state: bool) -> FromSavepoint {
        FromSavepoint {
            path,
            allow_non_restored_state,
            written_here: false,
        }
    }
}

impl JobManager {
    /// Takes a savepoint of running job `id` into `dir`; with `stop`, the
    /// job is canceled once it is taken. Returns at once: the savepoint is
    /// written in the background (`savepoints` shows it).
    pub fn trigger_savepoint(
        &self,
        id: &str,
        dir: &std::path::Path,
        stop: bool,
    ) -> Result<SavepointView, ApiError> {
        self.trigger_savepoint_draining(id, dir, stop, false)
    }

    /// [`JobManager::trigger_savepoint`]; with `drain` (and `stop`), the
    /// sources first send the final watermark, firing every event-time
    /// timer, and read nothing more: the savepoint holds the state after
    /// that, and the sinks commit what the timers emitted (Flink's
    /// `stop --drain`). If the savepoint fails, the sources read again.
    pub fn trigger_savepoint_draining(
        &self,
        id: &str,
        dir: &std::path::Path,
        stop: bool,
        drain: bool,
    ) -> Result<SavepointView, ApiError> {
        if drain && !stop {
            return Err(ApiError::bad_request(
                "drain applies to a stop with a savepoint (`weir stop --drain`): a drained job \
                 reads nothing more",
            ));
        }
        let dir = self.checked_savepoint_dir(dir)?;
        if std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_some()) {
            return Err(ApiError::conflict(format!(
                "savepoint directory {} is not empty (a savepoint never overwrites)",
                dir.display()
            )));
        }
        let result = self.trigger_savepoint_locked(id, dir, stop, drain);
        self.changed();
        result
    }

    fn trigger_savepoint_locked(
        &self,
        id: &str,
        dir: PathBuf,
        stop: bool,
        drain: bool,
    ) -> Result<SavepointView, ApiError> {
        let cell = self.job_cell(id)?;
        let mut guard = self.lock_job(&cell);
        if guard.upgrade.is_some() {
            return Err(ApiError::conflict(format!(
                "job {id} ({}) is being upgraded; take a savepoint once the upgrade ended",
                guard.name
            )));
        }
        self.trigger_savepoint_locked_in(&mut guard, dir, stop, drain)
    }

    /// Triggers a savepoint of `job` (locked) into `dir`.
    pub(crate) fn trigger_savepoint_locked_in(
        &self,
        job: &mut Job,
        dir: PathBuf,
        stop: bool,
        drain: bool,
    ) -> Result<SavepointView, ApiError> {
        let id = job.id.clone();
        if job.state != JobState::Running {
            return Err(ApiError::conflict(format!(
                "job {id} ({}) is {}: only a running job takes a savepoint",
                job.name,
                job.state.as_str()
            )));
        }
        if job.savepoint_running() {
            return Err(ApiError::conflict(format!(
                "job {id} ({}) is taking a savepoint already; wait for it \
                 (`weir status {id}` shows it)",
                job.name
            )));
        }
        let deployed = job
            .subtasks
            .iter()
            .flatten()
            .all(|s| matches!(s, TaskState::Running | TaskState::Finished));
        let now = self.clock.now();
        let Some(c) = job.checkpoints.as_mut() else {
            return Err(ApiError::conflict(format!(
                "job {id} ({}) takes no checkpoints: a savepoint needs [job.checkpoints] \
                 in its spec",
                job.name
            )));
        };
        if !deployed {
            return Err(ApiError::conflict(format!(
                "job {id} ({}) is still being deployed; try again once it runs",
                job.name
            )));
        }
        let Some((checkpoint, actions)) = c.coordinator.trigger_now(now) else {
            return Err(ApiError::conflict(format!(
                "job {id} ({}) takes no checkpoints at the moment (it is restarting or \
                 stopping); try again",
                job.name
            )));
        };
        // A completion whose metadata is still being written is announced
        // before the trigger, as the coordinator's own triggers wait for
        // (`checkpoint_actions`): the savepoint's uploads build on it.
        for earlier in std::mem::take(&mut c.unannounced) {
            announce(&self.taskmanagers, job, earlier);
        }
        let view = SavepointView {
            id: job.savepoints.last().map_or(1, |s| s.id + 1),
            dir: dir.display().to_string(),
            stop,
            drain,
            status: SavepointStatus::Pending,
            checkpoint: Some(checkpoint),
            requested_at_ms: now_ms(),
            ended_at_ms: None,
            bytes: 0,
            failure: None,
        };
        job.savepoints.push(view.clone());
        // A long-running job's periodic savepoints: the newest are kept
        // (none still running is ever dropped: only one runs at a time).
        if job.savepoints.len() > MAX_SAVEPOINT_HISTORY {
            job.savepoints.remove(0);
        }
        tracing::info!(job = %job.id, checkpoint, stop, drain, dir = %view.dir, "savepoint triggered");
        if drain {
            // Before the trigger on every TaskManager's queue: the final
            // watermark precedes the savepoint's barrier.
            drain_sources(&self.taskmanagers, job, true);
        }
        checkpoint_actions(&self.taskmanagers, job, self, actions);
        Ok(view)
    }

    /// Waits until savepoint `number` of job `id` is completed or failed;
    /// returns it then.
    pub async fn wait_savepoint(&self, id: &str, number: u32) -> Result<SavepointView, ApiError> {
        self.watch(|| {
            let view = self
                .savepoints(id)?
                .into_iter()
                .find(|s| s.id == number)
                .ok_or_else(|| ApiError::not_found(format!("no savepoint {number} of job {id}")))?;
            Ok((!view.is_running()).then_some(view))
        })
        .await
    }

    /// Job `id`'s savepoints, newest first.
    pub fn savepoints(&self, id: &str) -> Result<Vec<SavepointView>, ApiError> {
        let cell = self.job_cell(id)?;
        let job = self.lock_job(&cell);
        Ok(job.savepoints.iter().rev().cloned().collect())
    }

    /// Writes retained checkpoint `path` (`<checkpoint dir>/<job>/chk-<n>`,
    /// in this JobManager's checkpoint directory or an allowed one) as a
    /// savepoint into the JobManager's data dir, for a job to start from
    /// (`--from-checkpoint`); returns it. Blocking I/O.
    pub fn savepoint_from_checkpoint(
        &self,
        path: &std::path::Path,
        allow_non_restored_state: bool,
    ) -> Result<FromSavepoint, ApiError> {
        let refused = |m: String| {
            ApiError::bad_request(format!("cannot restore checkpoint {}: {m}", path.display()))
        };
        let real = path.canonicalize().map_err(|e| refused(e.to_string()))?;
        let in_storage = self
            .checkpoint_root
            .canonicalize()
            .is_ok_and(|root| real.starts_with(root));
        if !in_storage {
            self.checked_savepoint_dir(path)?;
        }
        let bytes = std::fs::read(real.join(weir_runtime::checkpoint::layout::METADATA_FILE))
            .map_err(|e| refused(format!("its _metadata: {e}")))?;
        let metadata: weir_runtime::checkpoint::snapshot::CheckpointMetadata =
            serde_json::from_slice(&bytes).map_err(|e| refused(format!("its _metadata: {e}")))?;
        let layout = metadata.layout.as_ref().ok_or_else(|| {
            refused(
                "its _metadata was written by an older weir and does not record the job's \
                     graph; restore it by restarting its own job"
                    .into(),
            )
        })?;
        let expected = format!("chk-{}", metadata.checkpoint);
        let job_dir = real
            .parent()
            .filter(|_| real.file_name().is_some_and(|n| n == expected.as_str()));
        let root = job_dir
            .filter(|d| d.file_name().is_some_and(|n| n == metadata.job.as_str()))
            .and_then(|d| d.parent())
            .ok_or_else(|| {
                refused(format!(
                    "expected a path ending in {}/{expected} (the checkpoint directory's layout)",
                    metadata.job
                ))
            })?;
        let storage = weir_runtime::checkpoint::DirStorage::new(root.to_path_buf());
        let states: HashMap<usize, Vec<StateDescriptor>> = layout
            .states
            .iter()
            .map(|(v, s)| (*v, s.iter().map(SavedState::descriptor).collect()))
            .collect();
        let out = self.restored_dir.join(format!(
            "{}-chk-{}-{:08x}",
            metadata.job,
            metadata.checkpoint,
            random_u64() as u32
        ));
        materialize(
            &CheckpointSource {
                job_id: &metadata.job,
                job_name: &layout.graph.name,
                checkpoint: metadata.checkpoint,
                graph: &layout.graph,
                tasks: &layout.tasks,
                parts: &metadata.subtasks,
                states: &states,
                storage: &storage,
            },
            &out,
            &mut |_| {},
        )
        .map_err(|e| refused(e.to_string()))?;
        Ok(FromSavepoint {
            path: out,
            allow_non_restored_state,
            written_here: true,
        })
    }

    /// `dir` resolved under the allowed directories, or why not.
    fn checked_savepoint_dir(&self, dir: &std::path::Path) -> Result<PathBuf, ApiError> {
        if !dir.is_absolute() {
            return Err(ApiError::bad_request(format!(
                "savepoint directory {:?} is relative; give an absolute path",
                dir.display().to_string()
            )));
        }
        self.checker
            .allowed_roots()
            .check_dir(dir)
            .map_err(|e| ApiError::bad_request(format!("savepoint directory refused: {e}")))
    }

    /// Reads and checks the savepoint `from` names for `graph`: its
    /// metadata, every file (read through once), and that the job can take
    /// its state (see [`check_compatible`]). Blocking I/O.
    pub(crate) fn load_savepoint(
        &self,
        from: &FromSavepoint,
        graph: &JobGraph,
        states: &HashMap<usize, Vec<StateDescriptor>>,
    ) -> Result<SavepointDeploy, ApiError> {
        let dir = if from.written_here {
            from.path.clone()
        } else {
            self.checked_savepoint_dir(&from.path)?
        };
        let refused = |e: weir_runtime::checkpoint::savepoint::SavepointError| {
            ApiError::bad_request(format!("cannot restore the savepoint: {e}"))
        };
        let metadata = read_metadata(&dir).map_err(refused)?;
        verify(&dir, &metadata).map_err(refused)?;
        check_compatible(&metadata, graph, states, from.allow_non_restored_state)
            .map_err(|m| ApiError::bad_request(format!("cannot restore the savepoint: {m}")))?;
        Ok(SavepointDeploy {
            dir,
            metadata,
            migrations: Default::default(),
        })
    }
}

/// Whether a job of `graph` (its keyed operators declaring `states`) can
/// start from the savepoint `saved`: the same `max_parallelism`; every
/// source and sink that recorded a position or committable there with the
/// same parallelism (except Kafka sources, whose partitions are dealt out
/// again); every saved state with entries declared by the same
/// operator under the same name and kind. State nobody takes is refused
/// unless `allow_non_restored`. Keyed operators may change parallelism.
pub(crate) fn check_compatible(
    saved: &SavepointMetadata,
    graph: &JobGraph,
    states: &HashMap<usize, Vec<StateDescriptor>>,
    allow_non_restored: bool,
) -> Result<(), String> {
    if u32::from(saved.max_parallelism) != graph.settings.max_parallelism {
        return Err(format!(
            "the savepoint has {} key groups (job.max_parallelism), the job {}; \
             they must be equal",
            saved.max_parallelism, graph.settings.max_parallelism
        ));
    }
    let mut dropped = Vec::new();
    for vertex in &saved.vertices {
        let has_position = vertex
            .subtasks
            .iter()
            .any(|s| s.source.is_some() || s.sink.is_some());
        let has_state = vertex.subtasks.iter().any(|s| {
            s.timers.is_some()
                || s.state
                    .as_ref()
                    .is_some_and(|f| f.entries.iter().any(|n| *n > 0))
        });
        let Some((v, new)) = graph
            .vertices
            .iter()
            .enumerate()
            .find(|(_, x)| x.id.0 == vertex.uid)
        else {
            if has_position || has_state {
                dropped.push(format!("{} `{}` (not in the job)", vertex.role, vertex.uid));
            }
            continue;
        };
        // A Kafka source's partitions are dealt out again (restore.rs in
        // the TaskManager); every other position stays with its subtask.
        let rescalable = || {
            let positions: Vec<Option<&serde_json::Value>> =
                vertex.subtasks.iter().map(|s| s.source.as_ref()).collect();
            vertex.subtasks.iter().all(|s| s.sink.is_none())
                && weir_runtime::connectors::rescaled_source_position(&positions).is_some()
        };
        if has_position && new.parallelism != vertex.parallelism && !rescalable() {
            return Err(format!(
                "{} `{}` ran with parallelism {} and now has {}: sources and sinks \
                 keep their parallelism across a savepoint (only keyed operators and \
                 Kafka sources rescale)",
                vertex.role, vertex.uid, vertex.parallelism, new.parallelism
            ));
        }
        let declared = states.get(&v).map(Vec::as_slice).unwrap_or_default();
        for (i, state) in vertex.states.iter().enumerate() {
            let entries: u64 = vertex
                .subtasks
                .iter()
                .filter_map(|s| s.state.as_ref())
                .map(|f| f.entries.get(i).copied().unwrap_or(0))
                .sum();
            match declared.iter().find(|d| d.name == state.name) {
                Some(d) if d.kind != state.kind => {
                    return Err(format!(
                        "operator `{}` state `{}` was saved as {} state and is now \
                         declared as {} state (a state whose layout changes needs a migration)",
                        vertex.uid, state.name, state.kind, d.kind
                    ));
                }
                Some(_) => {}
                None if entries > 0 => dropped.push(format!(
                    "operator `{}` state `{}` ({entries} entries; the operator no longer \
                     declares it)",
                    vertex.uid, state.name
                )),
                None => {}
            }
        }
    }
    if !dropped.is_empty() && !allow_non_restored {
        return Err(format!(
            "the savepoint holds state the job would drop: {}; start anyway with \
             --allow-non-restored-state",
            dropped.join(", ")
        ));
    }
    Ok(())
}

/// A savepoint's checkpoint completed (`done`): its files are written in
/// the background, and the job takes no other checkpoint meanwhile, so
/// its sinks publish nothing past the savepoint. With `stop`, the job is
/// canceled once the files are written ([`JobManager::savepoint_written`]);
/// if writing fails, it goes on.
pub(crate) fn savepoint_checkpoint_completed(
    job: &mut Job,
    jm: &JobManager,
    done: &CompletedCheckpoint<SubtaskCheckpoint>,
) {
    let state = job.state;
    let Some(view) = job
        .savepoints
        .iter_mut()
        .find(|s| s.status == SavepointStatus::Pending && s.checkpoint == Some(done.id))
    else {
        return;
    };
    if view.stop && state.on(Event::Cancel).is_err() {
        // Its subtasks all finished first: it ends on its own, publishing
        // all its output, which a savepoint of this checkpoint would
        // repeat on resume.
        view.status = SavepointStatus::Failed;
        view.ended_at_ms = Some(now_ms());
        let why = format!(
            "the job was {} before it could stop: it ends on its own, with all its output",
            state.as_str()
        );
        view.failure = Some(why.clone());
        let number = view.id;
        upgrade_savepoint_written(job, number, Err(why));
        return;
    }
    view.status = SavepointStatus::Writing;
    let (number, dir) = (view.id, PathBuf::from(&view.dir));
    let now = jm.clock.now();
    if let Some(c) = job.checkpoints.as_mut() {
        let actions = c.coordinator.suspend("a savepoint is being written", now);
        job.deferred.extend(actions);
    }
    // An upgrade stops the job now: what it would do until the savepoint
    // is written is never published, and the writer gets the cores.
    upgrade_checkpoint_taken(job, number, &jm.taskmanagers);
    let Some(me) = jm.me.upgrade() else { return };
    let parts: Vec<((u32, u32), SubtaskCheckpoint)> =
        done.acks.iter().map(|(k, v)| (*k, v.clone())).collect();
    let (graph, tasks, states) = (job.graph.clone(), job.tasks.clone(), job.states.clone());
    let (job_id, job_name, checkpoint) = (job.id.clone(), job.name.clone(), done.id);
    let storage = jm.storage.clone();
    jm.handle.spawn(async move {
        let written = {
            let me = me.clone();
            let job_id = job_id.clone();
            tokio::task::spawn_blocking(move || {
                let src = CheckpointSource {
                    job_id: &job_id,
                    job_name: &job_name,
                    checkpoint,
                    graph: &graph,
                    tasks: &tasks,
                    parts: &parts,
                    states: &states,
                    storage: storage.as_ref(),
                };
                let mut progress = |bytes| me.savepoint_progress(&job_id, number, bytes);
                materialize(&src, &dir, &mut progress)
            })
            .await
        };
        let outcome = match written {
            Ok(Ok(metadata)) => Ok(metadata),
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(format!("the savepoint writer panicked: {e}")),
        };
        me.savepoint_written(&job_id, number, outcome);
    });
}

/// Tells the job's TaskManagers to drain its sources (or to let them read
/// again): [`ToTaskManager::Drain`].
fn drain_sources(taskmanagers: &TaskManagers, job: &Job, drain: bool) {
    tell(taskmanagers, job, |job, attempt| ToTaskManager::Drain {
        job,
        attempt,
        drain,
    });
}

/// A checkpoint was aborted: a savepoint riding on it fails (the job goes on).
pub(crate) fn savepoint_checkpoint_aborted(
    taskmanagers: &TaskManagers,
    job: &mut Job,
    checkpoint: u64,
    reason: &str,
) {
    if let Some(view) = job
        .savepoints
        .iter_mut()
        .find(|s| s.status == SavepointStatus::Pending && s.checkpoint == Some(checkpoint))
    {
        view.status = SavepointStatus::Failed;
        view.ended_at_ms = Some(now_ms());
        let why = format!("its checkpoint {checkpoint} was aborted: {reason}");
        view.failure = Some(why.clone());
        let (number, drained) = (view.id, view.drain);
        if drained && job.state == JobState::Running {
            // The job goes on: its sources read again.
            drain_sources(taskmanagers, job, false);
        }
        tracing::warn!(job = %job.id, checkpoint, "savepoint failed: {reason}");
        if job
            .upgrade
            .as_ref()
            .is_some_and(|u| u.savepoint() == number)
        {
            job.end_upgrade(
                crate::UpgradeStatus::Failed,
                Some(format!("the savepoint failed: {why}; nothing changed")),
            );
        }
    }
}

impl JobManager {
    fn savepoint_progress(&self, job: &str, number: u32, bytes: u64) {
        if let Ok(cell) = self.job_cell(job) {
            let mut job = self.lock_job(&cell);
            if let Some(view) = job.savepoints.iter_mut().find(|s| s.id == number) {
                view.bytes = bytes;
            }
        }
        self.changed();
    }

    /// The savepoint writer of job `job` ended: records it, and lets a
    /// running job take checkpoints again.
    fn savepoint_written(
        &self,
        job: &str,
        number: u32,
        outcome: Result<SavepointMetadata, String>,
    ) {
        if let Ok(cell) = self.job_cell(job) {
            let mut guard = self.lock_job(&cell);
            let job = &mut *guard;
            let running = job.state == JobState::Running;
            let mut stop_now = false;
            let for_upgrade = job
                .upgrade
                .as_ref()
                .is_some_and(|u| u.savepoint() == number);
            let mut upgrade_outcome = None;
            let mut undrain = false;
            if let Some(view) = job.savepoints.iter_mut().find(|s| s.id == number) {
                view.ended_at_ms = Some(now_ms());
                match outcome {
                    Ok(metadata) => {
                        view.status = SavepointStatus::Completed;
                        view.bytes = metadata.files().map(|f| f.size).sum();
                        stop_now = view.stop;
                        tracing::info!(job = %job.id, dir = %view.dir, bytes = view.bytes, "savepoint written");
                        upgrade_outcome = Some(Ok((metadata, PathBuf::from(&view.dir))));
                    }
                    Err(why) => {
                        tracing::warn!(job = %job.id, dir = %view.dir, "savepoint failed: {why}");
                        upgrade_outcome = Some(Err(why.clone()));
                        undrain = view.drain && running;
                        view.status = SavepointStatus::Failed;
                        view.failure = Some(match view.checkpoint.filter(|_| view.stop) {
                            Some(_) if running => format!("{why}; the job goes on"),
                            // It finished meanwhile and was stopped at that
                            // checkpoint, which is retained.
                            Some(n) => format!(
                                "{why}; the job stopped at checkpoint {n}: start it again with \
                                 --from-checkpoint {}",
                                self.checkpoint_root
                                    .join(&job.id)
                                    .join(format!("chk-{n}"))
                                    .display()
                            ),
                            None => why,
                        });
                    }
                }
            }
            if undrain {
                // The job goes on: its sources read again.
                drain_sources(&self.taskmanagers, job, false);
            }
            if for_upgrade && let Some(outcome) = upgrade_outcome {
                let outcome = match &outcome {
                    Ok((metadata, dir)) => Ok((metadata, dir.as_path())),
                    Err(why) => Err(why.clone()),
                };
                upgrade_savepoint_written(job, number, outcome);
                // Restarts it (on the new version, or on its old one if
                // the savepoint failed) once its subtasks have stopped.
                settle(&self.taskmanagers, job, self.clock.now());
            } else if stop_now && running {
                // Stopped at the savepoint: its sinks published what it
                // records; what they wrote since is never published.
                job.advance(Event::Cancel);
                send_cancel(&self.taskmanagers, job);
                tracing::info!(job = %job.id, "stopped with a savepoint");
            } else if running && let Some(c) = job.checkpoints.as_mut() {
                c.coordinator.resume(self.clock.now());
            }
        }
        self.changed();
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use weir_runtime::checkpoint::savepoint::directory::{
        SavedFile, SavedStateFile, SavedSubtask, SavedVertex,
    };
    use weir_runtime::job::JobSpec;
    use weir_runtime::state::StateKind;

    fn graph(sources: u32, counters: u32) -> JobGraph {
        graph_with(sources, counters, 128)
    }

    /// Sources → a keyed counter → a blackhole, with checkpoints (the
    /// upgrade tests use it too).
    pub(crate) fn graph_with(sources: u32, counters: u32, max_parallelism: u32) -> JobGraph {
        let spec = format!(
            r#"
[job]
name = "j"
max_parallelism = {max_parallelism}

[job.checkpoints]
interval_ms = 1000

[[source]]
id = "src"
type = "generator"
kind = "sequence"
parallelism = {sources}

[[operator]]
id = "count"
module = "count.wasm"
key_by = "key"
parallelism = {counters}

[[sink]]
id = "out"
type = "blackhole"

[[edge]]
from = "src"
to = "count"

[[edge]]
from = "count"
to = "out"
"#
        );
        JobGraph::from_spec(JobSpec::parse(&spec, "/specs/job.toml", &[]).unwrap()).unwrap()
    }

    fn states(kind: StateKind) -> HashMap<usize, Vec<StateDescriptor>> {
        HashMap::from([(1, vec![StateDescriptor::new("counts", kind)])])
    }

    /// A savepoint of `graph(2, 2)` with `entries` in state `counts`.
    fn saved(entries: u64) -> SavepointMetadata {
        let file = |s: u32| SavedStateFile {
            file: SavedFile {
                path: format!("count/{s}.state"),
                size: 1,
                sha256: String::new(),
            },
            key_groups: (0, 1),
            entries: vec![entries],
            bytes: vec![entries * 8],
        };
        SavepointMetadata {
            format: 1,
            job_id: "old".into(),
            job_name: "j".into(),
            checkpoint: 3,
            created_at_ms: 0,
            max_parallelism: 128,
            vertices: vec![
                SavedVertex {
                    uid: "src".into(),
                    role: "source".into(),
                    parallelism: 2,
                    module: None,
                    states: Vec::new(),
                    subtasks: (0..2)
                        .map(|n| SavedSubtask {
                            source: Some(serde_json::json!(n)),
                            ..SavedSubtask::default()
                        })
                        .collect(),
                },
                SavedVertex {
                    uid: "count".into(),
                    role: "operator".into(),
                    parallelism: 2,
                    module: Some("sha256:00".into()),
                    states: vec![SavedState {
                        name: "counts".into(),
                        kind: StateKind::Value,
                        ttl_ms: None,
                    }],
                    subtasks: (0..2)
                        .map(|s| SavedSubtask {
                            state: Some(file(s)),
                            ..SavedSubtask::default()
                        })
                        .collect(),
                },
            ],
        }
    }

    #[test]
    fn a_savepoint_fits_a_job_that_declares_its_states_and_keeps_source_parallelism() {
        let ok = |g: JobGraph, st, allow| check_compatible(&saved(5), &g, &st, allow);
        ok(graph(2, 2), states(StateKind::Value), false).unwrap();
        // Keyed operators rescale.
        ok(graph(2, 4), states(StateKind::Value), false).unwrap();
        ok(graph(2, 1), states(StateKind::Value), false).unwrap();

        let err = ok(graph(3, 2), states(StateKind::Value), false).unwrap_err();
        assert!(
            err.contains("source `src`") && err.contains("parallelism 2"),
            "{err}"
        );
        let err = ok(graph(2, 2), states(StateKind::Map), false).unwrap_err();
        assert!(
            err.contains("operator `count` state `counts`") && err.contains("map"),
            "{err}"
        );
        // A state the new operator no longer declares, holding entries.
        let err = ok(graph(2, 2), HashMap::new(), false).unwrap_err();
        assert!(
            err.contains("`counts` (10 entries") && err.contains("--allow-non-restored-state"),
            "{err}"
        );
        ok(graph(2, 2), HashMap::new(), true).unwrap();
        // An empty state is no loss.
        check_compatible(&saved(0), &graph(2, 2), &HashMap::new(), false).unwrap();

        let mut other = saved(5);
        other.max_parallelism = 64;
        let err =
            check_compatible(&other, &graph(2, 2), &states(StateKind::Value), false).unwrap_err();
        assert!(err.contains("64 key groups"), "{err}");
    }
}
