//! `nexmark-local-item`: Nexmark q3, "local item suggestion": the auctions
//! in category 10 whose sellers live in Oregon, Idaho or California, as an
//! incremental join (Flink's regular inner join, a keyed co-process
//! function, both inputs keyed by the person's id):
//!
//! ```sql
//! SELECT P.name, P.city, P.state, A.id
//! FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
//! WHERE A.category = 10 AND P.state IN ('or', 'id', 'ca')
//! ```
//!
//! Input 0 (`left`): persons from `nexmark-select` (`query = "q3-persons"`),
//! `{"name":…,"city":…,"state":…}` keyed by id. Input 1 (`right`): auction
//! ids from `nexmark-select` (`query = "q3-auctions"`), keyed by seller. A
//! person is kept in value state; an auction whose seller has not arrived
//! yet waits in list state (Nexmark sellers can be persons still to come)
//! and is emitted when they do. Each match is emitted once:
//! `{"name":…,"city":…,"state":…,"id":A}`.

use weir_sdk::{
    Error, KeyedCoProcessFunction, KeyedContext, ListState, OpenContext, Record, StateDescriptor,
    ValueState,
};

/// The function.
pub struct LocalItem {
    person: ValueState<Vec<u8>>,
    waiting: ListState<Vec<u8>>,
}

/// The person's JSON object with the auction id added.
fn matched(person: &[u8], auction: &[u8]) -> Result<Vec<u8>, Error> {
    let open = person
        .strip_suffix(b"}")
        .ok_or_else(|| Error::msg("a person is not a JSON object"))?;
    let mut out = Vec::with_capacity(person.len() + auction.len() + 8);
    out.extend_from_slice(open);
    out.extend_from_slice(br#","id":"#);
    out.extend_from_slice(auction);
    out.push(b'}');
    Ok(out)
}

impl KeyedCoProcessFunction for LocalItem {
    const NAME: &'static str = "nexmark-local-item";
    const STATES: &'static [StateDescriptor] = &[
        StateDescriptor::value("person"),
        StateDescriptor::list("waiting"),
    ];

    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        Ok(LocalItem {
            person: ctx.value_state("person")?,
            waiting: ctx.list_state("waiting")?,
        })
    }

    fn process_element1(
        &mut self,
        record: Record<'_>,
        ctx: &mut KeyedContext<'_>,
    ) -> Result<(), Error> {
        let person = record.value.to_vec();
        for auction in self.waiting.get(ctx)? {
            let out = matched(&person, &auction)?;
            ctx.collect(Record::keyed(ctx.key(), &out, record.timestamp));
        }
        self.waiting.clear(ctx)?;
        self.person.set(ctx, &person)
    }

    fn process_element2(
        &mut self,
        record: Record<'_>,
        ctx: &mut KeyedContext<'_>,
    ) -> Result<(), Error> {
        match self.person.get(ctx)? {
            Some(person) => {
                let out = matched(&person, record.value)?;
                ctx.collect(Record::keyed(ctx.key(), &out, record.timestamp));
                Ok(())
            }
            None => self.waiting.add(ctx, &record.value.to_vec()),
        }
    }
}

weir_sdk::export_keyed_co!(LocalItem);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::KeyedCo;
    use weir_sdk::testing::Harness;

    const P: &str = r#"{"name":"kate white","city":"bend","state":"or"}"#;

    #[test]
    fn auctions_before_and_after_their_seller_match_once() -> Result<(), Error> {
        let mut h = Harness::<KeyedCo<LocalItem>>::open(&[])?;
        assert!(
            h.process_input(1, [Record::keyed("7", "1001", 1)])?
                .is_empty()
        );
        let out = h.process_input(0, [Record::keyed("7", P, 2), Record::keyed("8", P, 2)])?;
        assert_eq!(
            out.values(),
            [r#"{"name":"kate white","city":"bend","state":"or","id":1001}"#]
        );
        let out = h.process_input(
            1,
            [Record::keyed("7", "1002", 3), Record::keyed("9", "1003", 3)],
        )?;
        assert_eq!(
            out.values(),
            [r#"{"name":"kate white","city":"bend","state":"or","id":1002}"#]
        );
        Ok(())
    }
}
