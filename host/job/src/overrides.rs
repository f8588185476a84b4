//! `--set key=value` overrides, applied to the TOML document before it is
//! deserialised.
//!
//! A key is a dotted path. Its first segment is a top-level table of the
//! spec: `job`, or one of the arrays `source`, `operator`, `sink`, `edge`.
//! For an array the second segment chooses the element: the one whose `id`
//! equals it or, when none does, the element at that 0-based index (edges
//! have no id: `edge.2.partition=rebalance`). The remaining segments walk
//! into tables, creating missing ones (`job.limits.memory_mb=128` works
//! without a `[job.limits]`), and the last is set.
//!
//! The value is parsed as a TOML value (`4`, `true`, `1.5`, `"text"`,
//! `[1, 2]`, `{ a = 1 }`); anything that does not parse is taken as a
//! string (`/tmp/out.txt`, `final`). Quote to force a string: `"4"`.
//!
//! Unknown field names are not caught here: deserialisation rejects them
//! like any other unknown field.

use toml::{Table, Value};

/// The top-level tables a key may start with.
const SECTIONS: &str = "job, source, operator, sink or edge";

/// Applies `key = value` to `doc`, or says why it cannot.
pub(super) fn apply(doc: &mut Table, key: &str, value: &str) -> Result<(), String> {
    let segments: Vec<&str> = key.split('.').map(str::trim).collect();
    if segments.iter().any(|s| s.is_empty()) {
        return Err(format!(
            "empty segment in the key {key:?}; expected a dotted path like job.parallelism"
        ));
    }
    let (table, rest) = match segments[0] {
        "job" => {
            let job = doc
                .entry("job")
                .or_insert_with(|| Value::Table(Table::new()));
            let Value::Table(job) = job else {
                return Err("`job` is not a table".to_owned());
            };
            (job, &segments[1..])
        }
        section @ ("source" | "operator" | "sink" | "edge") => {
            let element = select_element(doc, section, segments.get(1).copied())?;
            (element, &segments[2..])
        }
        other => {
            return Err(format!(
                "unknown section {other:?}; expected {SECTIONS} (like job.parallelism or operator.<id>.parallelism)"
            ));
        }
    };
    let Some((last, path)) = rest.split_last() else {
        return Err(format!(
            "{key:?} names a whole table; expected a field after it, like {key}.parallelism"
        ));
    };
    let mut table = table;
    let mut walked = segments[..segments.len() - rest.len()].join(".");
    for segment in path {
        walked.push('.');
        walked.push_str(segment);
        let next = table
            .entry(segment.to_string())
            .or_insert_with(|| Value::Table(Table::new()));
        let Value::Table(next) = next else {
            return Err(format!(
                "{walked} is a {}, not a table, so it has no field {last:?}",
                next.type_str()
            ));
        };
        table = next;
    }
    table.insert(last.to_string(), parse_value(value));
    Ok(())
}

/// The `[[section]]` element chosen by `selector` (an id, else an index).
fn select_element<'a>(
    doc: &'a mut Table,
    section: &str,
    selector: Option<&str>,
) -> Result<&'a mut Table, String> {
    let by = if section == "edge" {
        "0-based index"
    } else {
        "id (or 0-based index)"
    };
    let Some(selector) = selector else {
        return Err(format!(
            "expected {section}.<{by}>.<field>, found only {section:?}"
        ));
    };
    let Some(Value::Array(elements)) = doc.get_mut(section) else {
        return Err(format!(
            "the spec has no [[{section}]], so there is no {section} {selector:?}"
        ));
    };
    let id_of = |element: &Value| element.get("id").and_then(Value::as_str).map(str::to_owned);
    let position = elements
        .iter()
        .position(|e| id_of(e).as_deref() == Some(selector))
        .or_else(|| {
            selector
                .parse::<usize>()
                .ok()
                .filter(|&i| i < elements.len())
        });
    let Some(position) = position else {
        let known: Vec<String> = if section == "edge" {
            vec![format!("0..{}", elements.len())]
        } else {
            elements.iter().filter_map(id_of).collect()
        };
        return Err(format!(
            "no [[{section}]] with {by} {selector:?}; expected one of: {}",
            known.join(", ")
        ));
    };
    match &mut elements[position] {
        Value::Table(table) => Ok(table),
        other => Err(format!(
            "{section}[{position}] is a {}, not a table",
            other.type_str()
        )),
    }
}

/// `value` as a TOML value if it parses as one, else as a string.
fn parse_value(value: &str) -> Value {
    value
        .parse::<Value>()
        .unwrap_or_else(|_| Value::String(value.to_owned()))
}
