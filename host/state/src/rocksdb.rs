//! The RocksDB state backend: one database per subtask, one column family
//! per declared state.
//!
//! Owns the database in the subtask's working directory, its options, the
//! list merge operator, and the in-memory `Buffer` in front of it (write-back
//! buffer and read cache in one, in `rocksdb/buffer.rs`).
//!
//! # Layout
//! * Column family `state:<name>` per declared state (the prefix keeps a
//!   state named `default` apart from RocksDB's own column family).
//! * Stored keys and values as in [`super::layout`] and [`super::ttl`]:
//!   `[key group: u16 BE][key len: u32 BE][key][namespace] -> value`, the
//!   namespace being the user key for map state, so one key's map entries
//!   are a contiguous range ordered by user key.
//! * List state is one stored value per key, the concatenation of
//!   length-prefixed elements; `list_add` is a blind RocksDB merge
//!   (operator `weir.list-concat.v1`, pure concatenation).
//!
//! # The buffer: write-back and read cache
//! Per state, a hash map from stored key to a `Slot` that is either
//! *dirty* (a put, a tombstone or appended list elements not yet in the
//! database) or *clean* (a copy of the database's entry, or the fact that
//! it has none). Every access consults it first, so a subtask reads its own
//! writes; `clear` and `map_remove` are tombstones in it.
//! * [`KeyedStateBackend::flush`], called by the driver before each
//!   snapshot and at the end of input (and by the buffer itself, below),
//!   writes all dirty slots as one `WriteBatch` and marks them clean. The
//!   batch is sorted by key: memtable inserts in key order walk memory the
//!   previous insert brought into CPU cache, which makes them markedly
//!   cheaper than puts in random order.
//! * Reads of value and map entries that miss the buffer fill it with a
//!   clean slot. The hot path of a keyed operator — read a key's state, write
//!   it back — then costs hash-map operations, not a memtable lookup per
//!   read (a skip-list walk, cache misses all the way). Clean slots are exact,
//!   not hints: every change to the database goes through the buffer. A list
//!   is cached clean only as known-absent (after a flushed clear); its merged
//!   value exists only in the database.
//! * A batched read (`value_get_many_into`, the host's `value-get-many`)
//!   reads all the keys of a batch that miss the buffer with one RocksDB
//!   `MultiGet`, which probes each SST file's bloom filter and index for
//!   the whole batch in turn (prefetching) rather than walking every file
//!   once per key: what a read that misses costs once checkpoints have left
//!   several level-0 files.
//! * Before any iteration (`map_entries`, `clear` of a map) the buffer is
//!   flushed, so iterators see a complete database.
//! * Bounds: the buffer flushes itself when its dirty slots hold more than
//!   [`WRITE_BACK_LIMIT_BYTES`] (a slot written many times counts once: a
//!   hot set that fits reaches the database only at checkpoints and at the
//!   end), and drops all (clean) slots after a flush when it holds more
//!   than [`BUFFER_LIMIT_BYTES`]: crude, free to track, and right for the
//!   common case of a hot set that fits. It never grows without bound.
//! * If a flush fails, the buffer is emptied and its writes are lost; the
//!   error fails the task, which restarts from the last checkpoint.
//!
//! # Durability and snapshots
//! The write-ahead log is disabled: durability comes from checkpoints, not
//! from the WAL. [`KeyedStateBackend::snapshot_local`] flushes the buffer
//! and takes a RocksDB checkpoint (which flushes the memtables to SST
//! files, then hard-links the SST files and writes a fresh MANIFEST,
//! CURRENT and OPTIONS); the `checkpoint` module uploads it. A restore
//! moves such a directory into place and opens it ([`move_snapshot_into`]). RocksDB still writes its memtables to
//! SST files on a clean close, so flushed state survives closing and
//! reopening the same directory; after a crash, the state is restored from a
//! checkpoint instead. Unflushed writes are dropped with the backend.
//!
//! No Wasm, no job types, no checkpoint logic.

use std::mem;
use std::path::Path;

use ::rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, DB, DBCompressionType,
    DBPinnableSlice, IngestExternalFileOptions, MergeOperands, Options, ReadOptions, SstFileWriter,
    WriteBatch, WriteOptions,
};

