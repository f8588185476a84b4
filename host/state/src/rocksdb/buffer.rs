//! The RocksDB backend's write-back buffer: recently read and written
//! entries of the current keys, kept in memory and written to the database
//! in one `WriteBatch` when it passes its size limit (or at a flush), so a
//! read-modify-write of a hot key costs no RocksDB call.

use super::*;

/// The buffer flushes itself once its dirty slots hold this many bytes
/// (estimated), even if the driver has not called `flush` yet. Counted
/// per dirty slot, not per write: a hot key written a million times
/// between checkpoints is one slot, and reaches the database once. (It
/// was a count of bytes written until December 2026: a hot set of 100 000
/// counters then went to the memtable every ~330 000 updates, a skip-list
/// insert per key each time, which was a third of the keyed-count
/// benchmark's time; benches/README.md, "Keyed count".)
pub const WRITE_BACK_LIMIT_BYTES: usize = 32 << 20;

/// Bound on the (estimated) bytes the buffer holds, clean and dirty, per
/// subtask; sized for about 800 000 small entries (a counter per key is
/// about 82 bytes with [`SLOT_OVERHEAD`]).
///
/// A key that is not in the buffer is read from RocksDB, and once
/// checkpoints have flushed the memtables into level-0 files that read
/// probes SST files: with 1 s checkpoints that was most of what they cost
/// (benches/README.md, "Throughput while checkpointing"). It was 32 MiB
/// until December 2026: the checkpointing benchmark's 500 000 keys per
/// subtask (39 MiB of slots, estimated) then overflowed it, the buffer was
/// emptied whenever it filled, and every record read RocksDB. At 64 MiB
/// they fit: measured side by side, 1.66× the records/s without
/// checkpoints and 2.02× with them. A state larger than the buffer gains
/// nothing (4 M keys). The cost is up to 32 MiB more per keyed subtask,
/// and only where the state is that large.
pub const BUFFER_LIMIT_BYTES: usize = 64 << 20;

/// Estimated bytes of bookkeeping per slot, beyond its key and payload
/// (hash-map bucket, `Vec` headers, allocator slack).
pub(super) const SLOT_OVERHEAD: usize = 64;

/// A slot's kind does not fit its state's kind: a bug in this module.
pub(super) fn mixed_slot() -> StateError {
    StateError::Backend("internal: buffered entry does not match the state kind".into())
}

/// What the buffer knows about one stored key.
pub(super) enum Slot {
    /// The database's entry: its stored value (value and map states), or
    /// `None` if it has none (any state).
    Clean(Option<Vec<u8>>),
    /// Dirty: the new stored value (value and map states).
    Put(Vec<u8>),
    /// Dirty: the key is gone (any state).
    Delete,
    /// Dirty (list state): elements appended since the last flush;
    /// `replace` means the database's list is void (cleared, or rewritten
    /// without expired elements).
    List { replace: bool, appended: Vec<u8> },
}

impl Slot {
    pub(super) fn is_dirty(&self) -> bool {
        !matches!(self, Slot::Clean(_))
    }

    /// Bytes of data the slot holds.
    pub(super) fn payload(&self) -> usize {
        match self {
            Slot::Clean(Some(v)) | Slot::Put(v) | Slot::List { appended: v, .. } => v.len(),
            Slot::Clean(None) | Slot::Delete => 0,
        }
    }
}

/// One state's slots.
pub(super) struct StateSlots {
    pub(super) slots: FastHashMap<Vec<u8>, Slot>,
    /// The keys of the dirty slots, each once, kept while they are at most
    /// a quarter of the slots (empty: no slot is dirty). `None` once they
    /// were more, so some slots are dirty: a flush then walks the map
    /// instead ([`Buffer::drain_dirty`]), and a buffer whose slots are
    /// mostly dirty (the common case: a write-back flush, most checkpoints)
    /// does not copy each key into this list on the hot path.
    pub(super) dirty_keys: Option<Vec<Vec<u8>>>,
}

impl Default for StateSlots {
    fn default() -> Self {
        Self {
            slots: FastHashMap::default(),
            dirty_keys: Some(Vec::new()),
        }
    }
}

