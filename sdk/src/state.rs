//! Keyed state: declarations and typed handles.
//!
//! Owns [`StateDescriptor`] (what an operator declares up front; a state's id
//! is its index in the declared list), the typed handles [`ValueState`],
//! [`ListState`] and [`MapState`], and [`KeyScope`], the source of the key
//! every access is scoped to.
//!
//! Flink's semantics: a handle reads and writes the state of the *current
//! key* — the key of the record being processed, or of the timer firing —
//! which the handle takes from the context passed to each call. The host's
//! state functions take the key explicitly; this module passes it. Values are
//! encoded with [`StateCodec`], whose docs give the byte encoding.

use std::cell::RefCell;
use std::marker::PhantomData;

use crate::Error;
use crate::backend;
use crate::codec::StateCodec;

pub use crate::bindings::weir::operator::state::StateError;
pub use crate::bindings::weir::operator::types::StateKind;

/// How a state's stored bytes written by an older version of the operator
/// become this version's: gets the old operator version (its
/// `operator-info.version`) and one stored value (or list element, or map
/// value) as the old version encoded it; returns the new encoding. An
/// error aborts the upgrade (the job goes back to its old modules) with
/// the message.
pub type MigrateFn = fn(from_version: &str, old: &[u8]) -> Result<Vec<u8>, Error>;

/// A keyed state an operator declares (`const STATES`). Together with the
/// operator's uid, `name` addresses the state in checkpoints and savepoints,
/// so renaming a state loses it.
#[derive(Debug, Clone, Copy)]
pub struct StateDescriptor {
    /// Unique within the operator.
    pub name: &'static str,
    /// Value, list or map.
    pub kind: StateKind,
    /// Time to live in milliseconds of processing time, enforced by the host.
    pub ttl_ms: Option<u64>,
    /// Rewrites this state's values written by an older operator version
    /// when a job is upgraded (`weir upgrade`); `None` keeps them as they are.
    pub migrate: Option<MigrateFn>,
}

/// Two declarations are equal when they declare the same state (name, kind,
/// TTL) and both or neither migrate it (function pointers are not compared).
impl PartialEq for StateDescriptor {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.kind == other.kind
            && self.ttl_ms == other.ttl_ms
            && self.migrate.is_some() == other.migrate.is_some()
    }
}

impl Eq for StateDescriptor {}

impl StateDescriptor {
    /// A value state: one value per key.
    pub const fn value(name: &'static str) -> Self {
        Self::new(name, StateKind::Value)
    }

    /// A list state: a list of values per key.
    pub const fn list(name: &'static str) -> Self {
        Self::new(name, StateKind::List)
    }

    /// A map state: a map from user keys to values per key.
    pub const fn map(name: &'static str) -> Self {
        Self::new(name, StateKind::Map)
    }

    const fn new(name: &'static str, kind: StateKind) -> Self {
        Self {
            name,
            kind,
            ttl_ms: None,
            migrate: None,
        }
    }

    /// This state migrated with `migrate` when the job is upgraded from an
    /// older version of the operator (see [`MigrateFn`]):
    ///
    /// ```
    /// use weir_sdk::{Error, StateCodec, StateDescriptor};
    ///
    /// /// Version 1 stored a count (u64); version 2 stores the count and
    /// /// when the key was first seen (i64; -1: before version 2).
    /// fn from_v1(from_version: &str, old: &[u8]) -> Result<Vec<u8>, Error> {
    ///     if !from_version.starts_with("1.") {
    ///         return Ok(old.to_vec());
    ///     }
    ///     let mut new = u64::decode(old)?.to_bytes();
    ///     (-1i64).encode(&mut new);
    ///     Ok(new)
    /// }
    ///
    /// const STATES: &[StateDescriptor] = &[StateDescriptor::value("count").with_migration(from_v1)];
    /// ```
    pub const fn with_migration(self, migrate: MigrateFn) -> Self {
        Self {
            migrate: Some(migrate),
            ..self
        }
    }

    /// This state with a time to live (the host drops entries not written for `ttl_ms`).
    pub const fn with_ttl_ms(self, ttl_ms: u64) -> Self {
        Self {
            ttl_ms: Some(ttl_ms),
            ..self
        }
    }
}

/// The name of a state kind, as in WIT.
pub(crate) fn kind_name(kind: StateKind) -> &'static str {
    match kind {
        StateKind::Value => "value",
        StateKind::List => "list",
        StateKind::Map => "map",
    }
}

