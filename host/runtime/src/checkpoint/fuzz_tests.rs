//! Fuzz properties of what a restore parses back from checkpoint storage
//! (or receives in an ack): [`StoragePath`]s, [`StateHandle`]s and the
//! [`SubtaskCheckpoint`]s that carry them, `_metadata` as a restore reads
//! and checks it ([`verify_restore`]), the timers file, and the heap
//! backend's snapshot file. Fed arbitrary bytes,
//! JSON-like text and mutated valid encodings (truncated, bit-flipped,
//! lengths set to huge values; for the heap snapshot, with its checksum
//! recomputed so the mutation reaches the decoder). See `weir_fuzz` for
//! how to run them longer.
//!
//! What must hold: no panic; a path read back never leaves the storage
//! root, and a downloaded file never lands outside its download directory;
//! valid encodings decode to what was encoded; valid metadata passes
//! [`verify_restore`], and metadata it accepts records exactly the parts
//! a restore was sent. The strategies for handles are shared with
//! `rpc::fuzz_tests`.

use std::path::{Component, Path};
use std::sync::Arc;

use proptest::prelude::*;

use super::snapshot::{CheckpointMetadata, verify_restore};
use super::storage::TEMP_PREFIX;
use super::{CheckpointError, CheckpointStorage, DirStorage, FileHandle, StateHandle, StoragePath};
use crate::rpc::SubtaskCheckpoint;
use crate::state::ttl::ManualClock;
use crate::state::{
    BackendConfig, BackendKind, KeyGroupRange, KeyedStateBackend, StateDescriptor, StateKind,
    heap::SNAPSHOT_FILE, open_backend_with_clock, restore_backend_with_clock,
};
use crate::taskmanager::Timers;
use weir_fuzz::{config, mutate, mutations};

/// A valid storage path: 1–4 components of safe characters.
pub(crate) fn storage_path() -> impl Strategy<Value = StoragePath> {
    prop::collection::vec("[a-zA-Z0-9_-]{1,8}(\\.sst)?", 1..5)
        .prop_map(|parts| StoragePath::new(parts.join("/")).expect("valid by construction"))
}

/// A JSON value a few levels deep, without floats (which JSON does not
/// round-trip exactly).
pub(crate) fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("\\PC{0,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn file_handle() -> impl Strategy<Value = FileHandle> {
    (
        "[a-zA-Z0-9_-]{1,12}",
        storage_path(),
        any::<u64>(),
        any::<bool>(),
        prop::option::of("[0-9a-f]{64}"),
    )
        .prop_map(|(local_name, path, size, shared, sha256)| FileHandle {
            local_name,
            path,
            size,
            shared,
            sha256,
        })
}

pub(crate) fn state_handle() -> impl Strategy<Value = StateHandle> {
    (
        prop_oneof![Just(BackendKind::RocksDb), Just(BackendKind::Heap)],
        prop::collection::vec(file_handle(), 0..4),
        any::<u64>(),
        any::<u64>(),
    )
        .prop_map(
            |(backend, files, full_size, incremental_size)| StateHandle {
                backend,
                files,
                full_size,
                incremental_size,
            },
        )
}

pub(crate) fn subtask_checkpoint() -> impl Strategy<Value = SubtaskCheckpoint> {
    (
        any::<bool>(),
        prop::collection::vec((any::<usize>(), state_handle()), 0..3),
        prop::option::of(storage_path()),
        prop::option::of("[0-9a-f]{64}"),
        prop::option::of(json_value()),
        prop::option::of(json_value()),
    )
        // `Some(null)` is written as `null` and read back as `None`.
        .prop_map(
            |(finished, states, timers, timers_sha256, source, sink)| SubtaskCheckpoint {
                finished,
                states,
                timers,
                timers_sha256,
                source: source.filter(|v| !v.is_null()),
                sink: sink.filter(|v| !v.is_null()),
            },
        )
}

fn timers() -> impl Strategy<Value = Vec<(usize, Timers)>> {
    prop::collection::vec(
        (
            any::<usize>(),
            prop::collection::vec(
                (any::<i64>(), prop::collection::vec(any::<u8>(), 0..8)),
                0..4,
            ),
        ),
        0..4,
    )
}

