//! `{{name}}`: a map operator that uppercases each record's value.

use weir_sdk::{Error, MapFunction, OpenContext, Record};

/// The operator: one instance per subtask. It keeps the output value in a
/// buffer it owns, so the returned record can borrow it.
pub struct Uppercase {
    buf: String,
}

impl MapFunction for Uppercase {
    fn open(_ctx: &OpenContext) -> Result<Self, Error> {
        Ok(Uppercase { buf: String::new() })
    }

    fn map<'a>(&'a mut self, record: Record<'a>) -> Result<Record<'a>, Error> {
        self.buf = record.value_str().to_uppercase();
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
    fn uppercases_values() -> Result<(), Error> {
        let mut h = Harness::<Map<Uppercase>>::open(&[])?;
        let out = h.process([Record::new("hello weir", 1), Record::keyed("k", "straße", 2)])?;
        assert_eq!(out.values(), ["HELLO WEIR", "STRASSE"]);
        Ok(())
    }
}
