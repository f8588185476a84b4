//! TaskManagers talking to the JobManager: registration, the messages
//! they send (heartbeats, acks, declines, task states, commits), and
//! losing one (connection closed or heartbeats missed): its jobs fail,
//! naming it.

use super::*;

impl JobManager {
    pub(crate) fn register(
        &self,
        id: &str,
        slots: u32,
        data_address: SocketAddr,
        tx: mpsc::UnboundedSender<ToTaskManager>,
        session: u64,
    ) {
        // Same id, new connection: the old process is gone (restarted).
        self.lose(id, None, "registered again (restarted)".to_owned());
        self.taskmanagers.lock().insert(
            id.to_owned(),
            Tm {
                data_address,
                slots_total: slots,
                occupied: BTreeMap::new(),
                lost: None,
                registered_at_ms: now_ms(),
                last_heartbeat: self.clock.now(),
                net: NetStats::default(),
                memory: None,
                tx,
                session,
            },
        );
        tracing::info!(taskmanager = id, %data_address, slots, "registered");
    }

    /// A message of TaskManager `tm_id` in session `session`: counted only
    /// from its current, live session. What it says about a job joins
    /// that job's queue ([`JobCell`]).
    pub(crate) fn on_message(&self, tm_id: &str, session: u64, message: ToJobManager) {
        {
            let mut taskmanagers = self.taskmanagers.lock();
            let Some(tm) = taskmanagers
                .get_mut(tm_id)
                .filter(|tm| tm.session == session && tm.lost.is_none())
            else {
                return;
            };
            tm.last_heartbeat = self.clock.now();
            if let ToJobManager::Heartbeat { net, memory, .. } = &message {
                tm.net = net.clone();
                tm.memory = *memory;
            }
        }
        let job_id = match message {
            ToJobManager::Register { .. } => return,
            ToJobManager::Heartbeat { jobs: reports, .. } => {
                for report in reports {
                    if let Ok(cell) = self.job_cell(&report.job) {
                        let tm = tm_id.to_owned();
                        self.queue_event(&cell, JobEvent::Report { tm, report });
                    }
                }
                self.changed();
                return;
            }
            ToJobManager::Ack { ref job, .. }
            | ToJobManager::RestoreFailed { ref job, .. }
            | ToJobManager::Decline { ref job, .. }
            | ToJobManager::Committed { ref job, .. }
            | ToJobManager::TaskState { ref job, .. } => job.clone(),
        };
        if let Ok(cell) = self.job_cell(&job_id) {
            let tm = tm_id.to_owned();
            let event = JobEvent::Message {
                tm,
                session,
                message,
            };
            self.queue_event(&cell, event);
        }
    }

    /// Takes one event of `job`'s queue, under its lock.
    pub(crate) fn on_event(&self, job: &mut Job, event: JobEvent) {
        let now = self.clock.now();
        match event {
            JobEvent::Message {
                tm,
                session,
                message,
            } => {
                // Checked again here: a TaskManager lost after it sent
                // this is lost for the job first (its `Lost` event is
                // ahead in the queue or already taken), and nothing it
                // said after that is counted.
                if self.taskmanagers.is_current(&tm, session) {
                    self.on_job_message(job, &tm, message, now);
                }
            }
            JobEvent::Report { tm, mut report } => {
                let shipped = std::mem::take(&mut report.logs);
                if !shipped.is_empty() {
                    let placement = JobPlacement {
                        tasks: &job.tasks,
                        placement: &job.placement,
                    };
                    job.logs.add(&placement, &tm, shipped);
                }
                job.reports.insert(tm, report);
                job.sample_load(now);
                self.check_live_state(job, now);
            }
            JobEvent::Lost {
                tm,
                address,
                reason,
            } => {
                if !job.state.is_terminal() {
                    lose_for(&self.taskmanagers, job, &tm, address, &reason, now);
                }
            }
        }
    }

    /// Fails `job` for good once its keyed state, as its TaskManagers last
    /// sampled it (about once a second), is over the cluster's quota
    /// (`--max-job-state-mb`). Completed checkpoints are checked as they
    /// complete; this holds the quota between them, and for jobs that take
    /// none.
    fn check_live_state(&self, job: &mut Job, now: Instant) {
        let Some(max) = self.max_job_state_bytes else {
            return;
        };
        let live: u64 = job.reports.values().map(|r| r.state_bytes).sum();
        if live <= max || job.fatal || job.state.is_terminal() || job.failure.is_some() {
            return;
        }
        job.fatal = true;
        let reason = format!(
            "its keyed state takes {live} bytes on its TaskManagers, over the cluster's limit \
             of {max} bytes per job (weir jobmanager --max-job-state-mb); not restarted"
        );
        tracing::warn!(job = %job.id, "{reason}");
        fail(&self.taskmanagers, job, Cause::new(reason), true, now);
    }

