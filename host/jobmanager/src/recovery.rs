//! Surviving a JobManager restart: the job store in the data dir, keyed
//! checkpoint metadata, and taking the jobs back ([`JobManager::recover`]),
//! as Flink's high-availability services do (its job graph store and
//! completed checkpoint store), for one JobManager with a data dir that
//! outlives it.
//!
//! # What is kept where
//!
//! - `DATA_DIR/jobs/<id>.json` ([`JobRecord`]): a submitted job's graph
//!   (modules by hash, in the module store beside it), spec, overrides,
//!   versions, the savepoint it started from and its latest attempt.
//!   Written (`0600`, atomically) before the job is first deployed and
//!   before each later deployment, so a restarted JobManager deploys past
//!   every attempt a TaskManager may have seen; deleted when the job ends.
//! - `DATA_DIR/checkpoint-key`: a random key (`0600`, made at first
//!   start, refused if others can read it). Each completed checkpoint's
//!   `_metadata` gets a tag, `_metadata.hmac` (HMAC-SHA256 of its bytes),
//!   written before it. Checkpoint storage may be shared with every
//!   TaskManager; the data dir is the JobManager's alone. So the record
//!   says what runs (graph, modules, file paths) and the tag says which
//!   checkpoints this JobManager completed: a TaskManager, or anyone who
//!   can write to checkpoint storage, can neither change a job nor make a
//!   restarted JobManager restore a checkpoint it did not complete.
//!
//! # Taking a job back
//!
//! For each record, [`JobManager::recover`] checks the job again as a
//! submission is checked (its modules loaded, its files within today's
//! allowed roots), then reads every `<job>/chk-<n>/_metadata` in storage,
//! keeps those whose tag matches and that belong to this version of the
//! job, registers their shared files and retains them as the coordinator
//! would have ([`Coordinator::adopt`]). The job starts `restarting`: it is
//! deployed as after a failure, once the TaskManagers registered again
//! with enough slots, from its newest retained checkpoint (or its
//! savepoint, or the beginning), after the sweep of uploads nobody acked.
//! Checkpoint folders without valid metadata (in flight at the crash)
//! are deleted; numbering continues past every folder found. A job that
//! cannot be checked again (a module gone, a path no longer allowed)
//! is listed `failed`, naming why, and its record removed.
//!
//! Exactly-once holds across the restart because TaskManagers are told a
//! checkpoint completed (sinks commit) only once its metadata is stored
//! (`checkpoints::checkpoint_actions`): anything committed is in a
//! checkpoint the restarted JobManager restores.
//!
//! Not kept: finished, failed and canceled jobs (gone after a restart, as
//! in Flink without its history server), an upgrade under way (the job
//! comes back on the version it last deployed), savepoint and upgrade
//! history, logs and metrics.

use super::*;
use crate::submit::{job_checkpoints, keyed_states, subtask_ids};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::path::Path;
use weir_runtime::checkpoint::layout::{METADATA_FILE, metadata_tag_path};

/// The folder of the data dir with one record per job.
pub const JOBS_DIR: &str = "jobs";

/// The file of the data dir with the key of checkpoint metadata tags.
pub const KEY_FILE: &str = "checkpoint-key";

/// The version of [`JobRecord`]'s format.
const FORMAT: u32 = 1;

/// The largest `_metadata` read back (as a TaskManager's restore).
const MAX_METADATA_BYTES: u64 = 256 << 20;

/// The largest `_metadata.hmac` (64 hex digits and a little slack).
const MAX_TAG_BYTES: u64 = 256;

/// What a job needs to be taken back by a restarted JobManager.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct JobRecord {
    format: u32,
    id: String,
    name: String,
    graph: JobGraph,
    spec: Option<String>,
    overrides: Vec<(String, String)>,
    submitted_at_ms: u64,
    attempt: u32,
    from_savepoint: Option<weir_runtime::rpc::SavepointDeploy>,
    versions: Vec<VersionView>,
}

impl JobRecord {
    fn of(job: &Job) -> JobRecord {
        JobRecord {
            format: FORMAT,
            id: job.id.clone(),
            name: job.name.clone(),
            graph: job.graph.clone(),
            spec: job.spec.clone(),
            overrides: job.overrides.clone(),
            submitted_at_ms: job.submitted_at_ms,
            attempt: job.attempt,
            from_savepoint: job.from_savepoint.as_deref().cloned(),
            versions: job.versions.clone(),
        }
    }
}

