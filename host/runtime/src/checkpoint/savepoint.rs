//! The canonical savepoint state file: one subtask's keyed state in a form
//! independent of the state backend and of RocksDB's version, so a
//! savepoint restores on either backend and at another parallelism.
//!
//! A file holds the entries [`KeyedStateBackend::export`] gives (state,
//! stored key, stored value: the layout both backends share, see
//! `weir_state::layout`), under a header naming the operator, its declared
//! states and the key groups the subtask owned. States are addressed by
//! name in the header, so a restore maps them onto the new operator's
//! declared states by name, whatever their order. Every stored key starts
//! with its key group, so a restore at another parallelism takes the
//! entries of its own key groups from every file that overlaps them
//! ([`SavepointFile::import_into`]).
//!
//! # Format (version 1)
//!
//! Little-endian integers; `bytes` is `[len: u32][bytes]`.
//!
//! ```text
//! "WEIRSVPT" version:u32
//! operator:bytes max_parallelism:u16 key_groups.start:u16 key_groups.end:u16
//! states:u32, per state: name:bytes kind:u8 (0 value, 1 list, 2 map) ttl_ms:u64 (0: none)
//! per entry: 1:u8 state:u32 key:bytes value:bytes
//! 0:u8 entries:u64 sha256:32 (of every byte before it)
//! ```
//!
//! A reader refuses, with a message naming the file and what is wrong: a
//! file that is not a savepoint state file, a newer version, a truncated
//! file, a checksum that does not match, an entry naming a state the
//! header does not declare. The checksum is checked at the end of a read:
//! [`SavepointFile::verify`] reads a file through once without importing,
//! so a restore can check every file before it starts anything.

use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::snapshot::hex;
use weir_state::layout::decode_key;
use weir_state::{KeyGroupRange, KeyedStateBackend, StateDescriptor, StateError, StateKind};

const MAGIC: &[u8; 8] = b"WEIRSVPT";

/// The version this build writes, and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;

/// Tags before each entry and before the footer.
const ENTRY: u8 = 1;
const END: u8 = 0;

/// Largest key or value a reader accepts (a corrupt length must not make
/// it allocate gigabytes).
const MAX_FIELD_BYTES: u32 = 256 << 20;

/// Why a savepoint (a directory, or one of its files) cannot be written
/// or read. Each names the path and says what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum SavepointError {
    /// Reading or writing failed.
    #[error("savepoint {path}: {cause}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What failed.
        cause: std::io::Error,
    },
    /// Not a savepoint (or a file of one) of a version this build reads,
    /// or corrupt.
    #[error("savepoint {path}: {message}")]
    Format {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong, for a human.
        message: String,
    },
    /// The new module's `migrate-state` refused or failed on an entry (the
    /// message names the operator, the state and the key).
    #[error("{0}")]
    Migration(String),
    /// The state backend refused an entry, or failed exporting.
    #[error("savepoint {path}: {cause}")]
    State {
        /// The file or directory.
        path: PathBuf,
        /// What the backend said.
        cause: StateError,
    },
}

/// How a restore rewrites the state values of an operator whose new module
/// migrates them (a job upgraded with `weir upgrade`).
pub struct Migration<'m> {
    /// By the new operator's state id: whether that state is migrated.
    pub states: Vec<bool>,
    /// Called with (the new operator's state id, the key, one value — or
    /// list element, or map value — as the old module wrote it, without
    /// any TTL prefix); returns its new bytes, or why not (a message naming
    /// the operator, the state and the key).
    pub migrate: Box<MigrateValue<'m>>,
}

/// See [`Migration::migrate`].
pub type MigrateValue<'m> = dyn FnMut(u32, &[u8], &[u8]) -> Result<Vec<u8>, String> + 'm;

impl std::fmt::Debug for Migration<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Migration")
            .field("states", &self.states)
            .finish_non_exhaustive()
    }
}

/// Why one stored value could not be migrated: the new module refused it,
/// or it is malformed.
enum MigrateFailed {
    Refused(String),
    Stored(StateError),
}