    /// A message of live TaskManager `tm_id` about `job`.
    fn on_job_message(&self, job: &mut Job, tm_id: &str, message: ToJobManager, now: Instant) {
        let taskmanagers = &self.taskmanagers;
        match message {
            ToJobManager::Register { .. } | ToJobManager::Heartbeat { .. } => {}
            ToJobManager::Ack {
                job: _,
                attempt,
                checkpoint,
                task,
                subtask,
                snapshot,
                alignment_ms,
            } => {
                if job.attempt != attempt {
                    // An attempt that was canceled finished an upload
                    // after the restart's sweep: its files are nobody's.
                    // (Only files of the job's own folders, and none a
                    // retained checkpoint uses, are deleted.)
                    if job.checkpoints.is_some()
                        && snapshot.foreign_path(&job.id, checkpoint).is_none()
                    {
                        let shared: Vec<StoragePath> = snapshot.shared_paths().cloned().collect();
                        discard_uploads(self, job, checkpoint, &shared);
                    }
                    return;
                }
                if !job.placed_on(task, subtask, tm_id) {
                    return;
                }
                let Some(c) = job.checkpoints.as_mut() else {
                    return;
                };
                if let Some(path) = snapshot.foreign_path(&job.id, checkpoint) {
                    // Refused whole: nothing it names is registered, restored
                    // from or deleted; the checkpoint fails.
                    let reason = format!(
                        "TaskManager {tm_id} acked with storage path `{path}`, outside the \
                         job's own folder"
                    );
                    tracing::warn!(job = %job.id, checkpoint, "{reason}");
                    let actions = c
                        .coordinator
                        .decline(checkpoint, (task, subtask), reason, now);
                    checkpoint_actions(taskmanagers, job, self, actions);
                    return;
                }
                if !c.coordinator.pending().any(|p| p == checkpoint) {
                    // Late: the checkpoint was aborted; drop its uploads.
                    let shared: Vec<StoragePath> = snapshot.shared_paths().cloned().collect();
                    discard_uploads(self, job, checkpoint, &shared);
                    return;
                }
                if let Some(first) = c.coordinator.acked(checkpoint, (task, subtask)) {
                    // Acked twice: the first counts; the files only the
                    // second names are nobody's (the checkpoint's own
                    // folder stays: it is still pending).
                    let first: HashSet<&StoragePath> = first.shared_paths().collect();
                    let extra: Vec<StoragePath> = snapshot
                        .shared_paths()
                        .filter(|p| !first.contains(p))
                        .cloned()
                        .collect();
                    tracing::warn!(job = %job.id, checkpoint, task, subtask, taskmanager = %tm_id, "a second ack of one subtask; ignored");
                    discard_shared(self, job, &extra);
                    return;
                }
                let actions = c.coordinator.ack(
                    checkpoint,
                    (task, subtask),
                    snapshot,
                    Duration::from_millis(alignment_ms),
                    now,
                );
                checkpoint_actions(taskmanagers, job, self, actions);
            }
            ToJobManager::RestoreFailed {
                job: _,
                attempt,
                checkpoint,
                reason,
            } => {
                if job.attempt != attempt {
                    return;
                }
                let Some(c) = job.checkpoints.as_mut() else {
                    return;
                };
                if !c.coordinator.retained().any(|r| r.id == checkpoint) {
                    return;
                }
                tracing::warn!(
                    job = %job.id, checkpoint, taskmanager = %tm_id,
                    "checkpoint cannot be restored, restarts fall back to an older one: {reason}"
                );
                c.unrestorable.insert(checkpoint);
                // With none left, a restart would start over (or from the
                // savepoint the job began with) and emit output the
                // retained checkpoints committed a second time.
                if c.restore_point().0.is_none() && !job.fatal {
                    job.fatal = true;
                    let passed: Vec<String> =
                        c.coordinator.retained().map(|r| r.id.to_string()).collect();
                    let cause = format!(
                        "no retained checkpoint can be restored ({} could not; {checkpoint}: \
                         {reason}); not restarted, since starting over would emit committed \
                         output again",
                        passed.join(", ")
                    );
                    tracing::error!(job = %job.id, "{cause}");
                    fail(taskmanagers, job, Cause::new(cause), true, now);
                }
            }
            ToJobManager::Decline {
                job: _,
                attempt,
                checkpoint,
                task,
                subtask,
                reason,
            } => {
                if job.attempt != attempt || !job.placed_on(task, subtask, tm_id) {
                    return;
                }
                if let Some(c) = job.checkpoints.as_mut() {
                    let actions = c
                        .coordinator
                        .decline(checkpoint, (task, subtask), reason, now);
                    checkpoint_actions(taskmanagers, job, self, actions);
                }
            }
            ToJobManager::Committed {
                job: _,
                attempt,
                error,
            } => {
                if job.attempt != attempt || job.state != JobState::Finishing {
                    return;
                }
                if let Some(error) = error {
                    let reason = format!("TaskManager {tm_id}: {error}");
                    not_committed(taskmanagers, job, Cause::new(reason).on(tm_id), now);
                } else if job.committing.remove(tm_id) {
                    let last = job.committing.is_empty();
                    job.advance(Event::Committed { last });
                    if job.state == JobState::Finished {
                        job.ended_at_ms = Some(now_ms());
                        job.forget();
                        tracing::info!(job = %job.id, "finished: every final commit is done");
                    }
                }
            }
            ToJobManager::TaskState {
                job: _,
                attempt,
                task,
                subtask,
                state: new,
                error,
            } => {
                if job.attempt != attempt || !job.placed_on(task, subtask, tm_id) {
                    return;
                }
                let (t, s) = (task as usize, subtask as usize);
                let Some(current) = job.subtasks.get_mut(t).and_then(|v| v.get_mut(s)) else {
                    return;
                };
                if current.is_terminal() {
                    return;
                }
                *current = new;
                let name = job.subtask_name(t, subtask);
                let task_id = job.tasks[t].id.as_str().to_owned();
                match new {
                    TaskState::Failed => fail(
                        taskmanagers,
                        job,
                        Cause::new(format!(
                            "{name} on {tm_id}: {}",
                            error.as_deref().unwrap_or("failed")
                        ))
                        .at(&task_id, subtask)
                        .on(tm_id),
                        true,
                        now,
                    ),
                    TaskState::Canceled if job.state == JobState::Running => fail(
                        taskmanagers,
                        job,
                        Cause::new(format!(
                            "{name} on {tm_id} was aborted: {}",
                            error.as_deref().unwrap_or("no reason given")
                        ))
                        .at(&task_id, subtask)
                        .on(tm_id),
                        false,
                        now,
                    ),
                    _ => {}
                }
                upgrade_progress(job);
                settle(taskmanagers, job, now);
            }
        }
    }

