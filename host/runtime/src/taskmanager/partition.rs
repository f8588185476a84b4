//! Partitioners: which downstream subtask gets each record.
//!
//! Hash partitioning computes the key with a [`KeyExtractor`], maps it to a
//! key group and the key group to the subtask that owns it (see
//! [`crate::state`]); the extracted key becomes the record's key, so the
//! keyed operator downstream scopes its state by it. An edge keyed by the
//! record's key with one downstream subtask (p = 1) passes each batch on
//! whole: that subtask owns every key group, so there is nothing to hash
//! and nothing to copy, only the check that every record has a key. Other
//! extractors with one target skip the hash but still copy the extracted
//! key into each record.

use crate::connectors::json_key_bytes;
use crate::json_fields;
use crate::record::Batch;
use crate::state::{key_group_of, subtask_for_key_group};

/// How the key of a keyed edge is taken from a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyExtractor {
    /// The record's key.
    RecordKey,
    /// The whole value.
    Value,
    /// A top-level field of a JSON value (strings without quotes).
    JsonField(String),
}

/// A partitioner bound to its downstream parallelism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Partitioning {
    /// To the subtask with the same index (the only target).
    Forward,
    /// By key group.
    Hash {
        /// How to get the key.
        key: KeyExtractor,
        /// Number of key groups.
        max_parallelism: u16,
    },
    /// Whole batches round-robin over the targets.
    Rebalance,
    /// Every record to every target.
    Broadcast,
}

impl Partitioning {
    /// Appends the records of `batch` to the `pending` batch of their target.
    /// `next` is the round-robin cursor.
    pub fn partition(
        &self,
        batch: Batch,
        pending: &mut [Batch],
        next: &mut usize,
    ) -> Result<(), String> {
        let n = pending.len();
        if n == 0 {
            return Ok(());
        }
        match self {
            Partitioning::Forward => append(&mut pending[0], batch),
            Partitioning::Rebalance => {
                append(&mut pending[*next % n], batch);
                *next = (*next + 1) % n;
            }
            Partitioning::Broadcast => {
                for p in pending.iter_mut() {
                    append(p, batch.clone());
                }
            }
            // One target owns every key group, and the records keep their
            // keys: the batch goes as it is, with no hash and no copy.
            Partitioning::Hash {
                key: KeyExtractor::RecordKey,
                ..
            } if n == 1 => {
                if let Some(i) = batch.key_lens.iter().position(|&len| len < 0) {
                    return Err(no_key(i));
                }
                append(&mut pending[0], batch);
            }
            Partitioning::Hash {
                key,
                max_parallelism,
            } => {
                for (i, r) in batch.iter().enumerate() {
                    let owned;
                    let k: &[u8] = match key {
                        KeyExtractor::RecordKey => r.key.ok_or_else(|| no_key(i))?,
                        KeyExtractor::Value => r.value,
                        KeyExtractor::JsonField(field) => {
                            let v = json_fields::field(r.value, field).map_err(|e| {
                                format!("key_by = \"json:{field}\": record {i} is not JSON: {e}")
                            })?;
                            owned = json_key_bytes(&v.ok_or_else(|| {
                                format!(
                                    "key_by = \"json:{field}\": record {i} has no field `{field}`"
                                )
                            })?);
                            &owned
                        }
                    };
                    let target = if n == 1 {
                        0
                    } else {
                        let kg = key_group_of(k, *max_parallelism);
                        subtask_for_key_group(*max_parallelism, n as u32, kg) as usize
                    };
                    pending[target].push(Some(k), r.value, r.timestamp);
                }
            }
        }
        Ok(())
    }
}

/// Why record `i` cannot go through a `key_by = "key"` edge.
fn no_key(i: usize) -> String {
    format!(
        "record {i} has no key, but key_by = \"key\" needs one \
         (key it upstream, or use key_by = \"value\" or \"json:<field>\")"
    )
}

fn append(into: &mut Batch, mut batch: Batch) {
    if into.is_empty() {
        *into = batch;
    } else {
        into.append(&mut batch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyed(keys: &[&str]) -> Batch {
        let mut b = Batch::new();
        for k in keys {
            b.push(Some(k.as_bytes()), b"v", 0);
        }
        b
    }

    #[test]
    fn hash_sends_each_key_to_the_owner_of_its_key_group() {
        let p = Partitioning::Hash {
            key: KeyExtractor::RecordKey,
            max_parallelism: 128,
        };
        let keys: Vec<String> = (0..500).map(|i| format!("k{i}")).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let mut pending = vec![Batch::new(); 4];
        p.partition(keyed(&refs), &mut pending, &mut 0).unwrap();
        let total: usize = pending.iter().map(Batch::len).sum();
        assert_eq!(total, 500);
        for (t, b) in pending.iter().enumerate() {
            assert!(!b.is_empty());
            for r in b.iter() {
                let kg = key_group_of(r.key.unwrap(), 128);
                assert_eq!(subtask_for_key_group(128, 4, kg) as usize, t);
            }
        }
    }

    #[test]
    fn one_target_gets_the_whole_batch_and_a_keyless_record_is_named() {
        let p = Partitioning::Hash {
            key: KeyExtractor::RecordKey,
            max_parallelism: 128,
        };
        let mut pending = vec![Batch::new(); 1];
        p.partition(keyed(&["a", "b"]), &mut pending, &mut 0)
            .unwrap();
        p.partition(keyed(&["c"]), &mut pending, &mut 0).unwrap();
        assert_eq!(pending[0], keyed(&["a", "b", "c"]));
        let mut bad = keyed(&["d"]);
        bad.push(None, b"v", 0);
        let err = p.partition(bad, &mut pending, &mut 0).unwrap_err();
        assert!(err.starts_with("record 1 has no key"), "{err}");
        assert_eq!(pending[0].len(), 3, "a refused batch adds nothing");
    }

    #[test]
    fn json_field_becomes_the_key_and_bad_records_are_named() {
        let p = Partitioning::Hash {
            key: KeyExtractor::JsonField("acct".into()),
            max_parallelism: 8,
        };
        let mut b = Batch::new();
        b.push(None, br#"{"acct":"a1","x":1}"#, 0);
        let mut pending = vec![Batch::new(); 1];
        p.partition(b, &mut pending, &mut 0).unwrap();
        assert_eq!(pending[0].iter().next().unwrap().key, Some(&b"a1"[..]));
        let mut bad = Batch::new();
        bad.push(None, b"not json", 0);
        let err = p.partition(bad, &mut pending, &mut 0).unwrap_err();
        assert!(err.contains("record 0 is not JSON"), "{err}");
    }

    #[test]
    fn rebalance_round_robins_and_broadcast_copies() {
        let mut pending = vec![Batch::new(); 3];
        let mut next = 0;
        for _ in 0..3 {
            Partitioning::Rebalance
                .partition(keyed(&["a"]), &mut pending, &mut next)
                .unwrap();
        }
        assert!(pending.iter().all(|b| b.len() == 1));
        let mut pending = vec![Batch::new(); 3];
        Partitioning::Broadcast
            .partition(keyed(&["a", "b"]), &mut pending, &mut 0)
            .unwrap();
        assert!(pending.iter().all(|b| b.len() == 2));
    }
}
