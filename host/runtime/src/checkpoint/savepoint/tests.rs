//! The savepoint state file: round trips across backends and key-group
//! splits, and a clear error for every kind of bad file.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use weir_state::ttl::ManualClock;
use weir_state::{
    BackendConfig, BackendKind, DEFAULT_MAX_PARALLELISM, KeyGroupRange, KeyedStateBackend,
    StateDescriptor, StateKind, key_group_range_for_subtask, open_backend_with_clock,
};

use super::*;

const MAX: u16 = DEFAULT_MAX_PARALLELISM;

fn states() -> Vec<StateDescriptor> {
    vec![
        StateDescriptor::new("count", StateKind::Value),
        StateDescriptor::new("events", StateKind::List),
        StateDescriptor::new("seen", StateKind::Map).with_ttl(Duration::from_secs(60)),
    ]
}

fn open(
    dir: &Path,
    kind: BackendKind,
    states: &[StateDescriptor],
    key_groups: KeyGroupRange,
) -> Box<dyn KeyedStateBackend> {
    open_backend_with_clock(
        BackendConfig {
            kind,
            dir,
            states,
            key_groups,
            max_parallelism: MAX,
        },
        Arc::new(ManualClock::new(1_000)),
    )
    .unwrap()
}

/// A backend of `kind` holding 500 keys over every kind of state.
fn filled(dir: &Path, kind: BackendKind) -> Box<dyn KeyedStateBackend> {
    let mut b = open(dir, kind, &states(), KeyGroupRange::all(MAX));
    for i in 0..500u32 {
        let key = format!("k{i}");
        b.value_set(0, key.as_bytes(), &i.to_le_bytes()).unwrap();
        if i % 2 == 0 {
            b.list_add(1, key.as_bytes(), b"e").unwrap();
        }
        if i % 5 == 0 {
            b.map_put(2, key.as_bytes(), b"u", &i.to_be_bytes())
                .unwrap();
        }
    }
    b
}

fn header() -> SavepointHeader {
    SavepointHeader {
        operator: "count".into(),
        max_parallelism: MAX,
        key_groups: KeyGroupRange::all(MAX),
        states: states().iter().map(SavedState::of).collect(),
    }
}

fn reads(b: &mut dyn KeyedStateBackend, keys: impl Iterator<Item = u32>) -> Vec<String> {
    keys.map(|i| {
        let key = format!("k{i}");
        let key = key.as_bytes();
        format!(
            "{:?} {:?} {:?}",
            b.value_get(0, key).unwrap(),
            b.list_get(1, key).unwrap(),
            b.map_entries(2, key).unwrap()
        )
    })
    .collect()
}

/// A written savepoint file and the reads of its source.
fn written(dir: &Path) -> (PathBuf, Vec<String>) {
    let mut source = filled(&dir.join("source"), BackendKind::RocksDb);
    let path = dir.join("count-0.state");
    let summary = write(&path, &header(), source.as_mut()).unwrap();
    assert_eq!(summary.entries, vec![500, 250, 100]);
    assert_eq!(summary.file_bytes, std::fs::metadata(&path).unwrap().len());
    (path, reads(source.as_mut(), 0..500))
}

#[test]
fn a_savepoint_restores_on_either_backend_and_at_another_parallelism() {
    let dir = tempfile::tempdir().unwrap();
    let (path, expected) = written(dir.path());
    let file = SavepointFile::new(&path);
    assert_eq!(file.header().unwrap(), header());
    assert_eq!(file.verify().unwrap().entries, vec![500, 250, 100]);

    // The same parallelism, on the other backend and on the same one.
    for kind in [BackendKind::Heap, BackendKind::RocksDb] {
        let all = KeyGroupRange::all(MAX);
        let mut b = open(&dir.path().join(format!("{kind:?}")), kind, &states(), all);
        file.import_into(b.as_mut(), &states(), all, None).unwrap();
        b.flush().unwrap();
        assert_eq!(reads(b.as_mut(), 0..500), expected, "{kind:?}");
    }

    // Three subtasks, each taking only its own key groups.
    let mut merged: Vec<Option<String>> = vec![None; 500];
    for subtask in 0..3 {
        let range = key_group_range_for_subtask(MAX, 3, subtask);
        let mut b = open(
            &dir.path().join(format!("p3-{subtask}")),
            BackendKind::Heap,
            &states(),
            range,
        );
        file.import_into(b.as_mut(), &states(), range, None)
            .unwrap();
        for i in 0..500u32 {
            let key = format!("k{i}");
            if range.contains(weir_state::key_group_of(key.as_bytes(), MAX)) {
                let read = reads(b.as_mut(), i..i + 1).remove(0);
                assert!(merged[i as usize].replace(read).is_none());
            }
        }
    }
    let merged: Vec<String> = merged.into_iter().map(Option::unwrap).collect();
    assert_eq!(merged, expected);
}

