//! The shared-state registry: reference counts of shared checkpoint files.
//!
//! Owns [`SharedStateRegistry`], kept by the JobManager's checkpoint
//! coordinator. A shared file (a RocksDB SST file, see [`super::snapshot`])
//! can be referenced by many retained checkpoints; it may be deleted once
//! none does. The registry counts, per shared [`StoragePath`], the
//! registered (completed, retained) checkpoints that reference it.
//!
//! # How the coordinator uses it
//! 1. A checkpoint completes: [`SharedStateRegistry::register`] it with the
//!    shared paths of all its subtasks' handles
//!    ([`super::StateHandle::shared_paths`]).
//! 2. *Then* release the checkpoints it subsumes (beyond the retention
//!    count): [`SharedStateRegistry::release`] returns the shared files no
//!    registered checkpoint uses any more; delete them, and each released
//!    checkpoint's private directory. Registering before releasing keeps
//!    the files the new checkpoint reuses from its predecessors.
//! 3. A checkpoint is aborted: its subtasks may have uploaded shared files
//!    no completed checkpoint references.
//!    [`SharedStateRegistry::orphans`] picks those out of the files it
//!    uploaded (the shared paths of the handles that were acked, or a
//!    listing of the shared prefix taken after its uploads stopped); delete
//!    them and its private directory.
//!
//! # The one thing it cannot see
//! A pending checkpoint `k` may reuse files of a completed checkpoint `b`
//! (its subtask's `previous`) that the registry does not know `k` needs
//! until `k` completes. If `b` is released meanwhile and no other retained
//! checkpoint references those files, they are deleted under `k`. With
//! "register, then release" this needs a subtask to learn of `b`'s
//! completion late, after a newer checkpoint was already taken without
//! `b` as its base; retention of 2 or more makes it rarer, not impossible.
//! The coordinator can detect it on completion: every path of `k`'s
//! handles that [`SharedStateRegistry::orphans`] reports must exist in
//! storage (it was uploaded by `k`); if one does not, fail `k` instead of
//! completing it.
//!
//! Pure bookkeeping: no storage access, no clocks; the caller deletes.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::storage::StoragePath;

/// Reference counts of shared checkpoint files; see the module docs.
#[derive(Debug, Default)]
pub struct SharedStateRegistry {
    /// Per shared file, the number of registered checkpoints referencing it.
    refs: HashMap<StoragePath, u32>,
    /// Per registered checkpoint, the shared files it references, each once.
    checkpoints: BTreeMap<u64, BTreeSet<StoragePath>>,
}

impl SharedStateRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// A checkpoint completed: counts a reference for every shared file it
    /// uses. Registering the same checkpoint again adds only files it did
    /// not list before (so it can be registered subtask by subtask).
    pub fn register(&mut self, checkpoint: u64, files: impl IntoIterator<Item = StoragePath>) {
        let known = self.checkpoints.entry(checkpoint).or_default();
        for file in files {
            if !known.contains(&file) {
                *self.refs.entry(file.clone()).or_insert(0) += 1;
                known.insert(file);
            }
        }
    }

    /// A checkpoint is no longer retained: drops its references and returns
    /// the shared files that no registered checkpoint uses any more, sorted
    /// (the caller deletes them). An unknown checkpoint releases nothing.
    pub fn release(&mut self, checkpoint: u64) -> Vec<StoragePath> {
        let Some(files) = self.checkpoints.remove(&checkpoint) else {
            return Vec::new();
        };
        let mut unused = Vec::new();
        for file in files {
            let count = self
                .refs
                .get_mut(&file)
                .expect("every file of a registered checkpoint is counted");
            *count -= 1;
            if *count == 0 {
                self.refs.remove(&file);
                unused.push(file);
            }
        }
        unused
    }

    /// The files of `uploaded` that no registered checkpoint references,
    /// sorted and each once: what an aborted checkpoint leaves behind.
    pub fn orphans(&self, uploaded: &[StoragePath]) -> Vec<StoragePath> {
        let orphans: BTreeSet<&StoragePath> = uploaded
            .iter()
            .filter(|f| !self.refs.contains_key(*f))
            .collect();
        orphans.into_iter().cloned().collect()
    }

    /// Whether a registered checkpoint references `file`.
    pub fn is_referenced(&self, file: &StoragePath) -> bool {
        self.refs.contains_key(file)
    }

    /// The number of registered checkpoints referencing `file`.
    pub fn ref_count(&self, file: &StoragePath) -> u32 {
        self.refs.get(file).copied().unwrap_or(0)
    }

    /// The registered checkpoints, oldest first.
    pub fn checkpoints(&self) -> impl Iterator<Item = u64> + '_ {
        self.checkpoints.keys().copied()
    }

    /// Every shared file some registered checkpoint references, sorted.
    pub fn referenced(&self) -> Vec<StoragePath> {
        let mut all: Vec<_> = self.refs.keys().cloned().collect();
        all.sort();
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> StoragePath {
        StoragePath::new(s).unwrap()
    }

    #[test]
    fn counts_references_across_checkpoints() {
        let mut r = SharedStateRegistry::new();
        r.register(1, [p("s/a"), p("s/b")]);
        r.register(2, [p("s/b"), p("s/c"), p("s/c")]); // duplicates count once
        r.register(2, [p("s/c"), p("s/d")]); // a second subtask of checkpoint 2
        assert_eq!(r.ref_count(&p("s/b")), 2);
        assert_eq!(r.ref_count(&p("s/c")), 1);
        assert_eq!(r.release(1), [p("s/a")]);
        assert_eq!(r.release(1), Vec::<StoragePath>::new(), "released twice");
        assert_eq!(r.release(7), Vec::<StoragePath>::new(), "unknown");
        assert_eq!(r.checkpoints().collect::<Vec<_>>(), [2]);
        assert_eq!(r.release(2), [p("s/b"), p("s/c"), p("s/d")]);
        assert!(r.referenced().is_empty());
    }

    #[test]
    fn orphans_are_the_uploads_no_checkpoint_references() {
        let mut r = SharedStateRegistry::new();
        r.register(1, [p("s/a")]);
        let uploaded = [p("s/x"), p("s/a"), p("s/y"), p("s/x")];
        assert_eq!(r.orphans(&uploaded), [p("s/x"), p("s/y")]);
        assert!(r.is_referenced(&p("s/a")));
    }
}