/// Strings that stress path validation: separators, dots, NUL, the temp
/// prefix, Windows separators and drive letters, non-ASCII.
fn path_like() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("/".to_owned()),
        Just(".".to_owned()),
        Just("..".to_owned()),
        Just("\\".to_owned()),
        Just("\0".to_owned()),
        Just("C:".to_owned()),
        Just(TEMP_PREFIX.to_owned()),
        Just("~".to_owned()),
        "[a-z]{1,3}",
        "\\PC{1,2}",
    ];
    prop::collection::vec(piece, 0..10).prop_map(|p| p.concat())
}

/// `path` names something strictly under a storage root.
fn stays_under_root(path: &StoragePath) -> bool {
    let root = Path::new("/storage/root");
    let joined = root.join(path.as_str());
    Path::new(path.as_str())
        .components()
        .all(|c| matches!(c, Component::Normal(_)))
        && joined.starts_with(root)
        && joined != root
}

/// States of every kind, with and without TTL, for the heap snapshot.
fn descriptors() -> Vec<StateDescriptor> {
    let ttl = Some(std::time::Duration::from_secs(3600));
    vec![
        StateDescriptor::new("v", StateKind::Value),
        StateDescriptor::new("l", StateKind::List),
        StateDescriptor::new("m", StateKind::Map),
        StateDescriptor {
            ttl,
            ..StateDescriptor::new("vt", StateKind::Value)
        },
        StateDescriptor {
            ttl,
            ..StateDescriptor::new("mt", StateKind::Map)
        },
    ]
}

const MAX_PARALLELISM: u16 = 4;

fn heap_config<'a>(
    dir: &'a Path,
    states: &'a [StateDescriptor],
    key_groups: KeyGroupRange,
) -> BackendConfig<'a> {
    BackendConfig {
        kind: BackendKind::Heap,
        dir,
        states,
        key_groups,
        max_parallelism: MAX_PARALLELISM,
    }
}

/// One write to keyed state: (state, key, user key, value).
type Write = (u32, Vec<u8>, Vec<u8>, Vec<u8>);

fn writes() -> impl Strategy<Value = Vec<Write>> {
    prop::collection::vec(
        (
            0..5u32,
            prop::collection::vec(any::<u8>(), 0..6),
            prop::collection::vec(any::<u8>(), 0..4),
            prop::collection::vec(any::<u8>(), 0..10),
        ),
        0..24,
    )
}

fn apply(backend: &mut dyn KeyedStateBackend, writes: &[Write]) {
    for (state, key, user_key, value) in writes {
        match state {
            0 | 3 => backend.value_set(*state, key, value).unwrap(),
            1 => backend.list_add(*state, key, value).unwrap(),
            _ => backend.map_put(*state, key, user_key, value).unwrap(),
        }
    }
}

/// Everything `writes` touched, read back.
fn read_back(backend: &mut dyn KeyedStateBackend, writes: &[Write]) -> Vec<String> {
    writes
        .iter()
        .map(|(state, key, _, _)| match state {
            0 | 3 => format!("{:?}", backend.value_get(*state, key).unwrap()),
            1 => format!("{:?}", backend.list_get(*state, key).unwrap()),
            _ => format!("{:?}", backend.map_entries(*state, key).unwrap()),
        })
        .collect()
}

/// A heap snapshot file holding `writes`, and the backend that wrote it.
fn heap_snapshot(tmp: &Path, writes: &[Write]) -> (Vec<u8>, Box<dyn KeyedStateBackend>) {
    let states = descriptors();
    let clock = Arc::new(ManualClock::new(1_000));
    let mut backend = open_backend_with_clock(
        heap_config(tmp, &states, KeyGroupRange::all(MAX_PARALLELISM)),
        clock,
    )
    .unwrap();
    apply(backend.as_mut(), writes);
    let dir = tmp.join("snapshot");
    backend.snapshot_local(&dir).unwrap();
    let bytes = std::fs::read(dir.join(SNAPSHOT_FILE)).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    (bytes, backend)
}

/// Restores a heap backend from `bytes` as a snapshot file.
fn restore_heap(
    tmp: &Path,
    bytes: &[u8],
    key_groups: KeyGroupRange,
) -> Result<Box<dyn KeyedStateBackend>, crate::state::StateError> {
    let dir = tmp.join("restore");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(SNAPSHOT_FILE), bytes).unwrap();
    let states = descriptors();
    restore_backend_with_clock(
        heap_config(tmp, &states, key_groups),
        &dir,
        Arc::new(ManualClock::new(1_000)),
    )
}

