//! Snapshots through checkpoint storage with real backends: incremental
//! RocksDB uploads, restores that see exactly the snapshotted state, heap
//! snapshots, TTL across a restore, and the registry's cleanup over many
//! checkpoints and an aborted one. Time is a `ManualClock`: no sleeps.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::state::ttl::ManualClock;
use crate::state::{
    BackendConfig, BackendKind, DEFAULT_MAX_PARALLELISM, KeyGroupRange, KeyedStateBackend,
    StateDescriptor, StateKind, open_backend_with_clock, restore_backend_with_clock,
};

const MAX: u16 = DEFAULT_MAX_PARALLELISM;
/// State ids of [`states`].
const VALUE: u32 = 0;
const LIST: u32 = 1;
const MAP: u32 = 2;
const TTL: u32 = 3;

fn states() -> Vec<StateDescriptor> {
    vec![
        StateDescriptor::new("value", StateKind::Value),
        StateDescriptor::new("list", StateKind::List),
        StateDescriptor::new("map", StateKind::Map),
        StateDescriptor::new("ttl", StateKind::Value).with_ttl(Duration::from_secs(10)),
    ]
}

fn p(s: &str) -> StoragePath {
    StoragePath::new(s).unwrap()
}

/// A subtask's backend, its working dir and a fake clock.
struct Subtask {
    kind: BackendKind,
    states: Vec<StateDescriptor>,
    clock: Arc<ManualClock>,
    tmp: tempfile::TempDir,
}

impl Subtask {
    fn new(kind: BackendKind) -> Self {
        Self {
            kind,
            states: states(),
            clock: Arc::new(ManualClock::new(1_000_000)),
            tmp: tempfile::tempdir().unwrap(),
        }
    }

    fn cfg<'a>(&'a self, dir: &'a Path) -> BackendConfig<'a> {
        BackendConfig {
            kind: self.kind,
            dir,
            states: &self.states,
            key_groups: KeyGroupRange::all(MAX),
            max_parallelism: MAX,
        }
    }

    fn open(&self, name: &str) -> Box<dyn KeyedStateBackend> {
        open_backend_with_clock(self.cfg(&self.tmp.path().join(name)), self.clock.clone()).unwrap()
    }

    /// Downloads `handle` and restores it into the fresh working dir `name`.
    fn restore(
        &self,
        handle: &StateHandle,
        storage: &dyn CheckpointStorage,
        name: &str,
    ) -> Box<dyn KeyedStateBackend> {
        let download_dir = self.tmp.path().join(format!("{name}-download"));
        download(handle, storage, &download_dir).unwrap();
        restore_backend_with_clock(
            self.cfg(&self.tmp.path().join(name)),
            &download_dir,
            self.clock.clone(),
        )
        .unwrap()
    }

    /// snapshot_local + upload under `chk-<n>/op/0` and `shared/op/0`.
    fn checkpoint(
        &self,
        backend: &mut dyn KeyedStateBackend,
        storage: &dyn CheckpointStorage,
        n: u64,
        previous: Option<&StateHandle>,
    ) -> StateHandle {
        let local = self.tmp.path().join(format!("snap-{n}"));
        backend.snapshot_local(&local).unwrap();
        let handle = upload(
            &local,
            storage,
            &private(n),
            &p("shared/op/0"),
            previous,
            self.kind,
        )
        .unwrap();
        std::fs::remove_dir_all(&local).unwrap();
        handle
    }
}

fn private(n: u64) -> StoragePath {
    p(&format!("chk-{n}/op/0"))
}

/// Deterministic, poorly compressible bytes.
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn key(i: u64) -> Vec<u8> {
    format!("key-{i}").into_bytes()
}

