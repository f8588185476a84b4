//! A savepoint made from a checkpoint in storage: relocatable, restorable
//! on the other backend and at another parallelism, and refused when any
//! of its files is missing, changed or outside it.

use std::collections::HashMap;

use weir_job::{JobGraph, JobSpec, chain};
use weir_state::{
    BackendConfig, BackendKind, KeyedStateBackend, StateDescriptor, StateKind,
    key_group_range_for_subtask, open_backend, restore_backend,
};

use super::*;
use crate::checkpoint::snapshot::upload;
use crate::checkpoint::storage::{DirStorage, StoragePath};

const SPEC: &str = r#"
[job]
name = "counts"
max_parallelism = 64

[[source]]
id = "src"
type = "generator"
kind = "sequence"
count = 10

[[operator]]
id = "count"
module = "count.wasm"
key_by = "value"
parallelism = 2

[[sink]]
id = "out"
type = "blackhole"
parallelism = 2

[[edge]]
from = "src"
to = "count"

[[edge]]
from = "count"
to = "out"
"#;

fn states() -> Vec<StateDescriptor> {
    vec![
        StateDescriptor::new("count", StateKind::Value),
        StateDescriptor::new("seen", StateKind::List),
    ]
}

const KEYS: u32 = 400;

/// A checkpoint's parts, by (task, subtask).
type Parts = Vec<((u32, u32), SubtaskCheckpoint)>;

/// Job `counts` with checkpoint 7 in `storage`: operator `count` (p=2,
/// RocksDB) holding `KEYS` keys, one timer per 50th key, and a source
/// position and sink committable per subtask.
fn checkpointed(dir: &Path) -> (JobGraph, Vec<TaskSpec>, Parts) {
    let graph = JobGraph::from_spec(JobSpec::parse(SPEC, "/specs/job.toml", &[]).unwrap()).unwrap();
    let tasks = chain(&graph);
    let v = graph
        .vertices
        .iter()
        .position(|x| x.id.0 == "count")
        .unwrap();
    let t = tasks.iter().position(|t| t.vertices.contains(&v)).unwrap() as u32;
    let storage = DirStorage::new(dir.join("storage"));
    let mut parts = Vec::new();
    for s in 0..2u32 {
        let range = key_group_range_for_subtask(64, 2, s);
        let db = dir.join(format!("db-{s}"));
        let mut b = open_backend(BackendConfig {
            kind: BackendKind::RocksDb,
            dir: &db,
            states: &states(),
            key_groups: range,
            max_parallelism: 64,
        })
        .unwrap();
        let mut timers = Vec::new();
        for i in 0..KEYS {
            let key = format!("w{i}");
            if !range.contains(key_group_of(key.as_bytes(), 64)) {
                continue;
            }
            b.value_set(0, key.as_bytes(), &u64::from(i).to_le_bytes())
                .unwrap();
            b.list_add(1, key.as_bytes(), b"x").unwrap();
            if i % 50 == 0 {
                timers.push((i64::from(i), key.into_bytes()));
            }
        }
        let snap = dir.join(format!("snap-{s}"));
        b.snapshot_local(&snap).unwrap();
        let handle = upload(
            &snap,
            &storage,
            &StoragePath::new(format!("job/chk-7/{s}")).unwrap(),
            &StoragePath::new("job/shared").unwrap(),
            None,
            BackendKind::RocksDb,
        )
        .unwrap();
        let timers_path = StoragePath::new(format!("job/chk-7/{s}/timers")).unwrap();
        let timers_bytes = serde_json::to_vec(&vec![(v, timers)]).unwrap();
        storage.put_bytes(&timers_path, &timers_bytes).unwrap();
        parts.push((
            (t, s),
            SubtaskCheckpoint {
                finished: false,
                states: vec![(v, handle)],
                timers: Some(timers_path),
                timers_sha256: Some(sha256_hex(&timers_bytes)),
                source: None,
                sink: Some(serde_json::json!({ "parts": [format!("part-{s}")] })),
            },
        ));
    }
    (graph, tasks, parts)
}

