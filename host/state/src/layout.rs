//! The byte layout of stored keyed state, shared by both backends, and the
//! checks every state call makes.
//!
//! Owns:
//! * the stored key: `[key group: u16 BE][key len: u32 BE][key][namespace]`,
//!   where the namespace is empty for value and list state and the user key
//!   for map state. Big-endian key group first means one key group (and one
//!   subtask's range) is a contiguous key range, as snapshots and rescaling
//!   need; the length prefix means the entries of key `a` never share a
//!   prefix with those of key `ab`, so a map's entries are exactly the keys
//!   starting with `[key group][len][key]`, ordered by user key bytes.
//! * the list encoding: elements back to back, each
//!   `[len: u32 LE][element as stored]`, so appending is concatenation (the
//!   RocksDB merge operator needs nothing else);
//! * `Schema`: the declared states plus the subtask's key groups, which
//!   validates descriptors and checks state id, kind and key group on every
//!   call.
//!
//! Values themselves are stored as [`super::ttl`] says (an expiry prefix
//! when the state has a TTL). This layout is written to disk and into
//! checkpoints: changing it needs a migration.
//!
//! No storage, no Wasm.

use std::collections::HashSet;
use std::sync::Arc;

use super::key_group::{KeyGroup, KeyGroupRange, key_group_of};
use super::ttl::Clock;
use super::{StateDescriptor, StateError, StateKind};

/// Bytes before the key in a stored key: key group (2) and key length (4).
pub const KEY_HEADER_LEN: usize = 6;

/// Bytes before each element in an encoded list.
pub const LIST_ELEMENT_HEADER_LEN: usize = 4;

fn len_u32(len: usize, what: &str) -> Result<u32, StateError> {
    u32::try_from(len)
        .map_err(|_| StateError::Backend(format!("{what} of {len} bytes is too long")))
}

