//! Picking a few top-level fields out of a JSON record without building
//! the whole document: the file source's key, timestamp and value fields,
//! `key_by = "json:<field>"` in hash partitioning, a window aggregate's
//! `field = "json:<field>"`.
//!
//! The record is still checked completely: it must be UTF-8 and one JSON
//! value with nothing after it, as `serde_json::from_slice` would check.
//! Only the named fields become [`serde_json::Value`]s; every other value
//! is skipped with [`IgnoredAny`], which allocates nothing. Building the
//! whole line as a `Value` (a `BTreeMap` of owned strings per object) was
//! a third of the host's time in the Nexmark pass-through query, for one
//! integer per line (`benches/README.md`, "Nexmark").
//!
//! As with a `Value`, a field named twice in a record takes its last value.
//! Errors are serde_json's messages, for the caller to place.

use std::fmt;

use serde::Deserializer as _;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

/// The values of `names` in `line`, a JSON object (`None` where a name is
/// `None` or the object has no such field). When no name is given, the
/// line may be any JSON value; it is checked and nothing is picked.
pub fn pick<const N: usize>(
    line: &[u8],
    names: [Option<&str>; N],
) -> Result<[Option<Value>; N], String> {
    let text = std::str::from_utf8(line).map_err(|e| e.to_string())?;
    let mut de = serde_json::Deserializer::from_str(text);
    let picked = if names.iter().all(Option::is_none) {
        de.deserialize_ignored_any(IgnoredAny)
            .map(|_| std::array::from_fn(|_| None))
    } else {
        Pick { names: &names }.deserialize(&mut de)
    };
    picked
        .and_then(|picked| de.end().map(|()| picked))
        .map_err(|e| e.to_string())
}

/// The value of the field `name` of the JSON object `record`.
pub fn field(record: &[u8], name: &str) -> Result<Option<Value>, String> {
    pick(record, [Some(name)]).map(|[v]| v)
}

/// The seed that reads an object, keeping the values of `names`.
struct Pick<'n, const N: usize> {
    names: &'n [Option<&'n str>; N],
}

impl<'de, const N: usize> DeserializeSeed<'de> for Pick<'_, N> {
    type Value = [Option<Value>; N];

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, const N: usize> Visitor<'de> for Pick<'_, N> {
    type Value = [Option<Value>; N];

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found: [Option<Value>; N] = std::array::from_fn(|_| None);
        while let Some(wanted) = map.next_key_seed(KeyMatch { names: self.names })? {
            if wanted.iter().any(|w| *w) {
                let value: Value = map.next_value()?;
                for (slot, _) in found.iter_mut().zip(wanted).filter(|(_, w)| *w) {
                    *slot = Some(value.clone());
                }
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// The seed that reads a key and says which of `names` it is (several
/// names may be the same field).
struct KeyMatch<'n, const N: usize> {
    names: &'n [Option<&'n str>; N],
}

impl<'de, const N: usize> DeserializeSeed<'de> for KeyMatch<'_, N> {
    type Value = [bool; N];

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, const N: usize> Visitor<'de> for KeyMatch<'_, N> {
    type Value = [bool; N];

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<Self::Value, E> {
        Ok(self.names.map(|name| name == Some(key)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pick` agrees with parsing the whole line as a `Value`.
    fn whole(line: &str, names: [Option<&str>; 3]) -> [Option<Value>; 3] {
        let v: Value = serde_json::from_str(line).unwrap();
        names.map(|n| n.and_then(|n| v.get(n).cloned()))
    }

    #[test]
    fn picks_the_named_fields_and_skips_the_rest() {
        let line = r#"{"type":"bid","bid":{"auction":7,"n":[1,2,{"x":"y"}]},"date_time":1700000000000,"extra":"a\"b\u00e9"}"#;
        for names in [
            [Some("type"), Some("date_time"), None],
            [None, Some("date_time"), Some("bid")],
            [Some("extra"), Some("missing"), Some("extra")],
            [Some("bid"), None, None],
        ] {
            assert_eq!(pick(line.as_bytes(), names).unwrap(), whole(line, names));
        }
    }

    #[test]
    fn escaped_field_names_match_and_the_last_duplicate_wins() {
        let line = r#"{"t\u0073":1,"ts":2,"k":"a"}"#;
        let got = pick(line.as_bytes(), [Some("k"), Some("ts"), None]).unwrap();
        assert_eq!(got, [Some("a".into()), Some(2.into()), None]);
    }

    #[test]
    fn a_bad_line_is_refused_as_the_whole_parse_would() {
        let names = [None, Some("ts"), None];
        for bad in [
            &br#"{"ts":1"#[..],        // cut short
            br#"{"ts":1} x"#,          // trailing characters
            br#"{"ts":1,"s":"\xff"}"#, // not UTF-8 in a skipped string
            br#"{"ts":1,"n":[1,}"#,    // broken in a skipped value
            br#"{"ts":1,"n":01}"#,     // a bad number in a skipped value
            br#"[1,2]"#,               // not an object
        ] {
            pick(bad, names).unwrap_err();
            assert!(serde_json::from_slice::<Value>(bad).is_err() || bad.starts_with(b"["));
        }
    }

    #[test]
    fn without_names_any_json_value_passes_and_garbage_does_not() {
        assert_eq!(pick(b"[1, 2] ", [None; 2]).unwrap(), [None, None]);
        assert_eq!(field(br#"{"a":1}"#, "a").unwrap(), Some(1.into()));
        assert_eq!(field(br#"{"a":1}"#, "b").unwrap(), None);
        assert_eq!(pick(b"\"s\"", [None; 2]).unwrap(), [None, None]);
        assert!(pick(b"{\"a\":", [None; 2]).is_err());
        assert!(pick(b"nope", [None; 2]).is_err());
    }
}
