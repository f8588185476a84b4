//! The keyed-state test suite, run against every backend.
//!
//! Each case is a plain function taking a [`Harness`]; the `suite!` macro
//! instantiates all of them for the heap backend, the RocksDB backend as the
//! driver uses it (writes buffered until an explicit `flush`), the RocksDB
//! backend flushed after every write, and the RocksDB backend with a buffer
//! so small that it flushes and empties itself every few calls. Time is a
//! [`ManualClock`]: no sleeps.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use super::ttl::ManualClock;
use super::*;

mod export;
use export::*;

const MAX: u16 = DEFAULT_MAX_PARALLELISM;

/// Which backend a case runs against, a scratch directory and a fake clock.
struct Harness {
    kind: BackendKind,
    flush_every_write: bool,
    /// RocksDB only: bounds so small that the buffer flushes and empties
    /// itself every few calls.
    /// RocksDB only: other buffer bounds (write-back, buffer), so tests
    /// reach them.
    limits: Option<(usize, usize)>,
    dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
}

impl Harness {
    fn new(kind: BackendKind, flush_every_write: bool) -> Self {
        Self {
            kind,
            flush_every_write,
            limits: None,
            dir: tempfile::tempdir().expect("temp dir"),
            clock: Arc::new(ManualClock::new(1_000_000)),
        }
    }

    fn try_open_range(
        &self,
        states: &[StateDescriptor],
        key_groups: KeyGroupRange,
    ) -> Result<Box<dyn KeyedStateBackend>, StateError> {
        let cfg = BackendConfig {
            kind: self.kind,
            dir: self.dir.path(),
            states,
            key_groups,
            max_parallelism: MAX,
        };
        let backend: Box<dyn KeyedStateBackend> = if let Some((write_back, buffer)) = self.limits {
            let schema = layout::Schema::new(states, key_groups, MAX, self.clock.clone())?;
            let backend = super::rocksdb::RocksDbBackend::open(cfg.dir, states, schema)?;
            Box::new(backend.with_limits(write_back, buffer))
        } else {
            open_backend_with_clock(cfg, self.clock.clone())?
        };
        assert_eq!(backend.kind(), self.kind);
        Ok(if self.flush_every_write {
            Box::new(FlushEveryWrite(backend))
        } else {
            backend
        })
    }

    fn open(&self, states: &[StateDescriptor]) -> Box<dyn KeyedStateBackend> {
        self.try_open_range(states, KeyGroupRange::all(MAX))
            .expect("open backend")
    }

    fn advance_ms(&self, ms: u64) {
        self.clock.advance(Duration::from_millis(ms));
    }
}

/// Flushes after every write, so that every read goes to the database.
struct FlushEveryWrite(Box<dyn KeyedStateBackend>);

impl KeyedStateBackend for FlushEveryWrite {
    fn value_get(&mut self, s: u32, k: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        self.0.value_get(s, k)
    }
    fn value_get_many_into(
        &mut self,
        s: u32,
        keys: &[&[u8]],
        out: &mut Vec<u8>,
        lens: &mut Vec<Option<usize>>,
    ) -> Result<(), StateError> {
        self.0.value_get_many_into(s, keys, out, lens)
    }
    fn value_set(&mut self, s: u32, k: &[u8], v: &[u8]) -> Result<(), StateError> {
        self.0.value_set(s, k, v)?;
        self.0.flush()
    }
    fn list_get(&mut self, s: u32, k: &[u8]) -> Result<Vec<Vec<u8>>, StateError> {
        self.0.list_get(s, k)
    }
    fn list_add(&mut self, s: u32, k: &[u8], e: &[u8]) -> Result<(), StateError> {
        self.0.list_add(s, k, e)?;
        self.0.flush()
    }
    fn map_get(&mut self, s: u32, k: &[u8], u: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        self.0.map_get(s, k, u)
    }
    fn map_put(&mut self, s: u32, k: &[u8], u: &[u8], v: &[u8]) -> Result<(), StateError> {
        self.0.map_put(s, k, u, v)?;
        self.0.flush()
    }
    fn map_remove(&mut self, s: u32, k: &[u8], u: &[u8]) -> Result<(), StateError> {
        self.0.map_remove(s, k, u)?;
        self.0.flush()
    }
    fn map_entries(&mut self, s: u32, k: &[u8]) -> Result<MapEntries, StateError> {
        self.0.map_entries(s, k)
    }
    fn clear(&mut self, s: u32, k: &[u8]) -> Result<(), StateError> {
        self.0.clear(s, k)?;
        self.0.flush()
    }
    fn flush(&mut self) -> Result<(), StateError> {
        self.0.flush()
    }
    fn snapshot_local(&mut self, dir: &std::path::Path) -> Result<(), StateError> {
        self.0.snapshot_local(dir)
    }
    fn kind(&self) -> BackendKind {
        self.0.kind()
    }
    fn size_bytes(&self) -> u64 {
        self.0.size_bytes()
    }
    fn compact(&mut self) -> Result<(), StateError> {
        self.0.compact()
    }
    fn export(&mut self, visit: &mut ExportVisitor<'_>) -> Result<(), StateError> {
        self.0.export(visit)
    }
    fn export_state(&mut self, s: u32, visit: &mut ExportVisitor<'_>) -> Result<(), StateError> {
        self.0.export_state(s, visit)
    }
    fn import(&mut self, s: u32, k: &[u8], v: &[u8]) -> Result<(), StateError> {
        self.0.import(s, k, v)?;
        self.0.flush()
    }
}

fn value(name: &str) -> StateDescriptor {
    StateDescriptor::new(name, StateKind::Value)
}
fn list(name: &str) -> StateDescriptor {
    StateDescriptor::new(name, StateKind::List)
}
fn map(name: &str) -> StateDescriptor {
    StateDescriptor::new(name, StateKind::Map)
}