/// A job taken back at start ([`JobManager::recover`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveredJob {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// The checkpoint it will restore, if any.
    pub checkpoint: Option<u64>,
    /// Why it could not be taken back (it is listed `failed`).
    pub failure: Option<String>,
}

/// The job store: records in `DATA_DIR/jobs`, and the metadata key.
pub(crate) struct JobStore {
    dir: PathBuf,
    key: Vec<u8>,
}

impl std::fmt::Debug for JobStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobStore").field("dir", &self.dir).finish()
    }
}

impl JobStore {
    /// Opens (creating) the store in `data_dir`: the jobs folder (`0700`)
    /// and the key (generated once, `0600`, refused if others may read it).
    pub(crate) fn open(data_dir: &Path) -> Result<JobStore, String> {
        let dir = data_dir.join(JOBS_DIR);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let (key, _) =
            rest::auth::load_or_create(&data_dir.join(KEY_FILE)).map_err(|e| e.to_string())?;
        Ok(JobStore {
            dir,
            key: key.into_bytes(),
        })
    }

    fn mac(&self) -> Hmac<Sha256> {
        // HMAC takes a key of any length.
        Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC accepts any key length")
    }

    /// The tag of metadata `bytes` (hex).
    pub(crate) fn tag(&self, bytes: &[u8]) -> String {
        let mut mac = self.mac();
        mac.update(bytes);
        hex(&mac.finalize().into_bytes())
    }

    /// Whether `tag` is the tag of `bytes` (compared in constant time).
    pub(crate) fn verify(&self, bytes: &[u8], tag: &[u8]) -> bool {
        let Some(tag) = unhex(tag.trim_ascii()) else {
            return false;
        };
        let mut mac = self.mac();
        mac.update(bytes);
        mac.verify_slice(&tag).is_ok()
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Writes `record` in place of the job's previous one: a private
    /// temporary file, synced, renamed over it, the folder synced.
    fn save(&self, record: &JobRecord) -> Result<(), String> {
        use std::io::Write;
        let bytes = serde_json::to_vec(record).map_err(|e| e.to_string())?;
        let target = self.path(&record.id);
        let err = |e: std::io::Error| format!("{}: {e}", target.display());
        // `tempfile` creates it `0600`, with a random name, never following
        // a link someone planted.
        let mut file = tempfile::NamedTempFile::new_in(&self.dir).map_err(err)?;
        file.write_all(&bytes).map_err(err)?;
        file.as_file().sync_all().map_err(err)?;
        file.persist(&target).map_err(|e| err(e.error))?;
        std::fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(err)
    }

    /// Deletes job `id`'s record (logged if it cannot).
    fn remove(&self, id: &str) {
        let path = self.path(id);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::error!(job = id, "cannot delete {}: {e}", path.display()),
        }
    }

    /// Every record, read: by file, the record or why it cannot be used.
    fn records(&self) -> Result<Vec<Stored>, String> {
        let entries =
            std::fs::read_dir(&self.dir).map_err(|e| format!("{}: {e}", self.dir.display()))?;
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let record = std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<JobRecord>(&b).map_err(|e| e.to_string()))
                .and_then(|r| {
                    let named = path.file_stem().and_then(|s| s.to_str()) == Some(r.id.as_str());
                    match (r.format, named) {
                        (FORMAT, true) => Ok(r),
                        (FORMAT, false) => Err(format!("it records job {:?}", r.id)),
                        (other, _) => Err(format!("format {other}, this weir reads {FORMAT}")),
                    }
                });
            out.push((path, record));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }
}

/// A record file and what it holds, or why it cannot be used.
type Stored = (PathBuf, Result<JobRecord, String>);

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &[u8]) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    text.chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect()
}

impl Job {
    /// Records the job (again) if its attempt moved past its record: before
    /// each deployment. Nothing for a job nobody takes back.
    pub(crate) fn persist(&mut self) -> Result<(), String> {
        let Some(store) = &self.journal else {
            return Ok(());
        };
        if self.recorded.is_some_and(|a| a >= self.attempt) {
            return Ok(());
        }
        store.save(&JobRecord::of(self))?;
        self.recorded = Some(self.attempt);
        Ok(())
    }

