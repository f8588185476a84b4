//! The write-ahead log that exactly-once sinks without a transaction of
//! the checkpoint's own (NATS, Kafka) hand to the checkpoint: the records
//! of each checkpoint interval not yet seen committed, as JSON in the
//! committable, and back. One encoding for both sinks, so a committable
//! restored by either is read the same way.

/// One record kept for a commit: (key, value).
pub(super) type Kept = (Option<Vec<u8>>, Vec<u8>);

/// Records kept per checkpoint, oldest first.
pub(super) type Epochs = Vec<(u64, Vec<Kept>)>;

/// The key and value bytes of every record of `epochs` (what
/// `MAX_PENDING_BYTES` bounds).
pub(super) fn pending_bytes(epochs: &[(u64, Vec<Kept>)]) -> usize {
    epochs
        .iter()
        .flat_map(|(_, records)| records)
        .map(|(k, v)| k.as_ref().map_or(0, Vec::len) + v.len())
        .sum()
}

/// `epochs` as the committable's `"epochs"` field:
/// `[{"checkpoint": c, "records": [[key, value], …]}, …]`.
pub(super) fn encode_epochs(epochs: &[(u64, Vec<Kept>)]) -> serde_json::Value {
    epochs
        .iter()
        .map(|(c, records)| {
            serde_json::json!({
                "checkpoint": c,
                "records": records.iter().map(|(k, v)| serde_json::json!([
                    k.as_deref().map(encode_bytes), encode_bytes(v)
                ])).collect::<Vec<_>>(),
            })
        })
        .collect()
}

/// The epochs of an [`encode_epochs`] value; `None` if it is not one.
pub(super) fn decode_epochs(value: Option<&serde_json::Value>) -> Option<Epochs> {
    let mut epochs = Vec::new();
    for epoch in value?.as_array()? {
        let checkpoint = epoch["checkpoint"].as_u64()?;
        let mut records = Vec::new();
        for r in epoch["records"].as_array()? {
            let key = match &r[0] {
                serde_json::Value::Null => None,
                k => Some(decode_bytes(k)?),
            };
            records.push((key, decode_bytes(&r[1])?));
        }
        epochs.push((checkpoint, records));
    }
    Some(epochs)
}

/// Bytes in a committable: a string if they are UTF-8, else `{"hex": …}`.
fn encode_bytes(bytes: &[u8]) -> serde_json::Value {
    match std::str::from_utf8(bytes) {
        Ok(s) => serde_json::Value::String(s.to_owned()),
        Err(_) => {
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            serde_json::json!({ "hex": hex })
        }
    }
}

fn decode_bytes(v: &serde_json::Value) -> Option<Vec<u8>> {
    if let Some(s) = v.as_str() {
        return Some(s.as_bytes().to_vec());
    }
    let hex = v.get("hex")?.as_str()?;
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip_through_a_committable() {
        for bytes in [&b"plain text\t1"[..], &[0xff, 0x00, 0x41][..], &b""[..]] {
            assert_eq!(decode_bytes(&encode_bytes(bytes)).as_deref(), Some(bytes));
        }
    }

    #[test]
    fn epochs_round_trip_and_count_their_bytes() {
        let epochs = vec![
            (
                3,
                vec![(None, b"v".to_vec()), (Some(b"k".to_vec()), vec![0xff])],
            ),
            (4, vec![]),
        ];
        assert_eq!(pending_bytes(&epochs), 3);
        assert_eq!(decode_epochs(Some(&encode_epochs(&epochs))), Some(epochs));
        assert_eq!(
            decode_epochs(Some(&serde_json::json!([{"checkpoint": 1}]))),
            None
        );
        assert_eq!(decode_epochs(None), None);
    }
}
