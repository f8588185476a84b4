//! A savepoint directory: everything a job needs to resume, in a folder the
//! user owns, independent of the state backend and of where it was made.
//!
//! ```text
//! DIR/_savepoint                 metadata (below), written last
//! DIR/<operator>/<subtask>.state canonical keyed state (`super` file format)
//! DIR/<operator>/<subtask>.timers its event-time timers, JSON
//! ```
//!
//! `_savepoint` is one line `weir-savepoint <version> sha256:<hex>` and then
//! the JSON of [`SavepointMetadata`]; the hash covers the JSON. The
//! metadata names every file by a path relative to the directory, with its
//! size and checksum, so the directory can be moved or copied anywhere and
//! restored from there; a reader refuses a path that would leave it.
//!
//! A savepoint is made from a completed checkpoint ([`materialize`]): each
//! subtask's keyed state is opened from the checkpoint's files on the
//! backend that wrote them and exported in the canonical form; source
//! positions and sink committables are copied. A restore
//! ([`restore_subtask`]) builds a local snapshot of the new subtask's
//! backend from every state file overlapping its key groups, which the
//! ordinary restore path then opens: the same savepoint restores on either
//! backend, at any parallelism of a keyed operator.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use weir_job::{JobGraph, TaskSpec};
use weir_state::{
    BackendConfig, BackendKind, KeyGroupRange, StateDescriptor, key_group_of,
    key_group_range_for_subtask, open_backend, restore_backend,
};

use super::{SavedState, SavepointError, SavepointFile, SavepointHeader};
use crate::checkpoint::snapshot::{SubtaskCheckpoint, download, get_checked, sha256_hex};
// A vertex uid as a folder name: a name never leaves the directory.
use crate::checkpoint::storage::CheckpointStorage;
use crate::local::sanitize;

/// A checkpoint's timers file: per operator vertex, (time, key) in firing order.
type VertexTimers = Vec<(usize, Vec<(i64, Vec<u8>)>)>;

/// The metadata file's name in a savepoint directory.
pub const METADATA_FILE: &str = "_savepoint";

/// The directory format this build writes, and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;

/// Largest `_savepoint` a reader accepts.
const MAX_METADATA_BYTES: u64 = 64 << 20;

/// What `_savepoint` records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavepointMetadata {
    /// The directory format version.
    pub format: u32,
    /// The job it was taken from.
    pub job_id: String,
    /// That job's name.
    pub job_name: String,
    /// The checkpoint it was made from.
    pub checkpoint: u64,
    /// When it was made, Unix ms.
    pub created_at_ms: u64,
    /// Key groups of the job.
    pub max_parallelism: u16,
    /// Every vertex of the job, in graph order.
    pub vertices: Vec<SavedVertex>,
}

impl SavepointMetadata {
    /// Every file the savepoint names: state files and timers files.
    pub fn files(&self) -> impl Iterator<Item = &SavedFile> {
        self.vertices
            .iter()
            .flat_map(|v| &v.subtasks)
            .flat_map(|s| s.state.iter().map(|f| &f.file).chain(&s.timers))
    }
}

/// One vertex of a savepoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedVertex {
    /// Its uid.
    pub uid: String,
    /// `source`, `operator` or `sink`.
    pub role: String,
    /// Its parallelism when saved.
    pub parallelism: u32,
    /// An operator's module (`sha256:…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// A keyed operator's declared states.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub states: Vec<SavedState>,
    /// Per subtask, in order.
    pub subtasks: Vec<SavedSubtask>,
}

/// One subtask of a [`SavedVertex`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SavedSubtask {
    /// It had finished.
    #[serde(default)]
    pub finished: bool,
    /// Its keyed state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<SavedStateFile>,
    /// Its event-time timers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timers: Option<SavedFile>,
    /// A source's position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<serde_json::Value>,
    /// A sink's committable (committed again on restore).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink: Option<serde_json::Value>,
}

/// A file of the savepoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedFile {
    /// Relative to the savepoint directory.
    pub path: String,
    /// Bytes.
    pub size: u64,
    /// SHA-256, lowercase hex (for a state file: the one at its end).
    pub sha256: String,
}

/// A keyed state file of the savepoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedStateFile {
    /// The file.
    #[serde(flatten)]
    pub file: SavedFile,
    /// The key groups it holds, `[start, end)`.
    pub key_groups: (u16, u16),
    /// Entries per state (in [`SavedVertex::states`] order).
    pub entries: Vec<u64>,
    /// Key and value bytes per state.
    pub bytes: Vec<u64>,
}