    /// Deletes the job's record: it ended, nobody takes it back.
    pub(crate) fn forget(&mut self) {
        if let Some(store) = self.journal.take() {
            store.remove(&self.id);
        }
        self.recorded = None;
    }
}

impl JobManager {
    /// Opens the job store in `data_dir` (from now on, submitted jobs are
    /// recorded there and checkpoint metadata is tagged) and takes back
    /// every job a previous run of this JobManager left running: see the
    /// module docs. Call once, before serving. Blocking I/O (module
    /// loads, checkpoint storage reads).
    pub fn recover(&self, data_dir: &Path) -> Result<Vec<RecoveredJob>, String> {
        let store = Arc::new(JobStore::open(data_dir)?);
        if self.journal.set(store.clone()).is_err() {
            return Err("the job store is open already".into());
        }
        let mut recovered = Vec::new();
        for (path, record) in store.records()? {
            let record = match record {
                Ok(record) => record,
                Err(why) => {
                    // Kept aside for a person to look at, never read again.
                    let aside = path.with_extension("json.unreadable");
                    match std::fs::rename(&path, &aside) {
                        Ok(()) => tracing::error!(
                            "cannot take back the job recorded in {}: {why}; moved to {}",
                            path.display(),
                            aside.display()
                        ),
                        Err(e) => tracing::error!(
                            "cannot take back the job recorded in {}: {why}; nor move it \
                             aside ({e}): it is read again at the next start",
                            path.display()
                        ),
                    }
                    continue;
                }
            };
            let (job, incomplete) = self.take_back(record, &store);
            let view = RecoveredJob {
                id: job.id.clone(),
                name: job.name.clone(),
                checkpoint: job
                    .checkpoints
                    .as_ref()
                    .and_then(|c| c.restore_point().0.map(|c| c.id)),
                failure: (job.state == JobState::Failed)
                    .then(|| job.failure.clone())
                    .flatten(),
            };
            match &view.failure {
                None => {
                    tracing::info!(job = %view.id, name = %view.name, checkpoint = ?view.checkpoint, "taken back after a restart")
                }
                Some(why) => tracing::error!(job = %view.id, name = %view.name, "{why}"),
            }
            let cell = JobCell::new(job);
            self.index().insert(view.id.clone(), cell.clone());
            // Queued once the job is in the index, where its drain task
            // looks for it.
            let mut job = self.lock_job(&cell);
            for dir in incomplete {
                self.enqueue(&mut job, StorageCommand::DeletePrefix(dir));
            }
            drop(job);
            recovered.push(view);
        }
        self.changed();
        Ok(recovered)
    }

    /// Job `record` as this JobManager takes it back: `restarting`, or
    /// `failed` if it cannot run here any more; with the folders of its
    /// checkpoints that never completed, to delete.
    fn take_back(&self, record: JobRecord, store: &Arc<JobStore>) -> (Job, Vec<StoragePath>) {
        let now = self.clock.now();
        let (graph, modules, loaded) = match self.prepare_graph(record.graph.clone(), false) {
            Ok(prepared) => prepared,
            Err(e) => {
                store.remove(&record.id);
                let tasks = chain(&record.graph);
                let mut job = Job::new(
                    record.id.clone(),
                    record.graph.clone(),
                    tasks,
                    HashSet::new(),
                    HashMap::new(),
                    None,
                );
                restore_fields(&mut job, record);
                job.state = JobState::Failed;
                job.ended_at_ms = Some(now_ms());
                let why = format!(
                    "not taken back after the JobManager restarted: {}",
                    e.message
                );
                job.failure = Some(why.clone());
                job.failure_is_root = true;
                job.exceptions
                    .record(job.attempt, Cause::new(why), now_ms(), false);
                return (job, Vec::new());
            }
        };
        let states = keyed_states(&graph, &loaded);
        let tasks = chain(&graph);
        let found = self.stored_checkpoints(&record.id, &graph, &tasks, store);
        let next_id = found.next_id;
        let checkpoints = job_checkpoints(&graph, &tasks, next_id, now);
        let mut job = Job::new(
            record.id.clone(),
            graph,
            tasks,
            modules,
            states,
            checkpoints,
        );
        let attempt = record.attempt;
        restore_fields(&mut job, record);
        job.journal = Some(store.clone());
        job.recorded = Some(attempt);
        job.state = JobState::Restarting;
        job.restart_at = Some(now);
        if let Some(c) = job.checkpoints.as_mut() {
            for done in found.completed {
                c.registry.register(
                    done.id,
                    done.acks.values().flat_map(|a| a.shared_paths().cloned()),
                );
                c.stored.insert(done.id);
                let actions = c.coordinator.adopt(done);
                job.deferred.extend(actions);
            }
        }
        let from = job
            .checkpoints
            .as_ref()
            .and_then(|c| c.restore_point().0.map(|c| c.id));
        let cause = match from {
            Some(id) => format!("the JobManager restarted; the job restarts from checkpoint {id}"),
            None => "the JobManager restarted; the job restarts".to_owned(),
        };
        job.exceptions
            .record(job.attempt, Cause::new(cause), now_ms(), false);
        (job, found.incomplete)
    }

