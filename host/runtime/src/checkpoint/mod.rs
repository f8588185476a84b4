//! Checkpoints: state snapshots, checkpoint storage, the shared-file
//! registry, and the two pure state machines that drive checkpoints (the
//! JobManager's coordinator, the TaskManager's ack ledger).
//!
//! This module owns the storage layer of checkpoints — what the barrier
//! aligner, the checkpoint coordinator and failover call — and the
//! bookkeeping on both sides of the checkpoint protocol:
//! * [`storage`]: [`StoragePath`] (relative paths that cannot escape the
//!   storage root), the [`CheckpointStorage`] trait and [`DirStorage`] (a
//!   local or shared directory), with atomic writes.
//! * [`layout`]: where a job's checkpoints live in storage (the one place
//!   the `<job>/shared`, `<job>/chk-<n>/…` layout is spelled).
//! * [`snapshot`]: one subtask's keyed state in a checkpoint. The
//!   synchronous part is [`crate::state::KeyedStateBackend::snapshot_local`]
//!   (a RocksDB checkpoint of hard links, or a heap snapshot file);
//!   [`snapshot::upload`] is the asynchronous part and yields a
//!   [`StateHandle`]; [`snapshot::download`] and
//!   [`crate::state::restore_backend`] bring it back. It also owns the
//!   `_metadata` of a completed checkpoint
//!   ([`snapshot::CheckpointMetadata`]) and its check at a restore
//!   ([`snapshot::verify_restore`]).
//! * [`coordinator`]: the checkpoint coordinator, a pure state machine
//!   (its own module docs say what it owns).
//! * [`acks`]: [`acks::AckLedger`], the TaskManager's side of one
//!   deployment's checkpoints, a pure state machine: when to upload a local
//!   snapshot and from which base, when to ack or decline it, when to
//!   commit sinks' pre-committed output.
//! * [`registry`]: [`SharedStateRegistry`], the JobManager's reference
//!   counts of shared files (RocksDB SST files referenced by several
//!   checkpoints), which says what to delete when checkpoints are subsumed
//!   or aborted.
//!
//! # Incremental checkpoints
//! RocksDB SST files are immutable and their names (`000012.sst`) are
//! unique within one database lineage (a database and the databases
//! restored from its checkpoints: a restored database continues the file
//! numbering recorded in its MANIFEST). So an SST file that the previous
//! checkpoint of the same subtask already uploaded is referenced again, not
//! uploaded: a checkpoint uploads only the SST files created since, plus its
//! small private files (MANIFEST, CURRENT, OPTIONS).
//!
//! # Invariants
//! * Storage paths never escape the storage root; storage writes are atomic.
//! * A [`StateHandle`] lists every file needed to restore, with its size
//!   and the SHA-256 of its contents (computed while uploading); a download
//!   checks both (handles written before files were hashed are checked by
//!   size only). A restore first checks that the checkpoint's `_metadata`
//!   records the very parts it restores.
//! * Shared files are deleted only when the registry says no registered
//!   checkpoint references them.
//!
//! # Must not touch
//! Barrier alignment, sinks and failover live with the tasks and the
//! JobManager. The storage layer ([`storage`], [`snapshot`], [`registry`])
//! does no networking and spawns no threads: the caller runs
//! [`snapshot::upload`] wherever its asynchronous part belongs. The state
//! machines ([`coordinator`], [`acks`]) do no I/O at all: their shells in
//! the JobManager and the TaskManager carry out what they return.

use crate::state::StateError;

pub mod acks;
pub mod coordinator;
pub mod layout;
pub mod registry;
pub mod savepoint;
pub mod snapshot;
pub mod storage;

#[cfg(test)]
pub(crate) mod fuzz_tests;
#[cfg(test)]
mod tests;

pub use registry::SharedStateRegistry;
pub use snapshot::{FileHandle, StateHandle, download, upload};
pub use storage::{CheckpointStorage, DirStorage, StoragePath};

/// Why a checkpoint storage, upload, download or restore step failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// A path that could escape the storage root, or is otherwise invalid.
    #[error("invalid storage path `{path}`: {reason}")]
    InvalidPath {
        /// The rejected path.
        path: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A file that should be in checkpoint storage is not.
    #[error("checkpoint file `{0}` not found in checkpoint storage")]
    NotFound(StoragePath),
    /// Reading or writing a file (in storage or locally) failed.
    #[error("cannot {op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The local path involved.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A checkpoint's files do not match its handle (size, hash, name,
    /// format), or its metadata does not match what a restore was sent.
    #[error("corrupt checkpoint: {0}")]
    Corrupt(String),
    /// The state backend failed (snapshot or restore).
    #[error(transparent)]
    State(#[from] StateError),
}
