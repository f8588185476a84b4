//! The restore download: what one deployment's local subtasks restore
//! from a checkpoint ([`download_restore`] → [`Restored`]) or from the
//! savepoint the job was submitted with ([`savepoint_restore`]).
//!
//! The checkpoint's `_metadata` is read first and must record exactly the
//! parts this TaskManager was sent for its subtasks
//! ([`verify_restore`]); only then are their state files downloaded (each
//! checked by size and SHA-256) and their timers files read (checked by
//! SHA-256). Any failure is why the checkpoint cannot be restored: the
//! caller reports it as
//! [`ToJobManager::RestoreFailed`](weir_runtime::rpc::ToJobManager::RestoreFailed).
//!
//! Blocking file and storage I/O: run it on the blocking pool. This module
//! must not start subtasks or talk to the JobManager.

use std::collections::HashMap;

use weir_runtime::checkpoint::CheckpointError;
use weir_runtime::checkpoint::savepoint::Migration;
use weir_runtime::checkpoint::savepoint::SavepointError;
use weir_runtime::checkpoint::savepoint::directory::restore_subtask;
use weir_runtime::checkpoint::snapshot::{StateHandle, get_checked, metadata_path, verify_restore};
use weir_runtime::checkpoint::storage::CheckpointStorage;
use weir_runtime::job::{JobGraph, StateBackendKind, TaskSpec, VertexKind};
use weir_runtime::local::{LoadedModules, SubtaskRestore, state_descriptors};
use weir_runtime::rpc::{MigrationDeploy, RestorePoint, SavepointDeploy, SubtaskCheckpoint};
use weir_runtime::state::BackendKind;
use weir_runtime::wasm::{InstanceConfig, Runtime};

/// The largest `_metadata` a restore reads: it lists every subtask's files
/// (a few hundred bytes each), so a checkpoint of thousands of subtasks
/// with thousands of files each stays far below; a bigger one is refused
/// as corrupt instead of being read into memory whole.
const MAX_METADATA_BYTES: u64 = 256 << 20;

/// What a TaskManager restores for its subtasks of one deployment.
#[derive(Debug, Clone, Default)]
pub(crate) struct Restored {
    /// What each local subtask (task, subtask) starts from.
    pub(crate) subtasks: HashMap<(usize, u32), SubtaskRestore>,
    /// Subtasks that had finished, with their (already committed) part.
    pub(crate) finished: HashMap<(u32, u32), SubtaskCheckpoint>,
    /// The restored state handles: the base of the next incremental upload.
    pub(crate) previous: HashMap<(usize, u32), StateHandle>,
}

/// Why a checkpoint cannot be restored here.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RestoreError {
    /// `_metadata` missing, unreadable or not matching; a state file
    /// missing or changed; a timers file missing or changed.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// A timers file (its hash matching) is not the JSON a snapshot writes.
    #[error("{path}: {source}")]
    Timers {
        /// Its storage path.
        path: String,
        /// Why it does not parse.
        source: serde_json::Error,
    },
}