impl StateSlots {
    /// Notes a slot that has just become dirty (`key`'s; call it before
    /// a new slot is inserted): lists its key while dirty slots are few.
    fn mark_dirty(&mut self, key: &[u8]) {
        if let Some(keys) = &mut self.dirty_keys {
            if keys.len() < self.slots.len() / 4 {
                keys.push(key.to_vec());
            } else {
                self.dirty_keys = None;
            }
        }
    }

    /// Whether any slot is dirty.
    fn any_dirty(&self) -> bool {
        self.dirty_keys.as_ref().is_none_or(|keys| !keys.is_empty())
    }

    /// Forgets the dirty slots' keys (all are clean or gone).
    fn reset_dirty(&mut self) {
        self.dirty_keys.get_or_insert_with(Vec::new).clear();
    }
}

/// The first 16 bytes of `key`, zero-padded, as a big-endian number: keys
/// ordered by it are in byte order except where it ties (then the keys
/// themselves decide).
fn sort_prefix(key: &[u8]) -> u128 {
    let mut head = [0u8; 16];
    let n = key.len().min(16);
    head[..n].copy_from_slice(&key[..n]);
    u128::from_be_bytes(head)
}

/// Adds a dirty slot's write to `batch` and marks the slot clean; returns
/// whether the slot stays (`false` for appended list elements: only the
/// database knows the merged list). Clean slots add nothing.
fn write_slot(batch: &mut WriteBatch, cf: &ColumnFamily, key: &[u8], slot: &mut Slot) -> bool {
    match slot {
        Slot::Put(stored) => {
            batch.put_cf(cf, key, &stored);
            let stored = mem::take(stored);
            *slot = Slot::Clean(Some(stored));
            true
        }
        Slot::Delete => {
            batch.delete_cf(cf, key);
            *slot = Slot::Clean(None);
            true
        }
        Slot::List {
            replace: false,
            appended,
        } => {
            batch.merge_cf(cf, key, &appended);
            false
        }
        Slot::List {
            replace: true,
            appended,
        } if appended.is_empty() => {
            batch.delete_cf(cf, key);
            false
        }
        Slot::List {
            replace: true,
            appended,
        } => {
            batch.put_cf(cf, key, &appended);
            false
        }
        Slot::Clean(_) => true,
    }
}

/// The write-back buffer and read cache of one subtask; see the module docs.
pub(super) struct Buffer {
    pub(super) states: Vec<StateSlots>,
    /// Estimated bytes held by all slots.
    pub(super) bytes: usize,
    /// Estimated bytes held by dirty slots (key, bookkeeping and payload
    /// each); 0 iff nothing is dirty.
    pub(super) dirty_bytes: usize,
}

impl Buffer {
    pub(super) fn new(states: usize) -> Self {
        Self {
            states: (0..states).map(|_| StateSlots::default()).collect(),
            bytes: 0,
            dirty_bytes: 0,
        }
    }

    #[inline]
    pub(super) fn get(&self, state: usize, key: &[u8]) -> Option<&Slot> {
        self.states[state].slots.get(key)
    }

    /// Records the database's entry for `key` (not in the buffer yet).
    pub(super) fn insert_clean(&mut self, state: usize, key: &[u8], stored: Option<Vec<u8>>) {
        let slot = Slot::Clean(stored);
        self.bytes += key.len() + SLOT_OVERHEAD + slot.payload();
        self.states[state].slots.insert(key.to_vec(), slot);
    }

    /// Makes `key`'s slot the dirty `new`.
    pub(super) fn set_dirty(&mut self, state: usize, key: &[u8], new: Slot) {
        debug_assert!(new.is_dirty());
        let st = &mut self.states[state];
        match st.slots.get_mut(key) {
            Some(slot) => {
                let (was_dirty, old, added) = (slot.is_dirty(), slot.payload(), new.payload());
                *slot = new;
                self.bytes = (self.bytes + added).saturating_sub(old);
                if was_dirty {
                    self.dirty_bytes = (self.dirty_bytes + added).saturating_sub(old);
                } else {
                    self.dirty_bytes += key.len() + SLOT_OVERHEAD + added;
                    st.mark_dirty(key);
                }
            }
            None => {
                self.bytes += key.len() + SLOT_OVERHEAD + new.payload();
                self.dirty_bytes += key.len() + SLOT_OVERHEAD + new.payload();
                st.mark_dirty(key);
                st.slots.insert(key.to_vec(), new);
            }
        }
    }