/// A completed checkpoint and what is needed to read it.
pub struct CheckpointSource<'a> {
    /// The job's id and name.
    pub job_id: &'a str,
    /// The job's name.
    pub job_name: &'a str,
    /// The checkpoint's id.
    pub checkpoint: u64,
    /// The job's graph and its chained tasks (what `parts` index).
    pub graph: &'a JobGraph,
    /// The chained tasks.
    pub tasks: &'a [TaskSpec],
    /// Every subtask's part, by (task, subtask).
    pub parts: &'a [((u32, u32), SubtaskCheckpoint)],
    /// The declared states of every keyed operator vertex.
    pub states: &'a HashMap<usize, Vec<StateDescriptor>>,
    /// Where the checkpoint's files are.
    pub storage: &'a dyn CheckpointStorage,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> SavepointError + '_ {
    move |source| SavepointError::Io {
        path: path.to_path_buf(),
        cause: source,
    }
}

fn bad(path: &Path, message: impl Into<String>) -> SavepointError {
    SavepointError::Format {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// Writes a savepoint of checkpoint `src` into `out`, which must not exist
/// or be empty; `progress(bytes written so far)` is called after each file.
/// `_savepoint` is written last: a directory without it is not a savepoint.
pub fn materialize(
    src: &CheckpointSource<'_>,
    out: &Path,
    progress: &mut dyn FnMut(u64),
) -> Result<SavepointMetadata, SavepointError> {
    if std::fs::read_dir(out).is_ok_and(|mut d| d.next().is_some()) {
        return Err(bad(
            out,
            "the directory is not empty (a savepoint never overwrites)",
        ));
    }
    std::fs::create_dir_all(out).map_err(io(out))?;
    let work = out.join(".work");
    let result = materialize_into(src, out, &work, progress);
    let _ = std::fs::remove_dir_all(&work);
    result
}

fn materialize_into(
    src: &CheckpointSource<'_>,
    out: &Path,
    work: &Path,
    progress: &mut dyn FnMut(u64),
) -> Result<SavepointMetadata, SavepointError> {
    let max_parallelism = src.graph.settings.max_parallelism as u16;
    let mut vertices: Vec<SavedVertex> = src
        .graph
        .vertices
        .iter()
        .enumerate()
        .map(|(v, vertex)| SavedVertex {
            uid: vertex.id.0.clone(),
            role: vertex.kind.role().to_owned(),
            parallelism: vertex.parallelism,
            module: vertex.kind.module_spec().map(|op| op.module.to_string()),
            states: src
                .states
                .get(&v)
                .map(|s| s.iter().map(SavedState::of).collect())
                .unwrap_or_default(),
            subtasks: vec![SavedSubtask::default(); vertex.parallelism as usize],
        })
        .collect();
    // Subtasks are written in parallel, one thread per core at most: each
    // is a download, a database open and an export of its own.
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(src.parts.len())
        .max(1);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (tx, rx) = std::sync::mpsc::channel::<u64>();
    let results: Vec<Result<Vec<Saved>, SavepointError>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let tx = tx.clone();
                let next = &next;
                scope.spawn(move || {
                    let mut saved = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(((t, s), part)) = src.parts.get(i) else {
                            return Ok(saved);
                        };
                        saved.extend(save_part(
                            src,
                            out,
                            work,
                            max_parallelism,
                            *t,
                            *s,
                            part,
                            &tx,
                        )?);
                    }
                })
            })
            .collect();
        drop(tx);
        let mut written = 0u64;
        for bytes in rx {
            written += bytes;
            progress(written);
        }
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(bad(out, "a savepoint writer thread panicked")))
            })
            .collect()
    });
    for result in results {
        for (v, index, subtask) in result? {
            vertices[v].subtasks[index] = subtask;
        }
    }
    let metadata = SavepointMetadata {
        format: FORMAT_VERSION,
        job_id: src.job_id.to_owned(),
        job_name: src.job_name.to_owned(),
        checkpoint: src.checkpoint,
        created_at_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        max_parallelism,
        vertices: std::mem::take(&mut vertices),
    };
    let body = serde_json::to_vec_pretty(&metadata).map_err(|e| bad(out, e.to_string()))?;
    let mut file = format!(
        "weir-savepoint {FORMAT_VERSION} sha256:{}\n",
        sha256_hex(&body)
    )
    .into_bytes();
    file.extend_from_slice(&body);
    // Written under a temporary name and renamed: `_savepoint` is whole or absent.
    let tmp = out.join(".savepoint.tmp");
    write_new(&tmp, &file)?;
    std::fs::rename(&tmp, out.join(METADATA_FILE)).map_err(io(out))?;
    Ok(metadata)
}

