//! One operator subtask's keyed state in a checkpoint: uploading a local
//! snapshot, and downloading it again for a restore.
//!
//! Owns [`StateHandle`] and [`FileHandle`] (what a task acks to the
//! coordinator and what the checkpoint's metadata records), [`upload`] and
//! [`download`].
//!
//! # Shared and private files
//! * RocksDB `.sst` files are *shared*: immutable, so a later checkpoint of
//!   the same subtask can reference them. Each is stored once, under
//!   `<shared prefix>/<random token>-<local name>` (the token keeps files
//!   of different subtasks, attempts and database lineages apart even when
//!   their local names are equal). [`upload`] skips a file whose local name
//!   and size equal a shared file of `previous` and references that
//!   [`FileHandle`] instead.
//! * Everything else (RocksDB `MANIFEST-*`, `CURRENT`, `OPTIONS-*`, the
//!   empty WAL; the heap backend's snapshot file) is *private* to one
//!   checkpoint: stored under `<private prefix>/<local name>`, deleted with
//!   the checkpoint's directory.
//!
//! # Contract for `previous`
//! `previous` must be a handle of the *same database lineage*: the
//! subtask's last completed checkpoint since it opened or restored its
//! backend, or the handle it was restored from. Local SST names are unique
//! only within a lineage; a handle of another subtask (or of a database
//! created empty) could make [`upload`] reference a different file with the
//! same name. The size check catches most such mix-ups, not all.
//!
//! The files `previous` contributes are not uploaded again, so they must
//! still exist when the new checkpoint completes: the coordinator must not
//! let the registry delete them before it has registered the new
//! checkpoint (see [`super::registry`]).

use std::collections::HashMap;
use std::fs;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::CheckpointError;
use super::storage::{CheckpointStorage, StoragePath};
use crate::state::BackendKind;

/// One operator subtask's keyed state in a checkpoint.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StateHandle {
    /// The backend that wrote it (and that can restore it).
    pub backend: BackendKind,
    /// Every file needed to restore, shared and private, sorted by local name.
    pub files: Vec<FileHandle>,
    /// Bytes of all referenced files.
    pub full_size: u64,
    /// Bytes this checkpoint uploaded (the rest it references from earlier
    /// checkpoints).
    pub incremental_size: u64,
}

impl StateHandle {
    /// The storage paths of the shared files this handle references (what
    /// [`super::SharedStateRegistry::register`] counts).
    pub fn shared_paths(&self) -> impl Iterator<Item = &StoragePath> {
        self.files.iter().filter(|f| f.shared).map(|f| &f.path)
    }

    /// The storage paths of its private files.
    pub fn private_paths(&self) -> impl Iterator<Item = &StoragePath> {
        self.files.iter().filter(|f| !f.shared).map(|f| &f.path)
    }
}

/// One file of a [`StateHandle`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Hash)]
pub struct FileHandle {
    /// Its name in the local snapshot directory (`000012.sst`,
    /// `MANIFEST-000005`, `heap.snapshot`): where [`download`] puts it.
    pub local_name: String,
    /// Where it is in checkpoint storage.
    pub path: StoragePath,
    /// Its size in bytes.
    pub size: u64,
    /// Whether other checkpoints may reference it (RocksDB SST files).
    pub shared: bool,
}

/// Whether a local snapshot file of a `kind` backend is shared (immutable,
/// referenced across checkpoints).
fn is_shared(kind: BackendKind, local_name: &str) -> bool {
    kind == BackendKind::RocksDb && local_name.ends_with(".sst")
}

/// A 128-bit random token in hex, for unique shared file names.
fn unique_token() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut token = String::with_capacity(32);
    for _ in 0..2 {
        // `RandomState::new` is randomly keyed (per thread, then stepped).
        let mut h = RandomState::new().build_hasher();
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        h.write_u128(nanos);
        h.write_u32(std::process::id());
        token.push_str(&format!("{:016x}", h.finish()));
    }
    token
}

/// A local file name from a handle, checked to be one plain path component
/// (a handle read from storage must not write outside the download dir).
fn checked_local_name(name: &str) -> Result<&str, CheckpointError> {
    match StoragePath::new(name) {
        Ok(_) if !name.contains('/') => Ok(name),
        _ => Err(CheckpointError::Corrupt(format!(
            "local file name `{name}` is not a plain file name"
        ))),
    }
}