    /// Sets `key`'s stored value, reusing the slot's allocation when it has one.
    pub(super) fn put(
        &mut self,
        state: usize,
        key: &[u8],
        expiry: Option<u64>,
        value: &[u8],
    ) -> Result<(), StateError> {
        let st = &mut self.states[state];
        if let Some(slot) = st.slots.get_mut(key) {
            if matches!(slot, Slot::List { .. }) {
                return Err(mixed_slot());
            }
            let was_dirty = slot.is_dirty();
            let old = slot.payload();
            let mut stored = match mem::replace(slot, Slot::Delete) {
                Slot::Put(v) | Slot::Clean(Some(v)) => v,
                Slot::Clean(None) | Slot::Delete | Slot::List { .. } => Vec::new(),
            };
            stored.clear();
            ttl::encode(&mut stored, expiry, value);
            let new = stored.len();
            *slot = Slot::Put(stored);
            if was_dirty {
                self.dirty_bytes = (self.dirty_bytes + new).saturating_sub(old);
            } else {
                st.mark_dirty(key);
                self.dirty_bytes += key.len() + SLOT_OVERHEAD + new;
            }
            self.bytes = (self.bytes + new).saturating_sub(old);
            return Ok(());
        }
        let mut stored = Vec::with_capacity(ttl::EXPIRY_LEN + value.len());
        ttl::encode(&mut stored, expiry, value);
        self.set_dirty(state, key, Slot::Put(stored));
        Ok(())
    }

    /// Appends a list element (blind: the database's list is not read).
    pub(super) fn list_add(
        &mut self,
        state: usize,
        key: &[u8],
        expiry: Option<u64>,
        element: &[u8],
    ) -> Result<(), StateError> {
        let st = &mut self.states[state];
        match st.slots.get_mut(key) {
            Some(Slot::List { appended, .. }) => {
                let old = appended.len();
                layout::push_list_element(appended, expiry, element)?;
                let grown = appended.len() - old;
                self.bytes += grown;
                self.dirty_bytes += grown;
                Ok(())
            }
            Some(Slot::Put(_) | Slot::Clean(Some(_))) => Err(mixed_slot()),
            other => {
                // After a tombstone (or with none in the database), the
                // database's list does not count: write the list whole.
                let replace = other.is_some();
                let mut appended = Vec::new();
                layout::push_list_element(&mut appended, expiry, element)?;
                self.set_dirty(state, key, Slot::List { replace, appended });
                Ok(())
            }
        }
    }

    /// Moves every dirty slot into `batch`, sorted by key per column family,
    /// and marks it clean (slots with appended list elements are dropped
    /// instead: only the database knows the merged list).
    ///
    /// The keys are sorted because a skip list takes keys in order fastest.
    /// When more than a quarter of the slots became dirty (a write-back
    /// flush, most checkpoints; [`StateSlots::dirty_keys`] is `None`) the
    /// map is walked in memory order instead of being probed once per dirty
    /// key, and the walk's entries are sorted through their leading bytes
    /// ([`sort_prefix`]), read during the walk, so that a comparison rarely
    /// follows a key's heap pointer. With 400 000 dirty slots, probing each
    /// (in sorted, so random, order) took about 300 ms of the task thread
    /// per flush; the walk takes about 150 ms (benches/README.md, "What the
    /// task thread waits for, measured"). A few dirty slots among many
    /// clean ones are probed through their listed keys.
    pub(super) fn drain_dirty(
        &mut self,
        store: &Store,
        batch: &mut WriteBatch,
    ) -> Result<(), StateError> {
        for (state, st) in self.states.iter_mut().enumerate() {
            if !st.any_dirty() {
                continue;
            }
            let cf = store.cf(state)?;
            let mut dropped = Vec::new();
            match &mut st.dirty_keys {
                None => {
                    let mut order: Vec<(u128, &Vec<u8>, &mut Slot)> = st
                        .slots
                        .iter_mut()
                        .filter(|(_, slot)| slot.is_dirty())
                        .map(|(key, slot)| (sort_prefix(key), key, slot))
                        .collect();
                    order.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
                    for (_, key, slot) in order {
                        if !write_slot(batch, cf, key, slot) {
                            dropped.push(key.clone());
                        }
                    }
                }
                Some(keys) => {
                    keys.sort_unstable();
                    for key in keys.iter() {
                        if let Some(slot) = st.slots.get_mut(&key[..])
                            && !write_slot(batch, cf, key, slot)
                        {
                            dropped.push(key.clone());
                        }
                    }
                }
            }
            st.reset_dirty();
            for key in dropped {
                if let Some(slot) = st.slots.remove(&key[..]) {
                    self.bytes = self
                        .bytes
                        .saturating_sub(key.len() + SLOT_OVERHEAD + slot.payload());
                }
            }
        }
        self.dirty_bytes = 0;
        Ok(())
    }

