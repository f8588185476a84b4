//! `tokenize`: splits each line into words.
//!
//! The value is read as UTF-8 (lossy) and split on every char that is not
//! `char::is_alphanumeric()`; empty pieces are dropped. Config `lowercase`
//! (bool, default true) lowercases each word with `str::to_lowercase`. One
//! record per word: key = value = the word, timestamp = the line's.

use weir_sdk::{Collector, Error, FlatMapFunction, OpenContext, Record};

/// The tokenizer.
pub struct Tokenize {
    lowercase: bool,
    /// The current word, lowercased; reused so ASCII words allocate nothing.
    word: String,
}

impl FlatMapFunction for Tokenize {
    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        Ok(Tokenize {
            lowercase: ctx.config().get_bool("lowercase")?.unwrap_or(true),
            word: String::new(),
        })
    }

    fn flat_map(&mut self, record: Record<'_>, out: &mut Collector) -> Result<(), Error> {
        let line = record.value_str();
        for word in line.split(|c: char| !c.is_alphanumeric()) {
            if word.is_empty() {
                continue;
            }
            let word = if !self.lowercase {
                word
            } else if word.is_ascii() {
                self.word.clear();
                self.word.push_str(word);
                self.word.make_ascii_lowercase();
                self.word.as_str()
            } else {
                // `str::to_lowercase` is context-sensitive (final sigma): use it as is.
                self.word = word.to_lowercase();
                self.word.as_str()
            };
            out.collect(Record::keyed(word, word, record.timestamp));
        }
        Ok(())
    }
}

weir_sdk::export_flat_map!(Tokenize);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::FlatMap;
    use weir_sdk::testing::Harness;

    #[test]
    fn splits_on_non_alphanumerics_and_lowercases() -> Result<(), Error> {
        let mut h = Harness::<FlatMap<Tokenize>>::open(&[])?;
        let out = h.process([Record::new("Hello, world!  ÓDYSSEUS--ΟΔΥΣΣΕΥΣ 42", 5)])?;
        assert_eq!(
            out.values(),
            ["hello", "world", "ódysseus", "οδυσσευς", "42"]
        );
        assert!(
            out.main
                .iter()
                .all(|r| r.key.as_deref() == Some(&r.value[..]))
        );
        assert!(out.main.iter().all(|r| r.timestamp == 5));
        Ok(())
    }

    #[test]
    fn keeps_case_when_asked() -> Result<(), Error> {
        let mut h = Harness::<FlatMap<Tokenize>>::open(&[("lowercase", "false")])?;
        let out = h.process([Record::new("To be, or NOT", 1), Record::new("", 2)])?;
        assert_eq!(out.values(), ["To", "be", "or", "NOT"]);
        Ok(())
    }
}
