//! An upgrade's moves in the job's lifecycle, called by the JobManager's
//! shell under the job's lock: stopping at the savepoint's checkpoint, the
//! savepoint written, the swap when every subtask stopped (or the
//! rollback), the restore marked, the new version running, and done at its
//! first checkpoint.

use super::*;

/// The checkpoint of savepoint `number` of `job` completed: if it is an
/// upgrade's, the job stops now (`upgrading`), while the savepoint is
/// written from the completed checkpoint. Its sinks published exactly
/// what the checkpoint holds; what it would do meanwhile is never
/// published anyway, and the writer gets the cores.
pub(crate) fn upgrade_checkpoint_taken(job: &mut Job, number: u32, taskmanagers: &TaskManagers) {
    if job.upgrade.as_ref().is_none_or(|u| u.savepoint != number) {
        return;
    }
    let stopped_at = job
        .savepoints
        .iter()
        .find(|s| s.id == number)
        .map(|s| s.requested_at_ms);
    if let Some(view) = job.pending_view() {
        view.stopped_at_ms = stopped_at;
    }
    if job.advance(Event::Upgrade) {
        send_cancel(taskmanagers, job);
        tracing::info!(job = %job.id, "stopped at the upgrade's checkpoint; writing its savepoint");
    }
}

/// The upgrade's savepoint `number` of `job` was written (`metadata` in
/// `dir`) or failed: checked against the new version, it is what the job
/// restarts from ([`swap_in`]); if it failed or does not fit, the upgrade
/// failed and the job restarts on its old version from the savepoint's
/// checkpoint (retained: nothing was rescoped yet). The caller settles the
/// job ([`settle`]) to carry either out once its subtasks stopped.
pub(crate) fn upgrade_savepoint_written(
    job: &mut Job,
    number: u32,
    outcome: Result<(&SavepointMetadata, &std::path::Path), String>,
) {
    let Some(up) = job.upgrade.as_mut().filter(|u| u.savepoint == number) else {
        return;
    };
    let back = "the job goes on with its old modules from the savepoint's checkpoint";
    let (metadata, dir) = match outcome {
        Ok(_) if job.state != JobState::Upgrading => {
            let why = format!(
                "the job was {} before it could stop for the upgrade; nothing changed",
                job.state.as_str()
            );
            job.end_upgrade(UpgradeStatus::Failed, Some(why));
            return;
        }
        Ok((metadata, dir)) => (metadata.clone(), dir.to_path_buf()),
        Err(why) => {
            let why = format!("the savepoint failed: {why}; {back}");
            job.end_upgrade(UpgradeStatus::Failed, Some(why));
            return;
        }
    };
    let new = up
        .new
        .as_ref()
        .expect("swapped in only after the savepoint");
    if let Err(why) = check_compatible(&metadata, &new.graph, &new.states, up.allow_non_restored) {
        let why = format!("upgrade refused: {why}; {back}");
        job.end_upgrade(UpgradeStatus::Failed, Some(why));
        return;
    }
    up.deploy = Some(SavepointDeploy {
        dir,
        metadata: metadata.clone(),
        migrations: up.migrations.clone(),
    });
    if let Some(view) = job.pending_view() {
        view.status = UpgradeStatus::Restoring;
        view.written_at_ms = Some(now_ms());
        for m in &mut view.migrated {
            m.entries = entries_of(&metadata, &m.operator, &m.state);
        }
    }
    tracing::info!(job = %job.id, "the upgrade's savepoint is written");
}

/// Whether an `upgrading` job still waits for its upgrade's savepoint.
pub(crate) fn waits_for_savepoint(job: &Job) -> bool {
    job.upgrade.as_ref().is_some_and(|u| u.deploy.is_none())
}

/// Entries of state `state` of operator `operator` in a savepoint.
fn entries_of(metadata: &SavepointMetadata, operator: &str, state: &str) -> u64 {
    let Some(vertex) = metadata.vertices.iter().find(|v| v.uid == operator) else {
        return 0;
    };
    let Some(i) = vertex.states.iter().position(|s| s.name == state) else {
        return 0;
    };
    vertex
        .subtasks
        .iter()
        .filter_map(|s| s.state.as_ref())
        .map(|f| f.entries.get(i).copied().unwrap_or(0))
        .sum()
}