    /// Drops every slot, dirty ones included.
    pub(super) fn clear(&mut self) {
        for st in &mut self.states {
            st.slots.clear();
            st.reset_dirty();
        }
        self.bytes = 0;
        self.dirty_bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checkpointing benchmark's state per subtask (500 000 keys,
    /// decimal strings as its generator makes them, each with an 8-byte
    /// count) fits in the buffer, so it is not emptied at every fill and
    /// its reads stay out of RocksDB's level-0 files (see
    /// [`BUFFER_LIMIT_BYTES`]).
    #[test]
    fn half_a_million_counters_fit_in_the_buffer() {
        let mut buffer = Buffer::new(1);
        let mut key = Vec::new();
        for n in 0..500_000u32 {
            let kg = crate::KeyGroup((n % 32_768) as u16);
            layout::encode_key(&mut key, kg, n.to_string().as_bytes()).unwrap();
            buffer
                .put(0, &key, None, &u64::from(n).to_le_bytes())
                .unwrap();
        }
        assert_eq!(buffer.states[0].slots.len(), 500_000);
        assert!(
            buffer.bytes <= BUFFER_LIMIT_BYTES,
            "500 000 counters take {} MiB of the buffer's {} MiB",
            buffer.bytes >> 20,
            BUFFER_LIMIT_BYTES >> 20
        );
    }

    /// The flush takes the probing path only while the listed keys are
    /// every dirty slot's; `flushes_of_most_or_of_few_dirty_slots_reach_the_database`
    /// checks what either path writes.
    #[test]
    fn dirty_keys_are_listed_only_while_a_quarter_or_fewer_of_the_slots() {
        let mut buffer = Buffer::new(1);
        for i in 0..100u32 {
            buffer.insert_clean(0, &i.to_be_bytes(), Some(vec![1]));
        }
        for i in 0..25u32 {
            buffer.put(0, &i.to_be_bytes(), None, b"v").unwrap();
            // Dirty again: listed once.
            buffer.put(0, &i.to_be_bytes(), None, b"w").unwrap();
        }
        let dirty = |buffer: &Buffer| {
            let st = &buffer.states[0];
            assert_eq!(st.any_dirty(), st.slots.values().any(Slot::is_dirty));
            st.slots.values().filter(|slot| slot.is_dirty()).count()
        };
        assert_eq!(dirty(&buffer), 25);
        let st = &buffer.states[0];
        let mut listed = st.dirty_keys.clone().expect("25 of 100 slots are listed");
        listed.sort();
        let expected: Vec<Vec<u8>> = (0..25u32).map(|i| i.to_be_bytes().to_vec()).collect();
        assert_eq!(listed, expected);

        buffer.put(0, &25u32.to_be_bytes(), None, b"v").unwrap();
        assert_eq!(dirty(&buffer), 26);
        assert!(
            buffer.states[0].dirty_keys.is_none(),
            "26 of 100 are not listed"
        );

        buffer.clear();
        assert_eq!(dirty(&buffer), 0);
        assert_eq!(buffer.states[0].dirty_keys, Some(Vec::new()));
        // A new key in an empty buffer is more than a quarter of its slots.
        buffer.put(0, b"new", None, b"v").unwrap();
        assert!(buffer.states[0].dirty_keys.is_none());
    }
}