    pub(crate) fn lose_if_current(&self, tm_id: &str, session: u64, reason: String) {
        self.lose(tm_id, Some(session), reason);
        self.changed();
    }

    pub(crate) fn check_heartbeats(&self) {
        let timeout = self.heartbeat_timeout;
        let now = self.clock.now();
        let late: Vec<(String, u64, Duration)> = self
            .taskmanagers
            .lock()
            .iter()
            .map(|(id, tm)| (id, tm, now.saturating_duration_since(tm.last_heartbeat)))
            .filter(|(_, tm, silent)| tm.lost.is_none() && *silent > timeout)
            .map(|(id, tm, silent)| (id.clone(), tm.session, silent))
            .collect();
        for (id, session, silent) in late {
            let reason = format!(
                "no heartbeat for {:.1} s (timeout {:.1} s)",
                silent.as_secs_f64(),
                timeout.as_secs_f64()
            );
            // Its session: one that registered again meanwhile stays.
            self.lose(&id, Some(session), reason);
        }
    }

    /// Declares TaskManager `tm_id` lost (only in `session`, if given):
    /// its slots leave the pool, its subtasks count as failed, its jobs
    /// fail. Marked lost first, then a [`JobEvent::Lost`] joins every
    /// job's queue: a message of it that a job takes after that is not
    /// counted ([`JobManager::on_event`]).
    pub(crate) fn lose(&self, tm_id: &str, session: Option<u64>, reason: String) {
        let address = {
            let mut taskmanagers = self.taskmanagers.lock();
            let Some(tm) = taskmanagers
                .get_mut(tm_id)
                .filter(|tm| tm.lost.is_none() && session.is_none_or(|s| s == tm.session))
            else {
                return;
            };
            tracing::warn!(taskmanager = tm_id, "lost: {reason}");
            tm.lost = Some(reason.clone());
            tm.occupied.clear();
            // Dropping its only sender ends the session's writer, which
            // closes the control stream: a TaskManager lost while its
            // connection stays open (it missed heartbeats, frozen or
            // starved) sees its session end, cancels its subtasks and
            // registers again, instead of staying lost with its slots.
            drop(std::mem::replace(&mut tm.tx, mpsc::unbounded_channel().0));
            tm.data_address
        };
        for cell in self.job_cells() {
            let event = JobEvent::Lost {
                tm: tm_id.to_owned(),
                address,
                reason: reason.clone(),
            };
            self.queue_event(&cell, event);
        }
    }
}

/// What losing TaskManager `tm_id` does to `job`.
fn lose_for(
    taskmanagers: &TaskManagers,
    job: &mut Job,
    tm_id: &str,
    address: SocketAddr,
    reason: &str,
    now: Instant,
) {
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
        fail(taskmanagers, job, Cause::new(message).on(tm_id), true, now);
        settle(taskmanagers, job, now);
    } else if job.state == JobState::Finishing && job.committing.contains(tm_id) {
        let message = format!(
            "TaskManager {tm_id} ({address}) lost before committing the final output: {reason}"
        );
        not_committed(taskmanagers, job, Cause::new(message).on(tm_id), now);
    } else if job.state == JobState::Running
        && job.checkpoints.is_some()
        && job.taskmanagers().contains(tm_id)
    {
        // Its subtasks had all finished, but their sinks' final output
        // waits for the job's end to be committed there: it never will.
        let message = format!(
            "TaskManager {tm_id} ({address}) lost with its subtasks' final output \
             uncommitted: {reason}"
        );
        fail(taskmanagers, job, Cause::new(message).on(tm_id), true, now);
        settle(taskmanagers, job, now);
    }
}
