//! What an operator learns when it opens: [`OpenContext`] and [`Config`].
//!
//! Owns the typed view of the WIT `open-context`: the operator's uid, its
//! subtask index and parallelism, its `config` table (values as the host
//! flattened them: strings as they are, other scalars in TOML syntax), and
//! the lookup of declared states by name into typed handles.

use crate::Error;
use crate::codec::StateCodec;
use crate::state::{ListState, MapState, StateDescriptor, StateKind, ValueState, kind_name};

/// The operator's `config` table from the job spec.
///
/// Getters return `Ok(None)` when the key is absent and an error naming the
/// key when the value is not of the requested type.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    entries: Vec<(String, String)>,
}

impl Config {
    /// A config from `(key, value)` pairs as the host sends them.
    pub fn new(entries: Vec<(String, String)>) -> Self {
        Self { entries }
    }

    /// The raw string value of `key`, if present.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `key`, which must be present.
    pub fn require_str(&self, key: &str) -> Result<&str, Error> {
        self.get_str(key)
            .ok_or_else(|| Error::new(format!("config `{key}` is required but missing")))
    }

    /// `key` as a bool: `true` or `false`.
    pub fn get_bool(&self, key: &str) -> Result<Option<bool>, Error> {
        self.parse(key, "a bool (true or false)", |v| match v {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        })
    }

    /// `key` as an unsigned integer (TOML syntax: `1_000`, `0x10`, `0o7`, `0b1` accepted).
    pub fn get_u64(&self, key: &str) -> Result<Option<u64>, Error> {
        self.parse(key, "an unsigned integer", parse_u64)
    }

    /// `key` as a signed integer (TOML syntax, like [`Config::get_u64`]).
    pub fn get_i64(&self, key: &str) -> Result<Option<i64>, Error> {
        self.parse(key, "an integer", |v| {
            let (negative, digits) = match v.as_bytes().first() {
                Some(b'-') => (true, &v[1..]),
                Some(b'+') => (false, &v[1..]),
                _ => (false, v),
            };
            let magnitude = i128::from(parse_u64(digits)?);
            i64::try_from(if negative { -magnitude } else { magnitude }).ok()
        })
    }

    /// `key` as a float (TOML syntax: `1.5`, `1e3`, `1_000.0`, `inf`, `nan`; integers accepted).
    pub fn get_f64(&self, key: &str) -> Result<Option<f64>, Error> {
        self.parse(key, "a number", |v| v.replace('_', "").parse().ok())
    }

    /// All entries, in the order the host sent them.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    fn parse<T>(
        &self,
        key: &str,
        expected: &str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<Option<T>, Error> {
        let Some(raw) = self.get_str(key) else {
            return Ok(None);
        };
        match parse(raw.trim()) {
            Some(value) => Ok(Some(value)),
            None => Err(Error::new(format!(
                "config `{key}`: expected {expected}, got `{raw}`"
            ))),
        }
    }
}