use super::fast_hash::FastHashMap;
use super::layout::{self, Schema};
use super::{
    BackendKind, KeyedStateBackend, MapEntries, StateDescriptor, StateError, StateKind, ttl,
};

mod buffer;

use buffer::*;

/// Prefix of every state's column family name.
pub const CF_PREFIX: &str = "state:";

/// Name of the list-state merge operator. Persisted in the database's
/// OPTIONS file: renaming it makes existing databases unopenable.
pub const LIST_MERGE_OPERATOR: &str = "weir.list-concat.v1";

/// Block cache shared by all column families of one subtask. Modest,
/// because a TaskManager runs many subtasks, and hot entries live in the
/// buffer anyway.
pub const BLOCK_CACHE_BYTES: usize = 64 << 20;

/// Memtable size per column family. Small on purpose: every flushed write
/// is a skip-list insert, and with a memtable that mostly stays in CPU cache
/// the keyed get+put benchmark (benches/benches/state.rs, 100 K hot keys)
/// runs about 1.5x as fast as with RocksDB's usual 64 MiB. Reads rarely
/// reach the memtable (the buffer serves hot keys), so its size matters
/// little for them.
pub const WRITE_BUFFER_BYTES: usize = 8 << 20;

/// Bound on all memtables of one subtask's database together, however many
/// states it declares (RocksDB flushes the largest when it is reached).
pub const DB_WRITE_BUFFER_BYTES: usize = 64 << 20;

/// Level-0 files per column family that start a compaction (RocksDB's
/// default is 4); writes slow down at twice and stop at three times as many.
///
/// Every checkpoint flushes the memtables into a new level-0 file, and keyed
/// state is spread over the whole key space (keys are prefixed by their key
/// group, a hash), so a level-0 compaction overlaps — and rewrites — nearly
/// every file of the column family. An incremental checkpoint after such a
/// compaction uploads almost the whole state again. Compacting after 20
/// level-0 files instead of 4 makes that happen about every 16 checkpoints
/// instead of every 4 (benches/README.md, "Incremental checkpoints": a mean
/// upload of 6% instead of about 20% of the state per checkpoint with 1%
/// of the keys changing). The cost: a point read that misses the buffer and
/// the memtable may probe up to 20 level-0 files (their bloom filters are
/// pinned in the block cache) before the sorted levels, and up to 20 small
/// files' worth of stale versions wait longer for compaction.
pub const L0_COMPACTION_TRIGGER: i32 = 20;

/// Bytes of imported entries ([`KeyedStateBackend::import`], a restore
/// from a savepoint) gathered before they are written, sorted, into one
/// SST file per state and ingested: no memtable, no flush, no compaction
/// of what a restore writes once.
pub const IMPORT_BATCH_BYTES: usize = 32 << 20;

/// The column family of state `name`.
pub fn cf_name(name: &str) -> String {
    format!("{CF_PREFIX}{name}")
}

fn backend_err(e: ::rocksdb::Error) -> StateError {
    StateError::Backend(e.into_string())
}

/// The database and what every access to it needs.
struct Store {
    db: DB,
    /// Column family name per state id.
    cf_names: Vec<String>,
    /// Reused for every point read.
    read_opts: ReadOptions,
    /// WAL disabled; see the module docs.
    write_opts: WriteOptions,
}

impl Store {
    #[inline]
    fn cf(&self, state: usize) -> Result<&ColumnFamily, StateError> {
        let name = &self.cf_names[state];
        self.db
            .cf_handle(name)
            .ok_or_else(|| StateError::Backend(format!("column family `{name}` is missing")))
    }

    #[inline]
    fn get(&self, state: usize, key: &[u8]) -> Result<Option<DBPinnableSlice<'_>>, StateError> {
        self.db
            .get_pinned_cf_opt(self.cf(state)?, key, &self.read_opts)
            .map_err(backend_err)
    }

    /// Calls `f(stored key, stored value)` for every stored key starting with
    /// `prefix`, in key order.
    fn scan_prefix(
        &self,
        state: usize,
        prefix: &[u8],
        mut f: impl FnMut(&[u8], &[u8]) -> Result<(), StateError>,
    ) -> Result<(), StateError> {
        let mut opts = ReadOptions::default();
        if let Some(bound) = layout::prefix_upper_bound(prefix) {
            opts.set_iterate_upper_bound(bound);
        }
        let mut it = self.db.raw_iterator_cf_opt(self.cf(state)?, opts);
        it.seek(prefix);
        while let (Some(key), Some(value)) = (it.key(), it.value()) {
            if !key.starts_with(prefix) {
                break;
            }
            f(key, value)?;
            it.next();
        }
        it.status().map_err(backend_err)
    }
}