/// Checks that the declared state names are unique (a state is addressed by name).
pub(crate) fn check_declared(states: &[StateDescriptor]) -> Result<(), Error> {
    for (i, state) in states.iter().enumerate() {
        if states[..i].iter().any(|s| s.name == state.name) {
            crate::bail!("state `{}` is declared twice", state.name);
        }
    }
    Ok(())
}

/// Where state accesses get their key from.
///
/// Implemented by [`KeyedContext`](crate::KeyedContext) (the current record's
/// or timer's key). [`ExplicitKey`] is the escape hatch for low-level
/// [`Operator`](crate::Operator)s that walk a batch themselves.
pub trait KeyScope {
    /// The key state accesses are scoped to.
    fn current_key(&self) -> &[u8];
}

/// A key given explicitly, for [`Operator`](crate::Operator)s that handle
/// whole batches: `count.get(&ExplicitKey(record.key.unwrap()))`.
#[derive(Debug, Clone, Copy)]
pub struct ExplicitKey<'a>(pub &'a [u8]);

impl KeyScope for ExplicitKey<'_> {
    fn current_key(&self) -> &[u8] {
        self.0
    }
}

thread_local! {
    /// One buffer to encode values into before handing them to the host,
    /// so a state write does not allocate.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Encodes `value` into the scratch buffer and passes the bytes to `f`.
fn with_encoded<T: StateCodec, R>(value: &T, f: impl FnOnce(&[u8]) -> R) -> R {
    SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
        Ok(mut buf) => {
            buf.clear();
            value.encode(&mut buf);
            f(&buf)
        }
        // Re-entered (a codec that writes state while encoding): use a fresh buffer.
        Err(_) => f(&value.to_bytes()),
    })
}

/// Turns a host state error into an operator error naming the state.
pub(crate) fn state_error(name: &str, error: StateError) -> Error {
    Error::new(format!("state `{name}`: {}", explain(error)))
}

/// Says what a host state (or timer) error means.
pub(crate) fn explain(error: StateError) -> String {
    match error {
        StateError::UnknownState(id) => format!("the host knows no state with id {id}"),
        StateError::WrongKind(id) => format!("state id {id} is of another kind on the host"),
        StateError::KeyOutOfRange => {
            "the key belongs to a key group this subtask does not own".to_owned()
        }
        StateError::Backend(message) => message,
    }
}

fn decode<T: StateCodec>(name: &str, bytes: &[u8]) -> Result<T, Error> {
    T::decode(bytes).map_err(|e| Error::new(format!("state `{name}`: {e}")))
}

macro_rules! handle_common {
    ($handle:ident < $($param:ident),+ >) => {
        impl<$($param),+> $handle<$($param),+> {
            pub(crate) fn new(id: u32, name: &'static str) -> Self {
                Self { id, name, _types: PhantomData }
            }

            /// The state's id: its index in the operator's declared states.
            pub fn id(&self) -> u32 {
                self.id
            }

            /// The state's declared name.
            pub fn name(&self) -> &'static str {
                self.name
            }

            /// Removes everything this state holds for the current key.
            pub fn clear(&self, scope: &impl KeyScope) -> Result<(), Error> {
                if crate::cache::clear(self.id, scope.current_key()) {
                    return Ok(());
                }
                backend::clear(self.id, scope.current_key())
                    .map_err(|e| state_error(self.name, e))
            }
        }

        impl<$($param),+> Clone for $handle<$($param),+> {
            fn clone(&self) -> Self {
                *self
            }
        }

        impl<$($param),+> Copy for $handle<$($param),+> {}

        impl<$($param),+> std::fmt::Debug for $handle<$($param),+> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($handle))
                    .field("id", &self.id)
                    .field("name", &self.name)
                    .finish()
            }
        }
    };
}

/// One value of type `T` per key (Flink's `ValueState`).
pub struct ValueState<T> {
    id: u32,
    name: &'static str,
    _types: PhantomData<fn() -> T>,
}

handle_common!(ValueState<T>);

impl<T: StateCodec> ValueState<T> {
    /// The current key's value, if set.
    pub fn get(&self, scope: &impl KeyScope) -> Result<Option<T>, Error> {
        let key = scope.current_key();
        let decoded = |bytes: Option<&[u8]>| bytes.map(|b| decode(self.name, b)).transpose();
        match crate::cache::get_with(self.id, key, decoded) {
            Some(Ok(value)) => value,
            Some(Err(e)) => Err(state_error(self.name, e)),
            None => match backend::value_get(self.id, key) {
                Ok(bytes) => decoded(bytes.as_deref()),
                Err(e) => Err(state_error(self.name, e)),
            },
        }
    }

