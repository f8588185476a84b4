//! Tests of [`super`] (`snapshot.rs`).

use std::io::{Seek, SeekFrom, Write};

use super::*;
use crate::checkpoint::DirStorage;

fn p(s: &str) -> StoragePath {
    StoragePath::new(s).unwrap()
}

/// Deterministic, poorly compressible bytes.
fn bytes(seed: u8, len: usize) -> Vec<u8> {
    let mut x = u64::from(seed).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Writes `files` into a fresh local snapshot dir `name` and uploads it
/// as checkpoint `n` of a RocksDB subtask (`.sst` files are shared).
fn upload_files(
    tmp: &Path,
    storage: &DirStorage,
    name: &str,
    n: u64,
    files: &[(&str, &[u8])],
    previous: Option<&StateHandle>,
) -> StateHandle {
    let dir = tmp.join(name);
    fs::create_dir_all(&dir).unwrap();
    for (file, contents) in files {
        fs::write(dir.join(file), contents).unwrap();
    }
    upload(
        &dir,
        storage,
        &p(&format!("j/chk-{n}/0-0/1")),
        &p("j/shared"),
        previous,
        BackendKind::RocksDb,
    )
    .unwrap()
}

#[test]
fn upload_records_the_sha256_of_every_file_it_stores() {
    let tmp = tempfile::tempdir().unwrap();
    let storage = DirStorage::new(tmp.path().join("storage"));
    let sst = bytes(1, 200_000);
    let handle = upload_files(
        tmp.path(),
        &storage,
        "snap-1",
        1,
        &[("000007.sst", &sst), ("CURRENT", b"MANIFEST-000001\n")],
        None,
    );
    for file in &handle.files {
        let stored = storage.get_bytes(&file.path).unwrap();
        assert_eq!(
            file.sha256.as_deref(),
            Some(hex(&Sha256::digest(&stored)).as_str()),
            "{}",
            file.path
        );
    }
    assert_eq!(
        handle.files[0].sha256.as_deref(),
        Some(hex(&Sha256::digest(&sst)).as_str()),
        "the hash is of the local file's bytes"
    );
}

#[test]
fn a_shared_file_referenced_again_keeps_its_recorded_hash() {
    let tmp = tempfile::tempdir().unwrap();
    let storage = DirStorage::new(tmp.path().join("storage"));
    let sst = bytes(2, 10_000);
    let first = upload_files(
        tmp.path(),
        &storage,
        "snap-1",
        1,
        &[("000007.sst", &sst)],
        None,
    );
    // Pretend the recorded hash is another: a reference copies the
    // handle, it does not hash the file again.
    let mut previous = first.clone();
    previous.files[0].sha256 = Some("recorded".into());
    let second = upload_files(
        tmp.path(),
        &storage,
        "snap-2",
        2,
        &[("000007.sst", &sst), ("000008.sst", b"new")],
        Some(&previous),
    );
    assert_eq!(second.files[0], previous.files[0]);
    assert_eq!(second.incremental_size, 3, "only the new file was stored");
    assert!(second.files[1].sha256.is_some());
}

/// The finding: `download` checked sizes only, so a file changed in
/// storage without changing its length was restored from.
#[test]
fn a_file_changed_in_storage_without_changing_its_size_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let storage = DirStorage::new(tmp.path().join("storage"));
    let handle = upload_files(
        tmp.path(),
        &storage,
        "snap-1",
        1,
        &[("000007.sst", &bytes(3, 100_000)), ("CURRENT", b"x\n")],
        None,
    );
    download(&handle, &storage, &tmp.path().join("ok")).unwrap();

    let sst = &handle.files[0];
    assert!(sst.shared, "{sst:?}");
    let stored = tmp.path().join("storage").join(sst.path.as_str());
    let mut f = fs::OpenOptions::new().write(true).open(&stored).unwrap();
    f.seek(SeekFrom::Start(sst.size / 2)).unwrap();
    f.write_all(b"sixteen bytes!!!").unwrap();
    drop(f);
    assert_eq!(fs::metadata(&stored).unwrap().len(), sst.size, "same size");

    let err = download(&handle, &storage, &tmp.path().join("bad")).unwrap_err();
    let CheckpointError::Corrupt(why) = &err else {
        panic!("{err:?}");
    };
    assert!(why.contains(&format!("`{}`", sst.path)), "{why}");
    assert!(
        !why.contains(&tmp.path().display().to_string()),
        "names the storage path, not a local one: {why}"
    );
}