#[test]
fn states_are_found_by_name_and_a_changed_kind_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (path, expected) = written(dir.path());
    let file = SavepointFile::new(&path);
    let all = KeyGroupRange::all(MAX);

    // Declared in another order, with one new state and one dropped
    // (`events`): the others keep their contents, the new one is empty.
    let reordered = vec![
        StateDescriptor::new("seen", StateKind::Map).with_ttl(Duration::from_secs(60)),
        StateDescriptor::new("new", StateKind::Value),
        StateDescriptor::new("count", StateKind::Value),
    ];
    let mut b = open(&dir.path().join("re"), BackendKind::Heap, &reordered, all);
    file.import_into(b.as_mut(), &reordered, all, None).unwrap();
    for i in [0u32, 5, 7, 499] {
        let key = format!("k{i}");
        let key = key.as_bytes();
        let line = &expected[i as usize];
        assert!(
            line.starts_with(&format!("{:?}", b.value_get(2, key).unwrap())),
            "{line}"
        );
        assert!(
            line.ends_with(&format!("{:?}", b.map_entries(0, key).unwrap())),
            "{line}"
        );
        assert_eq!(b.value_get(1, key).unwrap(), None);
    }

    let changed = vec![StateDescriptor::new("events", StateKind::Map)];
    let mut b = open(&dir.path().join("ch"), BackendKind::Heap, &changed, all);
    let err = file
        .import_into(b.as_mut(), &changed, all, None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("state `events` of operator `count`") && err.contains("List"),
        "{err}"
    );
}

fn assert_refused(path: &Path, expected: &str) {
    let err = SavepointFile::new(path).verify().unwrap_err().to_string();
    assert!(
        err.contains(expected) && err.contains(&path.display().to_string()),
        "{err}"
    );
}

#[test]
fn bad_files_are_refused_with_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = written(dir.path());
    let good = std::fs::read(&path).unwrap();
    let bad = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    };

    assert_refused(&dir.path().join("missing"), "No such file");
    assert_refused(&bad("empty", b""), "not a savepoint state file");
    assert_refused(&bad("other", b"{\"json\": true}"), "wrong magic bytes");
    assert_refused(&bad("truncated", &good[..good.len() / 2]), "truncated");
    assert_refused(&bad("no-digest", &good[..good.len() - 5]), "truncated");

    // One flipped byte in the last entry's value (before the footer: the
    // end tag, the count and the digest) ...
    let mut flipped = good.clone();
    flipped[good.len() - 42] ^= 0x01;
    assert_refused(&bad("flipped", &flipped), "checksum mismatch");
    // ... or anywhere else in the entries: the file is corrupt either way.
    for at in [good.len() / 3, good.len() / 2, good.len() - 100] {
        let mut flipped = good.clone();
        flipped[at] ^= 0x10;
        assert_refused(&bad(&format!("flipped-{at}"), &flipped), "corrupt");
    }

    let mut trailing = good.clone();
    trailing.push(0);
    assert_refused(&bad("trailing", &trailing), "after the checksum");

    let mut newer = good.clone();
    newer[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    assert_refused(&bad("newer", &newer), "newer than this weir reads");

    // A failed import leaves the caller to discard the backend; the file
    // itself is never changed by reading it.
    assert_eq!(std::fs::read(&path).unwrap(), good);
}

#[test]
fn a_savepoint_never_overwrites_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = written(dir.path());
    let before = std::fs::read(&path).unwrap();
    let mut b = filled(&dir.path().join("again"), BackendKind::Heap);
    let err = write(&path, &header(), b.as_mut()).unwrap_err();
    assert!(matches!(err, SavepointError::Io { .. }), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[test]
fn an_import_with_a_migration_rewrites_only_the_migrated_states_values() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = written(dir.path());
    let file = SavepointFile::new(&path);
    let all = KeyGroupRange::all(MAX);
    let mut b = open(
        &dir.path().join("migrated"),
        BackendKind::Heap,
        &states(),
        all,
    );
    // `count` (u32 LE) becomes a u64 LE plus the key's length; `seen` (map,
    // with TTL) gets a marker; `events` is not migrated.
    let mut migration = Migration {
        states: vec![true, false, true],
        migrate: Box::new(|state, key, old| match state {
            0 => {
                let n = u32::from_le_bytes(old.try_into().unwrap());
                Ok([u64::from(n).to_le_bytes().to_vec(), vec![key.len() as u8]].concat())
            }
            2 => Ok([old, b"+"].concat()),
            other => Err(format!("state {other} is not migrated")),
        }),
    };
    file.import_into(b.as_mut(), &states(), all, Some(&mut migration))
        .unwrap();
    b.flush().unwrap();
    let key = b"k10";
    let mut count = 10u64.to_le_bytes().to_vec();
    count.push(3);
    assert_eq!(b.value_get(0, key).unwrap(), Some(count));
    assert_eq!(b.list_get(1, key).unwrap(), vec![b"e".to_vec()]);
    assert_eq!(
        b.map_entries(2, key).unwrap(),
        vec![(b"u".to_vec(), [&10u32.to_be_bytes()[..], b"+"].concat())]
    );

    // A migration that refuses one key stops the import with its message.
    let mut b = open(
        &dir.path().join("refused"),
        BackendKind::Heap,
        &states(),
        all,
    );
    let mut refusing = Migration {
        states: vec![true, false, false],
        migrate: Box::new(|_, key, old| {
            if key == b"k7" {
                Err("operator `count` state `count` key \"k7\": no".into())
            } else {
                Ok(old.to_vec())
            }
        }),
    };
    let err = file
        .import_into(b.as_mut(), &states(), all, Some(&mut refusing))
        .unwrap_err();
    assert!(
        matches!(&err, SavepointError::Migration(m) if m.contains("\"k7\": no")),
        "{err}"
    );
}