/// The list merge operator: concatenation (of encoded lists), for both full
/// and partial merges.
fn concat_lists(_key: &[u8], existing: Option<&[u8]>, operands: &MergeOperands) -> Option<Vec<u8>> {
    let len = existing.map_or(0, <[u8]>::len) + operands.iter().map(<[u8]>::len).sum::<usize>();
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(existing.unwrap_or_default());
    for op in operands.iter() {
        out.extend_from_slice(op);
    }
    Some(out)
}

/// Options of a state's column family; `kind` is `None` for a column
/// family found on disk but no longer declared.
fn cf_options(cache: &Cache, kind: Option<StateKind>) -> Options {
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(cache);
    table.set_bloom_filter(10.0, false);
    table.set_cache_index_and_filter_blocks(true);
    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    let mut opts = Options::default();
    opts.set_block_based_table_factory(&table);
    opts.set_write_buffer_size(WRITE_BUFFER_BYTES);
    opts.set_compression_type(DBCompressionType::Lz4);
    opts.set_level_compaction_dynamic_level_bytes(true);
    opts.set_level_zero_file_num_compaction_trigger(L0_COMPACTION_TRIGGER);
    opts.set_level_zero_slowdown_writes_trigger(2 * L0_COMPACTION_TRIGGER);
    opts.set_level_zero_stop_writes_trigger(3 * L0_COMPACTION_TRIGGER);
    if matches!(kind, Some(StateKind::List) | None) {
        opts.set_merge_operator_associative(LIST_MERGE_OPERATOR, concat_lists);
    }
    opts
}

/// Appends the live elements of an encoded list to `out` and, for a state
/// with TTL, their stored forms to `live`; returns whether any had expired.
fn collect_list(
    encoded: &[u8],
    now: Option<u64>,
    out: &mut Vec<Vec<u8>>,
    live: &mut Vec<u8>,
) -> Result<bool, StateError> {
    let mut expired = false;
    for stored in layout::list_elements(encoded) {
        let stored = stored?;
        match ttl::decode(stored, now)? {
            Some(element) => {
                out.push(element.to_vec());
                if now.is_some() {
                    live.extend_from_slice(&(stored.len() as u32).to_le_bytes());
                    live.extend_from_slice(stored);
                }
            }
            None => expired = true,
        }
    }
    Ok(expired)
}

/// Keyed state in RocksDB; see the module docs.
pub struct RocksDbBackend {
    store: Store,
    schema: Schema,
    buffer: Buffer,
    /// [`WRITE_BACK_LIMIT_BYTES`], except in tests.
    write_back_limit: usize,
    /// [`BUFFER_LIMIT_BYTES`], except in tests.
    buffer_limit: usize,
    /// Scratch for the stored key of the current call.
    key_buf: Vec<u8>,
    /// Scratch of [`KeyedStateBackend::value_get_many_into`], kept for
    /// its allocations: stored keys end to end, each's end, the misses.
    many_keys: Vec<u8>,
    many_ends: Vec<usize>,
    many_misses: Vec<usize>,
    /// Imported entries not written yet, per state (see
    /// [`IMPORT_BATCH_BYTES`]); written by [`KeyedStateBackend::flush`] at
    /// the latest.
    imports: Vec<Vec<(Vec<u8>, Vec<u8>)>>,
    /// Bytes of keys and values in `imports`.
    import_bytes: usize,
    /// SST files ingested so far (names the next one).
    ingested: u64,
}

