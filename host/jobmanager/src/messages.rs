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
        let mut state = self.lock();
        if state
            .taskmanagers
            .get(id)
            .is_some_and(|tm| tm.lost.is_none())
        {
            // Same id, new connection: the old process is gone (restarted).
            lose(
                &mut state,
                id,
                "registered again (restarted)".to_owned(),
                self.clock.now(),
            );
        }
        state.taskmanagers.insert(
            id.to_owned(),
            Tm {
                data_address,
                slots_total: slots,
                occupied: BTreeMap::new(),
                lost: None,
                registered_at_ms: now_ms(),
                last_heartbeat: self.clock.now(),
                net: NetStats::default(),
                tx,
                session,
            },
        );
        tracing::info!(taskmanager = id, %data_address, slots, "registered");
    }

    pub(crate) fn on_message(&self, tm_id: &str, session: u64, message: ToJobManager) {
        self.on_message_locked(tm_id, session, message);
        self.changed();
    }

    pub(crate) fn on_message_locked(&self, tm_id: &str, session: u64, message: ToJobManager) {
        let mut state = self.lock();
        let State { taskmanagers, jobs } = &mut *state;
        let Some(tm) = taskmanagers
            .get_mut(tm_id)
            .filter(|tm| tm.session == session && tm.lost.is_none())
        else {
            return;
        };
        let now = self.clock.now();
        tm.last_heartbeat = now;
        match message {
            ToJobManager::Register { .. } => {}
            ToJobManager::Heartbeat { net, jobs: reports } => {
                tm.net = net;
                for report in reports {
                    if let Some(job) = jobs.get_mut(&report.job) {
                        job.reports.insert(tm_id.to_owned(), report);
                    }
                }
            }
            ToJobManager::Ack {
                job,
                attempt,
                checkpoint,
                task,
                subtask,
                snapshot,
                alignment_ms,
            } => {
                let Some(job) = jobs.get_mut(&job) else {
                    return;
                };
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
                job,
                attempt,
                checkpoint,
                reason,
            } => {
                let Some(job) = jobs.get_mut(&job).filter(|j| j.attempt == attempt) else {
                    return;
                };
                if let Some(c) = job.checkpoints.as_mut()
                    && c.coordinator.retained().any(|r| r.id == checkpoint)
                {
                    tracing::warn!(
                        job = %job.id, checkpoint, taskmanager = %tm_id,
                        "checkpoint cannot be restored, restarts fall back to an older one: {reason}"
                    );
                    c.unrestorable.insert(checkpoint);
                }
            }
            ToJobManager::Decline {
                job,
                attempt,
                checkpoint,
                task,
                subtask,
                reason,
            } => {
                let Some(job) = jobs
                    .get_mut(&job)
                    .filter(|j| j.attempt == attempt && j.placed_on(task, subtask, tm_id))
                else {
                    return;
                };
                if let Some(c) = job.checkpoints.as_mut() {
                    let actions = c
                        .coordinator
                        .decline(checkpoint, (task, subtask), reason, now);
                    checkpoint_actions(taskmanagers, job, self, actions);
                }
            }
            ToJobManager::Committed {
                job,
                attempt,
                error,
            } => {
                let Some(job) = jobs
                    .get_mut(&job)
                    .filter(|j| j.attempt == attempt && j.state == JobState::Finishing)
                else {
                    return;
                };
                if let Some(error) = error {
                    let reason = format!("TaskManager {tm_id}: {error}");
                    not_committed(taskmanagers, job, reason, now);
                } else if job.committing.remove(tm_id) {
                    let last = job.committing.is_empty();
                    job.advance(Event::Committed { last });
                    if job.state == JobState::Finished {
                        job.ended_at_ms = Some(now_ms());
                        tracing::info!(job = %job.id, "finished: every final commit is done");
                    }
                }
            }
            ToJobManager::TaskState {
                job,
                attempt,
                task,
                subtask,
                state: new,
                error,
            } => {
                let Some(job) = jobs
                    .get_mut(&job)
                    .filter(|j| j.attempt == attempt && j.placed_on(task, subtask, tm_id))
                else {
                    return;
                };
                let (t, s) = (task as usize, subtask as usize);
                let Some(current) = job.subtasks.get_mut(t).and_then(|v| v.get_mut(s)) else {
                    return;
                };
                if current.is_terminal() {
                    return;
                }
                *current = new;
                let name = job.subtask_name(t, subtask);
                match new {
                    TaskState::Failed => fail(
                        taskmanagers,
                        job,
                        format!(
                            "{name} on {tm_id}: {}",
                            error.as_deref().unwrap_or("failed")
                        ),
                        true,
                        now,
                    ),
                    TaskState::Canceled if job.state == JobState::Running => fail(
                        taskmanagers,
                        job,
                        format!(
                            "{name} on {tm_id} was aborted: {}",
                            error.as_deref().unwrap_or("no reason given")
                        ),
                        false,
                        now,
                    ),
                    _ => {}
                }
                settle(taskmanagers, job, now);
            }
        }
    }

    pub(crate) fn lose_if_current(&self, tm_id: &str, session: u64, reason: String) {
        {
            let mut state = self.lock();
            if state
                .taskmanagers
                .get(tm_id)
                .is_some_and(|tm| tm.session == session && tm.lost.is_none())
            {
                lose(&mut state, tm_id, reason, self.clock.now());
            }
        }
        self.changed();
    }

    pub(crate) fn check_heartbeats(&self) {
        let mut state = self.lock();
        let timeout = self.heartbeat_timeout;
        let now = self.clock.now();
        let late: Vec<(String, Duration)> = state
            .taskmanagers
            .iter()
            .map(|(id, tm)| (id, tm, now.saturating_duration_since(tm.last_heartbeat)))
            .filter(|(_, tm, silent)| tm.lost.is_none() && *silent > timeout)
            .map(|(id, _, silent)| (id.clone(), silent))
            .collect();
        for (id, silent) in late {
            let reason = format!(
                "no heartbeat for {:.1} s (timeout {:.1} s)",
                silent.as_secs_f64(),
                timeout.as_secs_f64()
            );
            lose(&mut state, &id, reason, now);
        }
    }
}

/// Declares a TaskManager lost: its slots leave the pool, its subtasks
/// count as failed, its jobs fail.
pub(crate) fn lose(state: &mut State, tm_id: &str, reason: String, now: Instant) {
    let State { taskmanagers, jobs } = state;
    let Some(tm) = taskmanagers.get_mut(tm_id) else {
        return;
    };
    tracing::warn!(taskmanager = tm_id, "lost: {reason}");
    let address = tm.data_address;
    tm.lost = Some(reason.clone());
    tm.occupied.clear();
    for job in jobs.values_mut().filter(|j| !j.state.is_terminal()) {
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
            fail(taskmanagers, job, message, true, now);
            settle(taskmanagers, job, now);
        } else if job.state == JobState::Finishing && job.committing.contains(tm_id) {
            let message = format!(
                "TaskManager {tm_id} ({address}) lost before committing the final output: {reason}"
            );
            not_committed(taskmanagers, job, message, now);
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
            fail(taskmanagers, job, message, true, now);
            settle(taskmanagers, job, now);
        }
    }
}