impl From<StateError> for MigrateFailed {
    fn from(e: StateError) -> Self {
        MigrateFailed::Stored(e)
    }
}

/// One declared state as a savepoint records it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SavedState {
    /// The declared name (how a restore finds it).
    pub name: String,
    /// Value, list or map.
    pub kind: StateKind,
    /// The TTL in milliseconds, if it had one.
    pub ttl_ms: Option<u64>,
}

impl SavedState {
    /// The declared state it records.
    pub fn descriptor(&self) -> StateDescriptor {
        StateDescriptor {
            name: self.name.clone(),
            kind: self.kind,
            ttl: self.ttl_ms.map(std::time::Duration::from_millis),
        }
    }

    /// The record of a declared state.
    pub fn of(d: &StateDescriptor) -> SavedState {
        SavedState {
            name: d.name.clone(),
            kind: d.kind,
            ttl_ms: d.ttl.map(|t| (t.as_millis() as u64).max(1)),
        }
    }
}

/// The header of a savepoint state file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavepointHeader {
    /// The operator's uid.
    pub operator: String,
    /// Key groups in the job (`max_parallelism`).
    pub max_parallelism: u16,
    /// The key groups the subtask owned.
    pub key_groups: KeyGroupRange,
    /// Its declared states, by state id.
    pub states: Vec<SavedState>,
}

/// What a written or verified file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavepointSummary {
    /// Its header.
    pub header: SavepointHeader,
    /// Entries per state (by the header's state id).
    pub entries: Vec<u64>,
    /// Bytes of keys and values per state.
    pub bytes: Vec<u64>,
    /// The file's size.
    pub file_bytes: u64,
    /// The SHA-256 at its end (of everything before it), lowercase hex: a
    /// savepoint's `_savepoint` records it for every state file.
    pub digest: String,
}

/// Writes `backend`'s whole keyed state to `path` (created; an existing
/// file is an error: a savepoint never overwrites). The file is synced
/// before this returns.
pub fn write(
    path: &Path,
    header: &SavepointHeader,
    backend: &mut dyn KeyedStateBackend,
) -> Result<SavepointSummary, SavepointError> {
    let io = |source| SavepointError::Io {
        path: path.to_path_buf(),
        cause: source,
    };
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io)?;
    let mut w = HashingWriter {
        inner: BufWriter::with_capacity(1 << 20, file),
        hash: Sha256::new(),
        written: 0,
    };
    w.put(MAGIC).map_err(io)?;
    w.put(&FORMAT_VERSION.to_le_bytes()).map_err(io)?;
    w.bytes(header.operator.as_bytes()).map_err(io)?;
    w.put(&header.max_parallelism.to_le_bytes()).map_err(io)?;
    w.put(&header.key_groups.start.to_le_bytes()).map_err(io)?;
    w.put(&header.key_groups.end.to_le_bytes()).map_err(io)?;
    w.put(&(header.states.len() as u32).to_le_bytes())
        .map_err(io)?;
    for s in &header.states {
        w.bytes(s.name.as_bytes()).map_err(io)?;
        w.put(&[kind_tag(s.kind)]).map_err(io)?;
        w.put(&s.ttl_ms.unwrap_or(0).to_le_bytes()).map_err(io)?;
    }
    let mut entries = vec![0u64; header.states.len()];
    let mut bytes = vec![0u64; header.states.len()];
    let mut failed: Option<std::io::Error> = None;
    let exported = backend.export(&mut |state, key, value| {
        let i = state as usize;
        if i >= entries.len() {
            return Err(StateError::UnknownState(state));
        }
        let put = w
            .put(&[ENTRY])
            .and_then(|()| w.put(&state.to_le_bytes()))
            .and_then(|()| w.bytes(key))
            .and_then(|()| w.bytes(value));
        if let Err(e) = put {
            let message = e.to_string();
            failed = Some(e);
            return Err(StateError::Backend(message));
        }
        entries[i] += 1;
        bytes[i] += (key.len() + value.len()) as u64;
        Ok(())
    });
    if let Some(e) = failed {
        return Err(io(e));
    }
    exported.map_err(|source| SavepointError::State {
        path: path.to_path_buf(),
        cause: source,
    })?;
    w.put(&[END]).map_err(io)?;
    w.put(&entries.iter().sum::<u64>().to_le_bytes())
        .map_err(io)?;
    let digest = w.hash.clone().finalize();
    w.inner.write_all(&digest).map_err(io)?;
    let file = w.inner.into_inner().map_err(|e| io(e.into_error()))?;
    file.sync_all().map_err(io)?;
    Ok(SavepointSummary {
        header: header.clone(),
        entries,
        bytes,
        file_bytes: w.written + digest.len() as u64,
        digest: hex(&digest),
    })
}

