//! One operator subtask's keyed state in a checkpoint: uploading a local
//! snapshot, and downloading it again for a restore; and a completed
//! checkpoint's metadata, read back and checked at a restore.
//!
//! Owns [`StateHandle`] and [`FileHandle`] (what a task acks to the
//! coordinator and what the checkpoint's metadata records), [`upload`] and
//! [`download`], [`SubtaskCheckpoint`] (one subtask's whole part of a
//! checkpoint) and [`CheckpointMetadata`] (the `_metadata` file: every
//! subtask's part) with [`verify_restore`].
//!
//! # Integrity
//! * [`upload`] hashes every file it stores (SHA-256, streamed on its way
//!   to storage: the hash is of exactly the bytes stored) and records the
//!   hash in its [`FileHandle`]; a shared file referenced from `previous`
//!   keeps the hash recorded when it was uploaded.
//! * [`download`] checks every file's size and, when its handle has one,
//!   its hash; a mismatch is [`CheckpointError::Corrupt`] naming the file's
//!   storage path. Handles written before files were hashed (no `sha256`)
//!   still download, checked by size only.
//! * A subtask's timers file is small and written whole: its hash is
//!   [`SubtaskCheckpoint::timers_sha256`], checked by [`get_checked`].
//! * [`verify_restore`] checks a checkpoint's `_metadata` against the
//!   parts a restore was sent: the metadata must be readable, name the
//!   same job and checkpoint, and record exactly the same part for every
//!   subtask restored. A TaskManager refuses the restore otherwise (and the
//!   JobManager falls back to an older retained checkpoint).
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

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::io::{self, Read};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

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
    /// SHA-256 of its contents, lowercase hex, computed by [`upload`] while
    /// it stored the file; [`download`] refuses a file that does not match.
    /// `None` in handles written before files were hashed: those are
    /// checked by size only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// Read buffer of [`hash_file`]: large enough that hashing a downloaded
/// SST file (megabytes) takes few system calls, small enough to sit on
/// the heap of every concurrent download without notice.
const HASH_BUFFER: usize = 64 << 10;

/// A reader that hashes (SHA-256) what passes through it.
struct Hashing<R> {
    inner: R,
    hasher: Sha256,
}

impl<R> Hashing<R> {
    fn new(inner: R) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
        }
    }

    /// The hash of everything read so far, lowercase hex.
    fn finish(self) -> String {
        hex(&self.hasher.finalize())
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// SHA-256 of `bytes`, lowercase hex: how [`FileHandle::sha256`] and
/// [`SubtaskCheckpoint::timers_sha256`] are written.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// The contents of the small file at `path` in `storage` (a timers file),
/// checked against `sha256` when there is one: a mismatch is
/// [`CheckpointError::Corrupt`] naming `path`.
pub fn get_checked(
    storage: &dyn CheckpointStorage,
    path: &StoragePath,
    sha256: Option<&str>,
) -> Result<Vec<u8>, CheckpointError> {
    let bytes = storage.get_bytes(path)?;
    if let Some(want) = sha256 {
        let got = sha256_hex(&bytes);
        if got != want {
            return Err(CheckpointError::Corrupt(format!(
                "`{path}` has SHA-256 {got}, the checkpoint says {want}"
            )));
        }
    }
    Ok(bytes)
}

/// The size and SHA-256 (lowercase hex) of the local file `path`, read in
/// [`HASH_BUFFER`] pieces (never whole into memory).
fn hash_file(path: &Path) -> io::Result<(u64, String)> {
    let mut file = Hashing::new(fs::File::open(path)?);
    let mut buf = vec![0u8; HASH_BUFFER];
    let mut size = 0u64;
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Ok((size, file.finish())),
            Ok(n) => size += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
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
/// local name and size, which is then referenced instead (with the hash it
/// recorded); other files go to `<private_prefix>/<name>`. Every file
/// stored is hashed on its way to storage, in the same read.
/// `incremental_size` is the bytes this call uploaded, `full_size` the
/// bytes of all files the handle references.
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
                let src = fs::File::open(local_dir.join(&name))
                    .map_err(|e| io("open snapshot file in", e))?;
                let mut src = Hashing::new(src);
                let written = storage.put_reader(&path, &mut src)?;
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
                    sha256: Some(src.finish()),
                }
            }
        };
        handle.full_size += file.size;
        handle.files.push(file);
    }
    Ok(handle)
}

