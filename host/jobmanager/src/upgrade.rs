//! Upgrading a running job in place (`weir upgrade`): new modules (and
//! `--set` changes, parallelism included) from a savepoint, with its state
//! migrated by the new modules, rolled back on failure.
//!
//! # Steps
//!
//! 1. **Check, before stopping anything** ([`JobManager::upgrade`]): the
//!    job's spec with the changes is prepared like a submission (every new
//!    module loaded and checked against the contract and its place in the
//!    graph), then compared with what runs ([`check_upgrade`]): the same
//!    key groups; sources and sinks keep their parallelism; every state of
//!    a keyed operator is declared again with the same kind, or dropped
//!    only with `allow_non_restored_state`; a new state starts empty. A
//!    module whose version differs and that exports `migration` migrates
//!    the states both versions declare. Refused: an error naming the
//!    operator and the state, and the job runs on untouched.
//! 2. **Stop with a savepoint** into `DATA_DIR/upgrades/<job>-<n>` (the
//!    savepoint machinery of [`crate::savepoints`]). The job stops (moves
//!    to `upgrading`, [`Event::Upgrade`], its subtasks canceled) as soon
//!    as the savepoint's checkpoint completes: its sinks published exactly
//!    that checkpoint, and the savepoint is written from it meanwhile
//!    ([`upgrade_checkpoint_taken`]). Once written, it is checked against
//!    the new graph again, now with its entry counts. If it fails or does
//!    not fit, the upgrade fails and the job restarts on its old version
//!    from that checkpoint (still retained): nothing changed, nothing lost.
//! 3. **Swap** ([`swap_in`]) once every subtask stopped: the job's graph,
//!    tasks, modules and declared states become the new ones; the
//!    coordinator is rescoped (the old retained checkpoints are discarded:
//!    the savepoint stands for them) and the job restarts at once from the
//!    savepoint, its TaskManagers migrating state on the way in
//!    ([`weir_runtime::rpc::SavepointDeploy::migrations`]).
//! 4. **Done** when the new version has run and completed its first
//!    checkpoint; the downtime is from the savepoint's barrier (the last
//!    record the old version published) to every new subtask running.
//!    If anything fails before that (the restore, a migration, `open`),
//!    the job is **rolled back**: it restarts from the same savepoint on
//!    its old graph and modules, and the upgrade is `rolled_back` with the
//!    cause. Nothing is lost either way: both restore the same savepoint,
//!    and the sinks published nothing past it.
//!
//! The job keeps its id and its checkpoint history (the restore that
//! started the upgrade is marked with its number); its version history
//! ([`VersionView`]) says which modules it runs and since when.

use super::*;

use crate::submit::keyed_states;
use weir_runtime::checkpoint::savepoint::directory::SavepointMetadata;
use weir_runtime::rpc::{MigrationDeploy, SavepointDeploy};
use weir_runtime::state::StateDescriptor;

mod lifecycle;
mod views;

pub(crate) use lifecycle::*;
pub use views::*;

/// Upgrades a job remembers (`GET /v1/jobs/{id}/upgrades`), newest.
const MAX_UPGRADE_HISTORY: usize = 100;

/// What [`JobManager::prepare_upgrade`] makes of a request: the version
/// to swap in, what changes, what is migrated and how.
type PreparedUpgrade = (
    Version,
    Vec<String>,
    Vec<MigratedState>,
    BTreeMap<String, MigrationDeploy>,
);

/// An upgrade checked against what runs ([`JobManager::checked_upgrade`]).
pub(crate) struct Checked {
    /// The version to swap in.
    new: Version,
    /// What changes, one line each.
    changes: Vec<String>,
    /// The states migrated.
    migrated: Vec<MigratedState>,
    /// How, per operator.
    migrations: BTreeMap<String, MigrationDeploy>,
    /// What ran when it was checked (see [`Job::basis`]).
    basis: (usize, Option<u32>),
}