/// A savepoint state file to read.
#[derive(Debug, Clone)]
pub struct SavepointFile {
    path: PathBuf,
}

impl SavepointFile {
    /// The file at `path` (nothing is read yet).
    pub fn new(path: impl Into<PathBuf>) -> SavepointFile {
        SavepointFile { path: path.into() }
    }

    /// Reads the header only (not checksummed on its own: [`Self::verify`]).
    pub fn header(&self) -> Result<SavepointHeader, SavepointError> {
        let mut r = self.open()?;
        r.header()
    }

    /// Reads the whole file and checks it (format, version, every entry's
    /// state, the entry count and the checksum) without importing anything.
    pub fn verify(&self) -> Result<SavepointSummary, SavepointError> {
        self.read(|_, _, _| Ok(()))
    }

    /// Imports the entries whose key group `backend` owns (`owned`) into
    /// it, each state by name: `states` are the new operator's declared
    /// states, by state id. A saved state the new operator does not declare
    /// is skipped (the caller decides whether that is allowed); one it
    /// declares with another kind is an error. A checksum mismatch at the
    /// end is an error too: the caller must then discard `backend`.
    pub fn import_into(
        &self,
        backend: &mut dyn KeyedStateBackend,
        states: &[StateDescriptor],
        owned: KeyGroupRange,
        mut migration: Option<&mut Migration<'_>>,
    ) -> Result<SavepointSummary, SavepointError> {
        let header = self.header()?;
        let mut map: Vec<Option<u32>> = Vec::with_capacity(header.states.len());
        for saved in &header.states {
            let target = states.iter().position(|d| d.name == saved.name);
            if let Some(t) = target
                && states[t].kind != saved.kind
            {
                return Err(self.format(format!(
                    "state `{}` of operator `{}` was saved as {:?} state, the operator now \
                     declares it as {:?} state",
                    saved.name, header.operator, saved.kind, states[t].kind
                )));
            }
            map.push(target.map(|t| t as u32));
        }
        let saved_ttl: Vec<bool> = header.states.iter().map(|s| s.ttl_ms.is_some()).collect();
        let path = self.path.clone();
        self.read(|state, key, value| {
            let Some(target) = map[state as usize] else {
                return Ok(());
            };
            let (kg, user_key, _) = decode_key(key).ok_or_else(|| SavepointError::Format {
                path: path.clone(),
                message: format!("malformed stored key of {} bytes", key.len()),
            })?;
            if !owned.contains(kg) {
                return Ok(());
            }
            let migrated;
            let value = match migration.as_deref_mut() {
                Some(m) if m.states.get(target as usize) == Some(&true) => {
                    let kind = states[target as usize].kind;
                    let f = &mut m.migrate;
                    let out = weir_state::layout::migrate_stored(
                        kind,
                        saved_ttl[state as usize],
                        value,
                        &mut |v: &[u8]| f(target, user_key, v).map_err(MigrateFailed::Refused),
                    );
                    migrated = match out {
                        Ok(bytes) => bytes,
                        Err(MigrateFailed::Refused(why)) => {
                            return Err(SavepointError::Migration(why));
                        }
                        Err(MigrateFailed::Stored(cause)) => {
                            return Err(SavepointError::State {
                                path: path.clone(),
                                cause,
                            });
                        }
                    };
                    &migrated[..]
                }
                _ => value,
            };
            backend
                .import(target, key, value)
                .map_err(|source| SavepointError::State {
                    path: path.clone(),
                    cause: source,
                })
        })
    }

