//! Export and import in the canonical form (what savepoints carry): the
//! same state exports the same entries from either backend, imports into
//! either, and can be split by key group (rescaling).

use super::*;

/// Every entry a backend exports: (state, stored key, stored value).
type Exported = Vec<(u32, Vec<u8>, Vec<u8>)>;

fn export_all(b: &mut dyn KeyedStateBackend) -> Exported {
    let mut out = Vec::new();
    b.export(&mut |state, key, value| {
        out.push((state, key.to_vec(), value.to_vec()));
        Ok(())
    })
    .unwrap();
    out
}

fn states() -> Vec<StateDescriptor> {
    vec![
        value("count"),
        list("events"),
        map("seen"),
        value("recent").with_ttl(Duration::from_secs(60)),
    ]
}

/// 300 keys over every kind of state, some written twice, some cleared.
fn fill(b: &mut dyn KeyedStateBackend) {
    for i in 0..300u32 {
        let key = format!("key-{i}");
        let key = key.as_bytes();
        b.value_set(0, key, &i.to_le_bytes()).unwrap();
        if i % 3 == 0 {
            b.list_add(1, key, b"a").unwrap();
            b.list_add(1, key, &i.to_be_bytes()).unwrap();
        }
        if i % 4 == 0 {
            b.map_put(2, key, b"x", b"1").unwrap();
            b.map_put(2, key, &i.to_be_bytes(), b"").unwrap();
        }
        b.value_set(3, key, b"fresh").unwrap();
        if i % 7 == 0 {
            b.clear(0, key).unwrap();
        }
    }
}

/// What a reader sees of every key of [`fill`].
fn reads(b: &mut dyn KeyedStateBackend) -> Vec<String> {
    (0..300u32)
        .map(|i| {
            let key = format!("key-{i}");
            let key = key.as_bytes();
            format!(
                "{:?} {:?} {:?} {:?}",
                b.value_get(0, key).unwrap(),
                b.list_get(1, key).unwrap(),
                b.map_entries(2, key).unwrap(),
                b.value_get(3, key).unwrap(),
            )
        })
        .collect()
}

pub(super) fn export_imports_into_either_backend_unchanged(h: Harness) {
    let mut source = h.open(&states());
    fill(source.as_mut());
    let exported = export_all(source.as_mut());
    assert!(exported.len() > 300, "{} entries", exported.len());
    assert!(
        exported
            .windows(2)
            .all(|w| (w[0].0, &w[0].1) < (w[1].0, &w[1].1)),
        "exported by state, then stored key"
    );
    let expected = reads(source.as_mut());
    for kind in [BackendKind::Heap, BackendKind::RocksDb] {
        let target = Harness::new(kind, false);
        let mut b = target.open(&states());
        for (state, key, value) in &exported {
            b.import(*state, key, value).unwrap();
        }
        b.flush().unwrap();
        assert_eq!(reads(b.as_mut()), expected, "{kind:?}");
        // The canonical form does not depend on the backend.
        assert_eq!(export_all(b.as_mut()), exported, "{kind:?}");
    }
}

/// A flush writes whatever is dirty, whether most of the buffer is (the
/// RocksDB buffer then walks its slots in memory order) or a few slots among
/// many clean ones (it then looks each dirty key up): the database holds
/// what the heap backend holds after the same calls.
pub(super) fn flushes_of_most_or_of_few_dirty_slots_reach_the_database(h: Harness) {
    let mut b = h.open(&states());
    let mut heap = Harness::new(BackendKind::Heap, false).open(&states());
    for backend in [&mut b, &mut heap] {
        // Every slot dirty: values, list appends, map entries, deletes.
        fill(backend.as_mut());
        backend.flush().unwrap();
        // Thousands of clean slots, then a few dirty ones of each kind.
        for round in 0..3u32 {
            let _ = reads(backend.as_mut());
            for i in (round..300).step_by(97) {
                let key = format!("key-{i}");
                let key = key.as_bytes();
                backend
                    .value_set(0, key, &(i + round).to_be_bytes())
                    .unwrap();
                backend.list_add(1, key, &round.to_le_bytes()).unwrap();
                backend.map_put(2, key, b"r", &round.to_le_bytes()).unwrap();
                backend.clear(3, key).unwrap();
            }
            backend.flush().unwrap();
        }
    }
    let expected = export_all(heap.as_mut());
    assert!(expected.len() > 300, "{} entries", expected.len());
    assert_eq!(export_all(b.as_mut()), expected);
    assert_eq!(reads(b.as_mut()), reads(heap.as_mut()));
}