/// Checkpoints job `counts` in `dir` ([`checkpointed`]) and writes it as a
/// savepoint into `out`, reporting progress to `progress`.
fn materialize_into(
    dir: &Path,
    out: &Path,
    progress: &mut dyn FnMut(u64),
) -> Result<SavepointMetadata, SavepointError> {
    let (graph, tasks, parts) = checkpointed(dir);
    let v = graph
        .vertices
        .iter()
        .position(|x| x.id.0 == "count")
        .unwrap();
    let states: HashMap<usize, Vec<StateDescriptor>> = HashMap::from([(v, states())]);
    let storage = DirStorage::new(dir.join("storage"));
    let src = CheckpointSource {
        job_id: "job",
        job_name: "counts",
        checkpoint: 7,
        graph: &graph,
        tasks: &tasks,
        parts: &parts,
        states: &states,
        storage: &storage,
    };
    materialize(&src, out, progress)
}

fn save(dir: &Path) -> (PathBuf, SavepointMetadata) {
    let out = dir.join("savepoint");
    let mut progress = Vec::new();
    let metadata = materialize_into(dir, &out, &mut |bytes| progress.push(bytes)).unwrap();
    // One report per file written, growing to the bytes of all of them.
    let files: u64 = metadata.files().map(|f| f.size).sum();
    assert_eq!(progress.len(), 4, "two state files, two timers files");
    assert!(progress.windows(2).all(|w| w[0] < w[1]), "{progress:?}");
    assert_eq!(progress.last(), Some(&files));
    (out, metadata)
}

fn count_of(b: &mut dyn KeyedStateBackend, key: &str) -> Option<u64> {
    b.value_get(0, key.as_bytes())
        .unwrap()
        .map(|v| u64::from_le_bytes(v.try_into().unwrap()))
}

#[test]
fn a_savepoint_restores_elsewhere_on_either_backend_at_any_parallelism() {
    let dir = tempfile::tempdir().unwrap();
    let (out, metadata) = save(dir.path());
    // Relocatable: moved away from where it was written.
    let moved = dir.path().join("moved");
    std::fs::rename(&out, &moved).unwrap();
    let read = read_metadata(&moved).unwrap();
    assert_eq!(read, metadata);
    verify(&moved, &read).unwrap();
    let vertex = read.vertices.iter().find(|v| v.uid == "count").unwrap();
    let saved: u64 = vertex
        .subtasks
        .iter()
        .map(|s| s.state.as_ref().unwrap().entries[0])
        .sum();
    assert_eq!(saved, u64::from(KEYS));
    let sink = read.vertices.iter().find(|v| v.uid == "out").unwrap();
    assert_eq!(
        sink.subtasks[1].sink,
        Some(serde_json::json!({ "parts": ["part-1"] }))
    );

    for (kind, parallelism) in [
        (BackendKind::Heap, 3),
        (BackendKind::RocksDb, 1),
        (BackendKind::Heap, 2),
    ] {
        let mut found = 0;
        let mut timers = 0;
        for s in 0..parallelism {
            let work = dir.path().join(format!("work-{kind:?}-{parallelism}-{s}"));
            let restored = restore_subtask(
                &moved,
                &read,
                vertex,
                s,
                parallelism,
                &states(),
                kind,
                &work,
                None,
            )
            .unwrap();
            let range = key_group_range_for_subtask(64, parallelism, s);
            let mut b = restore_backend(
                BackendConfig {
                    kind,
                    dir: &work.join("db"),
                    states: &states(),
                    key_groups: range,
                    max_parallelism: 64,
                },
                restored.state_dir.as_ref().unwrap(),
            )
            .unwrap();
            for i in 0..KEYS {
                let key = format!("w{i}");
                if range.contains(key_group_of(key.as_bytes(), 64)) {
                    assert_eq!(count_of(b.as_mut(), &key), Some(u64::from(i)), "{key}");
                    assert_eq!(b.list_get(1, key.as_bytes()).unwrap().len(), 1);
                    found += 1;
                }
            }
            assert!(
                restored
                    .timers
                    .iter()
                    .all(|(_, k)| range.contains(key_group_of(k, 64)))
            );
            assert!(restored.timers.windows(2).all(|w| w[0].0 <= w[1].0));
            timers += restored.timers.len();
        }
        assert_eq!(found, KEYS, "{kind:?} p={parallelism}");
        assert_eq!(timers, (KEYS / 50) as usize, "{kind:?} p={parallelism}");
    }
}