/// Downloads what the `local` subtasks of job `job` restore from `point`
/// into `dir`. First reads the checkpoint's `_metadata` and checks that it
/// records the very parts this TaskManager was sent for them
/// ([`verify_restore`]); then downloads their state files (each checked by
/// size and hash) and reads their timers. Any failure is why the
/// checkpoint cannot be restored
/// ([`ToJobManager::RestoreFailed`](weir_runtime::rpc::ToJobManager::RestoreFailed)).
pub(crate) fn download_restore(
    job: &str,
    point: &RestorePoint,
    local: &[(usize, u32)],
    storage: &dyn CheckpointStorage,
    dir: &std::path::Path,
) -> Result<Restored, RestoreError> {
    let parts: Vec<((u32, u32), &SubtaskCheckpoint)> = point
        .subtasks
        .iter()
        .filter(|((t, s), _)| local.contains(&(*t as usize, *s)))
        .map(|(id, part)| (*id, part))
        .collect();
    if !parts.is_empty() {
        let path = metadata_path(job, point.checkpoint)?;
        let bytes = storage.get_bytes_at_most(&path, MAX_METADATA_BYTES)?;
        verify_restore(&path, &bytes, job, point.checkpoint, &parts)?;
    }
    let mut out = Restored::default();
    for ((t, s), part) in &point.subtasks {
        let (t, s) = (*t as usize, *s);
        if !local.contains(&(t, s)) {
            continue;
        }
        let mut restore = SubtaskRestore {
            finished: part.finished,
            source: part.source.clone(),
            sink: part.sink.clone(),
            ..SubtaskRestore::default()
        };
        if part.finished {
            out.finished.insert(
                (t as u32, s),
                SubtaskCheckpoint {
                    finished: true,
                    source: part.source.clone(),
                    ..SubtaskCheckpoint::default()
                },
            );
        }
        for (vertex, handle) in &part.states {
            let to = dir.join(format!("{t}-{s}-{vertex}"));
            weir_runtime::checkpoint::snapshot::download(handle, storage, &to)?;
            restore.states.insert(*vertex, to);
            out.previous.insert((*vertex, s), handle.clone());
        }
        if let Some(path) = &part.timers {
            let bytes = get_checked(storage, path, part.timers_sha256.as_deref())?;
            let timers: Vec<(usize, weir_runtime::taskmanager::Timers)> =
                serde_json::from_slice(&bytes).map_err(|source| RestoreError::Timers {
                    path: path.as_str().to_owned(),
                    source,
                })?;
            restore.timers = timers.into_iter().collect();
        }
        out.subtasks.insert((t, s), restore);
    }
    Ok(out)
}

/// What the `local` subtasks of a deployment take from the savepoint it
/// starts from, prepared in `dir`: per keyed operator, a local snapshot of
/// the subtask's own backend built from every state file overlapping its
/// key groups, and its timers; per source and sink subtask, its position
/// and committable (their parallelism is unchanged: the JobManager
/// checked). A vertex the savepoint does not know starts empty. The state
/// of an operator the deployment migrates (`savepoint.migrations`, a job
/// upgrade) goes through its new module's `migrate-state` on the way in,
/// in an instance of its own under the job's sandbox limits.
pub(crate) fn savepoint_restore(
    runtime: &Runtime,
    savepoint: &SavepointDeploy,
    graph: &JobGraph,
    tasks: &[TaskSpec],
    local: &[(usize, u32)],
    modules: &LoadedModules,
    dir: &std::path::Path,
) -> Result<Restored, SavepointError> {
    let kind = match graph.settings.state_backend {
        StateBackendKind::RocksDb => BackendKind::RocksDb,
        StateBackendKind::Heap => BackendKind::Heap,
    };
    // One subtask after the other on each of up to one thread per core:
    // each is an import of its own (downtime, when a job resumes).
    let prepare = |t: usize, s: u32| -> Result<SubtaskRestore, SavepointError> {
        let task = &tasks[t];
        let mut restore = SubtaskRestore::default();
        for &v in &task.vertices {
            let vertex = &graph.vertices[v];
            let Some(saved) = savepoint
                .metadata
                .vertices
                .iter()
                .find(|x| x.uid == vertex.id.0)
            else {
                continue;
            };
            let sub = saved.subtasks.get(s as usize);
            if v == task.head() {
                restore.source = if saved.parallelism == vertex.parallelism {
                    sub.and_then(|x| x.source.clone())
                } else {
                    // Rescaled (the JobManager allowed it: a Kafka source):
                    // every old subtask's partitions, merged; this subtask
                    // keeps the ones it owns.
                    let positions: Vec<_> =
                        saved.subtasks.iter().map(|x| x.source.as_ref()).collect();
                    weir_runtime::connectors::rescaled_source_position(&positions)
                };
            }
            if v == task.tail() {
                restore.sink = sub.and_then(|x| x.sink.clone());
            }
            let states = match &vertex.kind {
                VertexKind::Operator(op) if op.key_by.is_some() => match modules.get(&v) {
                    Some((_, info)) => state_descriptors(info),
                    None => continue,
                },
                VertexKind::Window(_) => weir_runtime::window::window_states(),
                VertexKind::Join(_) => weir_runtime::join::join_states(),
                _ => continue,
            };
            let mut migration = match savepoint.migrations.get(&vertex.id.0) {
                Some(m) => Some(migration(runtime, graph, v, s, modules, &states, m)?),
                None => None,
            };
            let from = restore_subtask(
                &savepoint.dir,
                &savepoint.metadata,
                saved,
                s,
                vertex.parallelism,
                &states,
                kind,
                dir,
                migration.as_mut(),
            )?;
            if let Some(state_dir) = from.state_dir {
                restore.states.insert(v, state_dir);
            }
            if !from.timers.is_empty() {
                restore.timers.insert(v, from.timers);
            }
        }
        Ok(restore)
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(local.len())
        .max(1);
    let next = std::sync::atomic::AtomicUsize::new(0);
    type Prepared = Result<Vec<((usize, u32), SubtaskRestore)>, SavepointError>;
    let prepared: Vec<Prepared> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&(t, s)) = local.get(i) else {
                            return Ok(done);
                        };
                        done.push(((t, s), prepare(t, s)?));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a savepoint restore thread panicked"))
            .collect()
    });
    let mut out = Restored::default();
    for done in prepared {
        out.subtasks.extend(done?);
    }
    Ok(out)
}