/// Downloads every file of `handle` into `dir` (created if missing;
/// expected empty) under its local name, so that
/// [`crate::state::restore_backend`] can open it. Each file's size and (if
/// its handle has one) SHA-256 are checked on what landed in `dir`, read
/// back in pieces; a mismatch is [`CheckpointError::Corrupt`] naming its
/// storage path.
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
        let (got, sha256) = hash_file(&local).map_err(|e| CheckpointError::Io {
            op: "hash downloaded file",
            path: local.display().to_string(),
            source: e,
        })?;
        if got != file.size {
            return Err(CheckpointError::Corrupt(format!(
                "`{}` has {got} bytes, the checkpoint says {}",
                file.path, file.size
            )));
        }
        if let Some(want) = &file.sha256
            && *want != sha256
        {
            return Err(CheckpointError::Corrupt(format!(
                "`{}` has SHA-256 {sha256}, the checkpoint says {want}",
                file.path
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
    /// SHA-256 of the timers file, lowercase hex; a restore refuses a
    /// timers file that does not match ([`get_checked`]). `None` when there
    /// is no timers file, and in parts written before timers files were
    /// hashed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timers_sha256: Option<String>,
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
            super::layout::shared_dir(job),
            super::layout::checkpoint_dir(job, checkpoint),
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

pub use super::layout::{METADATA_FILE, metadata_path};

/// A completed checkpoint's `_metadata` (JSON): written by the JobManager
/// once every subtask acked, read back by every TaskManager that restores
/// from it ([`verify_restore`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMetadata {
    /// The job's id.
    pub job: String,
    /// The checkpoint's id.
    pub checkpoint: u64,
    /// Wall-clock trigger time, Unix ms.
    pub triggered_at_ms: u64,
    /// Wall-clock completion time (the last ack), Unix ms.
    pub completed_at_ms: u64,
    /// Every subtask's part, by (task, subtask).
    pub subtasks: Vec<((u32, u32), SubtaskCheckpoint)>,
    /// What the parts belong to, so that another job can start from this
    /// checkpoint (`--from-checkpoint`). Absent in metadata written before
    /// it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<JobLayout>,
}

/// A job's graph, its chained tasks (what the `(task, subtask)` of a
/// checkpoint's parts index) and the states its keyed operators declare.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobLayout {
    /// The job's graph.
    pub graph: crate::job::JobGraph,
    /// Its tasks after chaining.
    pub tasks: Vec<crate::job::TaskSpec>,
    /// Per keyed operator vertex, its declared states.
    pub states: Vec<(usize, Vec<super::savepoint::SavedState>)>,
}

/// Checks the metadata `bytes` read from `path` against what a restore of
/// checkpoint `checkpoint` of job `job` was sent: `parts`, the parts of the
/// subtasks being restored, by (task, subtask). Pure: the caller reads the
/// file.
///
/// The metadata must parse, name this job and checkpoint, record each
/// subtask at most once, and record for every subtask of `parts` exactly
/// the part sent. Both sides are compared as JSON reads them back (an
/// in-process TaskManager's part was never serialized, and JSON writes a
/// `null` position as nothing). Anything else is
/// [`CheckpointError::Corrupt`] naming `path`.
pub fn verify_restore(
    path: &StoragePath,
    bytes: &[u8],
    job: &str,
    checkpoint: u64,
    parts: &[((u32, u32), &SubtaskCheckpoint)],
) -> Result<(), CheckpointError> {
    let corrupt = |why: String| CheckpointError::Corrupt(format!("`{path}`: {why}"));
    let metadata: CheckpointMetadata =
        serde_json::from_slice(bytes).map_err(|e| corrupt(format!("unreadable ({e})")))?;
    if metadata.job != job || metadata.checkpoint != checkpoint {
        return Err(corrupt(format!(
            "it is the metadata of checkpoint {} of job `{}`, not of checkpoint {checkpoint} \
             of job `{job}`",
            metadata.checkpoint, metadata.job
        )));
    }
    let mut recorded = BTreeMap::new();
    for (id, part) in &metadata.subtasks {
        if recorded.insert(*id, part).is_some() {
            return Err(corrupt(format!(
                "it records subtask {}/{} twice",
                id.0, id.1
            )));
        }
    }
    for ((task, subtask), sent) in parts {
        let Some(recorded) = recorded.get(&(*task, *subtask)) else {
            return Err(corrupt(format!(
                "it records no part for subtask {task}/{subtask}"
            )));
        };
        let sent: SubtaskCheckpoint = serde_json::to_vec(sent)
            .and_then(|b| serde_json::from_slice(&b))
            .map_err(|e| corrupt(format!("the part sent for subtask {task}/{subtask}: {e}")))?;
        if let Some(field) = first_difference(&sent, recorded) {
            return Err(corrupt(format!(
                "its part for subtask {task}/{subtask} differs from the one to restore \
                 (in `{field}`)"
            )));
        }
    }
    Ok(())
}

/// The first field in which `a` and `b` differ, if any (`part` if they
/// differ in none of those named: a field added later).
fn first_difference(a: &SubtaskCheckpoint, b: &SubtaskCheckpoint) -> Option<&'static str> {
    if a == b {
        None
    } else if a.finished != b.finished {
        Some("finished")
    } else if a.states != b.states {
        Some("states")
    } else if a.timers != b.timers || a.timers_sha256 != b.timers_sha256 {
        Some("timers")
    } else if a.source != b.source {
        Some("source")
    } else if a.sink != b.sink {
        Some("sink")
    } else {
        Some("part")
    }
}

#[cfg(test)]
mod tests;