    /// The checkpoints of job `id` in storage that a restart may restore:
    /// every one whose metadata its tag confirms and that belongs to
    /// `graph` chained into `tasks`, oldest first; the folders of the
    /// others that have no metadata at all; the next free id.
    fn stored_checkpoints(
        &self,
        id: &str,
        graph: &JobGraph,
        tasks: &[TaskSpec],
        store: &JobStore,
    ) -> Found {
        let mut found = Found {
            completed: Vec::new(),
            incomplete: Vec::new(),
            next_id: 1,
        };
        if graph.settings.checkpoints.is_none() {
            return found;
        }
        let files = match StoragePath::new(id.to_owned()).and_then(|p| self.storage.list(&p)) {
            Ok(files) => files,
            Err(e) => {
                tracing::error!(
                    job = id,
                    "cannot list its checkpoints: {e}; it restarts without"
                );
                return found;
            }
        };
        // chk-<n> → whether it has metadata.
        let mut folders: BTreeMap<u64, bool> = BTreeMap::new();
        let prefix = format!("{id}/chk-");
        for file in &files {
            let Some((n, rest)) = file
                .as_str()
                .strip_prefix(&prefix)
                .and_then(|r| r.split_once('/'))
            else {
                continue;
            };
            let Ok(n) = n.parse::<u64>() else { continue };
            *folders.entry(n).or_default() |= rest == METADATA_FILE;
        }
        found.next_id = folders.keys().next_back().map_or(1, |n| n + 1);
        let subtasks: BTreeSet<(u32, u32)> = subtask_ids(tasks).collect();
        for (n, has_metadata) in folders {
            if !has_metadata {
                if let Ok(dir) = weir_runtime::checkpoint::layout::checkpoint_dir(id, n) {
                    found.incomplete.push(dir);
                }
                continue;
            }
            match self.read_checkpoint(id, n, graph, &subtasks, store) {
                Ok(done) => found.completed.push(done),
                // Left in place: not ours to delete, and worth a look.
                Err(why) => tracing::warn!(job = id, checkpoint = n, "not restored: {why}"),
            }
        }
        found
    }