/// The migration of subtask `subtask` of operator vertex `v`: an instance
/// of its new module (not opened: `migrate-state` needs no config), called
/// for every value of the states `m` names.
fn migration<'m>(
    runtime: &Runtime,
    graph: &JobGraph,
    v: usize,
    subtask: u32,
    modules: &LoadedModules,
    states: &[weir_runtime::state::StateDescriptor],
    m: &'m MigrationDeploy,
) -> Result<Migration<'m>, SavepointError> {
    let vertex = &graph.vertices[v];
    let uid = vertex.id.0.clone();
    let refused = |why: String| SavepointError::Migration(format!("operator `{uid}`: {why}"));
    let (module, _) = modules
        .get(&v)
        .ok_or_else(|| refused("its module is not loaded".into()))?;
    let limits = &graph.settings.limits;
    let mut config = InstanceConfig::new(&uid);
    config.subtask_index = subtask;
    config.parallelism = vertex.parallelism;
    config.memory_limit = (limits.memory_mb as usize) << 20;
    config.call_timeout = std::time::Duration::from_millis(limits.call_timeout_ms);
    config.max_output = (limits.max_output_mb as usize) << 20;
    let mut instance = runtime
        .instantiate(module, config)
        .map_err(|e| refused(e.to_string()))?;
    if !instance.can_migrate() {
        return Err(refused(
            "its new module does not export `migration`, so it cannot migrate the state".into(),
        ));
    }
    let names: Vec<String> = states.iter().map(|d| d.name.clone()).collect();
    let from_version = m.from_version.clone();
    Ok(Migration {
        states: states.iter().map(|d| m.states.contains(&d.name)).collect(),
        migrate: Box::new(move |state, key, old| {
            let name = &names[state as usize];
            instance
                .migrate_state(name, &from_version, old)
                .map_err(|e| {
                    format!(
                        "operator `{uid}` state `{name}` key \"{}\": migration from version \
                         {from_version} failed: {}",
                        key.escape_ascii(),
                        e.message
                    )
                })
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_runtime::checkpoint::snapshot::sha256_hex;
    use weir_runtime::checkpoint::storage::{DirStorage, StoragePath};

    /// A restore point of checkpoint 3 of job `j` with two subtasks, each
    /// with a state file uploaded to `storage`.
    fn restore_point(tmp: &std::path::Path, storage: &DirStorage) -> RestorePoint {
        let subtasks = (0..2u32)
            .map(|s| {
                let local = tmp.join(format!("snap-{s}"));
                std::fs::create_dir_all(&local).unwrap();
                std::fs::write(local.join("heap.snapshot"), format!("state of {s}")).unwrap();
                let handle = weir_runtime::checkpoint::upload(
                    &local,
                    storage,
                    &StoragePath::new(format!("j/chk-3/0-{s}/1")).unwrap(),
                    &StoragePath::new("j/shared").unwrap(),
                    None,
                    weir_runtime::state::BackendKind::Heap,
                )
                .unwrap();
                let timers = StoragePath::new(format!("j/chk-3/0-{s}/timers.json")).unwrap();
                let bytes = format!("[[1,[[{s},[1,2]]]]]").into_bytes();
                storage.put_bytes(&timers, &bytes).unwrap();
                let part = SubtaskCheckpoint {
                    states: vec![(1, handle)],
                    timers: Some(timers),
                    timers_sha256: Some(sha256_hex(&bytes)),
                    source: Some(serde_json::json!({ "next": s })),
                    ..SubtaskCheckpoint::default()
                };
                ((0, s), part)
            })
            .collect();
        RestorePoint {
            checkpoint: 3,
            subtasks,
        }
    }

    fn write_metadata(storage: &DirStorage, point: &RestorePoint) {
        let metadata = weir_runtime::checkpoint::snapshot::CheckpointMetadata {
            job: "j".into(),
            layout: None,
            checkpoint: point.checkpoint,
            triggered_at_ms: 1,
            completed_at_ms: 2,
            subtasks: point.subtasks.clone(),
        };
        storage
            .put_bytes(
                &metadata_path("j", point.checkpoint).unwrap(),
                &serde_json::to_vec(&metadata).unwrap(),
            )
            .unwrap();
    }

    #[test]
    fn a_restore_matching_the_checkpoints_metadata_downloads_its_subtasks() {
        let tmp = tempfile::tempdir().unwrap();
        let storage = DirStorage::new(tmp.path().join("storage"));
        let point = restore_point(tmp.path(), &storage);
        write_metadata(&storage, &point);
        let dir = tmp.path().join("restore");
        let restored = download_restore("j", &point, &[(0, 1)], &storage, &dir).unwrap();
        assert_eq!(restored.subtasks.len(), 1, "only the local subtask");
        assert_eq!(
            std::fs::read(dir.join("0-1-1/heap.snapshot")).unwrap(),
            b"state of 1"
        );
        assert_eq!(
            restored.subtasks[&(0, 1)].timers,
            HashMap::from([(1, vec![(1, vec![1, 2])])])
        );
    }

    #[test]
    fn a_timers_file_changed_in_storage_fails_the_restore() {
        let tmp = tempfile::tempdir().unwrap();
        let storage = DirStorage::new(tmp.path().join("storage"));
        let point = restore_point(tmp.path(), &storage);
        write_metadata(&storage, &point);
        // Same length, another timer.
        let timers = point.subtasks[1].1.timers.clone().unwrap();
        storage.put_bytes(&timers, b"[[1,[[7,[1,2]]]]]").unwrap();
        let dir = tmp.path().join("restore");
        let err = download_restore("j", &point, &[(0, 1)], &storage, &dir)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`j/chk-3/0-1/timers.json` has SHA-256"),
            "{err}"
        );
    }

    /// A checkpoint whose `_metadata` was deleted is not restored from:
    /// the restore fails (reported as `RestoreFailed`, so the JobManager
    /// falls back) before any state file is downloaded.
    #[test]
    fn a_checkpoint_whose_metadata_is_deleted_is_not_restored() {
        let tmp = tempfile::tempdir().unwrap();
        let storage = DirStorage::new(tmp.path().join("storage"));
        let point = restore_point(tmp.path(), &storage);
        write_metadata(&storage, &point);
        storage
            .delete(&metadata_path("j", point.checkpoint).unwrap())
            .unwrap();
        let dir = tmp.path().join("restore");
        let err = download_restore("j", &point, &[(0, 0), (0, 1)], &storage, &dir)
            .unwrap_err()
            .to_string();
        assert!(err.contains("`j/chk-3/_metadata` not found"), "{err}");
        assert!(!dir.exists(), "nothing was downloaded");
    }

    #[test]
    fn a_restore_not_matching_the_checkpoints_metadata_fails() {
        let tmp = tempfile::tempdir().unwrap();
        let storage = DirStorage::new(tmp.path().join("storage"));
        let point = restore_point(tmp.path(), &storage);
        // The metadata records another position for subtask 0/1 than the
        // part this TaskManager was sent.
        let mut recorded = point.clone();
        recorded.subtasks[1].1.source = Some(serde_json::json!({ "next": 99 }));
        write_metadata(&storage, &recorded);
        let dir = tmp.path().join("restore");
        // Subtask 0/0 alone matches ...
        download_restore("j", &point, &[(0, 0)], &storage, &dir.join("a")).unwrap();
        // ... 0/1 does not.
        let err = download_restore("j", &point, &[(0, 1)], &storage, &dir.join("b"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("subtask 0/1"), "{err}");
        assert!(err.contains("`j/chk-3/_metadata`"), "{err}");
    }
}