impl RocksDbBackend {
    /// Opens (creating if missing) the database in `dir` with a column
    /// family per declared state. Column families on disk that are no
    /// longer declared are kept as they are.
    pub(crate) fn open(
        dir: &Path,
        states: &[StateDescriptor],
        schema: Schema,
    ) -> Result<Self, StateError> {
        std::fs::create_dir_all(dir).map_err(|e| {
            StateError::Backend(format!(
                "cannot create state directory {}: {e}",
                dir.display()
            ))
        })?;
        let cache = Cache::new_lru_cache(BLOCK_CACHE_BYTES);
        let mut db_opts = Options::default();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        db_opts.set_max_background_jobs(2);
        db_opts.set_keep_log_file_num(2);
        db_opts.set_db_write_buffer_size(DB_WRITE_BUFFER_BYTES);

        let cf_names: Vec<String> = states.iter().map(|d| cf_name(&d.name)).collect();
        let mut cfs: Vec<ColumnFamilyDescriptor> = states
            .iter()
            .zip(&cf_names)
            .map(|(d, name)| ColumnFamilyDescriptor::new(name, cf_options(&cache, Some(d.kind))))
            .collect();
        if dir.join("CURRENT").exists() {
            for name in DB::list_cf(&db_opts, dir).map_err(backend_err)? {
                if name != ::rocksdb::DEFAULT_COLUMN_FAMILY_NAME && !cf_names.contains(&name) {
                    tracing::warn!(column_family = %name, dir = %dir.display(),
                        "state column family on disk is not declared; keeping it untouched");
                    cfs.push(ColumnFamilyDescriptor::new(name, cf_options(&cache, None)));
                }
            }
        }
        let db = DB::open_cf_descriptors(&db_opts, dir, cfs).map_err(backend_err)?;

        let mut write_opts = WriteOptions::default();
        write_opts.disable_wal(true);
        Ok(Self {
            store: Store {
                db,
                cf_names,
                read_opts: ReadOptions::default(),
                write_opts,
            },
            schema,
            buffer: Buffer::new(states.len()),
            write_back_limit: WRITE_BACK_LIMIT_BYTES,
            buffer_limit: BUFFER_LIMIT_BYTES,
            key_buf: Vec::with_capacity(64),
            many_keys: Vec::new(),
            many_ends: Vec::new(),
            many_misses: Vec::new(),
            imports: vec![Vec::new(); states.len()],
            import_bytes: 0,
            ingested: 0,
        })
    }

    /// Writes the imported entries gathered so far: per state, sorted (the
    /// last of equal keys wins, as later writes would) into an SST file
    /// beside the database, which RocksDB then takes in (moving the file).
    fn write_imports(&mut self) -> Result<(), StateError> {
        if self.import_bytes == 0 {
            return Ok(());
        }
        self.import_bytes = 0;
        let mut ingest = IngestExternalFileOptions::default();
        ingest.set_move_files(true);
        for state in 0..self.imports.len() {
            let mut entries = mem::take(&mut self.imports[state]);
            if entries.is_empty() {
                continue;
            }
            // Stable, and linear for entries already in order (a savepoint
            // file's are): equal keys keep their import order.
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            let path = self
                .store
                .db
                .path()
                .join(format!("import-{}.sst", self.ingested));
            self.ingested += 1;
            let mut opts = Options::default();
            opts.set_compression_type(DBCompressionType::Lz4);
            let mut writer = SstFileWriter::create(&opts);
            writer.open(&path).map_err(backend_err)?;
            for (i, (key, value)) in entries.iter().enumerate() {
                if entries.get(i + 1).is_some_and(|next| next.0 == *key) {
                    continue;
                }
                writer.put(key, value).map_err(backend_err)?;
            }
            writer.finish().map_err(backend_err)?;
            let cf = self.store.cf(state)?;
            self.store
                .db
                .ingest_external_file_cf_opts(cf, &ingest, vec![&path])
                .map_err(|e| {
                    let _ = std::fs::remove_file(&path);
                    backend_err(e)
                })?;
        }
        Ok(())
    }

    /// The same backend with other buffer bounds, so that tests reach them.
    #[cfg(test)]
    pub(crate) fn with_limits(mut self, write_back: usize, buffer: usize) -> Self {
        self.write_back_limit = write_back;
        self.buffer_limit = buffer;
        self
    }

    /// Reads the point entry (value or map entry) at `key_buf`: buffer
    /// first, then the database (caching what it finds). An expired entry
    /// reads as absent and is deleted.
    fn read_point(&mut self, state: u32, now: Option<u64>) -> Result<Option<Vec<u8>>, StateError> {
        let mut out = Vec::new();
        Ok(self.read_point_into(state, now, &mut out)?.then_some(out))
    }