/// A job's graph and what goes with it: what an upgrade swaps.
#[derive(Clone)]
pub(crate) struct Version {
    graph: JobGraph,
    tasks: Vec<TaskSpec>,
    modules: HashSet<String>,
    states: HashMap<usize, Vec<StateDescriptor>>,
    overrides: Vec<(String, String)>,
    running: Vec<RunningModule>,
}

/// An upgrade under way.
pub(crate) struct PendingUpgrade {
    id: u32,
    /// The savepoint (its number among the job's) it stops at.
    savepoint: u32,
    allow_non_restored: bool,
    /// What it swaps in; taken by [`swap_in`].
    new: Option<Version>,
    /// What it swapped out (for a rollback).
    old: Option<Version>,
    /// The savepoint, once written.
    deploy: Option<SavepointDeploy>,
    migrations: BTreeMap<String, MigrationDeploy>,
    /// The modules of the version swapped in, entering the job's version
    /// history once it checkpointed.
    swapped_in: Option<Vec<RunningModule>>,
}

impl PendingUpgrade {
    /// The number (among the job's savepoints) of the savepoint it stops at.
    pub(crate) fn savepoint(&self) -> u32 {
        self.savepoint
    }
}

impl Job {
    fn upgrade_view(&mut self, id: u32) -> Option<&mut UpgradeView> {
        self.upgrades.iter_mut().find(|u| u.id == id)
    }

    /// The running upgrade's view.
    fn pending_view(&mut self) -> Option<&mut UpgradeView> {
        let id = self.upgrade.as_ref()?.id;
        self.upgrade_view(id)
    }

    /// Ends the running upgrade with `status` (and `failure`).
    pub(crate) fn end_upgrade(&mut self, status: UpgradeStatus, failure: Option<String>) {
        if let Some(view) = self.pending_view() {
            view.status = status;
            view.ended_at_ms = Some(now_ms());
            view.failure = failure;
        }
        self.upgrade = None;
    }

    /// Which version of the job runs: its versions and its last upgrade.
    /// An upgrade checked against one basis does not start on another (the
    /// job changed meanwhile).
    fn basis(&self) -> (usize, Option<u32>) {
        (self.versions.len(), self.upgrades.last().map(|u| u.id))
    }

    /// This job as a [`Version`] (what runs now).
    fn version(&self) -> Version {
        Version {
            graph: self.graph.clone(),
            tasks: self.tasks.clone(),
            modules: self.modules.clone(),
            states: self.states.clone(),
            overrides: self.overrides.clone(),
            running: self
                .versions
                .last()
                .map(|v| v.modules.clone())
                .unwrap_or_default(),
        }
    }
}

/// The modules of `graph`'s operators as the version history shows them.
pub(crate) fn running_modules(
    graph: &JobGraph,
    loaded: &LoadedModules,
    store: &ModuleStore,
) -> Vec<RunningModule> {
    let stored = store.list();
    graph
        .vertices
        .iter()
        .enumerate()
        .filter_map(|(v, vertex)| {
            let VertexKind::Operator(op) = &vertex.kind else {
                return None;
            };
            let hash = op.module.to_string();
            let module = stored
                .iter()
                .rev()
                .find(|m| m.hash == hash)
                .map_or_else(|| hash.clone(), |m| format!("{}@{}", m.name, m.version));
            Some(RunningModule {
                operator: vertex.id.0.clone(),
                module,
                hash,
                version: loaded
                    .get(&v)
                    .map(|(_, info)| info.version.clone())
                    .unwrap_or_default(),
            })
        })
        .collect()
}