fn v(bytes: &[u8]) -> Option<Vec<u8>> {
    Some(bytes.to_vec())
}

fn elems(items: &[&[u8]]) -> Vec<Vec<u8>> {
    items.iter().map(|e| e.to_vec()).collect()
}

/// The values of `keys` by one batched read, unpacked; checks that the
/// read appends after what its buffer already held.
fn get_many(
    b: &mut dyn KeyedStateBackend,
    state: u32,
    keys: &[&[u8]],
) -> Result<Vec<Option<Vec<u8>>>, StateError> {
    let mut out = b"held".to_vec();
    let mut lens = vec![Some(99)];
    b.value_get_many_into(state, keys, &mut out, &mut lens)?;
    assert_eq!((&out[..4], lens[0]), (&b"held"[..], Some(99)));
    assert_eq!(lens.len(), keys.len() + 1);
    let mut at = 4;
    let values = lens[1..]
        .iter()
        .map(|len| {
            len.map(|len| {
                at += len;
                out[at - len..at].to_vec()
            })
        })
        .collect();
    assert_eq!(at, out.len(), "every byte appended belongs to a value");
    Ok(values)
}

fn entries(items: &[(&[u8], &[u8])]) -> MapEntries {
    items
        .iter()
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect()
}

// ---------------------------------------------------------------- cases

fn value_semantics(h: Harness) {
    let mut b = h.open(&[value("v")]);
    assert_eq!(b.value_get(0, b"k").unwrap(), None);
    b.value_set(0, b"k", b"one").unwrap();
    assert_eq!(b.value_get(0, b"k").unwrap(), v(b"one"));
    b.value_set(0, b"k", b"two").unwrap();
    assert_eq!(b.value_get(0, b"k").unwrap(), v(b"two"));
    b.clear(0, b"k").unwrap();
    assert_eq!(b.value_get(0, b"k").unwrap(), None);
    // An empty value is present, not absent; the empty key is a key.
    b.value_set(0, b"", b"").unwrap();
    assert_eq!(b.value_get(0, b"").unwrap(), v(b""));
    b.clear(0, b"never-set").unwrap();
    b.flush().unwrap();
    assert_eq!(b.value_get(0, b"").unwrap(), v(b""));
    assert_eq!(b.value_get(0, b"k").unwrap(), None);
}

/// A batched read answers as single reads would, key by key: for keys
/// never set, set, set and flushed, cleared, the empty key, a key asked
/// for twice (also before and after a miss), and across the buffer's
/// bounds (the tiny-buffer backends empty it while the keys are written).
fn batched_reads_answer_as_single_reads(h: Harness) {
    let mut b = h.open(&[value("v"), list("l")]);
    let keys: Vec<Vec<u8>> = (0..300u32).map(|i| format!("k{i}").into_bytes()).collect();
    let mut model: HashMap<&[u8], Vec<u8>> = HashMap::new();
    for (i, k) in keys.iter().enumerate() {
        let value = format!("value {i}").into_bytes();
        if i % 4 != 0 {
            b.value_set(0, k, &value).unwrap();
            model.insert(k, value);
        }
        if i % 4 == 3 {
            b.clear(0, k).unwrap();
            model.remove(&k[..]);
        }
        if i == 150 {
            b.flush().unwrap();
        }
    }
    b.value_set(0, b"", b"").unwrap();
    model.insert(b"", Vec::new());
    let mut asked: Vec<&[u8]> = vec![&keys[1], b"", &keys[1]];
    asked.extend(keys.iter().rev().map(|k| &k[..]));
    asked.extend([&keys[5][..], &keys[5], b"never", &keys[1]]);
    let expected: Vec<_> = asked.iter().map(|k| model.get(k).cloned()).collect();
    assert_eq!(get_many(&mut *b, 0, &asked).unwrap(), expected);
    // Again, now that the first read cached what it found.
    assert_eq!(get_many(&mut *b, 0, &asked).unwrap(), expected);
    let single: Vec<_> = asked.iter().map(|k| b.value_get(0, k).unwrap()).collect();
    assert_eq!(single, expected);
    assert_eq!(get_many(&mut *b, 0, &[]).unwrap(), vec![]);
    assert!(matches!(
        get_many(&mut *b, 1, &asked),
        Err(StateError::WrongKind { .. })
    ));
    assert!(matches!(
        get_many(&mut *b, 2, &asked),
        Err(StateError::UnknownState(2))
    ));
}

fn list_semantics(h: Harness) {
    let mut b = h.open(&[list("l")]);
    assert_eq!(b.list_get(0, b"k").unwrap(), elems(&[]));
    b.list_add(0, b"k", b"a").unwrap();
    b.list_add(0, b"k", b"").unwrap();
    b.list_add(0, b"k", b"ccc").unwrap();
    assert_eq!(b.list_get(0, b"k").unwrap(), elems(&[b"a", b"", b"ccc"]));
    b.clear(0, b"k").unwrap();
    assert_eq!(b.list_get(0, b"k").unwrap(), elems(&[]));
    b.list_add(0, b"k", b"d").unwrap();
    assert_eq!(b.list_get(0, b"k").unwrap(), elems(&[b"d"]));
    b.flush().unwrap();
    assert_eq!(b.list_get(0, b"k").unwrap(), elems(&[b"d"]));
}

fn map_semantics(h: Harness) {
    let mut b = h.open(&[map("m")]);
    assert_eq!(b.map_get(0, b"k", b"x").unwrap(), None);
    assert_eq!(b.map_entries(0, b"k").unwrap(), entries(&[]));
    b.map_put(0, b"k", b"x", b"1").unwrap();
    assert_eq!(b.map_get(0, b"k", b"x").unwrap(), v(b"1"));
    b.map_put(0, b"k", b"x", b"2").unwrap();
    assert_eq!(b.map_get(0, b"k", b"x").unwrap(), v(b"2"));
    b.map_remove(0, b"k", b"x").unwrap();
    assert_eq!(b.map_get(0, b"k", b"x").unwrap(), None);
    b.map_remove(0, b"k", b"never").unwrap();
    b.map_put(0, b"k", b"y", b"3").unwrap();
    b.clear(0, b"k").unwrap();
    assert_eq!(b.map_get(0, b"k", b"y").unwrap(), None);
    assert_eq!(b.map_entries(0, b"k").unwrap(), entries(&[]));
    b.map_put(0, b"k", b"z", b"4").unwrap();
    assert_eq!(b.map_entries(0, b"k").unwrap(), entries(&[(b"z", b"4")]));
}