/// What the test expects the value, list and map states to hold.
#[derive(Clone, Default)]
struct Model {
    values: BTreeMap<u64, Vec<u8>>,
    lists: BTreeMap<u64, Vec<Vec<u8>>>,
    maps: BTreeMap<u64, BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl Model {
    fn set(&mut self, b: &mut dyn KeyedStateBackend, i: u64, v: Vec<u8>) {
        b.value_set(VALUE, &key(i), &v).unwrap();
        self.values.insert(i, v);
    }

    fn add(&mut self, b: &mut dyn KeyedStateBackend, i: u64, e: Vec<u8>) {
        b.list_add(LIST, &key(i), &e).unwrap();
        self.lists.entry(i).or_default().push(e);
    }

    fn put(&mut self, b: &mut dyn KeyedStateBackend, i: u64, uk: Vec<u8>, v: Vec<u8>) {
        b.map_put(MAP, &key(i), &uk, &v).unwrap();
        self.maps.entry(i).or_default().insert(uk, v);
    }

    /// Checks every key in `0..keys` against the backend.
    fn check(&self, b: &mut dyn KeyedStateBackend, keys: u64) {
        for i in 0..keys {
            let k = key(i);
            assert_eq!(
                b.value_get(VALUE, &k).unwrap(),
                self.values.get(&i).cloned(),
                "value {i}"
            );
            assert_eq!(
                b.list_get(LIST, &k).unwrap(),
                self.lists.get(&i).cloned().unwrap_or_default(),
                "list {i}"
            );
            let map: Vec<_> = self
                .maps
                .get(&i)
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .collect();
            assert_eq!(b.map_entries(MAP, &k).unwrap(), map, "map {i}");
        }
    }
}

/// Fills every state for keys `0..keys`.
fn load(model: &mut Model, b: &mut dyn KeyedStateBackend, keys: u64) {
    for i in 0..keys {
        model.set(b, i, bytes(i, 100));
        if i % 10 == 0 {
            model.add(b, i, bytes(i + 1, 20));
            model.put(b, i, b"uk".to_vec(), bytes(i + 2, 20));
        }
        if i % 1000 == 999 {
            b.flush().unwrap();
        }
    }
    b.flush().unwrap();
}

/// Changes about 1% of the keys, in every state kind.
fn change_one_percent(model: &mut Model, b: &mut dyn KeyedStateBackend, keys: u64, round: u64) {
    for i in (round % 100..keys).step_by(100) {
        model.set(b, i, bytes(i * 1000 + round, 100));
        model.add(b, i, bytes(round, 8));
        model.put(b, i, format!("r{round}").into_bytes(), bytes(round, 8));
    }
    b.flush().unwrap();
}

#[test]
fn rocksdb_second_checkpoint_uploads_only_new_sst_files() {
    let t = Subtask::new(BackendKind::RocksDb);
    let storage = DirStorage::new(t.tmp.path().join("storage"));
    let mut db = t.open("db");
    let mut model = Model::default();
    const KEYS: u64 = 20_000; // ~2.5 MB: one memtable, one L0 file, no compaction
    load(&mut model, &mut *db, KEYS);

    let first = t.checkpoint(&mut *db, &storage, 1, None);
    let model_1 = model.clone();
    assert_eq!(
        first.incremental_size, first.full_size,
        "the first checkpoint is full"
    );
    let ssts_1: Vec<_> = first.files.iter().filter(|f| f.shared).cloned().collect();
    assert!(!ssts_1.is_empty());
    assert!(
        first
            .files
            .iter()
            .all(|f| f.shared == f.local_name.ends_with(".sst"))
    );
    assert!(
        first
            .files
            .iter()
            .any(|f| f.local_name == "CURRENT" && !f.shared)
    );
    assert!(
        first
            .shared_paths()
            .all(|f| f.starts_with(&p("shared/op/0")))
    );
    assert!(first.private_paths().all(|f| f.starts_with(&private(1))));

    change_one_percent(&mut model, &mut *db, KEYS, 1);
    let second = t.checkpoint(&mut *db, &storage, 2, Some(&first));
    let model_2 = model.clone();

    // Unchanged SST files are referenced, not uploaded again ...
    for old in &ssts_1 {
        assert!(
            second.files.contains(old),
            "{} was not referenced",
            old.local_name
        );
    }
    let new_ssts: Vec<_> = second
        .files
        .iter()
        .filter(|f| f.shared && !ssts_1.contains(f))
        .collect();
    assert!(
        !new_ssts.is_empty(),
        "the changed keys are in a new SST file"
    );
    let listed = storage.list(&p("shared/op/0")).unwrap();
    assert_eq!(
        listed.len(),
        ssts_1.len() + new_ssts.len(),
        "no SST stored twice"
    );
    // ... so the second checkpoint uploads a small fraction of its size.
    let uploaded: u64 = new_ssts.iter().map(|f| f.size).sum::<u64>()
        + second
            .files
            .iter()
            .filter(|f| !f.shared)
            .map(|f| f.size)
            .sum::<u64>();
    assert_eq!(second.incremental_size, uploaded);
    assert_eq!(
        second.full_size,
        second.files.iter().map(|f| f.size).sum::<u64>()
    );
    assert!(
        second.incremental_size * 10 < second.full_size,
        "incremental {} of full {}",
        second.incremental_size,
        second.full_size
    );

    // Later writes are not in either checkpoint.
    change_one_percent(&mut model, &mut *db, KEYS, 2);
    model.set(&mut *db, KEYS + 1, b"after".to_vec());
    db.flush().unwrap();

    let mut restored = t.restore(&second, &storage, "restored-2");
    model_2.check(&mut *restored, KEYS + 2);
    let mut restored = t.restore(&first, &storage, "restored-1");
    model_1.check(&mut *restored, KEYS + 2);
    // The live database still has everything.
    model.check(&mut *db, KEYS + 2);
}

#[test]
fn restored_rocksdb_continues_incrementally_from_the_restored_handle() {
    let t = Subtask::new(BackendKind::RocksDb);
    let storage = DirStorage::new(t.tmp.path().join("storage"));
    let mut db = t.open("db");
    let mut model = Model::default();
    load(&mut model, &mut *db, 5_000);
    let first = t.checkpoint(&mut *db, &storage, 1, None);
    drop(db);

    let mut restored = t.restore(&first, &storage, "restored");
    change_one_percent(&mut model, &mut *restored, 5_000, 1);
    let second = t.checkpoint(&mut *restored, &storage, 2, Some(&first));
    for old in first.files.iter().filter(|f| f.shared) {
        assert!(
            second.files.contains(old),
            "{} re-uploaded after restore",
            old.local_name
        );
    }
    assert!(second.incremental_size < second.full_size / 2);
    let mut again = t.restore(&second, &storage, "restored-again");
    model.check(&mut *again, 5_000);
}

#[test]
fn heap_snapshot_round_trips_in_full() {
    let t = Subtask::new(BackendKind::Heap);
    let storage = DirStorage::new(t.tmp.path().join("storage"));
    let mut heap = t.open("unused");
    let mut model = Model::default();
    load(&mut model, &mut *heap, 3_000);
    heap.map_put(MAP, &key(5), b"", b"empty user key").unwrap();
    model
        .maps
        .entry(5)
        .or_default()
        .insert(Vec::new(), b"empty user key".to_vec());

    let first = t.checkpoint(&mut *heap, &storage, 1, None);
    assert_eq!(first.files.len(), 1);
    assert_eq!(first.files[0].local_name, crate::state::heap::SNAPSHOT_FILE);
    assert!(!first.files[0].shared);
    assert_eq!(first.incremental_size, first.full_size);
    let model_1 = model.clone();

    change_one_percent(&mut model, &mut *heap, 3_000, 1);
    heap.clear(LIST, &key(0)).unwrap();
    model.lists.remove(&0);
    let second = t.checkpoint(&mut *heap, &storage, 2, Some(&first));
    assert_eq!(
        second.incremental_size, second.full_size,
        "heap snapshots are full"
    );
    // Later writes are in no snapshot.
    change_one_percent(&mut Model::default(), &mut *heap, 3_000, 2);

    model_1.check(&mut *t.restore(&first, &storage, "r1"), 3_001);
    model.check(&mut *t.restore(&second, &storage, "r2"), 3_001);
}

#[test]
fn heap_restore_rejects_corrupt_and_mismatched_snapshots() {
    let t = Subtask::new(BackendKind::Heap);
    let mut heap = t.open("unused");
    heap.value_set(VALUE, b"k", b"v").unwrap();
    let dir = t.tmp.path().join("snap");
    heap.snapshot_local(&dir).unwrap();
    assert!(
        heap.snapshot_local(&dir).is_err(),
        "a snapshot never overwrites one"
    );
    let file = dir.join(crate::state::heap::SNAPSHOT_FILE);
    let good = std::fs::read(&file).unwrap();

    // A state declared with another kind.
    let mut other = t.states.clone();
    other[VALUE as usize].kind = StateKind::List;
    let cfg = BackendConfig {
        states: &other,
        ..t.cfg(&dir)
    };
    let err = restore_backend_with_clock(cfg, &dir, t.clock.clone())
        .err()
        .unwrap();
    assert!(err.to_string().contains("declared as list"), "{err}");

    // Other key groups (another parallelism).
    let cfg = BackendConfig {
        key_groups: KeyGroupRange::new(0, 1),
        ..t.cfg(&dir)
    };
    let err = restore_backend_with_clock(cfg, &dir, t.clock.clone())
        .err()
        .unwrap();
    assert!(
        err.to_string()
            .contains("outside this subtask's key groups"),
        "{err}"
    );

    // One flipped byte.
    let mut bad = good.clone();
    bad[20] ^= 1;
    std::fs::write(&file, &bad).unwrap();
    let err = restore_backend_with_clock(t.cfg(&dir), &dir, t.clock.clone())
        .err()
        .unwrap();
    assert!(err.to_string().contains("checksum"), "{err}");

    std::fs::write(&file, &good).unwrap();
    let mut back = restore_backend_with_clock(t.cfg(&dir), &dir, t.clock.clone()).unwrap();
    assert_eq!(back.value_get(VALUE, b"k").unwrap(), Some(b"v".to_vec()));
}

/// TTL expiry times are stored with the values, so they survive a restore:
/// an entry written at t expires at t + ttl, however long the restore took.
fn ttl_survives_restore(kind: BackendKind) {
    let t = Subtask::new(kind);
    let storage = DirStorage::new(t.tmp.path().join("storage"));
    let mut b = t.open("db");
    b.value_set(TTL, b"early", b"1").unwrap();
    t.clock.advance(Duration::from_secs(6));
    b.value_set(TTL, b"late", b"2").unwrap();
    let handle = t.checkpoint(&mut *b, &storage, 1, None);

    let mut r = t.restore(&handle, &storage, "restored");
    assert_eq!(r.value_get(TTL, b"early").unwrap(), Some(b"1".to_vec()));
    t.clock.advance(Duration::from_secs(5)); // early: 11 s old, late: 5 s
    let mut r = t.restore(&handle, &storage, "restored-later");
    assert_eq!(
        r.value_get(TTL, b"early").unwrap(),
        None,
        "expired on schedule"
    );
    assert_eq!(r.value_get(TTL, b"late").unwrap(), Some(b"2".to_vec()));
    t.clock.advance(Duration::from_secs(5));
    assert_eq!(r.value_get(TTL, b"late").unwrap(), None);
}

#[test]
fn ttl_survives_restore_rocksdb() {
    ttl_survives_restore(BackendKind::RocksDb);
}

#[test]
fn ttl_survives_restore_heap() {
    ttl_survives_restore(BackendKind::Heap);
}

#[test]
fn download_rejects_wrong_sizes_and_escaping_names() {
    let t = Subtask::new(BackendKind::RocksDb);
    let storage = DirStorage::new(t.tmp.path().join("storage"));
    let mut db = t.open("db");
    db.value_set(VALUE, b"k", b"v").unwrap();
    let handle = t.checkpoint(&mut *db, &storage, 1, None);

    let mut wrong_size = handle.clone();
    wrong_size.files[0].size += 1;
    let err = download(&wrong_size, &storage, &t.tmp.path().join("d1")).unwrap_err();
    assert!(matches!(err, CheckpointError::Corrupt(_)), "{err}");

    let mut escaping = handle.clone();
    escaping.files[0].local_name = "../outside".into();
    let err = download(&escaping, &storage, &t.tmp.path().join("d2")).unwrap_err();
    assert!(matches!(err, CheckpointError::Corrupt(_)), "{err}");
    assert!(!t.tmp.path().join("outside").exists());

    storage.delete(&handle.files[0].path).unwrap();
    let err = download(&handle, &storage, &t.tmp.path().join("d3")).unwrap_err();
    assert!(matches!(err, CheckpointError::NotFound(_)), "{err}");

    // A handle survives JSON (the checkpoint metadata) unchanged.
    let json = serde_json::to_string(&handle).unwrap();
    assert_eq!(serde_json::from_str::<StateHandle>(&json).unwrap(), handle);
}

/// Retention 2 over many checkpoints of a real RocksDB whose compactions
/// drop SST files, one of them aborted: after each step, the shared files
/// in storage are exactly those the retained checkpoints reference.
#[test]
fn registry_keeps_exactly_the_files_retained_checkpoints_reference() {
    const RETAIN: usize = 2;
    const KEYS: u64 = 4_000;
    let t = Subtask::new(BackendKind::RocksDb);
    let storage = DirStorage::new(t.tmp.path().join("storage"));
    let shared = p("shared/op/0");
    let db_dir = t.tmp.path().join("db");
    let mut db = open_backend_with_clock(t.cfg(&db_dir), t.clock.clone()).unwrap();
    let mut model = Model::default();
    let mut registry = SharedStateRegistry::new();
    let mut retained: Vec<(u64, StateHandle, Model)> = Vec::new();
    let mut deleted = 0;
    load(&mut model, &mut *db, KEYS);

    let assert_storage_is_exact =
        |registry: &SharedStateRegistry, retained: &[(u64, StateHandle, Model)]| {
            let wanted: BTreeSet<StoragePath> = retained
                .iter()
                .flat_map(|(_, h, _)| h.shared_paths().cloned())
                .collect();
            let stored: BTreeSet<StoragePath> =
                storage.list(&shared).unwrap().into_iter().collect();
            assert_eq!(
                stored, wanted,
                "shared files in storage vs referenced by retained checkpoints"
            );
            assert_eq!(
                registry.referenced(),
                wanted.into_iter().collect::<Vec<_>>()
            );
            for n in registry.checkpoints() {
                assert!(retained.iter().any(|(m, ..)| *m == n));
            }
        };

    for n in 1..=12u64 {
        change_one_percent(&mut model, &mut *db, KEYS, n);
        if n % 4 == 0 {
            db.compact().unwrap();
        }
        let previous = retained.last().map(|(_, h, _)| h.clone());
        let handle = t.checkpoint(&mut *db, &storage, n, previous.as_ref());

        if n == 7 {
            // Aborted (say, another subtask failed): nothing registers it.
            // Its new uploads are orphans; what it reused is not.
            let uploaded: Vec<StoragePath> = handle.shared_paths().cloned().collect();
            let orphans = registry.orphans(&uploaded);
            let reused: BTreeSet<&StoragePath> =
                previous.as_ref().unwrap().shared_paths().collect();
            let new: BTreeSet<StoragePath> = uploaded
                .iter()
                .filter(|f| !reused.contains(f))
                .cloned()
                .collect();
            assert!(!new.is_empty());
            assert_eq!(
                orphans,
                new.into_iter().collect::<Vec<_>>(),
                "orphans are exactly the files checkpoint 7 uploaded"
            );
            // Listing the shared prefix finds the same orphans (when the
            // handle never reached the coordinator).
            assert_eq!(registry.orphans(&storage.list(&shared).unwrap()), orphans);
            for f in &orphans {
                storage.delete(f).unwrap();
            }
            storage.delete_prefix(&p(&format!("chk-{n}"))).unwrap();
            assert_storage_is_exact(&registry, &retained);
            continue;
        }

        // Completed: register first, then release what it subsumes.
        registry.register(n, handle.shared_paths().cloned());
        retained.push((n, handle, model.clone()));
        while retained.len() > RETAIN {
            let (old, ..) = retained.remove(0);
            for f in registry.release(old) {
                storage.delete(&f).unwrap();
                deleted += 1;
            }
            storage.delete_prefix(&p(&format!("chk-{old}"))).unwrap();
        }
        assert_storage_is_exact(&registry, &retained);
    }
    assert!(
        deleted > 0,
        "compactions dropped SST files, so some shared files were deleted"
    );
    assert!(storage.list(&p("chk-1")).unwrap().is_empty());

    // Every retained checkpoint still restores completely.
    for (n, handle, model) in &retained {
        let mut r = t.restore(handle, &storage, &format!("restored-{n}"));
        model.check(&mut *r, KEYS);
    }
}
