//! Where a job's checkpoints live in checkpoint storage: the one place the
//! layout is spelled. The JobManager (metadata, deletes, the sweep, the
//! check that an ack names only the job's own paths) and the TaskManagers
//! (uploads, restores) both name paths through these functions.
//!
//! ```text
//! <job>/shared/<token>-<local name>          shared files (RocksDB SSTs), referenced
//!                                            by any number of checkpoints
//! <job>/chk-<n>/_metadata                    a completed checkpoint's metadata
//! <job>/chk-<n>/_metadata.hmac               its tag, keyed by the JobManager
//! <job>/chk-<n>/<task>-<subtask>/<vertex>/…  one subtask's private files
//! <job>/chk-<n>/<task>-<subtask>/timers.json its timers
//! ```
//!
//! Every function validates through [`StoragePath::new`]: a job id that
//! cannot name a folder is an error, never a path outside the job.

use super::CheckpointError;
use super::storage::StoragePath;

/// The name of a completed checkpoint's metadata file in its directory.
pub const METADATA_FILE: &str = "_metadata";

/// `<job>/shared`: the job's shared files.
pub fn shared_dir(job: &str) -> Result<StoragePath, CheckpointError> {
    StoragePath::new(format!("{job}/shared"))
}

/// `<job>/chk-<checkpoint>`: one checkpoint's own folder (its metadata and
/// its private files), deleted whole when the checkpoint is discarded.
pub fn checkpoint_dir(job: &str, checkpoint: u64) -> Result<StoragePath, CheckpointError> {
    StoragePath::new(format!("{job}/chk-{checkpoint}"))
}

/// `<job>/chk-<checkpoint>/<task>-<subtask>`: one subtask's private files
/// and timers in a checkpoint.
pub fn subtask_dir(
    job: &str,
    checkpoint: u64,
    task: u32,
    subtask: u32,
) -> Result<StoragePath, CheckpointError> {
    StoragePath::new(format!("{job}/chk-{checkpoint}/{task}-{subtask}"))
}

/// `<job>/chk-<checkpoint>/_metadata`: where the JobManager writes a
/// completed checkpoint's metadata and a restore reads it.
pub fn metadata_path(job: &str, checkpoint: u64) -> Result<StoragePath, CheckpointError> {
    StoragePath::new(format!("{job}/chk-{checkpoint}/{METADATA_FILE}"))
}

/// `<job>/chk-<checkpoint>/_metadata.hmac`: the tag (HMAC-SHA256, hex) a
/// JobManager wrote beside the metadata, with a key only it holds; a
/// restarted JobManager restores only metadata its tag confirms.
pub fn metadata_tag_path(job: &str, checkpoint: u64) -> Result<StoragePath, CheckpointError> {
    StoragePath::new(format!("{job}/chk-{checkpoint}/{METADATA_FILE}.hmac"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_nests_every_path_in_the_jobs_folder() {
        let job = StoragePath::new("j").unwrap();
        let chk = checkpoint_dir("j", 3).unwrap();
        assert_eq!(chk.as_str(), "j/chk-3");
        assert_eq!(shared_dir("j").unwrap().as_str(), "j/shared");
        assert_eq!(metadata_path("j", 3).unwrap().as_str(), "j/chk-3/_metadata");
        assert_eq!(
            metadata_tag_path("j", 3).unwrap().as_str(),
            "j/chk-3/_metadata.hmac"
        );
        let sub = subtask_dir("j", 3, 1, 0).unwrap();
        assert_eq!(sub.as_str(), "j/chk-3/1-0");
        for p in [&chk, &sub, &metadata_path("j", 3).unwrap()] {
            assert!(p.starts_with(&job), "{p:?}");
        }
        assert!(sub.starts_with(&chk));
        assert!(!shared_dir("j").unwrap().starts_with(&chk));
    }

    #[test]
    fn a_job_id_that_cannot_name_a_folder_is_an_error() {
        assert!(shared_dir("../x").is_err());
        assert!(checkpoint_dir("", 1).is_err());
        assert!(metadata_path("/abs", 1).is_err());
    }
}
