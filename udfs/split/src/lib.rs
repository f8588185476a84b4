//! `split`: routes records by content — records whose value contains
//! config `contains` go to the side output named by config `tag` (default
//! `"matched"`), all others to the main output.
//!
//! Shows side outputs: the job spec consumes one with an edge
//! `from = "<operator id>:<tag>"`.

use weir_sdk::{Collector, Error, FlatMapFunction, OpenContext, Record};

/// The splitter.
pub struct Split {
    needle: Vec<u8>,
    tag: String,
}

impl FlatMapFunction for Split {
    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        let config = ctx.config();
        Ok(Split {
            needle: config.require_str("contains")?.as_bytes().to_vec(),
            tag: config.get_str("tag").unwrap_or("matched").to_owned(),
        })
    }

    fn flat_map(&mut self, record: Record<'_>, out: &mut Collector) -> Result<(), Error> {
        let matched = self.needle.is_empty()
            || record
                .value
                .windows(self.needle.len())
                .any(|w| w == self.needle.as_slice());
        if matched {
            out.output(&self.tag, record);
        } else {
            out.collect(record);
        }
        Ok(())
    }
}

weir_sdk::export_flat_map!(Split);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::FlatMap;
    use weir_sdk::testing::Harness;

    #[test]
    fn matching_records_go_to_the_side_output() -> Result<(), Error> {
        let mut h = Harness::<FlatMap<Split>>::open(&[("contains", "7"), ("tag", "sevens")])?;
        let out = h.process([
            Record::new("17", 1),
            Record::new("18", 2),
            Record::new("70", 3),
        ])?;
        assert_eq!(out.values(), ["18"]);
        let sevens: Vec<_> = out.side("sevens").iter().map(|r| r.value.clone()).collect();
        assert_eq!(sevens, [b"17".to_vec(), b"70".to_vec()]);
        Ok(())
    }
}
