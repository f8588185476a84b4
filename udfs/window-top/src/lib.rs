//! `window-top`: a process-window function (Flink's
//! `ProcessWindowFunction`): when a window fires, the three largest values
//! of its records. Use it as the `module` of an `[[operator]]` with a
//! `window`.
//!
//! Input values are decimal integers (surrounding whitespace allowed). Each
//! fired window emits one record, keyed by the window's key:
//! `{"key":"<key>","start":S,"end":E,"count":C,"top":[a,b,c]}` with the up
//! to three largest values, largest first (duplicates kept), the same bytes
//! as the Python, JS and C examples of the same name.

use weir_sdk::{Collector, Error, OpenContext, ProcessWindowFunction, Record, Window};

/// The function.
pub struct WindowTop;

impl ProcessWindowFunction for WindowTop {
    const NAME: &'static str = "window-top";

    fn open(_ctx: &OpenContext) -> Result<Self, Error> {
        Ok(WindowTop)
    }

    fn process(
        &mut self,
        key: &[u8],
        window: Window,
        records: &[Record<'_>],
        out: &mut Collector,
    ) -> Result<(), Error> {
        let mut values = records
            .iter()
            .map(|r| {
                let text = r.value_str();
                text.trim()
                    .parse::<i64>()
                    .map_err(|_| Error::msg(format!("value {text:?} is not a decimal integer")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        values.sort_unstable_by(|a, b| b.cmp(a));
        values.truncate(3);
        let top: Vec<String> = values.iter().map(i64::to_string).collect();
        let name = serde_json::to_string(&String::from_utf8_lossy(key))
            .map_err(|e| Error::msg(e.to_string()))?;
        let value = format!(
            r#"{{"key":{name},"start":{},"end":{},"count":{},"top":[{}]}}"#,
            window.start,
            window.end,
            records.len(),
            top.join(",")
        );
        out.collect(Record::keyed(key, value.as_bytes(), window.max_timestamp()));
        Ok(())
    }
}

weir_sdk::export_process_window!(WindowTop);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::ProcessWindow;
    use weir_sdk::testing::Harness;

    #[test]
    fn the_three_largest_values_largest_first_duplicates_kept() {
        let mut h = Harness::<ProcessWindow<WindowTop>>::open(&[]).unwrap();
        let w = Window { start: 20, end: 30 };
        let values = ["4", "9", " 9 ", "-1", "5"];
        let records: Vec<Record<'_>> = values.iter().map(|v| Record::keyed("a", *v, 21)).collect();
        let out = h.process_window("a", w, &records).unwrap();
        assert_eq!(
            out.values(),
            [r#"{"key":"a","start":20,"end":30,"count":5,"top":[9,9,5]}"#]
        );
        assert_eq!(out.main[0].timestamp, 29);
        assert_eq!(out.main[0].key.as_deref(), Some(&b"a"[..]));
        let out = h
            .process_window("b", w, &[Record::keyed("b", "7", 20)])
            .unwrap();
        assert_eq!(
            out.values(),
            [r#"{"key":"b","start":20,"end":30,"count":1,"top":[7]}"#]
        );
        let e = h
            .process_window("b", w, &[Record::keyed("b", "seven", 20)])
            .unwrap_err();
        assert!(e.to_string().contains("\"seven\""), "{e}");
    }
}