/// What the new version of a job migrates: per keyed operator whose module
/// changed, exports `migration` and reports another version, the states
/// both versions declare (same name and kind).
fn migrations(
    old: &[RunningModule],
    new: &[RunningModule],
    new_graph: &JobGraph,
    old_states: &HashMap<usize, Vec<StateDescriptor>>,
    old_graph: &JobGraph,
    new_states: &HashMap<usize, Vec<StateDescriptor>>,
    can_migrate: &HashSet<String>,
) -> BTreeMap<String, MigrationDeploy> {
    let mut out = BTreeMap::new();
    for m in new {
        let Some(before) = old.iter().find(|o| o.operator == m.operator) else {
            continue;
        };
        if before.hash == m.hash || before.version == m.version || !can_migrate.contains(&m.hash) {
            continue;
        }
        let declared = |graph: &JobGraph, states: &HashMap<usize, Vec<StateDescriptor>>| {
            graph
                .vertices
                .iter()
                .position(|v| v.id.0 == m.operator)
                .and_then(|v| states.get(&v).cloned())
                .unwrap_or_default()
        };
        let (was, is) = (
            declared(old_graph, old_states),
            declared(new_graph, new_states),
        );
        let states: Vec<String> = is
            .iter()
            .filter(|d| d.name != weir_runtime::wasm::PROCESSING_TIMERS_STATE)
            .filter(|d| was.iter().any(|o| o.name == d.name && o.kind == d.kind))
            .map(|d| d.name.clone())
            .collect();
        if !states.is_empty() {
            out.insert(
                m.operator.clone(),
                MigrationDeploy {
                    from_version: before.version.clone(),
                    states,
                },
            );
        }
    }
    out
}

/// Whether a job running `old_graph` (keyed operators declaring
/// `old_states`) can be upgraded to `new_graph` (declaring `new_states`),
/// before anything stops; why not, naming the operator and the state.
pub(crate) fn check_upgrade(
    old_graph: &JobGraph,
    old_states: &HashMap<usize, Vec<StateDescriptor>>,
    new_graph: &JobGraph,
    new_states: &HashMap<usize, Vec<StateDescriptor>>,
    allow_non_restored: bool,
) -> Result<(), String> {
    if new_graph.settings.checkpoints.is_none() {
        return Err(
            "the new version takes no checkpoints ([job.checkpoints] removed): an upgraded \
             job keeps them (they restore it, and carry its next upgrades)"
                .into(),
        );
    }
    if old_graph.settings.max_parallelism != new_graph.settings.max_parallelism {
        return Err(format!(
            "job.max_parallelism changes from {} to {}: the key groups of the job's state \
             must stay the same",
            old_graph.settings.max_parallelism, new_graph.settings.max_parallelism
        ));
    }
    let mut dropped = Vec::new();
    for (v, old) in old_graph.vertices.iter().enumerate() {
        let new = new_graph
            .vertices
            .iter()
            .enumerate()
            .find(|(_, n)| n.id.0 == old.id.0);
        // A Kafka source's partitions are dealt out again at another
        // parallelism; other sources and sinks keep theirs.
        let positioned = !matches!(
            old.kind,
            VertexKind::Operator(_)
                | VertexKind::Window(_)
                | VertexKind::Join(_)
                | VertexKind::Source(weir_runtime::job::SourceSpec::Kafka(_))
        );
        if let Some((_, n)) = new
            && positioned
            && n.parallelism != old.parallelism
        {
            return Err(format!(
                "{} `{}` runs with parallelism {} and would have {}: sources and sinks keep \
                 their parallelism across an upgrade (only keyed operators and Kafka sources rescale)",
                old.kind.role(),
                old.id,
                old.parallelism,
                n.parallelism
            ));
        }
        let was = old_states.get(&v).map(Vec::as_slice).unwrap_or_default();
        let is = new
            .and_then(|(nv, _)| new_states.get(&nv))
            .map(Vec::as_slice)
            .unwrap_or_default();
        for state in was {
            match is.iter().find(|d| d.name == state.name) {
                Some(d) if d.kind != state.kind => {
                    return Err(format!(
                        "operator `{}` state `{}` is {} state and the new module declares it \
                         as {} state: a state keeps its kind across an upgrade (a migration \
                         rewrites values, not kinds); declare a new state under another name",
                        old.id, state.name, state.kind, d.kind
                    ));
                }
                Some(_) => {}
                None if new.is_none() => dropped.push(format!(
                    "operator `{}` state `{}` (the operator is not in the new job)",
                    old.id, state.name
                )),
                None => dropped.push(format!(
                    "operator `{}` state `{}` (the new module no longer declares it)",
                    old.id, state.name
                )),
            }
        }
    }
    if !dropped.is_empty() && !allow_non_restored {
        return Err(format!(
            "the upgrade would drop state: {}; upgrade anyway with --allow-non-restored-state",
            dropped.join(", ")
        ));
    }
    Ok(())
}