fn map_entries_are_ordered_by_user_key_bytes(h: Harness) {
    let mut b = h.open(&[map("m")]);
    let user_keys: [&[u8]; 8] = [
        b"b",
        &[0xff],
        b"",
        b"ab",
        &[0x00],
        b"a",
        &[0xff, 0x00],
        b"a\0",
    ];
    for (i, uk) in user_keys.iter().enumerate() {
        b.map_put(0, b"k", uk, &[i as u8]).unwrap();
    }
    let mut expected: Vec<_> = user_keys
        .iter()
        .enumerate()
        .map(|(i, uk)| (uk.to_vec(), vec![i as u8]))
        .collect();
    expected.sort();
    assert_eq!(b.map_entries(0, b"k").unwrap(), expected);
    // Buffered changes after a first listing are reflected in the next one.
    b.map_remove(0, b"k", b"ab").unwrap();
    b.map_put(0, b"k", b"aa", b"new").unwrap();
    expected.retain(|(k, _)| k != b"ab");
    expected.push((b"aa".to_vec(), b"new".to_vec()));
    expected.sort();
    assert_eq!(b.map_entries(0, b"k").unwrap(), expected);
}

fn keys_that_are_prefixes_of_each_other_are_isolated(h: Harness) {
    let mut b = h.open(&[value("v"), list("l"), map("m")]);
    let keys: [&[u8]; 4] = [b"", b"a", b"ab", b"abc"];
    for k in keys {
        b.value_set(0, k, k).unwrap();
        b.list_add(1, k, k).unwrap();
        b.map_put(2, k, b"u", k).unwrap();
        b.map_put(2, k, k, b"self").unwrap();
    }
    for k in keys {
        assert_eq!(b.value_get(0, k).unwrap(), v(k));
        assert_eq!(b.list_get(1, k).unwrap(), elems(&[k]));
        let mut expected = entries(&[(b"u", k), (k, b"self")]);
        expected.sort();
        assert_eq!(b.map_entries(2, k).unwrap(), expected, "key {k:?}");
    }
    // Clearing "a" leaves "", "ab" and "abc" alone.
    for s in 0..3 {
        b.clear(s, b"a").unwrap();
    }
    assert_eq!(b.value_get(0, b"a").unwrap(), None);
    assert_eq!(b.list_get(1, b"a").unwrap(), elems(&[]));
    assert_eq!(b.map_entries(2, b"a").unwrap(), entries(&[]));
    for k in [&b""[..], b"ab", b"abc"] {
        assert_eq!(b.value_get(0, k).unwrap(), v(k));
        assert_eq!(b.list_get(1, k).unwrap(), elems(&[k]));
        assert_eq!(b.map_entries(2, k).unwrap().len(), 2);
        assert_eq!(b.map_get(2, k, b"u").unwrap(), v(k));
    }
}

fn states_are_isolated(h: Harness) {
    let mut b = h.open(&[
        value("a"),
        value("b"),
        map("m1"),
        map("m2"),
        list("l1"),
        list("l2"),
    ]);
    b.value_set(0, b"k", b"A").unwrap();
    b.value_set(1, b"k", b"B").unwrap();
    b.map_put(2, b"k", b"u", b"M1").unwrap();
    b.map_put(3, b"k", b"u", b"M2").unwrap();
    b.list_add(4, b"k", b"L1").unwrap();
    b.list_add(5, b"k", b"L2").unwrap();
    assert_eq!(b.value_get(0, b"k").unwrap(), v(b"A"));
    assert_eq!(b.value_get(1, b"k").unwrap(), v(b"B"));
    assert_eq!(b.map_entries(2, b"k").unwrap(), entries(&[(b"u", b"M1")]));
    assert_eq!(b.map_entries(3, b"k").unwrap(), entries(&[(b"u", b"M2")]));
    assert_eq!(b.list_get(4, b"k").unwrap(), elems(&[b"L1"]));
    assert_eq!(b.list_get(5, b"k").unwrap(), elems(&[b"L2"]));
    for s in [0, 2, 4] {
        b.clear(s, b"k").unwrap();
    }
    assert_eq!(b.value_get(0, b"k").unwrap(), None);
    assert_eq!(b.value_get(1, b"k").unwrap(), v(b"B"));
    assert_eq!(b.map_entries(2, b"k").unwrap(), entries(&[]));
    assert_eq!(b.map_entries(3, b"k").unwrap(), entries(&[(b"u", b"M2")]));
    assert_eq!(b.list_get(4, b"k").unwrap(), elems(&[]));
    assert_eq!(b.list_get(5, b"k").unwrap(), elems(&[b"L2"]));
}