    /// [`Self::read_point`], appending the value to `out`; whether there
    /// was one.
    fn read_point_into(
        &mut self,
        state: u32,
        now: Option<u64>,
        out: &mut Vec<u8>,
    ) -> Result<bool, StateError> {
        let state = state as usize;
        let key = &self.key_buf[..];
        let found = match read_buffered(&mut self.buffer, state, key, now, out)? {
            Some(found) => found,
            None => {
                let stored = self.store.get(state, key)?;
                cache_stored(&mut self.buffer, state, key, stored.as_deref(), now, out)?
            }
        };
        self.enforce_limits()?;
        Ok(found)
    }

    /// Flushes (and so, when it is too large, empties) the buffer once it
    /// exceeds its bounds.
    fn enforce_limits(&mut self) -> Result<(), StateError> {
        if self.buffer.dirty_bytes >= self.write_back_limit || self.buffer.bytes > self.buffer_limit
        {
            self.flush()
        } else {
            Ok(())
        }
    }
}

/// What the buffer holds for the point entry (value or map entry) at
/// `key`: `Some(found)`, with the value appended to `out`, or `None` if it
/// holds nothing for `key`. An entry found expired reads as absent and is
/// deleted.
fn read_buffered(
    buffer: &mut Buffer,
    state: usize,
    key: &[u8],
    now: Option<u64>,
    out: &mut Vec<u8>,
) -> Result<Option<bool>, StateError> {
    let found = match buffer.get(state, key) {
        Some(Slot::Put(stored) | Slot::Clean(Some(stored))) => ttl::decode(stored, now)?
            .map(|value| out.extend_from_slice(value))
            .is_some(),
        Some(Slot::Delete | Slot::Clean(None)) => return Ok(Some(false)),
        Some(Slot::List { .. }) => return Err(mixed_slot()),
        None => return Ok(None),
    };
    if !found {
        buffer.set_dirty(state, key, Slot::Delete);
    }
    Ok(Some(found))
}

/// Caches `stored`, the database's point entry at `key` (which the buffer
/// does not hold), as a clean slot and appends its value to `out`; whether
/// there was one. An entry found expired reads as absent and is deleted.
fn cache_stored(
    buffer: &mut Buffer,
    state: usize,
    key: &[u8],
    stored: Option<&[u8]>,
    now: Option<u64>,
    out: &mut Vec<u8>,
) -> Result<bool, StateError> {
    let found = match stored {
        Some(stored) => ttl::decode(stored, now)?
            .map(|value| out.extend_from_slice(value))
            .is_some(),
        None => false,
    };
    buffer.insert_clean(state, key, stored.map(<[u8]>::to_vec));
    if stored.is_some() && !found {
        buffer.set_dirty(state, key, Slot::Delete);
    }
    Ok(found)
}

impl KeyedStateBackend for RocksDbBackend {
    fn value_get(&mut self, state: u32, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        let (kg, meta) = self.schema.check(state, Some(StateKind::Value), key)?;
        layout::encode_key(&mut self.key_buf, kg, key)?;
        self.read_point(state, self.schema.now(meta))
    }