/// Asynchronous part of a snapshot: uploads the local snapshot directory
/// `local_dir` (written by
/// [`crate::state::KeyedStateBackend::snapshot_local`]) to `storage`.
///
/// Shared files (RocksDB `.sst`) go to `<shared_prefix>/<token>-<name>`,
/// unless `previous` (see the module docs) has a shared file with the same
/// local name and size, which is then referenced instead; other files go to
/// `<private_prefix>/<name>`. `incremental_size` is the bytes this call
/// uploaded, `full_size` the bytes of all files the handle references.
///
/// On error, files uploaded so far are left behind: the coordinator deletes
/// the checkpoint's private directory and the shared files that
/// [`super::SharedStateRegistry::orphans`] reports (it can find them by
/// listing `shared_prefix`).
pub fn upload(
    local_dir: &Path,
    storage: &dyn CheckpointStorage,
    private_prefix: &StoragePath,
    shared_prefix: &StoragePath,
    previous: Option<&StateHandle>,
    kind: BackendKind,
) -> Result<StateHandle, CheckpointError> {
    let io = |op, e| CheckpointError::Io {
        op,
        path: local_dir.display().to_string(),
        source: e,
    };
    let reusable: HashMap<&str, &FileHandle> = previous
        .filter(|p| p.backend == kind)
        .map(|p| {
            p.files
                .iter()
                .filter(|f| f.shared)
                .map(|f| (f.local_name.as_str(), f))
                .collect()
        })
        .unwrap_or_default();

    let mut local = Vec::new();
    for entry in fs::read_dir(local_dir).map_err(|e| io("list snapshot dir", e))? {
        let entry = entry.map_err(|e| io("list snapshot dir", e))?;
        let meta = entry
            .metadata()
            .map_err(|e| io("stat snapshot file in", e))?;
        let name = entry.file_name().into_string().map_err(|n| {
            CheckpointError::Corrupt(format!("snapshot file name {n:?} is not UTF-8"))
        })?;
        if !meta.is_file() {
            return Err(CheckpointError::Corrupt(format!(
                "unexpected non-file `{name}` in snapshot dir {}",
                local_dir.display()
            )));
        }
        checked_local_name(&name)?;
        local.push((name, meta.len()));
    }
    local.sort();

    let mut handle = StateHandle {
        backend: kind,
        files: Vec::with_capacity(local.len()),
        full_size: 0,
        incremental_size: 0,
    };
    for (name, size) in local {
        let shared = is_shared(kind, &name);
        let file = match reusable.get(name.as_str()) {
            Some(&prev) if shared && prev.size == size => prev.clone(),
            _ => {
                let path = if shared {
                    shared_prefix.join(&format!("{}-{name}", unique_token()))?
                } else {
                    private_prefix.join(&name)?
                };
                let written = storage.put_file(&path, &local_dir.join(&name))?;
                if written != size {
                    return Err(CheckpointError::Corrupt(format!(
                        "snapshot file `{name}` changed while uploading ({size} → {written} bytes)"
                    )));
                }
                handle.incremental_size += written;
                FileHandle {
                    local_name: name,
                    path,
                    size,
                    shared,
                }
            }
        };
        handle.full_size += file.size;
        handle.files.push(file);
    }
    Ok(handle)
}

/// Downloads every file of `handle` into `dir` (created if missing;
/// expected empty) under its local name, checking sizes, so that
/// [`crate::state::restore_backend`] can open it.
pub fn download(
    handle: &StateHandle,
    storage: &dyn CheckpointStorage,
    dir: &Path,
) -> Result<(), CheckpointError> {
    fs::create_dir_all(dir).map_err(|e| CheckpointError::Io {
        op: "create download dir",
        path: dir.display().to_string(),
        source: e,
    })?;
    for file in &handle.files {
        let local = dir.join(checked_local_name(&file.local_name)?);
        storage.get_to_file(&file.path, &local)?;
        let got = fs::metadata(&local)
            .map_err(|e| CheckpointError::Io {
                op: "stat downloaded file",
                path: local.display().to_string(),
                source: e,
            })?
            .len();
        if got != file.size {
            return Err(CheckpointError::Corrupt(format!(
                "`{}` has {got} bytes, the checkpoint says {}",
                file.path, file.size
            )));
        }
    }
    Ok(())
}

/// One subtask's part of a completed checkpoint: what it restores from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SubtaskCheckpoint {
    /// It had finished (it restores as finished: ends its outputs only).
    pub finished: bool,
    /// Keyed state per operator vertex (index in the graph).
    pub states: Vec<(usize, StateHandle)>,
    /// A file with the event-time timers of its operators, if any.
    pub timers: Option<StoragePath>,
    /// The source's position.
    pub source: Option<serde_json::Value>,
    /// The sink's committable (committed on completion, and again on restore).
    pub sink: Option<serde_json::Value>,
}

impl SubtaskCheckpoint {
    /// The storage paths of every shared file its states reference.
    pub fn shared_paths(&self) -> impl Iterator<Item = &StoragePath> {
        self.states.iter().flat_map(|(_, h)| h.shared_paths())
    }

    /// The first storage path it names outside job `job`'s own folders for
    /// checkpoint `checkpoint`: shared files must lie under `<job>/shared`,
    /// private files and timers under `<job>/chk-<checkpoint>` (where
    /// TaskManagers upload them). The JobManager refuses an ack that names
    /// another path: it would register, restore from and later delete what
    /// the path names, which may be another job's.
    pub fn foreign_path(&self, job: &str, checkpoint: u64) -> Option<&StoragePath> {
        let (Ok(shared), Ok(private)) = (
            StoragePath::new(format!("{job}/shared")),
            StoragePath::new(format!("{job}/chk-{checkpoint}")),
        ) else {
            // No path can lie under a folder that cannot be named.
            return self
                .states
                .iter()
                .flat_map(|(_, h)| h.files.iter().map(|f| &f.path))
                .chain(&self.timers)
                .next();
        };
        let files = self.states.iter().flat_map(|(_, h)| &h.files);
        files
            .filter_map(|f| {
                let folder = if f.shared { &shared } else { &private };
                (!f.path.starts_with(folder) || f.path == *folder).then_some(&f.path)
            })
            .chain(
                self.timers
                    .iter()
                    .filter(|t| !t.starts_with(&private) || **t == private),
            )
            .next()
    }
}