/// Replaces `out` with the stored-key prefix of `key`:
/// `[key group: u16 BE][key len: u32 BE][key]`. For value and list state this
/// is the whole stored key; map state appends the user key.
#[inline]
pub fn encode_key(out: &mut Vec<u8>, kg: KeyGroup, key: &[u8]) -> Result<(), StateError> {
    let len = len_u32(key.len(), "key")?;
    out.clear();
    out.reserve(KEY_HEADER_LEN + key.len());
    out.extend_from_slice(&kg.0.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(key);
    Ok(())
}

/// Splits a stored key into key group, key and namespace (the user key for
/// map state); `None` if it is malformed.
pub fn decode_key(stored: &[u8]) -> Option<(KeyGroup, &[u8], &[u8])> {
    let (kg, rest) = stored.split_first_chunk::<2>()?;
    let (len, rest) = rest.split_first_chunk::<4>()?;
    let len = u32::from_be_bytes(*len) as usize;
    if rest.len() < len {
        return None;
    }
    let (key, namespace) = rest.split_at(len);
    Some((KeyGroup(u16::from_be_bytes(*kg)), key, namespace))
}

/// The smallest byte string greater than every string starting with
/// `prefix`, or `None` if there is none (the prefix is all `0xff`): the
/// exclusive upper bound of a prefix scan.
pub fn prefix_upper_bound(prefix: &[u8]) -> Option<Vec<u8>> {
    let last = prefix.iter().rposition(|&b| b != 0xff)?;
    let mut bound = prefix[..=last].to_vec();
    bound[last] += 1;
    Some(bound)
}

/// Appends one list element (already in stored form, see [`super::ttl`]) to
/// an encoded list.
#[inline]
pub fn push_list_element(
    out: &mut Vec<u8>,
    expiry: Option<u64>,
    element: &[u8],
) -> Result<(), StateError> {
    let stored_len = element.len()
        + if expiry.is_some() {
            super::ttl::EXPIRY_LEN
        } else {
            0
        };
    let len = len_u32(stored_len, "list element")?;
    out.reserve(LIST_ELEMENT_HEADER_LEN + stored_len);
    out.extend_from_slice(&len.to_le_bytes());
    super::ttl::encode(out, expiry, element);
    Ok(())
}

/// Appends one element already in stored form (TTL prefix included, as
/// [`list_elements`] yields it) to an encoded list.
pub fn push_stored_list_element(out: &mut Vec<u8>, stored: &[u8]) -> Result<(), StateError> {
    let len = len_u32(stored.len(), "list element")?;
    out.reserve(LIST_ELEMENT_HEADER_LEN + stored.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(stored);
    Ok(())
}

/// Rewrites one stored value of a state of `kind` (with a TTL prefix if
/// `ttl`) with `migrate`, keeping its layout: a value state's value and a
/// map state's value go through `migrate` once, a list's elements one by
/// one; TTL expiries stay as they were. For a job upgraded with a module
/// that migrates its state (`migration.migrate-state`). `migrate`'s error
/// is returned as it is; a malformed stored value is a backend error.
pub fn migrate_stored<E: From<StateError>>(
    kind: StateKind,
    ttl: bool,
    stored: &[u8],
    migrate: &mut impl FnMut(&[u8]) -> Result<Vec<u8>, E>,
) -> Result<Vec<u8>, E> {
    let mut one = |stored: &[u8], out: &mut Vec<u8>| -> Result<(), E> {
        let (expiry, value) = if ttl {
            let (expiry, value) = stored
                .split_first_chunk::<{ super::ttl::EXPIRY_LEN }>()
                .ok_or_else(|| {
                    StateError::Backend(format!(
                        "stored value of {} bytes is too short for its TTL prefix",
                        stored.len()
                    ))
                })?;
            (Some(u64::from_le_bytes(*expiry)), value)
        } else {
            (None, stored)
        };
        let new = migrate(value)?;
        super::ttl::encode(out, expiry, &new);
        Ok(())
    };
    let mut out = Vec::with_capacity(stored.len());
    match kind {
        StateKind::Value | StateKind::Map => one(stored, &mut out)?,
        StateKind::List => {
            let mut element = Vec::new();
            for stored in list_elements(stored) {
                element.clear();
                one(stored?, &mut element)?;
                push_stored_list_element(&mut out, &element)?;
            }
        }
    }
    Ok(out)
}

/// Iterates over the stored elements of an encoded list, oldest first.
pub fn list_elements(encoded: &[u8]) -> ListElements<'_> {
    ListElements { rest: encoded }
}

/// Iterator returned by [`list_elements`]; yields an error (once) for a
/// truncated list.
pub struct ListElements<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for ListElements<'a> {
    type Item = Result<&'a [u8], StateError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let parsed = self
            .rest
            .split_first_chunk::<LIST_ELEMENT_HEADER_LEN>()
            .and_then(|(len, rest)| {
                let len = u32::from_le_bytes(*len) as usize;
                (rest.len() >= len).then(|| rest.split_at(len))
            });
        match parsed {
            Some((element, rest)) => {
                self.rest = rest;
                Some(Ok(element))
            }
            None => {
                let n = self.rest.len();
                self.rest = &[];
                Some(Err(StateError::Backend(format!(
                    "truncated list state ({n} trailing bytes)"
                ))))
            }
        }
    }
}

/// A stored key taken apart and checked ([`Schema::check_stored`]).
pub(crate) struct StoredKey<'k> {
    pub key_group: KeyGroup,
    pub key: &'k [u8],
    /// A map's user key; empty for value and list state.
    pub namespace: &'k [u8],
    pub meta: StateMeta,
}

/// One declared state, as the backends need it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StateMeta {
    pub kind: StateKind,
    /// TTL in milliseconds, at least 1.
    pub ttl_ms: Option<u64>,
}

/// The declared states and the subtask's key groups: validates the
/// configuration once, then checks every call.
#[derive(Debug)]
pub(crate) struct Schema {
    states: Vec<StateMeta>,
    /// Declared names, by state id.
    names: Vec<String>,
    key_groups: KeyGroupRange,
    max_parallelism: u16,
    clock: Arc<dyn Clock>,
}

