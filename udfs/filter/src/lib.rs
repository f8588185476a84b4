//! `filter`: keeps the records whose value contains a substring.
//!
//! Config `contains` (string, required): the bytes to look for; `invert`
//! (bool, default false): keep the records that do *not* contain them.

use weir_sdk::{Error, FilterFunction, OpenContext, Record};

/// The substring filter.
pub struct Contains {
    needle: Vec<u8>,
    invert: bool,
}

impl FilterFunction for Contains {
    const NAME: &'static str = "filter";

    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        Ok(Contains {
            needle: ctx.config().require_str("contains")?.as_bytes().to_vec(),
            invert: ctx.config().get_bool("invert")?.unwrap_or(false),
        })
    }

    fn filter(&mut self, record: &Record<'_>) -> Result<bool, Error> {
        let found = self.needle.is_empty()
            || record
                .value
                .windows(self.needle.len())
                .any(|window| window == self.needle);
        Ok(found != self.invert)
    }
}

weir_sdk::export_filter!(Contains);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::Filter;
    use weir_sdk::testing::Harness;

    #[test]
    fn keeps_matches_or_the_rest() -> Result<(), Error> {
        let input = [
            Record::new("apple", 1),
            Record::keyed("k", "banana", 2),
            Record::new("grape", 3),
        ];
        let mut h = Harness::<Filter<Contains>>::open(&[("contains", "ap")])?;
        assert_eq!(h.process(input)?.values(), ["apple", "grape"]);
        let mut h = Harness::<Filter<Contains>>::open(&[("contains", "ap"), ("invert", "true")])?;
        let out = h.process(input)?;
        assert_eq!(out.values(), ["banana"]);
        assert_eq!(out.main[0].key.as_deref(), Some(&b"k"[..]));
        Ok(())
    }

    #[test]
    fn contains_is_required() {
        let err = Harness::<Filter<Contains>>::open(&[]).err().unwrap();
        assert_eq!(err.message(), "config `contains` is required but missing");
    }
}