/// What one subtask of a checkpoint puts into a savepoint: per vertex of
/// its task, (vertex, subtask index, what it saved).
type Saved = (usize, usize, SavedSubtask);

/// Writes the files of one subtask's part (`t`, `s`) of a checkpoint and
/// returns what each vertex of its task saved; sends the bytes of each
/// file written on `written`.
#[allow(clippy::too_many_arguments)]
fn save_part(
    src: &CheckpointSource<'_>,
    out: &Path,
    work: &Path,
    max_parallelism: u16,
    t: u32,
    s: u32,
    part: &SubtaskCheckpoint,
    written: &std::sync::mpsc::Sender<u64>,
) -> Result<Vec<Saved>, SavepointError> {
    let mut result = Vec::new();
    let task = src.tasks.get(t as usize).ok_or_else(|| {
        bad(
            out,
            format!(
                "checkpoint part of task {t}, the job has {}",
                src.tasks.len()
            ),
        )
    })?;
    let index = s as usize;
    let timers: VertexTimers = match &part.timers {
        Some(path) => {
            let bytes = get_checked(src.storage, path, part.timers_sha256.as_deref())
                .map_err(|e| bad(out, format!("checkpoint timers {path}: {e}")))?;
            serde_json::from_slice(&bytes)
                .map_err(|e| bad(out, format!("checkpoint timers {path}: {e}")))?
        }
        None => Vec::new(),
    };
    for &v in &task.vertices {
        let uid = &src.graph.vertices[v].id.0;
        if index >= src.graph.vertices[v].parallelism as usize {
            return Err(bad(
                out,
                format!("checkpoint part of subtask {s} of `{uid}`"),
            ));
        }
        let mut saved = SavedSubtask {
            finished: part.finished,
            ..SavedSubtask::default()
        };
        if v == task.head() {
            saved.source = part.source.clone();
        }
        if v == task.tail() {
            saved.sink = part.sink.clone();
        }
        if let Some((_, list)) = timers.iter().find(|(tv, _)| *tv == v) {
            let rel = format!("{}/{s}.timers", sanitize(uid));
            let bytes = serde_json::to_vec(list).map_err(|e| bad(out, e.to_string()))?;
            write_new(&out.join(&rel), &bytes)?;
            let _ = written.send(bytes.len() as u64);
            saved.timers = Some(SavedFile {
                path: rel,
                size: bytes.len() as u64,
                sha256: sha256_hex(&bytes),
            });
        }
        let Some((_, handle)) = part.states.iter().find(|(sv, _)| *sv == v) else {
            result.push((v, index, saved));
            continue;
        };
        let states = src.states.get(&v).ok_or_else(|| {
            bad(
                out,
                format!("operator `{uid}`: its declared states are unknown"),
            )
        })?;
        let range =
            key_group_range_for_subtask(max_parallelism, src.graph.vertices[v].parallelism, s);
        let downloaded = work.join(format!("{v}-{s}-download"));
        download(handle, src.storage, &downloaded)
            .map_err(|e| bad(out, format!("operator `{uid}` subtask {s}: {e}")))?;
        let db = work.join(format!("{v}-{s}-db"));
        let config = BackendConfig {
            kind: handle.backend,
            dir: &db,
            states,
            key_groups: range,
            max_parallelism,
        };
        let mut backend =
            restore_backend(config, &downloaded).map_err(|source| SavepointError::State {
                path: downloaded.clone(),
                cause: source,
            })?;
        let rel = format!("{}/{s}.state", sanitize(uid));
        let path = out.join(&rel);
        std::fs::create_dir_all(path.parent().expect("has a parent")).map_err(io(out))?;
        let header = SavepointHeader {
            operator: uid.clone(),
            max_parallelism,
            key_groups: range,
            states: states.iter().map(SavedState::of).collect(),
        };
        let summary = super::write(&path, &header, backend.as_mut())?;
        drop(backend);
        let _ = std::fs::remove_dir_all(&db);
        let _ = std::fs::remove_dir_all(&downloaded);
        let _ = written.send(summary.file_bytes);
        saved.state = Some(SavedStateFile {
            file: SavedFile {
                path: rel,
                size: summary.file_bytes,
                sha256: summary.digest,
            },
            key_groups: (range.start, range.end),
            entries: summary.entries,
            bytes: summary.bytes,
        });
        result.push((v, index, saved));
    }
    Ok(result)
}

