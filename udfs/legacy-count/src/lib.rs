//! `legacy-count`: the contract-compatibility fixture. A keyed count (the
//! word count's semantics: per key, a `u64` in value state `count`; at the
//! final watermark, one record `"{key}\t{count}"` per key) written against
//! `wit/operator.wit` *as it was at `weir:operator@0.1.0`*, kept verbatim
//! in this crate's `wit/`, with raw `wit-bindgen` and no SDK. It must load
//! and run on every later host: the contract only grows.
//!
//! Do not update its `wit/`: that file is the point of the fixture.

#![allow(unsafe_code, missing_docs)]

wit_bindgen::generate!({
    world: "stream-operator",
    path: "wit/operator.wit",
});

use exports::weir::operator::operator::Guest;
use weir::operator::types::{
    Batch, Emitted, OpenContext, OperatorInfo, StateDescriptor, StateKind,
};
use weir::operator::{state, timers};

struct LegacyCount;

fn empty() -> Batch {
    Batch {
        timestamps: Vec::new(),
        key_lens: Vec::new(),
        value_lens: Vec::new(),
        data: Vec::new(),
    }
}

fn emitted(main: Batch) -> Emitted {
    Emitted {
        main,
        side: Vec::new(),
    }
}

fn err(e: state::StateError) -> String {
    format!("state: {e:?}")
}

impl Guest for LegacyCount {
    fn describe() -> OperatorInfo {
        OperatorInfo {
            name: "legacy-count".into(),
            version: "0.1.0".into(),
            keyed: true,
            states: vec![StateDescriptor {
                name: "count".into(),
                kind: StateKind::Value,
                ttl_ms: None,
            }],
        }
    }

    fn open(_ctx: OpenContext) -> Result<(), String> {
        Ok(())
    }

    fn process(input: Batch) -> Result<Emitted, String> {
        let mut at = 0usize;
        for i in 0..input.timestamps.len() {
            let key_len = input.key_lens[i];
            if key_len < 0 {
                return Err(format!("record {i} has no key"));
            }
            let key = &input.data[at..at + key_len as usize];
            at += key_len as usize + input.value_lens[i] as usize;
            let count = match state::value_get(0, key).map_err(err)? {
                Some(bytes) => {
                    u64::from_le_bytes(bytes.try_into().map_err(|_| "corrupt count".to_string())?)
                }
                None => {
                    timers::register_event_timer(key, i64::MAX).map_err(err)?;
                    0
                }
            };
            state::value_set(0, key, &(count + 1).to_le_bytes()).map_err(err)?;
        }
        Ok(emitted(empty()))
    }

    fn on_timer(key: Vec<u8>, time: i64) -> Result<Emitted, String> {
        let Some(bytes) = state::value_get(0, &key).map_err(err)? else {
            return Ok(emitted(empty()));
        };
        let count = u64::from_le_bytes(bytes.try_into().map_err(|_| "corrupt count".to_string())?);
        let mut out = empty();
        let value = format!("{}\t{count}", String::from_utf8_lossy(&key));
        out.timestamps.push(time);
        out.key_lens.push(key.len() as i32);
        out.value_lens.push(value.len() as u32);
        out.data.extend_from_slice(&key);
        out.data.extend_from_slice(value.as_bytes());
        Ok(emitted(out))
    }

    fn on_watermark(_watermark: i64) -> Result<Emitted, String> {
        Ok(emitted(empty()))
    }

    fn close() -> Result<Emitted, String> {
        Ok(emitted(empty()))
    }
}

export!(LegacyCount);
