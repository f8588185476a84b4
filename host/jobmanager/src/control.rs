//! Carrying out the job lifecycle ([`crate::job`] decides the states):
//! cancel, failure, settling once every subtask stopped (end, or restart as
//! the strategy says), the restart's deployment after the sweep, and the
//! messages to TaskManagers each move implies.

use super::*;

impl JobManager {
    /// Cancels a job.
    pub fn cancel(&self, id: &str) -> Result<JobSummary, ApiError> {
        let result = self.cancel_locked(id);
        self.changed();
        result
    }

    pub(crate) fn cancel_locked(&self, id: &str) -> Result<JobSummary, ApiError> {
        let cell = self.job_cell(id)?;
        let mut job = self.lock_job(&cell);
        let job = &mut *job;
        let taskmanagers = &self.taskmanagers;
        if job.state.is_terminal() {
            return Err(ApiError::conflict(format!(
                "job {id} ({}) already ended: {}",
                job.name,
                job.state.as_str()
            )));
        }
        // Finishing: the final output is being published; the cancel is
        // refused by the lifecycle and the job finishes.
        if let Ok(next) = job.state.on(Event::Cancel) {
            match std::mem::replace(&mut job.state, next) {
                JobState::Running => send_cancel(taskmanagers, job),
                // Nothing runs: it settles at once.
                JobState::Restarting => job.restart_at = None,
                // Failing: its subtasks are being canceled already.
                _ => {}
            }
        }
        settle(taskmanagers, job, self.clock.now());
        Ok(job.summary())
    }