fn buffered_writes_are_read_back_and_layer_over_flushed_ones(h: Harness) {
    let mut b = h.open(&[value("v"), list("l"), map("m")]);
    // Value: buffered, flushed, overwritten, cleared over a flushed value.
    b.value_set(0, b"k", b"1").unwrap();
    assert_eq!(b.value_get(0, b"k").unwrap(), v(b"1"));
    b.flush().unwrap();
    assert_eq!(b.value_get(0, b"k").unwrap(), v(b"1"));
    b.value_set(0, b"k", b"2").unwrap();
    assert_eq!(b.value_get(0, b"k").unwrap(), v(b"2"));
    b.flush().unwrap();
    b.clear(0, b"k").unwrap();
    assert_eq!(b.value_get(0, b"k").unwrap(), None);
    b.flush().unwrap();
    assert_eq!(b.value_get(0, b"k").unwrap(), None);
    // List: appends on top of a flushed list; clear then add over it.
    b.list_add(1, b"k", b"a").unwrap();
    b.flush().unwrap();
    b.list_add(1, b"k", b"b").unwrap();
    assert_eq!(b.list_get(1, b"k").unwrap(), elems(&[b"a", b"b"]));
    b.flush().unwrap();
    b.list_add(1, b"k", b"c").unwrap();
    b.flush().unwrap();
    assert_eq!(b.list_get(1, b"k").unwrap(), elems(&[b"a", b"b", b"c"]));
    b.clear(1, b"k").unwrap();
    b.list_add(1, b"k", b"d").unwrap();
    assert_eq!(b.list_get(1, b"k").unwrap(), elems(&[b"d"]));
    b.flush().unwrap();
    assert_eq!(b.list_get(1, b"k").unwrap(), elems(&[b"d"]));
    // Map: buffered entries, removals and clears over flushed entries.
    b.map_put(2, b"k", b"x", b"1").unwrap();
    b.map_put(2, b"k", b"y", b"2").unwrap();
    b.flush().unwrap();
    b.map_put(2, b"k", b"z", b"3").unwrap();
    b.map_remove(2, b"k", b"x").unwrap();
    assert_eq!(b.map_get(2, b"k", b"x").unwrap(), None);
    assert_eq!(b.map_get(2, b"k", b"z").unwrap(), v(b"3"));
    assert_eq!(
        b.map_entries(2, b"k").unwrap(),
        entries(&[(b"y", b"2"), (b"z", b"3")])
    );
    b.clear(2, b"k").unwrap();
    b.map_put(2, b"k", b"w", b"4").unwrap();
    assert_eq!(b.map_get(2, b"k", b"y").unwrap(), None);
    assert_eq!(b.map_entries(2, b"k").unwrap(), entries(&[(b"w", b"4")]));
    b.flush().unwrap();
    assert_eq!(b.map_entries(2, b"k").unwrap(), entries(&[(b"w", b"4")]));
    b.flush().unwrap(); // flushing nothing is fine
}

fn many_keys_survive_repeated_flushes(h: Harness) {
    let mut b = h.open(&[value("count"), list("l")]);
    for round in 0..3u64 {
        for i in 0..5_000u64 {
            let key = i.to_be_bytes();
            let old = b
                .value_get(0, &key)
                .unwrap()
                .map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()));
            assert_eq!(old, round, "key {i}");
            b.value_set(0, &key, &(old + 1).to_le_bytes()).unwrap();
            if i % 7 == 0 {
                b.list_add(1, &key, &round.to_le_bytes()).unwrap();
            }
            if i % 1000 == 999 {
                b.flush().unwrap();
            }
        }
    }
    assert_eq!(b.list_get(1, &7u64.to_be_bytes()).unwrap().len(), 3);
}

fn large_writes_spill_past_the_write_back_limit_and_memtables(h: Harness) {
    // More than the RocksDB write-back limit and one memtable, without any
    // explicit flush: the buffer flushes itself and reads reach SST files.
    let mut b = h.open(&[value("big"), list("l")]);
    let chunk = vec![0xabu8; 1 << 20];
    for i in 0..48u32 {
        let mut val = chunk.clone();
        val[..4].copy_from_slice(&i.to_le_bytes());
        b.value_set(0, &i.to_le_bytes(), &val).unwrap();
        b.list_add(1, b"k", &i.to_le_bytes()).unwrap();
    }
    for i in 0..48u32 {
        let got = b.value_get(0, &i.to_le_bytes()).unwrap().unwrap();
        assert_eq!((got.len(), &got[..4]), (1 << 20, &i.to_le_bytes()[..]));
    }
    assert_eq!(b.list_get(1, b"k").unwrap().len(), 48);
}

fn errors_for_unknown_state_and_wrong_kind(h: Harness) {
    let mut b = h.open(&[value("v"), list("l"), map("m")]);
    let k = &b"k"[..];
    assert!(matches!(
        b.value_get(3, k),
        Err(StateError::UnknownState(3))
    ));
    assert!(matches!(
        b.value_set(99, k, k),
        Err(StateError::UnknownState(99))
    ));
    assert!(matches!(b.list_get(3, k), Err(StateError::UnknownState(3))));
    assert!(matches!(
        b.list_add(3, k, k),
        Err(StateError::UnknownState(3))
    ));
    assert!(matches!(
        b.map_get(3, k, k),
        Err(StateError::UnknownState(3))
    ));
    assert!(matches!(
        b.map_put(3, k, k, k),
        Err(StateError::UnknownState(3))
    ));
    assert!(matches!(
        b.map_remove(3, k, k),
        Err(StateError::UnknownState(3))
    ));
    assert!(matches!(
        b.map_entries(3, k),
        Err(StateError::UnknownState(3))
    ));
    assert!(matches!(
        b.clear(u32::MAX, k),
        Err(StateError::UnknownState(u32::MAX))
    ));

    use StateKind::*;
    let wrong =
        |r: Result<(), StateError>, state: u32, expected: StateKind, actual: StateKind| match r {
            Err(StateError::WrongKind {
                state: s,
                expected: e,
                actual: a,
            }) => {
                assert_eq!((s, e, a), (state, expected, actual))
            }
            other => panic!("expected WrongKind, got {other:?}"),
        };
    wrong(b.value_get(1, k).map(drop), 1, Value, List);
    wrong(b.value_set(2, k, k), 2, Value, Map);
    wrong(b.list_get(0, k).map(drop), 0, List, Value);
    wrong(b.list_add(2, k, k), 2, List, Map);
    wrong(b.map_get(0, k, k).map(drop), 0, Map, Value);
    wrong(b.map_put(1, k, k, k), 1, Map, List);
    wrong(b.map_remove(0, k, k), 0, Map, Value);
    wrong(b.map_entries(1, k).map(drop), 1, Map, List);
    // Nothing was written by the failed calls.
    assert_eq!(b.value_get(0, k).unwrap(), None);
    assert_eq!(b.list_get(1, k).unwrap(), elems(&[]));
    assert_eq!(b.map_entries(2, k).unwrap(), entries(&[]));
    let msg = b.list_get(0, k).unwrap_err().to_string();
    assert!(msg.contains("value") && msg.contains("list"), "{msg}");
}