/// Creates `path` (and its folder) with `bytes`, synced; refuses an
/// existing file.
fn write_new(path: &Path, bytes: &[u8]) -> Result<(), SavepointError> {
    use std::io::Write as _;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io(path))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io(path))?;
    f.write_all(bytes).map_err(io(path))?;
    f.sync_all().map_err(io(path))
}

/// Reads and checks `dir/_savepoint`: its header line, version and hash.
pub fn read_metadata(dir: &Path) -> Result<SavepointMetadata, SavepointError> {
    let path = dir.join(METADATA_FILE);
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(bad(dir, "not a directory: a savepoint is a directory")),
        Err(source) => {
            return Err(SavepointError::Io {
                path: dir.to_path_buf(),
                cause: source,
            });
        }
    }
    let len = std::fs::metadata(&path).map_err(io(&path))?.len();
    if len > MAX_METADATA_BYTES {
        return Err(bad(
            &path,
            format!("{len} bytes: too large to be savepoint metadata"),
        ));
    }
    let bytes = std::fs::read(&path).map_err(io(&path))?;
    let newline = bytes
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| bad(&path, "not savepoint metadata (no header line)"))?;
    let header = std::str::from_utf8(&bytes[..newline])
        .map_err(|_| bad(&path, "not savepoint metadata (header is not text)"))?;
    let mut words = header.split(' ');
    if words.next() != Some("weir-savepoint") {
        return Err(bad(
            &path,
            "not savepoint metadata (no `weir-savepoint` header)",
        ));
    }
    let version: u32 = words
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| bad(&path, "savepoint metadata without a format version"))?;
    if version > FORMAT_VERSION {
        return Err(bad(
            &path,
            format!(
                "savepoint format version {version} is newer than this weir reads \
                 ({FORMAT_VERSION}); restore it with a newer weir"
            ),
        ));
    }
    let want = words
        .next()
        .and_then(|w| w.strip_prefix("sha256:"))
        .ok_or_else(|| bad(&path, "savepoint metadata without a checksum"))?;
    let body = &bytes[newline + 1..];
    if sha256_hex(body) != want {
        return Err(bad(&path, "checksum mismatch: the metadata is corrupt"));
    }
    let metadata: SavepointMetadata =
        serde_json::from_slice(body).map_err(|e| bad(&path, format!("unreadable: {e}")))?;
    for file in metadata.files() {
        relative(dir, &file.path)?;
    }
    Ok(metadata)
}

/// `rel` inside `dir`; an absolute path or one with `..` is refused.
fn relative(dir: &Path, rel: &str) -> Result<PathBuf, SavepointError> {
    let ok = !rel.is_empty()
        && Path::new(rel)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
    if !ok {
        return Err(bad(
            &dir.join(METADATA_FILE),
            format!("names the file `{rel}`, outside the savepoint directory"),
        ));
    }
    Ok(dir.join(rel))
}

/// Checks every file `metadata` names: present, of its size and checksum.
/// Reads every byte; nothing is changed.
pub fn verify(dir: &Path, metadata: &SavepointMetadata) -> Result<(), SavepointError> {
    for vertex in &metadata.vertices {
        for sub in &vertex.subtasks {
            if let Some(state) = &sub.state {
                let path = checked_size(dir, &state.file)?;
                let summary = SavepointFile::new(&path).verify()?;
                if summary.digest != state.file.sha256 {
                    return Err(bad(&path, "not the file the savepoint recorded (checksum)"));
                }
            }
            if let Some(timers) = &sub.timers {
                read_checked(dir, timers)?;
            }
        }
    }
    Ok(())
}