/// Every subtask of an `upgrading` job (or of a failed new version, to
/// roll back) has stopped: swaps in the version to run next and restarts
/// the job from the upgrade's savepoint at once. Returns false when the
/// job has no upgrade to carry out (then it settles as usual).
pub(crate) fn swap_in(job: &mut Job, now: Instant) -> bool {
    let Some(up) = job.upgrade.as_mut() else {
        return false;
    };
    let Some(deploy) = up.deploy.clone() else {
        return false;
    };
    let (next, from, rollback) = match (job.state, up.new.take()) {
        (JobState::Upgrading, Some(new)) => (new, deploy, false),
        (JobState::Failing, None) if up.old.is_some() => {
            let old = up.old.take().expect("checked");
            // The old version reads its own state as it is.
            let from = SavepointDeploy {
                migrations: BTreeMap::new(),
                ..deploy
            };
            (old, from, true)
        }
        (_, new) => {
            up.new = new;
            return false;
        }
    };
    let Version {
        graph,
        tasks,
        modules,
        states,
        overrides,
        running,
    } = next;
    if !rollback {
        // What runs now, for a rollback (read before it is replaced).
        let previous = job.version();
        let up = job.upgrade.as_mut().expect("matched above");
        up.old = Some(previous);
        up.swapped_in = Some(running);
    }
    job.name = graph.name.clone();
    job.graph = graph;
    job.tasks = tasks;
    job.modules = modules;
    job.states = states;
    job.overrides = overrides;
    // Nothing is placed until the deployment: views and cancels see none.
    job.placement = job.tasks.iter().map(|_| Vec::new()).collect();
    job.subtasks = job.tasks.iter().map(|_| Vec::new()).collect();
    job.reports.clear();
    job.restarts = Restarts::new(job.graph.settings.restart);
    job.from_savepoint = Some(Arc::new(from));
    let subtasks: Vec<(u32, u32)> = crate::submit::subtask_ids(&job.tasks).collect();
    if let Some(c) = job.checkpoints.as_mut() {
        // `check_upgrade` refuses a version without checkpoints.
        let config = job
            .graph
            .settings
            .checkpoints
            .clone()
            .unwrap_or_else(|| c.coordinator.config().clone());
        let actions = c.coordinator.rescope(subtasks, config, now);
        c.unrestorable.clear();
        job.deferred.extend(actions);
    }
    job.restart_at = Some(now);
    let id = job.upgrade.as_ref().map_or(0, |u| u.id);
    if rollback {
        let cause = job
            .failure
            .clone()
            .unwrap_or_else(|| "the new version failed".into());
        job.end_upgrade(
            UpgradeStatus::RolledBack,
            Some(format!(
                "{cause}; the job was rolled back to its old modules from the upgrade's savepoint"
            )),
        );
        // Marked in the restore history at the restore (`redeployed`).
        job.rollback_of = Some(id);
        tracing::warn!(job = %job.id, upgrade = id, "upgrade rolled back: {cause}");
    } else {
        tracing::info!(job = %job.id, upgrade = id, "swapping in the new version");
    }
    true
}

/// A restarting job was deployed again: marks the restore that started
/// an upgrade (or its rollback) in the restore history.
pub(crate) fn redeployed(job: &mut Job) {
    let mark = job
        .upgrade
        .as_ref()
        .map(|u| u.id)
        .or(job.rollback_of.take());
    if let (Some(id), Some(c)) = (mark, job.checkpoints.as_mut()) {
        c.coordinator.mark_upgrade(id);
    }
    if let Some(view) = job.pending_view() {
        view.deployed_at_ms = Some(now_ms());
    }
}

/// After a subtask's state changed: an upgrade's new version is running
/// once all its subtasks run (the downtime ends).
pub(crate) fn upgrade_progress(job: &mut Job) {
    // Cheap first: this runs on every subtask state a TaskManager reports.
    let restoring = job.state == JobState::Running
        && job
            .pending_view()
            .is_some_and(|v| v.status == UpgradeStatus::Restoring);
    let all_running = || {
        !job.subtasks.is_empty()
            && job
                .subtasks
                .iter()
                .flatten()
                .all(|s| matches!(s, TaskState::Running | TaskState::Finished))
    };
    if !restoring || !all_running() {
        return;
    }
    let Some(view) = job.pending_view() else {
        return;
    };
    let now = now_ms();
    view.status = UpgradeStatus::Running;
    view.resumed_at_ms = Some(now);
    view.downtime_ms = view.stopped_at_ms.map(|s| now.saturating_sub(s));
}

/// A checkpoint of `job` completed: an upgrade whose new version runs is
/// done, and the new version enters the version history. Returns the
/// savepoints of the job's earlier upgrades, which nothing restores from
/// any more (the caller deletes them, off the lock): each holds a copy of
/// the job's whole state.
pub(crate) fn upgrade_checkpointed(job: &mut Job) -> Vec<PathBuf> {
    let done = job
        .pending_view()
        .is_some_and(|v| v.status == UpgradeStatus::Running);
    if !done {
        return Vec::new();
    }
    let id = job.upgrade.as_ref().map_or(0, |u| u.id);
    let modules = job
        .upgrade
        .as_mut()
        .and_then(|u| u.swapped_in.take())
        .unwrap_or_default();
    let version = job.versions.last().map_or(1, |v| v.version + 1);
    let since_ms = job
        .pending_view()
        .and_then(|v| v.resumed_at_ms)
        .unwrap_or_else(now_ms);
    job.versions.push(VersionView {
        version,
        since_ms,
        upgrade: Some(id),
        modules,
    });
    job.end_upgrade(UpgradeStatus::Completed, None);
    tracing::info!(job = %job.id, upgrade = id, version, "upgrade completed");
    let kept = job.from_savepoint.as_ref().map(|s| s.dir.clone());
    job.upgrades
        .iter()
        .filter(|u| u.id < id)
        .map(|u| PathBuf::from(&u.savepoint))
        .filter(|dir| Some(dir) != kept.as_ref() && dir.exists())
        .collect()
}

/// Whether a failure of `job` now rolls back its upgrade: the new version
/// was swapped in and has not checkpointed yet.
pub(crate) fn rolls_back(job: &Job) -> bool {
    job.upgrade
        .as_ref()
        .is_some_and(|u| u.new.is_none() && u.old.is_some() && u.deploy.is_some())
}