#[test]
fn a_handle_without_hashes_still_downloads_checked_by_size() {
    let tmp = tempfile::tempdir().unwrap();
    let storage = DirStorage::new(tmp.path().join("storage"));
    let sst = bytes(4, 50_000);
    let handle = upload_files(
        tmp.path(),
        &storage,
        "snap-1",
        1,
        &[("000007.sst", &sst)],
        None,
    );
    // As written before files were hashed: no `sha256` field at all.
    let mut json = serde_json::to_value(&handle).unwrap();
    json["files"][0].as_object_mut().unwrap().remove("sha256");
    assert!(!json.to_string().contains("sha256"), "{json}");
    let old: StateHandle = serde_json::from_value(json).unwrap();
    assert_eq!(old.files[0].sha256, None);
    assert_eq!(
        serde_json::to_value(&old).unwrap()["files"][0].get("sha256"),
        None,
        "and written back the same way"
    );

    download(&old, &storage, &tmp.path().join("d1")).unwrap();
    assert_eq!(fs::read(tmp.path().join("d1/000007.sst")).unwrap(), sst);

    // Its size is still checked.
    let stored = tmp.path().join("storage").join(old.files[0].path.as_str());
    fs::OpenOptions::new()
        .write(true)
        .open(&stored)
        .unwrap()
        .set_len(100)
        .unwrap();
    let err = download(&old, &storage, &tmp.path().join("d2")).unwrap_err();
    assert!(matches!(err, CheckpointError::Corrupt(_)), "{err}");
}

#[test]
fn a_timers_file_changed_in_storage_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let storage = DirStorage::new(tmp.path().to_path_buf());
    let path = p("j/chk-1/0-0/timers.json");
    let written = br#"[[1,[[5,[1,2]]]]]"#;
    storage.put_bytes(&path, written).unwrap();
    let sha256 = sha256_hex(written);
    assert_eq!(
        get_checked(&storage, &path, Some(&sha256)).unwrap(),
        written
    );
    // Written before timers files were hashed: read as it is.
    assert_eq!(get_checked(&storage, &path, None).unwrap(), written);

    storage.put_bytes(&path, br#"[[1,[[6,[1,2]]]]]"#).unwrap();
    let err = get_checked(&storage, &path, Some(&sha256)).unwrap_err();
    let CheckpointError::Corrupt(why) = &err else {
        panic!("{err:?}");
    };
    assert!(why.contains("`j/chk-1/0-0/timers.json`"), "{why}");
}

fn part(path: &str, sha256: &str, source: Option<serde_json::Value>) -> SubtaskCheckpoint {
    SubtaskCheckpoint {
        finished: false,
        states: vec![(
            1,
            StateHandle {
                backend: BackendKind::RocksDb,
                files: vec![FileHandle {
                    local_name: "000007.sst".into(),
                    path: p(path),
                    size: 10,
                    shared: true,
                    sha256: Some(sha256.into()),
                }],
                full_size: 10,
                incremental_size: 10,
            },
        )],
        timers: None,
        timers_sha256: None,
        source,
        sink: Some(serde_json::json!({ "parts": ["a"], "next": 2 })),
    }
}

fn metadata(subtasks: Vec<((u32, u32), SubtaskCheckpoint)>) -> CheckpointMetadata {
    CheckpointMetadata {
        job: "j".into(),
        layout: None,
        checkpoint: 3,
        triggered_at_ms: 1,
        completed_at_ms: 2,
        subtasks,
    }
}

#[test]
fn the_metadata_path_is_in_the_checkpoints_directory() {
    assert_eq!(metadata_path("j", 3).unwrap(), p("j/chk-3/_metadata"));
    assert!(metadata_path("../j", 3).is_err());
}