impl Schema {
    pub fn new(
        states: &[StateDescriptor],
        key_groups: KeyGroupRange,
        max_parallelism: u16,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, StateError> {
        let invalid = |msg: String| Err(StateError::InvalidDescriptor(msg));
        if max_parallelism == 0 {
            return invalid("max_parallelism must be at least 1".into());
        }
        if key_groups.start > key_groups.end || key_groups.end > max_parallelism {
            return invalid(format!(
                "key-group range {key_groups} is not within [0, {max_parallelism})"
            ));
        }
        if u32::try_from(states.len()).is_err() {
            return invalid(format!("{} states is too many", states.len()));
        }
        let mut names = HashSet::new();
        let mut metas = Vec::with_capacity(states.len());
        for (id, d) in states.iter().enumerate() {
            if d.name.is_empty() {
                return invalid(format!("state {id} has an empty name"));
            }
            if !names.insert(d.name.as_str()) {
                return invalid(format!("state name `{}` is declared twice", d.name));
            }
            let ttl_ms = match d.ttl {
                None => None,
                Some(ttl) => match u64::try_from(ttl.as_millis()) {
                    Ok(0) => {
                        return invalid(format!("state `{}` has a TTL below 1 ms", d.name));
                    }
                    Ok(ms) => Some(ms),
                    Err(_) => return invalid(format!("state `{}` has a TTL too large", d.name)),
                },
            };
            metas.push(StateMeta {
                kind: d.kind,
                ttl_ms,
            });
        }
        Ok(Self {
            states: metas,
            names: states.iter().map(|d| d.name.clone()).collect(),
            key_groups,
            max_parallelism,
            clock,
        })
    }

    /// Number of declared states.
    pub fn len(&self) -> usize {
        self.states.len()
    }

    /// The declared state `id`.
    pub fn meta(&self, id: usize) -> StateMeta {
        self.states[id]
    }

    /// Checks that `state` exists, is of kind `expected` (any kind if
    /// `None`) and that `key` belongs to this subtask; returns the key's key
    /// group and the state.
    #[inline]
    pub fn check(
        &self,
        state: u32,
        expected: Option<StateKind>,
        key: &[u8],
    ) -> Result<(KeyGroup, StateMeta), StateError> {
        let meta = *self
            .states
            .get(state as usize)
            .ok_or(StateError::UnknownState(state))?;
        if let Some(expected) = expected
            && meta.kind != expected
        {
            return Err(StateError::WrongKind {
                state,
                expected,
                actual: meta.kind,
            });
        }
        let kg = key_group_of(key, self.max_parallelism);
        if !self.key_groups.contains(kg) {
            return Err(StateError::KeyOutOfRange {
                key_group: kg.0,
                range: self.key_groups,
            });
        }
        Ok((kg, meta))
    }

    /// Checks that `state` exists and that `stored_key` is well formed and
    /// its key group this subtask's (an import, [`super::KeyedStateBackend::import`]);
    /// returns the key group, the key, the namespace (a map's user key) and the state.
    pub fn check_stored<'k>(
        &self,
        state: u32,
        stored_key: &'k [u8],
    ) -> Result<StoredKey<'k>, StateError> {
        let (kg, key, namespace) = decode_key(stored_key).ok_or_else(|| {
            StateError::Backend(format!(
                "malformed stored key of {} bytes for state {state}",
                stored_key.len()
            ))
        })?;
        let (checked, meta) = self.check(state, None, key)?;
        if checked != kg {
            return Err(StateError::Backend(format!(
                "stored key names key group {} but its key hashes to {} \
                 (max parallelism {})",
                kg.0, checked.0, self.max_parallelism
            )));
        }
        if meta.kind != StateKind::Map && !namespace.is_empty() {
            return Err(StateError::Backend(format!(
                "stored key of {:?} state {state} has a namespace",
                meta.kind
            )));
        }
        Ok(StoredKey {
            key_group: kg,
            key,
            namespace,
            meta,
        })
    }

    /// The declared name of state `id`.
    pub fn name(&self, id: usize) -> &str {
        &self.names[id]
    }

    /// The key groups this subtask owns.
    pub fn key_groups(&self) -> KeyGroupRange {
        self.key_groups
    }

    /// The number of key groups of the job.
    pub fn max_parallelism(&self) -> u16 {
        self.max_parallelism
    }

    /// Processing time now, if `meta` has a TTL (`None` otherwise, without
    /// reading the clock).
    #[inline]
    pub fn now(&self, meta: StateMeta) -> Option<u64> {
        meta.ttl_ms.map(|_| self.clock.now_millis())
    }

    /// The expiry of an entry of `meta` written now, if it has a TTL.
    #[inline]
    pub fn expiry(&self, meta: StateMeta) -> Option<u64> {
        meta.ttl_ms
            .map(|ttl| self.clock.now_millis().saturating_add(ttl))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_layout_round_trips_and_separates_prefix_keys() {
        let mut a = Vec::new();
        encode_key(&mut a, KeyGroup(0x0102), b"a").unwrap();
        assert_eq!(a, [1, 2, 0, 0, 0, 1, b'a']);
        let mut ab = Vec::new();
        encode_key(&mut ab, KeyGroup(0x0102), b"ab").unwrap();
        assert!(
            !ab.starts_with(&a),
            "key `ab` must not lie in key `a`'s prefix range"
        );
        a.extend_from_slice(b"uk");
        assert_eq!(
            decode_key(&a),
            Some((KeyGroup(0x0102), &b"a"[..], &b"uk"[..]))
        );
        assert_eq!(decode_key(&[0, 1, 0, 0, 0, 5, b'x']), None);
    }

    #[test]
    fn prefix_upper_bound_cases() {
        assert_eq!(prefix_upper_bound(&[1, 2, 3]), Some(vec![1, 2, 4]));
        assert_eq!(prefix_upper_bound(&[1, 0xff, 0xff]), Some(vec![2]));
        assert_eq!(prefix_upper_bound(&[0xff, 0xff]), None);
        assert_eq!(prefix_upper_bound(&[]), None);
    }

    #[test]
    fn list_encoding_round_trips() {
        let mut list = Vec::new();
        for e in [&b"x"[..], b"", b"hello"] {
            push_list_element(&mut list, None, e).unwrap();
        }
        let got: Vec<_> = list_elements(&list).map(Result::unwrap).collect();
        assert_eq!(got, [&b"x"[..], b"", b"hello"]);
        list.pop();
        let got: Vec<_> = list_elements(&list).collect();
        assert!(got.last().unwrap().is_err());
    }

    #[test]
    fn migration_rewrites_each_value_and_element_and_keeps_expiries() {
        let mut upper = |v: &[u8]| -> Result<Vec<u8>, StateError> { Ok(v.to_ascii_uppercase()) };
        assert_eq!(
            migrate_stored(StateKind::Value, false, b"ab", &mut upper).unwrap(),
            b"AB"
        );
        let mut with_ttl = Vec::new();
        super::super::ttl::encode(&mut with_ttl, Some(7), b"map value");
        let mut expected = Vec::new();
        super::super::ttl::encode(&mut expected, Some(7), b"MAP VALUE");
        assert_eq!(
            migrate_stored(StateKind::Map, true, &with_ttl, &mut upper).unwrap(),
            expected
        );
        let mut list = Vec::new();
        for (e, expiry) in [(&b"x"[..], 1), (b"", 2), (b"hello", 3)] {
            push_list_element(&mut list, Some(expiry), e).unwrap();
        }
        let mut grown = |v: &[u8]| -> Result<Vec<u8>, StateError> { Ok([v, b"!"].concat()) };
        let out = migrate_stored(StateKind::List, true, &list, &mut grown).unwrap();
        let got: Vec<Vec<u8>> = list_elements(&out).map(|e| e.unwrap().to_vec()).collect();
        let mut want = Vec::new();
        for (e, expiry) in [(&b"x!"[..], 1u64), (b"!", 2), (b"hello!", 3)] {
            let mut stored = Vec::new();
            super::super::ttl::encode(&mut stored, Some(expiry), e);
            want.push(stored);
        }
        assert_eq!(got, want);
        // The migration's error comes back as it is.
        let mut failing =
            |_: &[u8]| -> Result<Vec<u8>, StateError> { Err(StateError::Backend("no".into())) };
        assert!(matches!(
            migrate_stored(StateKind::Value, false, b"a", &mut failing),
            Err(StateError::Backend(m)) if m == "no"
        ));
        // A TTL state's value shorter than its prefix is malformed.
        assert!(migrate_stored(StateKind::Value, true, b"abc", &mut upper).is_err());
    }
}