    /// Sets the current key's value.
    pub fn set(&self, scope: &impl KeyScope, value: &T) -> Result<(), Error> {
        with_encoded(value, |bytes| {
            if crate::cache::set(self.id, scope.current_key(), Some(bytes)) {
                return Ok(());
            }
            backend::value_set(self.id, scope.current_key(), bytes)
        })
        .map_err(|e| state_error(self.name, e))
    }
}

/// A list of values of type `T` per key (Flink's `ListState`).
pub struct ListState<T> {
    id: u32,
    name: &'static str,
    _types: PhantomData<fn() -> T>,
}

handle_common!(ListState<T>);

impl<T: StateCodec> ListState<T> {
    /// The current key's list, oldest first (empty if none).
    pub fn get(&self, scope: &impl KeyScope) -> Result<Vec<T>, Error> {
        let elements = backend::list_get(self.id, scope.current_key())
            .map_err(|e| state_error(self.name, e))?;
        elements.iter().map(|e| decode(self.name, e)).collect()
    }

    /// Appends `element` to the current key's list.
    pub fn add(&self, scope: &impl KeyScope, element: &T) -> Result<(), Error> {
        with_encoded(element, |bytes| {
            backend::list_add(self.id, scope.current_key(), bytes)
        })
        .map_err(|e| state_error(self.name, e))
    }

    /// Replaces the current key's list with `elements` (clear, then add each).
    pub fn update(&self, scope: &impl KeyScope, elements: &[T]) -> Result<(), Error> {
        self.clear(scope)?;
        elements.iter().try_for_each(|e| self.add(scope, e))
    }
}

/// A map from user keys `K` to values `V` per key (Flink's `MapState`).
pub struct MapState<K, V> {
    id: u32,
    name: &'static str,
    _types: PhantomData<fn() -> (K, V)>,
}

handle_common!(MapState<K, V>);

impl<K: StateCodec, V: StateCodec> MapState<K, V> {
    /// The value under `user_key` in the current key's map.
    pub fn get(&self, scope: &impl KeyScope, user_key: &K) -> Result<Option<V>, Error> {
        let found = with_encoded(user_key, |uk| {
            backend::map_get(self.id, scope.current_key(), uk)
        })
        .map_err(|e| state_error(self.name, e))?;
        found.map(|bytes| decode(self.name, &bytes)).transpose()
    }

    /// True if the current key's map has `user_key`.
    pub fn contains(&self, scope: &impl KeyScope, user_key: &K) -> Result<bool, Error> {
        let found = with_encoded(user_key, |uk| {
            backend::map_get(self.id, scope.current_key(), uk)
        })
        .map_err(|e| state_error(self.name, e))?;
        Ok(found.is_some())
    }

    /// Puts `value` under `user_key` in the current key's map.
    pub fn put(&self, scope: &impl KeyScope, user_key: &K, value: &V) -> Result<(), Error> {
        // Two values to encode: the scratch buffer holds the user key.
        let value = value.to_bytes();
        with_encoded(user_key, |uk| {
            backend::map_put(self.id, scope.current_key(), uk, &value)
        })
        .map_err(|e| state_error(self.name, e))
    }

    /// Removes `user_key` from the current key's map.
    pub fn remove(&self, scope: &impl KeyScope, user_key: &K) -> Result<(), Error> {
        with_encoded(user_key, |uk| {
            backend::map_remove(self.id, scope.current_key(), uk)
        })
        .map_err(|e| state_error(self.name, e))
    }

    /// All entries of the current key's map, ordered by the user keys' encoded bytes.
    pub fn entries(&self, scope: &impl KeyScope) -> Result<Vec<(K, V)>, Error> {
        let entries = backend::map_entries(self.id, scope.current_key())
            .map_err(|e| state_error(self.name, e))?;
        entries
            .iter()
            .map(|(k, v)| Ok((decode(self.name, k)?, decode(self.name, v)?)))
            .collect()
    }

    /// True if the current key's map has no entries.
    pub fn is_empty(&self, scope: &impl KeyScope) -> Result<bool, Error> {
        let entries = backend::map_entries(self.id, scope.current_key())
            .map_err(|e| state_error(self.name, e))?;
        Ok(entries.is_empty())
    }
}