fn keys_outside_the_subtask_key_groups_are_rejected(h: Harness) {
    let range = key_group_range_for_subtask(MAX, 2, 0); // [0, 64)
    let mut b = h
        .try_open_range(&[value("v"), list("l"), map("m")], range)
        .unwrap();
    let keys: Vec<Vec<u8>> = (0..200u32)
        .map(|i| format!("key-{i}").into_bytes())
        .collect();
    let outside = keys
        .iter()
        .find(|k| !range.contains(key_group_of(k, MAX)))
        .unwrap();
    let inside = keys
        .iter()
        .find(|k| range.contains(key_group_of(k, MAX)))
        .unwrap();
    let kg = key_group_of(outside, MAX).0;
    let out = |r: Result<(), StateError>| match r {
        Err(StateError::KeyOutOfRange {
            key_group,
            range: r,
        }) => {
            assert_eq!((key_group, r), (kg, range))
        }
        other => panic!("expected KeyOutOfRange, got {other:?}"),
    };
    let k = &outside[..];
    out(b.value_get(0, k).map(drop));
    out(b.value_set(0, k, b"x"));
    out(b.list_get(1, k).map(drop));
    out(b.list_add(1, k, b"x"));
    out(b.map_get(2, k, b"u").map(drop));
    out(b.map_put(2, k, b"u", b"x"));
    out(b.map_remove(2, k, b"u"));
    out(b.map_entries(2, k).map(drop));
    out(b.clear(0, k));
    out(get_many(&mut *b, 0, &[inside, k]).map(drop));
    // The kind is checked before the key group.
    assert!(matches!(
        b.list_get(0, k),
        Err(StateError::WrongKind { .. })
    ));
    b.value_set(0, inside, b"ok").unwrap();
    assert_eq!(b.value_get(0, inside).unwrap(), v(b"ok"));
    assert!(b.flush().is_ok());
}

fn invalid_configurations_are_rejected(h: Harness) {
    let bad = |states: &[StateDescriptor], range: KeyGroupRange, what: &str| match h
        .try_open_range(states, range)
    {
        Err(StateError::InvalidDescriptor(msg)) => assert!(msg.contains(what), "{msg}"),
        Err(other) => panic!("expected InvalidDescriptor, got {other}"),
        Ok(_) => panic!("expected InvalidDescriptor ({what})"),
    };
    let all = KeyGroupRange::all(MAX);
    bad(&[value("")], all, "empty name");
    bad(&[value("a"), map("a")], all, "declared twice");
    bad(
        &[value("a").with_ttl(Duration::from_micros(999))],
        all,
        "TTL",
    );
    bad(
        &[value("a")],
        KeyGroupRange::new(0, MAX + 1),
        "key-group range",
    );
    bad(&[value("a")], KeyGroupRange::new(5, 4), "key-group range");
    // No states and an empty range are fine.
    h.try_open_range(&[], KeyGroupRange::new(3, 3)).unwrap();
}

fn ttl_value_expires(h: Harness) {
    let mut b = h.open(&[value("t").with_ttl(Duration::from_secs(1)), value("plain")]);
    b.value_set(0, b"k", b"1").unwrap();
    b.value_set(1, b"k", b"p").unwrap();
    h.advance_ms(999);
    assert_eq!(b.value_get(0, b"k").unwrap(), v(b"1"));
    // A read does not extend the TTL; a write does.
    h.advance_ms(1);
    let mut out = Vec::new();
    assert!(!b.value_get_into(0, b"k", &mut out).unwrap(), "expired");
    assert!(out.is_empty());
    assert_eq!(b.value_get(0, b"k").unwrap(), None);
    assert_eq!(
        b.value_get(1, b"k").unwrap(),
        v(b"p"),
        "a state without TTL never expires"
    );
    b.value_set(0, b"k", b"2").unwrap();
    b.flush().unwrap();
    h.advance_ms(600);
    b.value_set(0, b"k", b"3").unwrap();
    h.advance_ms(600);
    assert_eq!(b.value_get(0, b"k").unwrap(), v(b"3"));
    b.flush().unwrap();
    h.advance_ms(400);
    assert_eq!(b.value_get(0, b"k").unwrap(), None);
}

fn ttl_list_elements_expire_one_by_one(h: Harness) {
    let mut b = h.open(&[list("t").with_ttl(Duration::from_millis(1000))]);
    b.list_add(0, b"k", b"old").unwrap();
    b.flush().unwrap();
    h.advance_ms(500);
    b.list_add(0, b"k", b"new").unwrap();
    assert_eq!(b.list_get(0, b"k").unwrap(), elems(&[b"old", b"new"]));
    h.advance_ms(500);
    assert_eq!(b.list_get(0, b"k").unwrap(), elems(&[b"new"]));
    b.list_add(0, b"k", b"newer").unwrap();
    b.flush().unwrap();
    assert_eq!(b.list_get(0, b"k").unwrap(), elems(&[b"new", b"newer"]));
    h.advance_ms(500);
    assert_eq!(b.list_get(0, b"k").unwrap(), elems(&[b"newer"]));
    h.advance_ms(500);
    assert_eq!(b.list_get(0, b"k").unwrap(), elems(&[]));
    b.list_add(0, b"k", b"again").unwrap();
    assert_eq!(b.list_get(0, b"k").unwrap(), elems(&[b"again"]));
}