#[test]
fn a_restore_matching_its_metadata_passes() {
    let path = metadata_path("j", 3).unwrap();
    let a = part(
        "j/shared/a.sst",
        "aa",
        Some(serde_json::json!({ "next": 7 })),
    );
    let b = part("j/shared/b.sst", "bb", None);
    let bytes =
        serde_json::to_vec(&metadata(vec![((0, 0), a.clone()), ((0, 1), b.clone())])).unwrap();
    verify_restore(&path, &bytes, "j", 3, &[((0, 0), &a), ((0, 1), &b)]).unwrap();
    // A TaskManager checks only the subtasks it restores.
    verify_restore(&path, &bytes, "j", 3, &[((0, 1), &b)]).unwrap();
    // A `null` position in memory is what JSON reads back as none.
    let null = part("j/shared/b.sst", "bb", Some(serde_json::Value::Null));
    verify_restore(&path, &bytes, "j", 3, &[((0, 1), &null)]).unwrap();
}

#[test]
fn a_restore_not_matching_its_metadata_is_refused_naming_the_file() {
    let path = metadata_path("j", 3).unwrap();
    let a = part(
        "j/shared/a.sst",
        "aa",
        Some(serde_json::json!({ "next": 7 })),
    );
    let good = metadata(vec![((0, 0), a.clone())]);
    let bytes = |m: &CheckpointMetadata| serde_json::to_vec(m).unwrap();

    let mut other_job = good.clone();
    other_job.job = "k".into();
    let mut other_checkpoint = good.clone();
    other_checkpoint.checkpoint = 2;
    let mut twice = good.clone();
    twice.subtasks.push(((0, 0), a.clone()));
    let missing = metadata(vec![((0, 1), a.clone())]);
    let mut other_hash = good.clone();
    other_hash.subtasks[0].1.states[0].1.files[0].sha256 = Some("ab".into());
    let mut other_source = good.clone();
    other_source.subtasks[0].1.source = Some(serde_json::json!({ "next": 8 }));
    let mut finished = good.clone();
    finished.subtasks[0].1.finished = true;
    let mut other_timers = good.clone();
    other_timers.subtasks[0].1.timers_sha256 = Some("cd".into());

    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", Vec::new(), "unreadable"),
        ("not JSON", b"{\"job\": \"j\", ".to_vec(), "unreadable"),
        ("not metadata", b"{\"job\": \"j\"}".to_vec(), "unreadable"),
        ("another job", bytes(&other_job), "of job `k`"),
        (
            "another checkpoint",
            bytes(&other_checkpoint),
            "checkpoint 2",
        ),
        ("a subtask twice", bytes(&twice), "twice"),
        ("no part", bytes(&missing), "no part for subtask 0/0"),
        ("another hash", bytes(&other_hash), "`states`"),
        ("another position", bytes(&other_source), "`source`"),
        ("finished", bytes(&finished), "`finished`"),
        ("another timers hash", bytes(&other_timers), "`timers`"),
    ];
    for (case, bytes, says) in cases {
        let err = verify_restore(&path, &bytes, "j", 3, &[((0, 0), &a)]).unwrap_err();
        let CheckpointError::Corrupt(why) = &err else {
            panic!("{case}: {err:?}");
        };
        assert!(why.starts_with("`j/chk-3/_metadata`: "), "{case}: {why}");
        assert!(why.contains(says), "{case}: {why}");
    }
    verify_restore(&path, &bytes(&good), "j", 3, &[((0, 0), &a)]).unwrap();
}

#[test]
fn the_jobmanagers_metadata_reads_back() {
    // The JSON as the JobManager wrote it before `CheckpointMetadata`
    // existed (`serde_json::json!`, keys sorted): still readable.
    let a = part("j/shared/a.sst", "aa", None);
    let written = serde_json::json!({
        "job": "j",
        "checkpoint": 3,
        "triggered_at_ms": 1,
        "completed_at_ms": 2,
        "subtasks": [((0u32, 0u32), &a)],
    });
    let read: CheckpointMetadata = serde_json::from_value(written).unwrap();
    assert_eq!(read, metadata(vec![((0, 0), a)]));
}