    /// Calls `f(state, stored key, stored value)` for every entry, in file
    /// order, then checks the footer (`f`'s error stops the read).
    pub fn for_each_entry(
        &self,
        f: impl FnMut(u32, &[u8], &[u8]) -> Result<(), SavepointError>,
    ) -> Result<SavepointSummary, SavepointError> {
        self.read(f)
    }

    fn open(&self) -> Result<Reader<BufReader<std::fs::File>>, SavepointError> {
        let file = std::fs::File::open(&self.path).map_err(|source| SavepointError::Io {
            path: self.path.clone(),
            cause: source,
        })?;
        Ok(Reader {
            inner: BufReader::with_capacity(1 << 20, file),
            hash: Sha256::new(),
            read: 0,
            path: self.path.clone(),
        })
    }

    fn format(&self, message: String) -> SavepointError {
        SavepointError::Format {
            path: self.path.clone(),
            message,
        }
    }

    /// Reads every entry into `f(state, key, value)`, then checks the footer.
    fn read(
        &self,
        mut f: impl FnMut(u32, &[u8], &[u8]) -> Result<(), SavepointError>,
    ) -> Result<SavepointSummary, SavepointError> {
        let mut r = self.open()?;
        let header = r.header()?;
        let n = header.states.len();
        let (mut entries, mut bytes) = (vec![0u64; n], vec![0u64; n]);
        let (mut key, mut value) = (Vec::new(), Vec::new());
        loop {
            match r.u8()? {
                ENTRY => {}
                END => break,
                tag => {
                    return Err(r.bad(format!("unknown record tag {tag}: the file is corrupt")));
                }
            }
            let state = r.u32()?;
            if state as usize >= n {
                return Err(r.bad(format!(
                    "an entry names state {state}, the header declares {n}: the file is corrupt"
                )));
            }
            r.bytes_into(&mut key)?;
            r.bytes_into(&mut value)?;
            entries[state as usize] += 1;
            bytes[state as usize] += (key.len() + value.len()) as u64;
            f(state, &key, &value)?;
        }
        let count = r.u64()?;
        let expected = r.hash.clone().finalize();
        let mut digest = [0u8; 32];
        r.inner
            .read_exact(&mut digest)
            .map_err(|e| r.truncated(e))?;
        if digest[..] != expected[..] {
            return Err(r.bad("checksum mismatch: the file is corrupt".into()));
        }
        if count != entries.iter().sum::<u64>() {
            return Err(r.bad(format!(
                "the footer counts {count} entries, the file holds {}: the file is corrupt",
                entries.iter().sum::<u64>()
            )));
        }
        let mut rest = [0u8; 1];
        if r.inner.read(&mut rest).map_err(|e| r.io(e))? != 0 {
            return Err(r.bad("bytes after the checksum".into()));
        }
        Ok(SavepointSummary {
            header,
            entries,
            bytes,
            file_bytes: r.read + 32,
            digest: hex(&digest),
        })
    }
}

fn kind_tag(kind: StateKind) -> u8 {
    match kind {
        StateKind::Value => 0,
        StateKind::List => 1,
        StateKind::Map => 2,
    }
}

struct HashingWriter<W: Write> {
    inner: W,
    hash: Sha256,
    written: u64,
}

impl<W: Write> HashingWriter<W> {
    fn put(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.hash.update(b);
        self.written += b.len() as u64;
        self.inner.write_all(b)
    }