    fn value_get_into(
        &mut self,
        state: u32,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<bool, StateError> {
        let (kg, meta) = self.schema.check(state, Some(StateKind::Value), key)?;
        layout::encode_key(&mut self.key_buf, kg, key)?;
        self.read_point_into(state, self.schema.now(meta), out)
    }

    /// Keys are served from the buffer in order until the first that
    /// misses it; from there on, every key is first encoded and looked up,
    /// the misses are read with one `MultiGet`, and then all are served in
    /// order. A batch of hot keys thus costs one hash lookup per key, as
    /// single reads do.
    fn value_get_many_into(
        &mut self,
        state: u32,
        keys: &[&[u8]],
        out: &mut Vec<u8>,
        lens: &mut Vec<Option<usize>>,
    ) -> Result<(), StateError> {
        let idx = state as usize;
        let mut now = None;
        // From the first miss on: the stored keys, end to end, each's end,
        // and which of them miss the buffer (indices into `ends`).
        let mut stored = mem::take(&mut self.many_keys);
        let mut ends = mem::take(&mut self.many_ends);
        let mut misses = mem::take(&mut self.many_misses);
        stored.clear();
        ends.clear();
        misses.clear();
        for (i, key) in keys.iter().enumerate() {
            let (kg, meta) = self.schema.check(state, Some(StateKind::Value), key)?;
            if i == 0 {
                now = self.schema.now(meta);
            }
            layout::encode_key(&mut self.key_buf, kg, key)?;
            if ends.is_empty() {
                let start = out.len();
                if let Some(found) = read_buffered(&mut self.buffer, idx, &self.key_buf, now, out)?
                {
                    lens.push(found.then(|| out.len() - start));
                    continue;
                }
            }
            if self.buffer.get(idx, &self.key_buf).is_none() {
                misses.push(ends.len());
            }
            stored.extend_from_slice(&self.key_buf);
            ends.push(stored.len());
        }
        let key_at = |j: usize| &stored[if j == 0 { 0 } else { ends[j - 1] }..ends[j]];
        if !ends.is_empty() {
            let cf = self.store.cf(idx)?;
            let mut read = self
                .store
                .db
                .batched_multi_get_cf_opt(
                    cf,
                    misses.iter().map(|&j| key_at(j)),
                    false,
                    &self.store.read_opts,
                )
                .into_iter();
            let mut next_miss = misses.iter().peekable();
            for j in 0..ends.len() {
                let key = key_at(j);
                let entry = next_miss.next_if_eq(&&j).and_then(|_| read.next());
                let start = out.len();
                // A key asked for twice is cached at its first read and
                // served from the buffer at its second.
                let found = match read_buffered(&mut self.buffer, idx, key, now, out)? {
                    Some(found) => found,
                    None => {
                        let entry = match entry {
                            Some(entry) => entry.map_err(backend_err)?,
                            None => self.store.get(idx, key)?,
                        };
                        cache_stored(&mut self.buffer, idx, key, entry.as_deref(), now, out)?
                    }
                };
                lens.push(found.then(|| out.len() - start));
            }
        }
        (self.many_keys, self.many_ends, self.many_misses) = (stored, ends, misses);
        self.enforce_limits()
    }

    fn value_set(&mut self, state: u32, key: &[u8], value: &[u8]) -> Result<(), StateError> {
        let (kg, meta) = self.schema.check(state, Some(StateKind::Value), key)?;
        layout::encode_key(&mut self.key_buf, kg, key)?;
        self.buffer.put(
            state as usize,
            &self.key_buf,
            self.schema.expiry(meta),
            value,
        )?;
        self.enforce_limits()
    }

    fn list_get(&mut self, state: u32, key: &[u8]) -> Result<Vec<Vec<u8>>, StateError> {
        let (kg, meta) = self.schema.check(state, Some(StateKind::List), key)?;
        layout::encode_key(&mut self.key_buf, kg, key)?;
        let now = self.schema.now(meta);
        let idx = state as usize;
        let key = &self.key_buf[..];
        let (mut out, mut live) = (Vec::new(), Vec::new());
        let mut expired = false;
        match self.buffer.get(idx, key) {
            Some(Slot::Delete | Slot::Clean(None)) => {}
            Some(Slot::Put(_) | Slot::Clean(Some(_))) => return Err(mixed_slot()),
            Some(Slot::List { replace, appended }) => {
                if !replace && let Some(stored) = self.store.get(idx, key)? {
                    expired |= collect_list(&stored, now, &mut out, &mut live)?;
                }
                expired |= collect_list(appended, now, &mut out, &mut live)?;
            }
            None => {
                if let Some(stored) = self.store.get(idx, key)? {
                    expired |= collect_list(&stored, now, &mut out, &mut live)?;
                }
            }
        }
        if expired {
            // Rewrite the list without its expired elements.
            let rewrite = if live.is_empty() {
                Slot::Delete
            } else {
                Slot::List {
                    replace: true,
                    appended: live,
                }
            };
            self.buffer.set_dirty(idx, key, rewrite);
            self.enforce_limits()?;
        }
        Ok(out)
    }

    fn list_add(&mut self, state: u32, key: &[u8], element: &[u8]) -> Result<(), StateError> {
        let (kg, meta) = self.schema.check(state, Some(StateKind::List), key)?;
        layout::encode_key(&mut self.key_buf, kg, key)?;
        self.buffer.list_add(
            state as usize,
            &self.key_buf,
            self.schema.expiry(meta),
            element,
        )?;
        self.enforce_limits()
    }

    fn map_get(
        &mut self,
        state: u32,
        key: &[u8],
        user_key: &[u8],
    ) -> Result<Option<Vec<u8>>, StateError> {
        let (kg, meta) = self.schema.check(state, Some(StateKind::Map), key)?;
        layout::encode_key(&mut self.key_buf, kg, key)?;
        self.key_buf.extend_from_slice(user_key);
        self.read_point(state, self.schema.now(meta))
    }

    fn map_put(
        &mut self,
        state: u32,
        key: &[u8],
        user_key: &[u8],
        value: &[u8],
    ) -> Result<(), StateError> {
        let (kg, meta) = self.schema.check(state, Some(StateKind::Map), key)?;
        layout::encode_key(&mut self.key_buf, kg, key)?;
        self.key_buf.extend_from_slice(user_key);
        self.buffer.put(
            state as usize,
            &self.key_buf,
            self.schema.expiry(meta),
            value,
        )?;
        self.enforce_limits()
    }

    fn map_remove(&mut self, state: u32, key: &[u8], user_key: &[u8]) -> Result<(), StateError> {
        let (kg, _) = self.schema.check(state, Some(StateKind::Map), key)?;
        layout::encode_key(&mut self.key_buf, kg, key)?;
        self.key_buf.extend_from_slice(user_key);
        self.buffer
            .set_dirty(state as usize, &self.key_buf, Slot::Delete);
        self.enforce_limits()
    }

    fn map_entries(&mut self, state: u32, key: &[u8]) -> Result<MapEntries, StateError> {
        let (kg, meta) = self.schema.check(state, Some(StateKind::Map), key)?;
        layout::encode_key(&mut self.key_buf, kg, key)?;
        let now = self.schema.now(meta);
        // Iterators see only the database: make it complete first.
        self.flush()?;
        let prefix = &self.key_buf[..];
        let buffer = &mut self.buffer;
        let mut entries = Vec::new();
        self.store
            .scan_prefix(state as usize, prefix, |stored_key, stored| {
                match ttl::decode(stored, now)? {
                    Some(value) => {
                        entries.push((stored_key[prefix.len()..].to_vec(), value.to_vec()))
                    }
                    None => buffer.set_dirty(state as usize, stored_key, Slot::Delete),
                }
                Ok(())
            })?;
        self.enforce_limits()?;
        Ok(entries)
    }

    fn clear(&mut self, state: u32, key: &[u8]) -> Result<(), StateError> {
        let (kg, meta) = self.schema.check(state, None, key)?;
        layout::encode_key(&mut self.key_buf, kg, key)?;
        if meta.kind == StateKind::Map {
            // A map is every stored key with this prefix: find them in the
            // (flushed) database and tombstone each.
            self.flush()?;
            let buffer = &mut self.buffer;
            self.store
                .scan_prefix(state as usize, &self.key_buf, |stored_key, _| {
                    buffer.set_dirty(state as usize, stored_key, Slot::Delete);
                    Ok(())
                })?;
        } else {
            self.buffer
                .set_dirty(state as usize, &self.key_buf, Slot::Delete);
        }
        self.enforce_limits()
    }

    fn compact(&mut self) -> Result<(), StateError> {
        self.flush()?;
        for state in 0..self.store.cf_names.len() {
            let cf = self.store.cf(state)?;
            self.store
                .db
                .compact_range_cf::<&[u8], &[u8]>(cf, None, None);
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StateError> {
        self.write_imports()?;
        if self.buffer.dirty_bytes > 0 {
            let mut batch = WriteBatch::default();
            let written = self
                .buffer
                .drain_dirty(&self.store, &mut batch)
                .and_then(|()| {
                    self.store
                        .db
                        .write_opt(batch, &self.store.write_opts)
                        .map_err(backend_err)
                });
            if let Err(e) = written {
                // Dirty slots may be half drained, clean ones ahead of the
                // database: trust none of them.
                self.buffer.clear();
                return Err(e);
            }
        }
        if self.buffer.bytes > self.buffer_limit {
            self.buffer.clear();
        }
        Ok(())
    }

    fn snapshot_local(&mut self, dir: &Path) -> Result<(), StateError> {
        self.flush()?;
        super::prepare_snapshot_dir(dir)?;
        // With `log_size_for_flush` 0 the checkpoint flushes every column
        // family's memtable first: with the WAL off, that is the only way
        // the writes since the last memtable flush get into the snapshot.
        ::rocksdb::checkpoint::Checkpoint::new(&self.store.db)
            .and_then(|cp| cp.create_checkpoint(dir))
            .map_err(|e| {
                StateError::Backend(format!(
                    "RocksDB checkpoint into {}: {}",
                    dir.display(),
                    e.into_string()
                ))
            })
    }

    fn kind(&self) -> BackendKind {
        BackendKind::RocksDb
    }

    fn size_bytes(&self) -> u64 {
        use ::rocksdb::properties::{CUR_SIZE_ALL_MEM_TABLES, LIVE_SST_FILES_SIZE};
        let db = &self.store.db;
        let mut bytes = (self.buffer.dirty_bytes + self.import_bytes) as u64;
        for name in &self.store.cf_names {
            let Some(cf) = db.cf_handle(name) else {
                continue;
            };
            for property in [LIVE_SST_FILES_SIZE, CUR_SIZE_ALL_MEM_TABLES] {
                // A property RocksDB cannot give counts as 0: metrics only.
                bytes += db
                    .property_int_value_cf(cf, property)
                    .ok()
                    .flatten()
                    .unwrap_or(0);
            }
        }
        bytes
    }

    fn export(&mut self, visit: &mut crate::ExportVisitor<'_>) -> Result<(), StateError> {
        for state in 0..self.store.cf_names.len() as u32 {
            self.export_state(state, visit)?;
        }
        Ok(())
    }

    fn export_state(
        &mut self,
        state: u32,
        visit: &mut crate::ExportVisitor<'_>,
    ) -> Result<(), StateError> {
        if state as usize >= self.store.cf_names.len() {
            return Err(StateError::UnknownState(state));
        }
        self.flush()?;
        // The column family holds exactly the canonical form.
        self.store
            .scan_prefix(state as usize, &[], |key, value| visit(state, key, value))
    }

    fn import(
        &mut self,
        state: u32,
        stored_key: &[u8],
        stored_value: &[u8],
    ) -> Result<(), StateError> {
        let checked = self.schema.check_stored(state, stored_key)?;
        if checked.meta.kind == StateKind::List {
            for element in layout::list_elements(stored_value) {
                element?;
            }
        }
        if self.buffer.bytes > 0 {
            // Nothing cached may hide what is written underneath it.
            self.flush()?;
            self.buffer.clear();
        }
        self.import_bytes += stored_key.len() + stored_value.len();
        self.imports[state as usize].push((stored_key.to_vec(), stored_value.to_vec()));
        if self.import_bytes >= IMPORT_BATCH_BYTES {
            self.write_imports()?;
        }
        Ok(())
    }
}

/// Moves the files of a local snapshot (a RocksDB checkpoint directory)
/// from `from` into the working directory `to`, which must not exist or be
/// empty: renamed where possible, copied across filesystems.
pub(crate) fn move_snapshot_into(from: &Path, to: &Path) -> Result<(), StateError> {
    let err = |what: String, e: std::io::Error| StateError::Backend(format!("{what}: {e}"));
    if !from.join("CURRENT").is_file() {
        return Err(StateError::Backend(format!(
            "{} is not a RocksDB snapshot (no CURRENT file)",
            from.display()
        )));
    }
    if std::fs::read_dir(to).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(StateError::Backend(format!(
            "cannot restore into {}: the state directory is not empty",
            to.display()
        )));
    }
    std::fs::create_dir_all(to)
        .map_err(|e| err(format!("cannot create state directory {}", to.display()), e))?;
    let entries = std::fs::read_dir(from)
        .map_err(|e| err(format!("cannot list snapshot {}", from.display()), e))?;
    for entry in entries {
        let entry =
            entry.map_err(|e| err(format!("cannot list snapshot {}", from.display()), e))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if std::fs::rename(&src, &dst).is_err() {
            std::fs::copy(&src, &dst).map_err(|e| {
                err(
                    format!("cannot copy {} to {}", src.display(), dst.display()),
                    e,
                )
            })?;
            let _ = std::fs::remove_file(&src);
        }
    }
    Ok(())
}