pub(super) fn export_state_gives_one_states_entries_of_the_export(h: Harness) {
    let mut b = h.open(&states());
    fill(b.as_mut());
    let all = export_all(b.as_mut());
    for state in 0..states().len() as u32 {
        let mut one = Vec::new();
        b.export_state(state, &mut |s, key, value| {
            one.push((s, key.to_vec(), value.to_vec()));
            Ok(())
        })
        .unwrap();
        let expected: Exported = all.iter().filter(|e| e.0 == state).cloned().collect();
        assert!(!expected.is_empty(), "state {state}");
        assert_eq!(one, expected, "state {state}");
    }
    let unknown = b.export_state(9, &mut |_, _, _| Ok(()));
    assert!(
        matches!(unknown, Err(StateError::UnknownState(9))),
        "{unknown:?}"
    );
}

pub(super) fn import_splits_by_key_group(h: Harness) {
    let mut source = h.open(&states());
    fill(source.as_mut());
    let exported = export_all(source.as_mut());
    let expected = reads(source.as_mut());
    let halves = [
        key_group_range_for_subtask(MAX, 2, 0),
        key_group_range_for_subtask(MAX, 2, 1),
    ];
    let mut merged: Vec<Option<String>> = vec![None; expected.len()];
    for range in halves {
        let target = Harness::new(h.kind, false);
        let mut b = target.try_open_range(&states(), range).unwrap();
        let mut refused = 0;
        for (state, key, value) in &exported {
            let (kg, _, _) = layout::decode_key(key).unwrap();
            if range.contains(kg) {
                b.import(*state, key, value).unwrap();
            } else {
                // Another subtask's key group is refused, never stored.
                let err = b.import(*state, key, value).unwrap_err();
                assert!(matches!(err, StateError::KeyOutOfRange { .. }), "{err}");
                refused += 1;
            }
        }
        assert!(refused > 0);
        b.flush().unwrap();
        for (i, slot) in merged.iter_mut().enumerate() {
            let key = format!("key-{i}");
            if range.contains(key_group_of(key.as_bytes(), MAX)) {
                assert!(slot.is_none());
                let one = format!(
                    "{:?} {:?} {:?} {:?}",
                    b.value_get(0, key.as_bytes()).unwrap(),
                    b.list_get(1, key.as_bytes()).unwrap(),
                    b.map_entries(2, key.as_bytes()).unwrap(),
                    b.value_get(3, key.as_bytes()).unwrap(),
                );
                *slot = Some(one);
            }
        }
    }
    let merged: Vec<String> = merged.into_iter().map(Option::unwrap).collect();
    assert_eq!(merged, expected);
}

pub(super) fn import_refuses_malformed_entries(h: Harness) {
    let mut b = h.open(&states());
    let mut key = Vec::new();
    layout::encode_key(&mut key, key_group_of(b"k", MAX), b"k").unwrap();
    // Truncated key header.
    assert!(b.import(0, &key[..3], b"v").is_err());
    // A key group that is not the key's.
    let mut wrong = key.clone();
    wrong[..2].copy_from_slice(&(key_group_of(b"k", MAX).0 ^ 1).to_be_bytes());
    assert!(b.import(0, &wrong, b"v").is_err());
    // A namespace on value state.
    let mut namespaced = key.clone();
    namespaced.push(b'x');
    assert!(b.import(0, &namespaced, b"v").is_err());
    // An unknown state.
    assert!(matches!(
        b.import(9, &key, b"v"),
        Err(StateError::UnknownState(9))
    ));
    // A truncated list.
    assert!(b.import(1, &key, &[5, 0, 0, 0, b'a']).is_err());
    assert_eq!(b.list_get(1, b"k").unwrap(), elems(&[]));
    b.flush().unwrap();
    assert_eq!(b.value_get(0, b"k").unwrap(), None, "nothing was stored");
}

/// Imports need not come in key order, and a key imported twice keeps
/// the later value (the RocksDB backend sorts what it gathers into SST
/// files; the heap backend just writes).
pub(super) fn import_in_any_order_keeps_the_last_value_of_a_key(h: Harness) {
    let mut source = h.open(&states());
    fill(source.as_mut());
    let exported = export_all(source.as_mut());
    let expected = reads(source.as_mut());
    let target = Harness::new(h.kind, false);
    let mut b = target.open(&states());
    // A stale value for every value-state key first, then everything in
    // reverse order: the real values come later and win.
    for (state, key, _) in exported.iter().filter(|(s, _, _)| *s == 0) {
        b.import(*state, key, b"stale").unwrap();
    }
    for (state, key, value) in exported.iter().rev() {
        b.import(*state, key, value).unwrap();
    }
    b.flush().unwrap();
    assert_eq!(reads(b.as_mut()), expected);
}