    fn bytes(&mut self, b: &[u8]) -> std::io::Result<()> {
        let len = u32::try_from(b.len()).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("a field of {} bytes is too long", b.len()),
            )
        })?;
        self.put(&len.to_le_bytes())?;
        self.put(b)
    }
}

struct Reader<R: Read> {
    inner: R,
    hash: Sha256,
    read: u64,
    path: PathBuf,
}

impl<R: Read> Reader<R> {
    fn io(&self, source: std::io::Error) -> SavepointError {
        SavepointError::Io {
            path: self.path.clone(),
            cause: source,
        }
    }

    fn bad(&self, message: String) -> SavepointError {
        SavepointError::Format {
            path: self.path.clone(),
            message,
        }
    }

    fn truncated(&self, e: std::io::Error) -> SavepointError {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            self.bad(format!(
                "truncated after {} bytes (or corrupt: a length points past the end)",
                self.read
            ))
        } else {
            self.io(e)
        }
    }

    fn exact(&mut self, buf: &mut [u8]) -> Result<(), SavepointError> {
        self.inner.read_exact(buf).map_err(|e| self.truncated(e))?;
        self.hash.update(&*buf);
        self.read += buf.len() as u64;
        Ok(())
    }

    fn u8(&mut self) -> Result<u8, SavepointError> {
        let mut b = [0; 1];
        self.exact(&mut b)?;
        Ok(b[0])
    }

    fn u16(&mut self) -> Result<u16, SavepointError> {
        let mut b = [0; 2];
        self.exact(&mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    fn u32(&mut self) -> Result<u32, SavepointError> {
        let mut b = [0; 4];
        self.exact(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self) -> Result<u64, SavepointError> {
        let mut b = [0; 8];
        self.exact(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    fn bytes_into(&mut self, out: &mut Vec<u8>) -> Result<(), SavepointError> {
        let len = self.u32()?;
        if len > MAX_FIELD_BYTES {
            return Err(self.bad(format!(
                "a field of {len} bytes (at most {MAX_FIELD_BYTES}): the file is corrupt"
            )));
        }
        out.resize(len as usize, 0);
        self.exact(out)
    }

    fn string(&mut self, what: &str) -> Result<String, SavepointError> {
        let mut b = Vec::new();
        self.bytes_into(&mut b)?;
        String::from_utf8(b).map_err(|_| self.bad(format!("{what} is not UTF-8")))
    }

    fn header(&mut self) -> Result<SavepointHeader, SavepointError> {
        let mut magic = [0u8; 8];
        self.exact(&mut magic)
            .map_err(|_| self.bad("not a savepoint state file (too short)".into()))?;
        if &magic != MAGIC {
            return Err(self.bad("not a savepoint state file (wrong magic bytes)".into()));
        }
        let version = self.u32()?;
        if version > FORMAT_VERSION {
            return Err(self.bad(format!(
                "format version {version} is newer than this weir reads ({FORMAT_VERSION}); \
                 restore it with a newer weir"
            )));
        }
        let operator = self.string("the operator uid")?;
        let max_parallelism = self.u16()?;
        let (start, end) = (self.u16()?, self.u16()?);
        if start >= end || end > max_parallelism {
            return Err(self.bad(format!(
                "key groups {start}..{end} out of 0..{max_parallelism}"
            )));
        }
        let n = self.u32()?;
        if n > 4096 {
            return Err(self.bad(format!("{n} states: the file is corrupt")));
        }
        let mut states = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let name = self.string("a state name")?;
            let kind = match self.u8()? {
                0 => StateKind::Value,
                1 => StateKind::List,
                2 => StateKind::Map,
                k => return Err(self.bad(format!("state `{name}` has unknown kind {k}"))),
            };
            let ttl = self.u64()?;
            states.push(SavedState {
                name,
                kind,
                ttl_ms: (ttl > 0).then_some(ttl),
            });
        }
        Ok(SavepointHeader {
            operator,
            max_parallelism,
            key_groups: KeyGroupRange { start, end },
            states,
        })
    }
}

pub mod directory;

#[cfg(test)]
mod tests;