fn ttl_map_values_expire_one_by_one(h: Harness) {
    let mut b = h.open(&[map("t").with_ttl(Duration::from_millis(1000))]);
    b.map_put(0, b"k", b"a", b"1").unwrap();
    h.advance_ms(500);
    b.map_put(0, b"k", b"b", b"2").unwrap();
    b.flush().unwrap();
    h.advance_ms(500);
    assert_eq!(b.map_get(0, b"k", b"a").unwrap(), None);
    assert_eq!(b.map_get(0, b"k", b"b").unwrap(), v(b"2"));
    assert_eq!(b.map_entries(0, b"k").unwrap(), entries(&[(b"b", b"2")]));
    b.map_put(0, b"k", b"a", b"3").unwrap();
    h.advance_ms(500);
    assert_eq!(b.map_entries(0, b"k").unwrap(), entries(&[(b"a", b"3")]));
    h.advance_ms(500);
    assert_eq!(b.map_entries(0, b"k").unwrap(), entries(&[]));
    assert_eq!(b.map_get(0, b"k", b"a").unwrap(), None);
}

fn expired_entries_are_removed_when_read(h: Harness) {
    // Observable through a clock that goes back: an entry that was read as
    // expired stays gone; one never read reappears.
    let ttl = Duration::from_millis(100);
    let mut b = h.open(&[
        value("v").with_ttl(ttl),
        list("l").with_ttl(ttl),
        map("m").with_ttl(ttl),
    ]);
    let t0 = h.clock.now_millis();
    for k in [&b"read"[..], b"unread"] {
        b.value_set(0, k, b"x").unwrap();
        b.list_add(1, k, b"x").unwrap();
        b.map_put(2, k, b"u", b"x").unwrap();
    }
    b.value_set(0, b"read in a batch", b"x").unwrap();
    b.flush().unwrap();
    h.advance_ms(100);
    assert_eq!(b.value_get(0, b"read").unwrap(), None);
    assert_eq!(
        get_many(&mut *b, 0, &[b"read in a batch", b"read in a batch"]).unwrap(),
        [None, None]
    );
    assert_eq!(b.list_get(1, b"read").unwrap(), elems(&[]));
    assert_eq!(b.map_entries(2, b"read").unwrap(), entries(&[]));
    b.flush().unwrap();
    h.clock.set(t0);
    assert_eq!(b.value_get(0, b"read").unwrap(), None);
    assert_eq!(b.value_get(0, b"read in a batch").unwrap(), None);
    assert_eq!(b.list_get(1, b"read").unwrap(), elems(&[]));
    assert_eq!(b.map_get(2, b"read", b"u").unwrap(), None);
    assert_eq!(b.value_get(0, b"unread").unwrap(), v(b"x"));
    assert_eq!(b.list_get(1, b"unread").unwrap(), elems(&[b"x"]));
    assert_eq!(b.map_get(2, b"unread", b"u").unwrap(), v(b"x"));
}

/// A tiny deterministic RNG (xorshift64*), so the model check needs no
/// dependency and replays exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Random operations checked against a model made of std maps.
fn matches_a_model_under_random_operations(h: Harness) {
    let mut b = h.open(&[value("v"), list("l"), map("m")]);
    let keys: [&[u8]; 6] = [b"", b"a", b"ab", b"b", &[0xff], &[0xff, 0xff]];
    let user_keys: [&[u8]; 4] = [b"", b"x", b"xy", &[0xff]];
    let mut values: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    let mut lists: HashMap<Vec<u8>, Vec<Vec<u8>>> = HashMap::new();
    let mut maps: HashMap<Vec<u8>, BTreeMap<Vec<u8>, Vec<u8>>> = HashMap::new();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for step in 0..20_000u32 {
        let k = keys[rng.below(keys.len() as u64) as usize];
        let uk = user_keys[rng.below(user_keys.len() as u64) as usize];
        let val = step.to_le_bytes();
        match rng.below(15) {
            0 => b
                .value_set(0, k, &val)
                .map(|_| values.insert(k.to_vec(), val.to_vec()))
                .map(drop),
            1 if step % 2 == 0 => {
                assert_eq!(
                    b.value_get(0, k).unwrap(),
                    values.get(k).cloned(),
                    "step {step}"
                );
                Ok(())
            }
            1 => {
                // The batched read's form: appended after what is there.
                let mut out = b"before".to_vec();
                let found = b.value_get_into(0, k, &mut out).unwrap();
                let mut expected = b"before".to_vec();
                expected.extend(values.get(k).into_iter().flatten());
                assert_eq!(
                    (found, out),
                    (values.contains_key(k), expected),
                    "step {step}"
                );
                Ok(())
            }
            2 => b.clear(0, k).map(|_| values.remove(k)).map(drop),
            3 => b
                .list_add(1, k, &val)
                .map(|_| lists.entry(k.to_vec()).or_default().push(val.to_vec())),
            4 => {
                assert_eq!(
                    b.list_get(1, k).unwrap(),
                    lists.get(k).cloned().unwrap_or_default(),
                    "step {step}"
                );
                Ok(())
            }
            5 => b.clear(1, k).map(|_| lists.remove(k)).map(drop),
            6 | 7 => b
                .map_put(2, k, uk, &val)
                .map(|_| {
                    maps.entry(k.to_vec())
                        .or_default()
                        .insert(uk.to_vec(), val.to_vec())
                })
                .map(drop),
            8 => {
                assert_eq!(
                    b.map_get(2, k, uk).unwrap(),
                    maps.get(k).and_then(|m| m.get(uk)).cloned(),
                    "step {step}"
                );
                Ok(())
            }
            9 => b
                .map_remove(2, k, uk)
                .map(|_| maps.get_mut(k).map(|m| m.remove(uk)))
                .map(drop),
            10 => {
                let expected: Vec<_> = maps
                    .get(k)
                    .into_iter()
                    .flatten()
                    .map(|(u, x)| (u.clone(), x.clone()))
                    .collect();
                assert_eq!(b.map_entries(2, k).unwrap(), expected, "step {step}");
                Ok(())
            }
            11 => b.clear(2, k).map(|_| maps.remove(k)).map(drop),
            12 => {
                let asked: Vec<&[u8]> = (0..1 + rng.below(8))
                    .map(|_| keys[rng.below(keys.len() as u64) as usize])
                    .collect();
                let expected: Vec<_> = asked.iter().map(|k| values.get(*k).cloned()).collect();
                assert_eq!(
                    get_many(&mut *b, 0, &asked).unwrap(),
                    expected,
                    "step {step}"
                );
                Ok(())
            }
            _ => b.flush(),
        }
        .unwrap();
    }
}

