//! The byte encoding of state values: [`StateCodec`].
//!
//! The host stores state as opaque bytes; this module fixes how Rust values
//! become those bytes, so that savepoints written by one version of an
//! operator (or by an operator written in another language) can be read by
//! another. The encoding is part of Weir's contract and other SDKs share it:
//!
//! | type | bytes |
//! |---|---|
//! | `u8`, `u16`, `u32`, `u64`, `i8`, `i16`, `i32`, `i64` | little-endian, fixed width (1, 2, 4 or 8 bytes; signed as two's complement) |
//! | `f32`, `f64` | IEEE 754 bits, little-endian (4 or 8 bytes) |
//! | `bool` | one byte: `0` false, `1` true (any other byte is an error) |
//! | `String` | its UTF-8 bytes, no length prefix (invalid UTF-8 is an error) |
//! | `Vec<u8>` | the bytes as they are |
//! | `()` | no bytes (anything else is an error) |
//!
//! Decoding never panics: a wrong length or an invalid byte is a
//! [`DecodeError`], which surfaces as an operator [`Error`](crate::Error).
//!
//! Note for map state: `map-entries` is ordered by the user key's *bytes*, so
//! little-endian integer keys do not come back in numeric order.

use std::fmt;

/// How a value is stored in keyed state; see the [module docs](self) for the
/// encoding of each implementation.
///
/// Implement it for your own types to store them in state (for example with
/// a serde format of your choice inside `encode`/`decode`).
pub trait StateCodec: Sized {
    /// Appends the encoding of `self` to `out`.
    fn encode(&self, out: &mut Vec<u8>);
    /// Decodes a value from exactly `bytes`.
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError>;

    /// The encoding of `self` as a new vector.
    fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
}

/// Stored bytes that are not a valid encoding of the requested type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    type_name: &'static str,
    reason: String,
}

impl DecodeError {
    /// A decoding error for `type_name`, explained by `reason`.
    pub fn new(type_name: &'static str, reason: impl Into<String>) -> Self {
        Self {
            type_name,
            reason: reason.into(),
        }
    }

    /// The error for `bytes` of the wrong length for a fixed-width type.
    pub fn wrong_length(type_name: &'static str, expected: usize, got: usize) -> Self {
        Self::new(type_name, format!("expected {expected} bytes, got {got}"))
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot decode {}: {}", self.type_name, self.reason)
    }
}

impl std::error::Error for DecodeError {}

macro_rules! fixed_width_le {
    ($($t:ty),*) => {$(
        impl StateCodec for $t {
            fn encode(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
                let array = bytes.try_into().map_err(|_| {
                    DecodeError::wrong_length(stringify!($t), size_of::<$t>(), bytes.len())
                })?;
                Ok(<$t>::from_le_bytes(array))
            }
        }
    )*};
}

fixed_width_le!(u8, u16, u32, u64, i8, i16, i32, i64, f32, f64);

impl StateCodec for bool {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        match bytes {
            [0] => Ok(false),
            [1] => Ok(true),
            [b] => Err(DecodeError::new("bool", format!("invalid byte {b}"))),
            _ => Err(DecodeError::wrong_length("bool", 1, bytes.len())),
        }
    }
}

impl StateCodec for String {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|e| DecodeError::new("String", e.to_string()))
    }
}

impl StateCodec for Vec<u8> {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        Ok(bytes.to_vec())
    }
}

impl StateCodec for () {
    fn encode(&self, _out: &mut Vec<u8>) {}
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        if bytes.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::wrong_length("()", 0, bytes.len()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: StateCodec + PartialEq + fmt::Debug>(value: T, bytes: &[u8]) {
        assert_eq!(value.to_bytes(), bytes, "encoding of {value:?}");
        assert_eq!(T::decode(bytes).unwrap(), value);
    }

    #[test]
    fn encodings_match_the_documented_table() {
        round_trip(0x12u8, &[0x12]);
        round_trip(0x1234u16, &[0x34, 0x12]);
        round_trip(0x1234_5678u32, &[0x78, 0x56, 0x34, 0x12]);
        round_trip(1u64, &[1, 0, 0, 0, 0, 0, 0, 0]);
        round_trip(-1i8, &[0xff]);
        round_trip(-2i16, &[0xfe, 0xff]);
        round_trip(-1i32, &[0xff; 4]);
        round_trip(i64::MIN, &[0, 0, 0, 0, 0, 0, 0, 0x80]);
        round_trip(1.0f32, &[0, 0, 0x80, 0x3f]);
        round_trip(1.0f64, &[0, 0, 0, 0, 0, 0, 0xf0, 0x3f]);
        round_trip(true, &[1]);
        round_trip(false, &[0]);
        round_trip("héllo".to_string(), "héllo".as_bytes());
        round_trip(vec![0u8, 255], &[0, 255]);
        round_trip((), &[]);
    }

    #[test]
    fn bad_bytes_are_errors_not_panics() {
        assert_eq!(
            u64::decode(&[1, 2, 3]).unwrap_err().to_string(),
            "cannot decode u64: expected 8 bytes, got 3"
        );
        assert_eq!(
            bool::decode(&[2]).unwrap_err().to_string(),
            "cannot decode bool: invalid byte 2"
        );
        assert!(bool::decode(&[]).is_err());
        assert!(String::decode(&[0xff, 0xfe]).is_err());
        assert!(<()>::decode(&[0]).is_err());
        assert!(f64::decode(&[0; 4]).is_err());
    }
}