impl JobManager {
    /// Upgrades running job `id` as `request` says: checks the new version
    /// first (refused: the job runs on untouched), then stops the job at a
    /// savepoint and restarts it on the new version. Returns once the
    /// savepoint is triggered; `upgrades` shows the rest. (A `dry_run`
    /// request is refused here: [`JobManager::plan_upgrade`] answers it.)
    pub async fn upgrade(
        self: &Arc<Self>,
        id: &str,
        request: UpgradeRequest,
    ) -> Result<UpgradeView, ApiError> {
        if request.dry_run {
            return Err(ApiError::bad_request(
                "a dry run only checks: ask for its plan (POST with dry_run answers one)",
            ));
        }
        let checked = self.checked_upgrade(id, &request).await?;
        let result = self.start_upgrade(id, checked, &request);
        self.changed();
        result
    }

    /// What upgrading job `id` as `request` says would change and migrate,
    /// checked exactly as [`JobManager::upgrade`] checks it; nothing stops
    /// (`weir upgrade --dry-run`).
    pub async fn plan_upgrade(
        self: &Arc<Self>,
        id: &str,
        request: UpgradeRequest,
    ) -> Result<UpgradePlan, ApiError> {
        let checked = self.checked_upgrade(id, &request).await?;
        Ok(UpgradePlan {
            changes: checked.changes,
            migrated: checked.migrated,
        })
    }

    /// The new version of running job `id` with `request` applied, checked
    /// against what runs (off the async threads: it loads modules).
    async fn checked_upgrade(
        self: &Arc<Self>,
        id: &str,
        request: &UpgradeRequest,
    ) -> Result<Checked, ApiError> {
        let (spec, old, basis) = {
            let cell = self.job_cell(id)?;
            let job = self.lock_job(&cell);
            self.check_upgradable(&job)?;
            let spec = job.spec.clone().ok_or_else(|| {
                ApiError::conflict(format!(
                    "job {id} ({}) was started by `weir run`, not submitted with a spec: \
                     it cannot be upgraded in place",
                    job.name
                ))
            })?;
            (spec, job.version(), job.basis())
        };
        let this = self.clone();
        let request = request.clone();
        let _turn = self.check_turn().await?;
        let (new, changes, migrated, migrations) =
            tokio::task::spawn_blocking(move || this.prepare_upgrade(&spec, &old, &request))
                .await
                .map_err(|e| ApiError::internal(e.to_string()))??;
        Ok(Checked {
            new,
            changes,
            migrated,
            migrations,
            basis,
        })
    }

    /// Why job `job` cannot be upgraded now, if it cannot.
    fn check_upgradable(&self, job: &Job) -> Result<(), ApiError> {
        if job.state != JobState::Running {
            return Err(ApiError::conflict(format!(
                "job {} ({}) is {}: only a running job is upgraded",
                job.id,
                job.name,
                job.state.as_str()
            )));
        }
        if job.upgrade.is_some() {
            return Err(ApiError::conflict(format!(
                "job {} ({}) is being upgraded already; wait for it (`weir status {}`)",
                job.id, job.name, job.id
            )));
        }
        if job.checkpoints.is_none() {
            return Err(ApiError::conflict(format!(
                "job {} ({}) takes no checkpoints: an upgrade stops it at a savepoint, \
                 which needs [job.checkpoints] in its spec",
                job.id, job.name
            )));
        }
        Ok(())
    }