/// The bytes of a small file of the savepoint (timers), checked against
/// its recorded size and SHA-256; with its path.
fn read_checked(dir: &Path, file: &SavedFile) -> Result<(PathBuf, Vec<u8>), SavepointError> {
    let path = checked_size(dir, file)?;
    let bytes = std::fs::read(&path).map_err(io(&path))?;
    if sha256_hex(&bytes) != file.sha256 {
        return Err(bad(&path, "checksum mismatch: the file is corrupt"));
    }
    Ok((path, bytes))
}

fn checked_size(dir: &Path, file: &SavedFile) -> Result<PathBuf, SavepointError> {
    let path = relative(dir, &file.path)?;
    let size = std::fs::metadata(&path).map_err(io(&path))?.len();
    if size != file.size {
        return Err(bad(
            &path,
            format!("{size} bytes, the savepoint recorded {}", file.size),
        ));
    }
    Ok(path)
}

/// What one new subtask takes from a savepoint.
#[derive(Debug, Default)]
pub struct SubtaskFromSavepoint {
    /// A local snapshot of its keyed state, for the ordinary restore.
    pub state_dir: Option<PathBuf>,
    /// Its event-time timers (those of its key groups), in firing order.
    pub timers: Vec<(i64, Vec<u8>)>,
}

/// Builds what subtask `subtask` of operator `vertex` (`parallelism`
/// subtasks, keyed state on `kind` with `states`) restores: a local
/// snapshot in `work/...` made from every state file overlapping its key
/// groups, and its timers. A saved state the operator no longer declares
/// is skipped (the caller checked that this is allowed). With `migration`,
/// the values of the states it names are rewritten on the way in.
#[allow(clippy::too_many_arguments)]
pub fn restore_subtask(
    dir: &Path,
    metadata: &SavepointMetadata,
    vertex: &SavedVertex,
    subtask: u32,
    parallelism: u32,
    states: &[StateDescriptor],
    kind: BackendKind,
    work: &Path,
    mut migration: Option<&mut super::Migration<'_>>,
) -> Result<SubtaskFromSavepoint, SavepointError> {
    let max = metadata.max_parallelism;
    let range = key_group_range_for_subtask(max, parallelism, subtask);
    let overlaps = |(start, end): (u16, u16)| start < range.end && range.start < end;
    let mut out = SubtaskFromSavepoint::default();
    let files: Vec<&SavedStateFile> = vertex
        .subtasks
        .iter()
        .filter_map(|s| s.state.as_ref())
        .filter(|f| overlaps(f.key_groups))
        .collect();
    if !files.is_empty() && !states.is_empty() {
        let db = work.join(format!("{}-{subtask}-import", sanitize(&vertex.uid)));
        let _ = std::fs::remove_dir_all(&db);
        let config = BackendConfig {
            kind,
            dir: &db,
            states,
            key_groups: range,
            max_parallelism: max,
        };
        let mut backend = open_backend(config).map_err(|source| SavepointError::State {
            path: db.clone(),
            cause: source,
        })?;
        for file in files {
            let path = relative(dir, &file.file.path)?;
            let summary = SavepointFile::new(&path).import_into(
                backend.as_mut(),
                states,
                range,
                migration.as_deref_mut(),
            )?;
            if summary.digest != file.file.sha256 {
                return Err(bad(&path, "not the file the savepoint recorded (checksum)"));
            }
        }
        let snapshot = work.join(format!("{}-{subtask}-snapshot", sanitize(&vertex.uid)));
        backend
            .snapshot_local(&snapshot)
            .map_err(|source| SavepointError::State {
                path: snapshot.clone(),
                cause: source,
            })?;
        drop(backend);
        let _ = std::fs::remove_dir_all(&db);
        out.state_dir = Some(snapshot);
    }
    for sub in &vertex.subtasks {
        let Some(file) = &sub.timers else { continue };
        let (path, bytes) = read_checked(dir, file)?;
        let timers: Vec<(i64, Vec<u8>)> =
            serde_json::from_slice(&bytes).map_err(|e| bad(&path, e.to_string()))?;
        out.timers.extend(
            timers
                .into_iter()
                .filter(|(_, key)| range.contains(key_group_of(key, max))),
        );
    }
    out.timers
        .sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
    Ok(out)
}

/// The key groups of a savepoint's state file, as a range.
pub fn key_groups(file: &SavedStateFile) -> KeyGroupRange {
    KeyGroupRange {
        start: file.key_groups.0,
        end: file.key_groups.1,
    }
}

#[cfg(test)]
mod tests;