    /// Checkpoint `n` of job `id`, read from its metadata, if its tag
    /// matches and it belongs to `graph` (every subtask of `subtasks`, files
    /// only in the job's own folders).
    fn read_checkpoint(
        &self,
        id: &str,
        n: u64,
        graph: &JobGraph,
        subtasks: &BTreeSet<(u32, u32)>,
        store: &JobStore,
    ) -> Result<CompletedCheckpoint<SubtaskCheckpoint>, String> {
        let path = metadata_path(id, n).map_err(|e| e.to_string())?;
        let tag_path = metadata_tag_path(id, n).map_err(|e| e.to_string())?;
        let tag = self
            .storage
            .get_bytes_at_most(&tag_path, MAX_TAG_BYTES)
            .map_err(|e| format!("no tag ({e})"))?;
        let bytes = self
            .storage
            .get_bytes_at_most(&path, MAX_METADATA_BYTES)
            .map_err(|e| e.to_string())?;
        if !store.verify(&bytes, &tag) {
            return Err(format!(
                "`{path}` does not match its tag: this JobManager did not write it (or not \
                 with its key `{KEY_FILE}`), or it changed since"
            ));
        }
        let metadata: CheckpointMetadata =
            serde_json::from_slice(&bytes).map_err(|e| format!("`{path}`: {e}"))?;
        if metadata.job != id || metadata.checkpoint != n {
            return Err(format!(
                "`{path}` is checkpoint {} of job {}",
                metadata.checkpoint, metadata.job
            ));
        }
        if metadata.layout.as_ref().is_none_or(|l| l.graph != *graph) {
            return Err("it was taken by another version of the job".into());
        }
        let acks: BTreeMap<(u32, u32), SubtaskCheckpoint> = metadata.subtasks.into_iter().collect();
        if acks.keys().ne(subtasks.iter()) {
            return Err("its subtasks are not the job's".into());
        }
        if let Some(path) = acks.values().find_map(|a| a.foreign_path(id, n)) {
            return Err(format!("it names `{path}`, outside the job's folders"));
        }
        Ok(CompletedCheckpoint {
            id: n,
            triggered_at_ms: metadata.triggered_at_ms,
            completed_at_ms: metadata.completed_at_ms,
            acks,
            max_alignment: Duration::ZERO,
        })
    }
}

/// What [`JobManager::stored_checkpoints`] found.
struct Found {
    completed: Vec<CompletedCheckpoint<SubtaskCheckpoint>>,
    incomplete: Vec<StoragePath>,
    next_id: u64,
}