    /// The new version of a job running `old` (spec `spec`) with `request`
    /// applied, checked against it; what changes and what is migrated.
    /// Blocking: loads modules.
    fn prepare_upgrade(
        &self,
        spec: &str,
        old: &Version,
        request: &UpgradeRequest,
    ) -> Result<PreparedUpgrade, ApiError> {
        let refused = |m: String| ApiError::bad_request(format!("upgrade refused: {m}"));
        if request.modules.is_empty() && request.set.is_empty() {
            return Err(refused(
                "nothing to change: give --module OP=name@version or --set key=value".into(),
            ));
        }
        let mut overrides = old.overrides.clone();
        for (op, module) in &request.modules {
            let is_operator = old
                .graph
                .vertices
                .iter()
                .any(|v| v.id.0 == *op && matches!(v.kind, VertexKind::Operator(_)));
            if !is_operator {
                return Err(refused(format!(
                    "the job has no operator `{op}` (its operators: {})",
                    old.running
                        .iter()
                        .map(|m| m.operator.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            // Quoted: a module reference is a string, whatever it looks
            // like (a store reference is plain ASCII, which `{:?}` quotes
            // as TOML does).
            self.store.resolve(module).map_err(|e| match e {
                StoreError::NotFound(_) => refused(format!(
                    "operator `{op}`: unknown module `{module}`; upload it first with \
                     `weir upload FILE --name N --version V` (`weir modules` lists them)"
                )),
                other => refused(format!("operator `{op}`: {other}")),
            })?;
            overrides.push((format!("operator.{op}.module"), format!("{module:?}")));
        }
        for set in &request.set {
            let (key, value) = weir_runtime::job::parse_override(set).map_err(refused)?;
            overrides.push((key, value));
        }
        let (graph, modules, loaded) = self
            .prepare_with(spec, &overrides)
            .map_err(|e| refused(e.message))?;
        let states = keyed_states(&graph, &loaded);
        check_upgrade(
            &old.graph,
            &old.states,
            &graph,
            &states,
            request.allow_non_restored_state,
        )
        .map_err(refused)?;
        let running = running_modules(&graph, &loaded, &self.store);
        let can_migrate: HashSet<String> = running
            .iter()
            .filter(|m| {
                graph
                    .vertices
                    .iter()
                    .position(|v| v.id.0 == m.operator)
                    .and_then(|v| loaded.get(&v))
                    .is_some_and(|(module, _)| self.runtime.exports_migration(module))
            })
            .map(|m| m.hash.clone())
            .collect();
        let migrations = migrations(
            &old.running,
            &running,
            &graph,
            &old.states,
            &old.graph,
            &states,
            &can_migrate,
        );
        let mut changes = Vec::new();
        for m in &running {
            match old.running.iter().find(|o| o.operator == m.operator) {
                Some(o) if o.hash != m.hash && o.version == m.version => changes.push(format!(
                    "operator `{}`: {} → {}, both version {}: its state is kept as it is \
                     (a module migrates state only from another version)",
                    m.operator, o.module, m.module, m.version
                )),
                Some(o) if o.hash != m.hash => changes.push(format!(
                    "operator `{}`: {} (version {}) → {} (version {})",
                    m.operator, o.module, o.version, m.module, m.version
                )),
                Some(_) => {}
                None => changes.push(format!("operator `{}`: new, {}", m.operator, m.module)),
            }
        }
        for v in &graph.vertices {
            if let Some(o) = old.graph.vertices.iter().find(|o| o.id.0 == v.id.0)
                && o.parallelism != v.parallelism
            {
                changes.push(format!(
                    "{} `{}`: parallelism {} → {}",
                    v.kind.role(),
                    v.id,
                    o.parallelism,
                    v.parallelism
                ));
            }
        }
        changes.extend(request.set.iter().map(|s| format!("--set {s}")));
        let migrated = migrations
            .iter()
            .flat_map(|(op, m)| {
                let to = running
                    .iter()
                    .find(|r| r.operator == *op)
                    .map(|r| r.version.clone())
                    .unwrap_or_default();
                m.states.iter().map(move |s| MigratedState {
                    operator: op.clone(),
                    state: s.clone(),
                    from_version: m.from_version.clone(),
                    to_version: to.clone(),
                    entries: 0,
                })
            })
            .collect();
        let tasks = chain(&graph);
        let new = Version {
            graph,
            tasks,
            modules,
            states,
            overrides,
            running,
        };
        Ok((new, changes, migrated, migrations))
    }

    /// Registers the upgrade of job `id` to `new` and triggers its
    /// stop-with-savepoint.
    fn start_upgrade(
        &self,
        id: &str,
        checked: Checked,
        request: &UpgradeRequest,
    ) -> Result<UpgradeView, ApiError> {
        let Checked {
            new,
            changes,
            migrated,
            migrations,
            basis,
        } = checked;
        let cell = self.job_cell(id)?;
        let mut guard = self.lock_job(&cell);
        let job = &mut *guard;
        // Checked again: it may have changed while the modules loaded.
        self.check_upgradable(job)?;
        if job.basis() != basis {
            return Err(ApiError::conflict(format!(
                "job {id} ({}) was upgraded while this upgrade was being checked; check \
                 it again against what runs now",
                job.name
            )));
        }
        let number = job.upgrades.last().map_or(1, |u| u.id + 1);
        let dir = self.upgrades_dir.join(format!("{}-{number}", job.id));
        // Left by an earlier JobManager on this data dir (job ids are
        // random, so hardly ever): a savepoint never writes over files.
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .map_err(|e| ApiError::internal(format!("cannot clear {}: {e}", dir.display())))?;
        }
        let savepoint = self.trigger_savepoint_locked_in(job, dir.clone(), true, false)?;
        let view = UpgradeView {
            id: number,
            status: UpgradeStatus::Stopping,
            changes,
            migrated,
            savepoint: dir.display().to_string(),
            requested_at_ms: now_ms(),
            stopped_at_ms: None,
            written_at_ms: None,
            deployed_at_ms: None,
            resumed_at_ms: None,
            downtime_ms: None,
            ended_at_ms: None,
            failure: None,
        };
        job.upgrades.push(view.clone());
        if job.upgrades.len() > MAX_UPGRADE_HISTORY {
            job.upgrades.remove(0);
        }
        job.upgrade = Some(Box::new(PendingUpgrade {
            id: number,
            savepoint: savepoint.id,
            allow_non_restored: request.allow_non_restored_state,
            new: Some(new),
            old: None,
            deploy: None,
            migrations,
            swapped_in: None,
        }));
        tracing::info!(job = %job.id, upgrade = number, "upgrade started");
        Ok(view)
    }

    /// Job `id`'s upgrades, newest first.
    pub fn upgrades(&self, id: &str) -> Result<Vec<UpgradeView>, ApiError> {
        let cell = self.job_cell(id)?;
        let job = self.lock_job(&cell);
        Ok(job.upgrades.iter().rev().cloned().collect())
    }

    /// Waits until upgrade `number` of job `id` has ended; returns it then.
    pub async fn wait_upgrade(&self, id: &str, number: u32) -> Result<UpgradeView, ApiError> {
        self.watch(|| {
            let view = self
                .upgrades(id)?
                .into_iter()
                .find(|u| u.id == number)
                .ok_or_else(|| ApiError::not_found(format!("no upgrade {number} of job {id}")))?;
            Ok(view.status.is_final().then_some(view))
        })
        .await
    }
}

#[cfg(test)]
mod tests;