#[test]
fn a_changed_missing_or_escaping_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (out, metadata) = save(dir.path());
    let vertex = metadata.vertices.iter().find(|v| v.uid == "count").unwrap();
    let state = out.join(&vertex.subtasks[0].state.as_ref().unwrap().file.path);
    let timers = out.join(&vertex.subtasks[1].timers.as_ref().unwrap().path);
    let expect = |what: &str| {
        let err = read_metadata(&out)
            .and_then(|m| verify(&out, &m))
            .unwrap_err()
            .to_string();
        assert!(err.contains(what), "{err}");
    };

    // A flipped byte in a state file.
    let good = std::fs::read(&state).unwrap();
    let mut flipped = good.clone();
    flipped[good.len() - 40] ^= 1;
    std::fs::write(&state, &flipped).unwrap();
    expect("checksum mismatch");
    std::fs::write(&state, &good).unwrap();

    // Timers changed, same size.
    let good_timers = std::fs::read(&timers).unwrap();
    let mut changed = good_timers.clone();
    let at = changed.iter().position(|b| b.is_ascii_digit()).unwrap();
    changed[at] = if changed[at] == b'9' { b'8' } else { b'9' };
    std::fs::write(&timers, &changed).unwrap();
    expect("checksum mismatch");
    std::fs::write(&timers, &good_timers).unwrap();

    // A file missing.
    std::fs::rename(&state, dir.path().join("aside")).unwrap();
    expect("No such file");
    std::fs::rename(dir.path().join("aside"), &state).unwrap();
    read_metadata(&out).and_then(|m| verify(&out, &m)).unwrap();

    // Metadata edited to point outside the directory, and its hash fixed up.
    let text = std::fs::read_to_string(out.join(METADATA_FILE)).unwrap();
    let (_, body) = text.split_once('\n').unwrap();
    let body = body.replacen("\"count/0.state\"", "\"../../etc/passwd\"", 1);
    let forged = format!(
        "weir-savepoint {FORMAT_VERSION} sha256:{}\n{body}",
        sha256_hex(body.as_bytes())
    );
    std::fs::write(out.join(METADATA_FILE), forged).unwrap();
    expect("outside the savepoint directory");

    // Edited without fixing the hash; a newer format; not a savepoint.
    std::fs::write(
        out.join(METADATA_FILE),
        format!("weir-savepoint 1 sha256:00\n{body}"),
    )
    .unwrap();
    expect("checksum mismatch");
    std::fs::write(out.join(METADATA_FILE), "weir-savepoint 99 sha256:00\n{}").unwrap();
    expect("newer than this weir reads");
    std::fs::write(out.join(METADATA_FILE), "{}").unwrap();
    expect("not savepoint metadata");
    let err = read_metadata(&dir.path().join("nowhere"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("No such file"), "{err}");
}

#[test]
fn a_savepoint_is_never_written_over_another() {
    let dir = tempfile::tempdir().unwrap();
    let (out, _) = save(dir.path());
    let err = materialize_into(&dir.path().join("again"), &out, &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(err.contains("not empty"), "{err}");
}