/// The fields of `job` its record holds beyond the graph.
fn restore_fields(job: &mut Job, record: JobRecord) {
    job.name = record.name;
    job.spec = record.spec;
    job.overrides = record.overrides;
    job.submitted_at_ms = record.submitted_at_ms;
    job.attempt = record.attempt;
    job.from_savepoint = record.from_savepoint.map(Arc::new);
    if !record.versions.is_empty() {
        job.versions = record.versions;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_confirms_only_the_bytes_and_the_key_it_was_made_with() {
        let dir = tempfile::tempdir().unwrap();
        let store = JobStore::open(dir.path()).unwrap();
        let tag = store.tag(b"{\"checkpoint\":3}");
        assert_eq!(tag.len(), 64);
        assert!(store.verify(b"{\"checkpoint\":3}", tag.as_bytes()));
        assert!(store.verify(b"{\"checkpoint\":3}", format!("{tag}\n").as_bytes()));
        assert!(!store.verify(b"{\"checkpoint\":4}", tag.as_bytes()));
        assert!(!store.verify(b"{\"checkpoint\":3}", b"not hex"));
        assert!(!store.verify(b"{\"checkpoint\":3}", &tag.as_bytes()[..62]));
        // The key persists: a reopened store confirms the tag; another
        // data dir's key does not.
        let again = JobStore::open(dir.path()).unwrap();
        assert!(again.verify(b"{\"checkpoint\":3}", tag.as_bytes()));
        let other = tempfile::tempdir().unwrap();
        let stranger = JobStore::open(other.path()).unwrap();
        assert!(!stranger.verify(b"{\"checkpoint\":3}", tag.as_bytes()));
    }

    /// A JobManager core on `dir` (data dir `dir/jm`) allowing files under
    /// `root`, with its job store opened.
    fn core(dir: &Path, root: &Path) -> (Arc<JobManager>, Vec<RecoveredJob>) {
        let data_dir = dir.join("jm");
        let runtime = Arc::new(
            weir_runtime::wasm::Runtime::new(weir_runtime::wasm::RuntimeConfig { cache_dir: None })
                .unwrap(),
        );
        let jm = JobManager::new(
            CoreConfig::for_tests(
                data_dir.clone(),
                dir.join("checkpoints"),
                AllowedRoots::new([root]).unwrap(),
            ),
            runtime,
            ModuleStore::open(&data_dir.join("modules")).unwrap(),
        );
        let recovered = jm.recover(&data_dir).unwrap();
        (jm, recovered)
    }

    fn spec(name: &str, source: &str) -> String {
        format!(
            "[job]\nname = \"{name}\"\n\n{source}\n\n[[sink]]\nid = \"out\"\ntype = \"blackhole\"\n\n\
             [[edge]]\nfrom = \"in\"\nto = \"out\"\n"
        )
    }

    /// The core of a restart, without processes: what a first JobManager
    /// submitted is taken back by a second one on the same data dir,
    /// `restarting`, and deployed past the attempt the first one recorded
    /// once a TaskManager registers; a job whose file the second one no
    /// longer allows is listed `failed`, saying why; an unreadable record
    /// is moved aside.
    #[test]
    fn a_restarted_jobmanager_takes_back_its_jobs_and_says_what_it_cannot() {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _entered = rt.enter();
        let inputs = dir.path().join("in");
        std::fs::create_dir_all(&inputs).unwrap();
        std::fs::write(inputs.join("lines.txt"), "a\nb\n").unwrap();

        let (first, recovered) = core(dir.path(), dir.path());
        assert!(recovered.is_empty(), "{recovered:?}");
        let (_, _tm) = first.register_in_process("tm", 8);
        let generator =
            "[[source]]\nid = \"in\"\ntype = \"generator\"\nkind = \"sequence\"\nrate = 10";
        let running = rt
            .block_on(first.submit(spec("generated", generator), None))
            .unwrap()
            .id;
        let file = format!(
            "[[source]]\nid = \"in\"\ntype = \"file\"\npath = {:?}",
            inputs.join("lines.txt").display().to_string()
        );
        let confined = rt
            .block_on(first.submit(spec("confined", &file), None))
            .unwrap()
            .id;
        let jobs = dir.path().join("jm").join(JOBS_DIR);
        std::fs::write(jobs.join("00000000000000ff.json"), b"{\"format\": 1, ").unwrap();
        drop(first);

        // Started again, allowing another folder only.
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        let (second, mut recovered) = core(dir.path(), &elsewhere);
        recovered.sort_by_key(|r| r.name.clone());
        assert_eq!(recovered.len(), 2, "{recovered:?}");
        let why = recovered[0].failure.as_deref().unwrap_or_default();
        assert_eq!(recovered[0].id, confined);
        assert!(
            why.contains("not taken back") && why.contains("lines.txt"),
            "{why}"
        );
        assert_eq!(
            recovered[1],
            RecoveredJob {
                id: running.clone(),
                name: "generated".into(),
                checkpoint: None,
                failure: None,
            }
        );
        assert!(
            !jobs.join(format!("{confined}.json")).exists(),
            "its record is gone"
        );
        assert!(jobs.join("00000000000000ff.json.unreadable").exists());
        assert!(!jobs.join("00000000000000ff.json").exists());
        let state = |id: &str| second.job(id).unwrap().summary.state;
        assert_eq!(state(&confined), JobState::Failed);
        assert_eq!(state(&running), JobState::Restarting);

        // Deployed once a TaskManager registers, past the recorded attempt.
        let (_, mut tm) = second.register_in_process("tm", 8);
        second.tick();
        assert_eq!(state(&running), JobState::Running);
        let deployed = std::iter::from_fn(|| tm.try_recv().ok())
            .find_map(|m| match m {
                weir_runtime::rpc::ToTaskManager::Deploy(d) => Some(d),
                _ => None,
            })
            .expect("a deployment");
        assert_eq!(
            (deployed.job.as_str(), deployed.attempt),
            (running.as_str(), 1)
        );
        let record: JobRecord =
            serde_json::from_slice(&std::fs::read(jobs.join(format!("{running}.json"))).unwrap())
                .unwrap();
        assert_eq!(record.attempt, 1, "recorded before it was deployed");
    }

    #[cfg(unix)]
    #[test]
    fn the_key_and_the_records_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        JobStore::open(dir.path()).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.path().join(KEY_FILE)), 0o600);
        assert_eq!(mode(&dir.path().join(JOBS_DIR)), 0o700);
        // A key others can read is refused, not used.
        std::fs::set_permissions(
            dir.path().join(KEY_FILE),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        let err = JobStore::open(dir.path()).unwrap_err();
        assert!(err.contains("open to other users"), "{err}");
    }
}