    /// Drives checkpoint coordinators and restarts, one job at a time.
    pub(crate) fn tick_jobs(&self) {
        let taskmanagers = &self.taskmanagers;
        let now = self.clock.now();
        for cell in self.job_cells() {
            // A job busy elsewhere is ticked at the next tick.
            let Some(mut job) = self.try_lock_job(&cell) else {
                continue;
            };
            let job = &mut *job;
            let deferred = std::mem::take(&mut job.deferred);
            checkpoint_actions(taskmanagers, job, self, deferred);
            match job.state {
                JobState::Running => {
                    // Checkpoints start once every subtask runs (a trigger
                    // during deployment could not reach the sources).
                    let deployed = job
                        .subtasks
                        .iter()
                        .flatten()
                        .all(|s| matches!(s, TaskState::Running | TaskState::Finished));
                    // Nor while a completed one waits for its metadata to be
                    // announced (`checkpoint_actions`).
                    if let Some(c) = job
                        .checkpoints
                        .as_mut()
                        .filter(|c| deployed && c.unannounced.is_empty())
                    {
                        let actions = c.coordinator.tick(now);
                        checkpoint_actions(taskmanagers, job, self, actions);
                    }
                }
                JobState::Restarting => {
                    // Deployed once the sweep has run (see `swept`), and due.
                    if !self.swept(job) || job.restart_at.is_none_or(|t| now < t) {
                        continue;
                    }
                    job.attempt += 1;
                    // Recorded before any TaskManager hears of it: a
                    // restarted JobManager deploys past this attempt.
                    if let Err(why) = job.persist() {
                        tracing::error!(job = %job.id, "cannot record the job's attempt: {why}");
                    }
                    match deploy(taskmanagers, job, self.scheduling, &self.checkpoint_root) {
                        Ok(()) => {
                            job.restart_at = None;
                            job.advance(Event::Redeployed);
                            job.reports.clear();
                            job.load.clear();
                            let restored_at_ms = now_ms();
                            // The next failure is reported as itself.
                            job.failure = None;
                            job.failure_is_root = false;
                            // Not while a savepoint reads a checkpoint: a
                            // new one could subsume it (the writer resumes).
                            let paused = job.savepoint_running();
                            if let Some(c) = job.checkpoints.as_mut() {
                                let (from, skipped) = c.restore_point();
                                let from = from.map(|l| l.id);
                                c.coordinator.record_restore_skipping(
                                    from,
                                    skipped,
                                    restored_at_ms,
                                    job.attempt,
                                );
                                if !paused {
                                    c.coordinator.resume(now);
                                }
                            }
                            redeployed(job);
                            tracing::info!(job = %job.id, attempt = job.attempt, "restarted");
                        }
                        Err(why) => {
                            // Not enough slots yet: wait for a TaskManager.
                            job.attempt -= 1;
                            // Ticks are 50 ms apart: a TaskManager that
                            // registers is used within a tick or two.
                            job.restart_at = Some(now + Duration::from_millis(100));
                            tracing::debug!(job = %job.id, "restart waits: {why}");
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// Whether a restarting job's shared folder has been swept for its
    /// next attempt; if not, requests the sweep (once).
    ///
    /// The failed attempt may have uploaded files it never acked (a
    /// TaskManager killed mid-upload); the sweep deletes whatever in the
    /// job's shared folder no retained checkpoint references. It lists the
    /// folder, so it must run before the new attempt can upload anything:
    /// the restart waits for it. Being behind every storage command the
    /// job queued before, it also means the metadata of the checkpoint the
    /// restart restores from has been written. The registry does not
    /// change meanwhile: nothing completes while the job is restarting.
    pub(crate) fn swept(&self, job: &mut Job) -> bool {
        let next = job.attempt + 1;
        let Some(c) = &job.checkpoints else {
            return true;
        };
        match job.sweep {
            Some(Sweep::Done(a)) if a == next => true,
            Some(Sweep::Requested(a)) if a == next => false,
            _ => {
                let Ok(prefix) = weir_runtime::checkpoint::layout::shared_dir(&job.id) else {
                    return true;
                };
                let keep = c.registry.referenced().into_iter().collect();
                job.sweep = Some(Sweep::Requested(next));
                self.enqueue(
                    job,
                    StorageCommand::Sweep {
                        prefix,
                        keep,
                        attempt: next,
                    },
                );
                false
            }
        }
    }
}

/// A `finishing` job whose final commit did not happen on one of its
/// TaskManagers: it fails, and restarts as its strategy says (the restored
/// sinks commit again; parts committed since are rolled back and produced
/// again).
pub(crate) fn not_committed(
    taskmanagers: &TaskManagers,
    job: &mut Job,
    cause: Cause,
    now: Instant,
) {
    job.committing.clear();
    job.failure = Some(cause.message.clone());
    job.failure_is_root = true;
    job.exceptions.record(job.attempt, cause, now_ms(), false);
    job.advance(Event::CommitFailed);
    settle(taskmanagers, job, now);
}

/// Records a failure of `job` (in its exception history too) and cancels
/// its other subtasks.
pub(crate) fn fail(
    taskmanagers: &TaskManagers,
    job: &mut Job,
    cause: Cause,
    root: bool,
    now: Instant,
) {
    if job.failure.is_none() || (root && !job.failure_is_root) {
        let replaces = job.failure.is_some();
        job.failure = Some(cause.message.clone());
        job.failure_is_root = root;
        job.exceptions
            .record(job.attempt, cause, now_ms(), replaces);
    }
    if let Ok(next) = job.state.on(Event::TaskFailed) {
        job.state = next;
        send_cancel(taskmanagers, job);
        if let Some(c) = job.checkpoints.as_mut() {
            let actions = c.coordinator.suspend("a task failed", now);
            job.deferred.extend(actions);
        }
    }
}

pub(crate) fn send_cancel(taskmanagers: &TaskManagers, job: &Job) {
    for tm in job.taskmanagers() {
        taskmanagers.send(
            tm,
            ToTaskManager::Cancel {
                job: job.id.clone(),
            },
        );
    }
}

/// Once every subtask has stopped: ends the job, or schedules its restart
/// (the restart strategy decides), and frees its slots.
pub(crate) fn settle(taskmanagers: &TaskManagers, job: &mut Job, now: Instant) {
    if job.state.is_terminal()
        || matches!(job.state, JobState::Restarting | JobState::Finishing)
        || !job.subtasks.iter().flatten().all(|s| s.is_terminal())
    {
        return;
    }

    // Stopped for an upgrade: restarted once its savepoint is written, from
    // it on the new version; or, if the savepoint failed or does not fit,
    // on the old version from its latest checkpoint. A new version that
    // failed before it checkpointed is rolled back: restarted from the
    // upgrade's savepoint on the old version. Either at once.
    let upgrading = job.state == JobState::Upgrading;
    if upgrading && waits_for_savepoint(job) {
        return;
    }
    if upgrading || (job.state == JobState::Failing && rolls_back(job)) {
        if !swap_in(job, now) {
            // The upgrade failed: the old version restarts as it was.
            job.restart_at = Some(now);
        }
        job.advance(Event::Stopped {
            all_finished: false,
            committers: 0,
            restart: true,
        });
        if let Some(c) = job.checkpoints.as_mut() {
            let actions = c.coordinator.suspend("the job is upgraded", now);
            job.deferred.extend(actions);
        }
        taskmanagers.release(&job.id);
        tracing::info!(job = %job.id, state = ?job.state, "settled for an upgrade");
        return;
    }

    let all_finished = job
        .subtasks
        .iter()
        .flatten()
        .all(|s| *s == TaskState::Finished);
    if all_finished && job.state == JobState::Running && job.stopping_at_savepoint() {
        // Its input ended while it stops at a savepoint being written: the
        // output past the savepoint must not be published, so it is
        // canceled, not finished (a resume produces that output again).
        job.advance(Event::Cancel);
        send_cancel(taskmanagers, job);
    }
    let mut committers = 0;
    let mut restart = false;
    match job.state {
        JobState::Running if all_finished => {
            // Sinks commit what they pre-committed at the end of input.
            tell(taskmanagers, job, |job, attempt| {
                ToTaskManager::JobFinished { job, attempt }
            });
            if job.checkpoints.is_some() {
                // Finished once every TaskManager confirms its commits: a
                // reader of the output, or a TaskManager lost meanwhile
                // (then the job restarts), never misses the last part.
                job.committing = job
                    .taskmanagers()
                    .into_iter()
                    .filter(|tm| taskmanagers.is_live(tm))
                    .map(str::to_owned)
                    .collect();
                committers = job.committing.len();
            }
        }
        JobState::Canceling => {}
        // Over the cluster's state quota: a restart would not help.
        _ if job.fatal => {}
        // The attempt failed: the restart strategy decides (and counts).
        _ => match job.restarts.on_failure(now) {
            Ok(delay) => {
                job.restart_at = Some(now + delay);
                restart = true;
                tracing::info!(
                    job = %job.id,
                    "failed ({}); restarting in {delay:?}",
                    job.failure.as_deref().unwrap_or("?")
                );
            }
            Err(why) => {
                if job.restarts.count() > 0 {
                    let failure = job.failure.take().unwrap_or_default();
                    job.failure = Some(format!("{failure} (not restarted: {why})"));
                }
            }
        },
    }
    let stopped = Event::Stopped {
        all_finished,
        committers,
        restart,
    };
    // Every non-ended state but Restarting and Finishing (returned above)
    // takes `Stopped`.
    if !job.advance(stopped) {
        return;
    }
    if let Some(c) = job.checkpoints.as_mut() {
        let reason = match job.state {
            JobState::Restarting => "the job is restarting",
            _ => "the job ended",
        };
        let actions = c.coordinator.suspend(reason, now);
        job.deferred.extend(actions);
    }
    if job.state == JobState::Canceled {
        job.failure = None;
    }
    if job.state.is_terminal() {
        job.ended_at_ms = Some(now_ms());
        job.forget();
        if job.upgrade.is_some() {
            let why = format!("the job was {} during the upgrade", job.state.as_str());
            job.end_upgrade(UpgradeStatus::Failed, Some(why));
        }
    }
    taskmanagers.release(&job.id);
    tracing::info!(job = %job.id, state = ?job.state, "settled");
}

/// Places a job's subtasks (again, for a restart) and sends the deployment,
/// restoring from the latest completed checkpoint if there is one.
pub(crate) fn deploy(
    taskmanagers: &TaskManagers,
    job: &mut Job,
    scheduling: Strategy,
    checkpoint_root: &std::path::Path,
) -> Result<(), String> {
    let (placement, peers) = taskmanagers.reserve(job, scheduling)?;
    let restore = job.checkpoints.as_ref().and_then(|c| {
        c.restore_point().0.map(|latest| RestorePoint {
            checkpoint: latest.id,
            subtasks: latest.acks.iter().map(|(k, v)| (*k, v.clone())).collect(),
        })
    });
    let deployment = Deployment {
        job: job.id.clone(),
        graph: job.graph.clone(),
        tasks: job.tasks.clone(),
        placement: placement.clone(),
        peers,
        attempt: job.attempt,
        checkpoints: job.checkpoints.as_ref().map(|_| CheckpointDeploy {
            storage: checkpoint_root.to_path_buf(),
        }),
        // Its own checkpoints first: the savepoint only until there is one.
        savepoint: job
            .from_savepoint
            .as_ref()
            .filter(|_| restore.is_none())
            .map(|s| (**s).clone()),
        restore,
    };
    job.placement = placement;
    job.subtasks = job
        .tasks
        .iter()
        .map(|t| vec![TaskState::Deploying; t.parallelism as usize])
        .collect();
    for tm in job.taskmanagers() {
        taskmanagers.send(tm, ToTaskManager::Deploy(Box::new(deployment.clone())));
    }
    Ok(())
}

/// Sends `message(job id, attempt)` to every live TaskManager of the job.
pub(crate) fn tell(
    taskmanagers: &TaskManagers,
    job: &Job,
    message: impl Fn(String, u32) -> ToTaskManager,
) {
    for tm in job.taskmanagers() {
        taskmanagers.send(tm, message(job.id.clone(), job.attempt));
    }
}