fn parse_u64(v: &str) -> Option<u64> {
    let v = v.strip_prefix('+').unwrap_or(v);
    let (radix, digits) = match v.get(..2) {
        Some("0x") => (16, &v[2..]),
        Some("0o") => (8, &v[2..]),
        Some("0b") => (2, &v[2..]),
        _ => (10, v),
    };
    if digits.is_empty() || digits.starts_with('_') || digits.ends_with('_') {
        return None;
    }
    u64::from_str_radix(&digits.replace('_', ""), radix).ok()
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Config {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Self::new(
            iter.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }
}

/// What the host tells an operator instance when it opens.
#[derive(Debug, Clone)]
pub struct OpenContext {
    operator_id: String,
    subtask_index: u32,
    parallelism: u32,
    max_parallelism: u32,
    config: Config,
    states: &'static [StateDescriptor],
}

impl OpenContext {
    /// A context; the export glue and the test harness build it.
    pub(crate) fn new(
        operator_id: String,
        subtask_index: u32,
        parallelism: u32,
        max_parallelism: u32,
        config: Config,
        states: &'static [StateDescriptor],
    ) -> Self {
        Self {
            operator_id,
            subtask_index,
            parallelism,
            max_parallelism,
            config,
            states,
        }
    }

    /// The operator's stable uid from the job spec.
    pub fn operator_id(&self) -> &str {
        &self.operator_id
    }

    /// This instance's index among the operator's parallel instances (0-based).
    pub fn subtask_index(&self) -> u32 {
        self.subtask_index
    }

    /// How many parallel instances the operator has.
    pub fn parallelism(&self) -> u32 {
        self.parallelism
    }

    /// The number of key groups (`max_parallelism` in the job spec).
    pub fn max_parallelism(&self) -> u32 {
        self.max_parallelism
    }

    /// The job's deployment attempt: 0 on the first run, one more after
    /// each restart (from the environment variable `WEIR_ATTEMPT`, which
    /// the host sets; 0 where it is not set, as in native tests).
    pub fn attempt(&self) -> u32 {
        std::env::var("WEIR_ATTEMPT")
            .ok()
            .and_then(|a| a.parse().ok())
            .unwrap_or(0)
    }

    /// The operator's `config` table.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The states the operator declared.
    pub fn states(&self) -> &'static [StateDescriptor] {
        self.states
    }

    /// A handle on the declared value state `name`.
    pub fn value_state<T: StateCodec>(&self, name: &str) -> Result<ValueState<T>, Error> {
        let (id, descriptor) = self.lookup(name, StateKind::Value)?;
        Ok(ValueState::new(id, descriptor.name))
    }

    /// A handle on the declared list state `name`.
    pub fn list_state<T: StateCodec>(&self, name: &str) -> Result<ListState<T>, Error> {
        let (id, descriptor) = self.lookup(name, StateKind::List)?;
        Ok(ListState::new(id, descriptor.name))
    }

    /// A handle on the declared map state `name`.
    pub fn map_state<K: StateCodec, V: StateCodec>(
        &self,
        name: &str,
    ) -> Result<MapState<K, V>, Error> {
        let (id, descriptor) = self.lookup(name, StateKind::Map)?;
        Ok(MapState::new(id, descriptor.name))
    }

    fn lookup(
        &self,
        name: &str,
        kind: StateKind,
    ) -> Result<(u32, &'static StateDescriptor), Error> {
        let states: &'static [StateDescriptor] = self.states;
        let Some((index, descriptor)) = states.iter().enumerate().find(|(_, d)| d.name == name)
        else {
            let declared: Vec<&str> = states.iter().map(|d| d.name).collect();
            crate::bail!("state `{name}` is not declared (declared: {declared:?})");
        };
        if descriptor.kind != kind {
            crate::bail!(
                "state `{name}` is declared as {} state, not {} state",
                kind_name(descriptor.kind),
                kind_name(kind)
            );
        }
        let id = u32::try_from(index).map_err(|_| Error::new("too many states"))?;
        Ok((id, descriptor))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> Config {
        pairs.iter().copied().collect()
    }

    #[test]
    fn typed_getters_parse_toml_scalars() {
        let c = config(&[
            ("b", "true"),
            ("n", "1_000"),
            ("h", "0xff"),
            ("neg", "-5"),
            ("f", "2.5"),
            ("i", "3"),
            ("s", "hello"),
        ]);
        assert_eq!(c.get_bool("b").unwrap(), Some(true));
        assert_eq!(c.get_u64("n").unwrap(), Some(1000));
        assert_eq!(c.get_u64("h").unwrap(), Some(255));
        assert_eq!(c.get_i64("neg").unwrap(), Some(-5));
        assert_eq!(c.get_f64("f").unwrap(), Some(2.5));
        assert_eq!(c.get_f64("i").unwrap(), Some(3.0));
        assert_eq!(c.get_str("s"), Some("hello"));
        assert_eq!(c.get_bool("missing").unwrap(), None);
    }

    #[test]
    fn wrong_types_and_missing_keys_are_clear_errors() {
        let c = config(&[("b", "yes"), ("n", "-1")]);
        assert_eq!(
            c.get_bool("b").unwrap_err().message(),
            "config `b`: expected a bool (true or false), got `yes`"
        );
        assert_eq!(
            c.get_u64("n").unwrap_err().message(),
            "config `n`: expected an unsigned integer, got `-1`"
        );
        assert_eq!(
            c.require_str("contains").unwrap_err().message(),
            "config `contains` is required but missing"
        );
    }

    #[test]
    fn states_are_found_by_name_and_kind() {
        static STATES: &[StateDescriptor] = &[
            StateDescriptor::value("count"),
            StateDescriptor::list("seen"),
        ];
        let ctx = OpenContext::new("op".into(), 0, 1, 128, Config::default(), STATES);
        assert_eq!(ctx.list_state::<u64>("seen").unwrap().id(), 1);
        assert!(
            ctx.value_state::<u64>("nope")
                .unwrap_err()
                .message()
                .starts_with("state `nope` is not declared")
        );
        assert_eq!(
            ctx.map_state::<u64, u64>("count").unwrap_err().message(),
            "state `count` is declared as value state, not map state"
        );
    }
}
