//! `uppercase`: uppercases each value (UTF-8, lossy).

use weir_sdk::{Error, MapFunction, OpenContext, Record};

/// The mapper; keeps one buffer for the uppercased value.
pub struct Uppercase {
    buf: String,
}

impl MapFunction for Uppercase {
    fn open(_ctx: &OpenContext) -> Result<Self, Error> {
        Ok(Uppercase { buf: String::new() })
    }

    fn map<'a>(&'a mut self, record: Record<'a>) -> Result<Record<'a>, Error> {
        let value = record.value_str();
        self.buf.clear();
        if value.is_ascii() {
            self.buf.push_str(&value);
            self.buf.make_ascii_uppercase();
        } else {
            // Same as `str::to_uppercase`, into the reused buffer.
            self.buf.extend(value.chars().flat_map(char::to_uppercase));
        }
        Ok(record.with_value(&self.buf))
    }
}

weir_sdk::export_map!(Uppercase);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::Map;
    use weir_sdk::testing::Harness;

    #[test]
    fn uppercases_values_and_keeps_keys() -> Result<(), Error> {
        let mut h = Harness::<Map<Uppercase>>::open(&[])?;
        let out = h.process([
            Record::keyed("k", "straße ok", 3),
            Record::new(&[0xffu8, b'a'][..], 4),
        ])?;
        assert_eq!(out.values(), ["STRASSE OK", "\u{fffd}A"]);
        assert_eq!(out.main[0].key.as_deref(), Some(&b"k"[..]));
        assert_eq!(out.main[1].timestamp, 4);
        Ok(())
    }
}