/// `size_bytes` follows what the state holds: at least the bytes written
/// once they are in, and most of it gone once every key is cleared and
/// compacted away (values are pseudo-random, so RocksDB's LZ4 cannot
/// shrink them).
fn size_follows_the_state(h: Harness) {
    let mut b = h.open(&[value("v"), map("m")]);
    let empty = b.size_bytes();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (keys, len) = (2_000u32, 512usize);
    for k in 0..keys {
        let value: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        b.value_set(0, &k.to_le_bytes(), &value).unwrap();
        b.map_put(1, b"one key", &k.to_le_bytes(), &value).unwrap();
    }
    let written = 2 * u64::from(keys) * len as u64;
    assert!(
        b.size_bytes() >= written,
        "{} bytes before the flush, {written} written",
        b.size_bytes()
    );
    b.flush().unwrap();
    let full = b.size_bytes();
    assert!(
        full >= written,
        "{full} bytes after the flush, {written} written"
    );
    for k in 0..keys {
        b.clear(0, &k.to_le_bytes()).unwrap();
    }
    b.clear(1, b"one key").unwrap();
    b.compact().unwrap();
    let cleared = b.size_bytes();
    assert!(
        cleared < empty + written / 10,
        "{cleared} bytes after clearing everything (empty: {empty}, full: {full})"
    );
}

/// The heap backend's running byte count equals a full count of its
/// tables after every operation, TTL expiry and import included.
#[test]
fn heap_size_is_kept_exactly_under_random_operations() {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let ttl = Duration::from_millis(50);
    let states = [
        value("v"),
        list("l"),
        map("m"),
        value("tv").with_ttl(ttl),
        list("tl").with_ttl(ttl),
        map("tm").with_ttl(ttl),
    ];
    let range = KeyGroupRange::all(MAX);
    let schema = layout::Schema::new(&states, range, MAX, clock.clone()).unwrap();
    let mut b = crate::heap::HeapBackend::new(schema);
    let mut exported = Vec::new();
    let keys: [&[u8]; 4] = [b"", b"a", b"ab", &[0xff; 9]];
    let user_keys: [&[u8]; 3] = [b"", b"x", b"xyz"];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for step in 0..20_000u32 {
        let k = keys[rng.below(keys.len() as u64) as usize];
        let uk = user_keys[rng.below(user_keys.len() as u64) as usize];
        let val = vec![7u8; rng.below(20) as usize];
        // Even ids: without TTL; odd: the same kind with one.
        let ttl = 3 * rng.below(2) as u32;
        match rng.below(13) {
            0 => b.value_set(ttl, k, &val),
            1 => b.value_get(ttl, k).map(drop),
            2 => b.list_add(1 + ttl, k, &val),
            3 => b.list_get(1 + ttl, k).map(drop),
            4 => b.map_put(2 + ttl, k, uk, &val),
            5 => b.map_get(2 + ttl, k, uk).map(drop),
            6 => b.map_remove(2 + ttl, k, uk),
            7 => b.map_entries(2 + ttl, k).map(drop),
            8 => b.clear(rng.below(6) as u32, k),
            9 => {
                clock.advance(Duration::from_millis(rng.below(40)));
                Ok(())
            }
            10 => {
                exported.clear();
                b.export(&mut |state, key, value| {
                    exported.push((state, key.to_vec(), value.to_vec()));
                    Ok(())
                })
            }
            _ => match exported.get(rng.below(exported.len() as u64 + 1) as usize) {
                Some((state, key, value)) => b.import(*state, key, value),
                None => Ok(()),
            },
        }
        .unwrap();
        assert_eq!(b.size_bytes(), b.count_bytes(), "step {step}");
    }
    assert!(b.size_bytes() > 0);
    // A restore counts from scratch.
    let dir = tempfile::tempdir().unwrap();
    b.snapshot_local(&dir.path().join("s")).unwrap();
    let schema = layout::Schema::new(&states, range, MAX, clock).unwrap();
    let restored = crate::heap::HeapBackend::restore(
        schema,
        &dir.path().join("s").join(crate::heap::SNAPSHOT_FILE),
    )
    .unwrap();
    assert_eq!(restored.size_bytes(), b.size_bytes());
}