/// `body` with a valid xxh3 checksum appended, so that it reaches the
/// snapshot decoder proper.
fn with_checksum(mut body: Vec<u8>) -> Vec<u8> {
    let checksum = xxhash_rust::xxh3::xxh3_64(&body);
    body.extend_from_slice(&checksum.to_le_bytes());
    body
}

fn key_groups() -> impl Strategy<Value = KeyGroupRange> {
    (0..=MAX_PARALLELISM, 0..=MAX_PARALLELISM)
        .prop_map(|(a, b)| KeyGroupRange::new(a.min(b), a.max(b)))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn storage_paths_read_back_never_escape_the_root(path in path_like()) {
        if let Ok(p) = StoragePath::new(path.clone()) {
            prop_assert!(stays_under_root(&p), "{:?} was accepted", path);
            prop_assert!(!p.as_str().split('/').any(|c| c.starts_with(TEMP_PREFIX)));
        }
        let json = serde_json::to_string(&path).unwrap();
        let parsed = serde_json::from_str::<StoragePath>(&json);
        prop_assert_eq!(parsed.is_ok(), StoragePath::new(path).is_ok());
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_metadata_decoders(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let _ = serde_json::from_slice::<StateHandle>(&bytes);
        let _ = serde_json::from_slice::<SubtaskCheckpoint>(&bytes);
        let _ = serde_json::from_slice::<Vec<(usize, Timers)>>(&bytes);
        let _ = serde_json::from_slice::<StoragePath>(&bytes);
    }

    #[test]
    fn mutated_metadata_never_panics_and_keeps_paths_valid(
        checkpoint in subtask_checkpoint(),
        mutations in mutations(),
    ) {
        let bytes = serde_json::to_vec(&checkpoint).unwrap();
        let back: SubtaskCheckpoint = serde_json::from_slice(&bytes).unwrap();
        prop_assert_eq!(&back, &checkpoint);
        if let Ok(got) = serde_json::from_slice::<SubtaskCheckpoint>(&mutate(bytes, &mutations)) {
            for (_, handle) in &got.states {
                for file in &handle.files {
                    prop_assert!(stays_under_root(&file.path));
                }
            }
            if let Some(timers) = &got.timers {
                prop_assert!(stays_under_root(timers));
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_metadata_check(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
        part in subtask_checkpoint(),
    ) {
        let path = StoragePath::new("j/chk-1/_metadata").unwrap();
        if let Err(e) = verify_restore(&path, &bytes, "j", 1, &[((0, 0), &part)]) {
            prop_assert!(matches!(e, CheckpointError::Corrupt(_)), "{e}");
        }
    }

    #[test]
    fn mutated_metadata_passes_only_if_it_records_the_parts_sent(
        subtasks in prop::collection::btree_map(
            (0u32..4, 0u32..4),
            subtask_checkpoint(),
            1..4,
        ),
        mutations in mutations(),
    ) {
        let path = StoragePath::new("j/chk-1/_metadata").unwrap();
        let metadata = CheckpointMetadata {
            job: "j".into(),
            layout: None,
            checkpoint: 1,
            triggered_at_ms: 1,
            completed_at_ms: 2,
            subtasks: subtasks.clone().into_iter().collect(),
        };
        let bytes = serde_json::to_vec(&metadata).unwrap();
        let sent: Vec<((u32, u32), &SubtaskCheckpoint)> =
            subtasks.iter().map(|(id, part)| (*id, part)).collect();
        prop_assert!(verify_restore(&path, &bytes, "j", 1, &sent).is_ok());

        let mutated = mutate(bytes, &mutations);
        match verify_restore(&path, &mutated, "j", 1, &sent) {
            Ok(()) => {
                let read: CheckpointMetadata = serde_json::from_slice(&mutated).unwrap();
                prop_assert_eq!((read.job.as_str(), read.checkpoint), ("j", 1));
                for (id, part) in &subtasks {
                    let recorded: Vec<_> =
                        read.subtasks.iter().filter(|(i, _)| i == id).collect();
                    prop_assert_eq!(recorded.len(), 1);
                    prop_assert_eq!(&recorded[0].1, part);
                }
            }
            Err(e) => prop_assert!(matches!(e, CheckpointError::Corrupt(_)), "{e}"),
        }
    }

    #[test]
    fn mutated_path_strings_in_a_handle_are_refused_or_contained(
        handle in state_handle(),
        path in path_like(),
        which in any::<usize>(),
    ) {
        // Replace one path (as text) with a hostile string.
        let mut json = serde_json::to_value(&handle).unwrap();
        if let Some(files) = json["files"].as_array_mut()
            && !files.is_empty()
        {
            let n = files.len();
            files[which % n]["path"] = serde_json::Value::String(path);
        }
        if let Ok(got) = serde_json::from_value::<StateHandle>(json) {
            prop_assert!(got.files.iter().all(|f| stays_under_root(&f.path)));
        }
    }

    #[test]
    fn timers_files_round_trip_and_survive_mutation(
        timers in timers(),
        mutations in mutations(),
    ) {
        let bytes = serde_json::to_vec(&timers).unwrap();
        let back: Vec<(usize, Timers)> = serde_json::from_slice(&bytes).unwrap();
        prop_assert_eq!(back, timers);
        let _ = serde_json::from_slice::<Vec<(usize, Timers)>>(&mutate(bytes, &mutations));
    }

    #[test]
    fn a_download_never_writes_outside_its_directory(local_name in path_like()) {
        let tmp = tempfile::tempdir().unwrap();
        let storage = DirStorage::new(tmp.path().join("storage"));
        let path = StoragePath::new("chk-1/f").unwrap();
        storage.put_bytes(&path, b"data").unwrap();
        let handle = StateHandle {
            backend: BackendKind::Heap,
            files: vec![FileHandle {
                local_name: local_name.clone(), path, size: 4, shared: false, sha256: None,
            }],
            full_size: 4,
            incremental_size: 4,
        };
        let dir = tmp.path().join("a/b/download");
        match super::download(&handle, &storage, &dir) {
            Ok(()) => {
                prop_assert!(!local_name.contains('/') && local_name != "." && local_name != "..");
                prop_assert_eq!(std::fs::read(dir.join(&local_name)).unwrap(), b"data");
            }
            Err(e) => prop_assert!(
                matches!(e, CheckpointError::Corrupt(_) | CheckpointError::Io { .. }),
                "{e}"
            ),
        }
        // Nothing appeared anywhere else.
        let mut found = Vec::new();
        let mut stack = vec![tmp.path().to_path_buf()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let entry = entry.unwrap();
                if entry.file_type().unwrap().is_dir() {
                    stack.push(entry.path());
                } else {
                    found.push(entry.path());
                }
            }
        }
        for f in found {
            prop_assert!(
                f.starts_with(&dir) || f.starts_with(tmp.path().join("storage")),
                "{} written by a download", f.display()
            );
        }
    }

    #[test]
    fn heap_snapshots_round_trip(writes in writes()) {
        let tmp = tempfile::tempdir().unwrap();
        let (bytes, mut original) = heap_snapshot(tmp.path(), &writes);
        let mut restored =
            restore_heap(tmp.path(), &bytes, KeyGroupRange::all(MAX_PARALLELISM)).unwrap();
        prop_assert_eq!(
            read_back(restored.as_mut(), &writes),
            read_back(original.as_mut(), &writes)
        );
    }

    #[test]
    fn mutated_heap_snapshots_never_panic_the_restore(
        writes in writes(),
        mutations in mutations(),
        keep_checksum in any::<bool>(),
        key_groups in key_groups(),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let (bytes, _) = heap_snapshot(tmp.path(), &writes);
        let body = bytes[..bytes.len() - 8].to_vec();
        let mutated = if keep_checksum {
            with_checksum(mutate(body, &mutations))
        } else {
            mutate(bytes, &mutations)
        };
        if let Ok(mut restored) = restore_heap(tmp.path(), &mutated, key_groups) {
            // Whatever was accepted reads without panicking (a TTL value
            // too short for its prefix is an error, not a panic).
            for (state, key, _, _) in &writes {
                let _ = match state {
                    0 | 3 => restored.value_get(*state, key).map(drop),
                    1 => restored.list_get(*state, key).map(drop),
                    _ => restored.map_entries(*state, key).map(drop),
                };
            }
        }
    }

    #[test]
    fn arbitrary_heap_snapshots_never_panic_the_restore(
        body in prop::collection::vec(any::<u8>(), 0..256),
        magic in any::<bool>(),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let mut bytes = if magic { b"WEIRHEAP\x01\0\0\0\x04\0".to_vec() } else { Vec::new() };
        bytes.extend_from_slice(&body);
        let _ = restore_heap(tmp.path(), &with_checksum(bytes), KeyGroupRange::all(MAX_PARALLELISM));
    }
}