/// A batched read of keys that are all in the database and none in the
/// buffer (a reopened database): every one is read by the `MultiGet`, in
/// any order, with duplicates, expired entries and absent keys among them;
/// an expired entry read so is deleted for good.
#[test]
fn rocksdb_batched_reads_of_a_cold_buffer() {
    let h = Harness::new(BackendKind::RocksDb, false);
    let states = [value("v"), value("t").with_ttl(Duration::from_millis(100))];
    let keys: Vec<Vec<u8>> = (0..2_000u32).map(|i| i.to_be_bytes().to_vec()).collect();
    {
        let mut b = h.open(&states);
        for k in keys.iter().step_by(2) {
            b.value_set(0, k, k).unwrap();
            b.value_set(1, k, k).unwrap();
        }
        b.flush().unwrap();
        h.advance_ms(50);
        // Written later: still live when the others have expired.
        b.value_set(1, &keys[0], b"late").unwrap();
        b.flush().unwrap();
    }
    let mut asked: Vec<&[u8]> = keys.iter().rev().map(|k| &k[..]).collect();
    asked.extend([&keys[2][..], &keys[3], &keys[2]]);
    let expected: Vec<_> = asked
        .iter()
        .map(|k| (u32::from_be_bytes((*k).try_into().unwrap()) % 2 == 0).then(|| k.to_vec()))
        .collect();
    let mut b = h.open(&states);
    assert_eq!(get_many(&mut *b, 0, &asked).unwrap(), expected);
    h.advance_ms(60);
    let live: Vec<_> = asked
        .iter()
        .map(|k| (*k == &keys[0][..]).then(|| b"late".to_vec()))
        .collect();
    assert_eq!(get_many(&mut *b, 1, &asked).unwrap(), live);
    b.flush().unwrap();
    drop(b);
    // Back before the expiry: what the batch found expired stays deleted.
    h.clock.set(h.clock.now_millis() - 60);
    let mut b = h.open(&states);
    assert_eq!(
        get_many(&mut *b, 1, &[&keys[2], &keys[0]]).unwrap(),
        [None, v(b"late")]
    );
}

#[test]
fn rocksdb_state_survives_close_and_reopen() {
    let h = Harness::new(BackendKind::RocksDb, false);
    let states = [
        value("v"),
        list("l"),
        map("m"),
        value("t").with_ttl(Duration::from_secs(60)),
    ];
    {
        let mut b = h.open(&states);
        b.value_set(0, b"k", b"value").unwrap();
        b.list_add(1, b"k", b"e1").unwrap();
        b.flush().unwrap();
        b.list_add(1, b"k", b"e2").unwrap();
        b.map_put(2, b"k", b"u", b"mv").unwrap();
        b.value_set(3, b"k", b"ttl").unwrap();
        b.flush().unwrap();
    }
    {
        let mut b = h.open(&states);
        assert_eq!(b.value_get(0, b"k").unwrap(), v(b"value"));
        assert_eq!(b.list_get(1, b"k").unwrap(), elems(&[b"e1", b"e2"]));
        assert_eq!(b.map_entries(2, b"k").unwrap(), entries(&[(b"u", b"mv")]));
        assert_eq!(b.value_get(3, b"k").unwrap(), v(b"ttl"));
        b.list_add(1, b"k", b"e3").unwrap();
        b.flush().unwrap();
    }
    // Reopen with a state added and one no longer declared: the remaining
    // ones keep their data (state ids follow the new declaration order).
    let mut b = h.open(&[list("l"), value("new"), value("v")]);
    assert_eq!(b.list_get(0, b"k").unwrap(), elems(&[b"e1", b"e2", b"e3"]));
    assert_eq!(b.value_get(1, b"k").unwrap(), None);
    assert_eq!(b.value_get(2, b"k").unwrap(), v(b"value"));
}

#[test]
fn backend_kind_parses_and_prints() {
    for kind in [BackendKind::RocksDb, BackendKind::Heap] {
        assert_eq!(kind.to_string().parse::<BackendKind>().unwrap(), kind);
    }
    assert_eq!(BackendKind::default(), BackendKind::RocksDb);
    let err = "RocksDB".parse::<BackendKind>().unwrap_err().to_string();
    assert!(
        err.contains("`RocksDB`") && err.contains("rocksdb") && err.contains("heap"),
        "{err}"
    );
}

/// Instantiates every case for every backend configuration.
macro_rules! suite {
    ($($case:ident),* $(,)?) => {
        mod heap {
            $(#[test] fn $case() { super::$case(super::Harness::new(super::BackendKind::Heap, false)); })*
        }
        mod rocksdb {
            $(#[test] fn $case() { super::$case(super::Harness::new(super::BackendKind::RocksDb, false)); })*
        }
        mod rocksdb_flush_every_write {
            $(#[test] fn $case() { super::$case(super::Harness::new(super::BackendKind::RocksDb, true)); })*
        }
        mod rocksdb_tiny_buffer {
            $(#[test] fn $case() {
                let mut h = super::Harness::new(super::BackendKind::RocksDb, false);
                h.limits = Some((200, 1000));
                super::$case(h);
            })*
        }
        // Only the buffer limit is ever reached, never the write-back
        // limit: the buffer flushes and empties itself by its size alone.
        mod rocksdb_buffer_limit_only {
            $(#[test] fn $case() {
                let mut h = super::Harness::new(super::BackendKind::RocksDb, false);
                h.limits = Some((1 << 30, 1000));
                super::$case(h);
            })*
        }
    };
}

suite!(
    value_semantics,
    batched_reads_answer_as_single_reads,
    list_semantics,
    map_semantics,
    map_entries_are_ordered_by_user_key_bytes,
    keys_that_are_prefixes_of_each_other_are_isolated,
    states_are_isolated,
    buffered_writes_are_read_back_and_layer_over_flushed_ones,
    many_keys_survive_repeated_flushes,
    large_writes_spill_past_the_write_back_limit_and_memtables,
    errors_for_unknown_state_and_wrong_kind,
    keys_outside_the_subtask_key_groups_are_rejected,
    invalid_configurations_are_rejected,
    ttl_value_expires,
    ttl_list_elements_expire_one_by_one,
    ttl_map_values_expire_one_by_one,
    expired_entries_are_removed_when_read,
    matches_a_model_under_random_operations,
    export_imports_into_either_backend_unchanged,
    export_state_gives_one_states_entries_of_the_export,
    flushes_of_most_or_of_few_dirty_slots_reach_the_database,
    import_splits_by_key_group,
    import_refuses_malformed_entries,
    import_in_any_order_keeps_the_last_value_of_a_key,
    size_follows_the_state,
);
