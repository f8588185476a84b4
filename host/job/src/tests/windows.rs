//! Windows in the spec: an `[[operator]]` with a `window` table becomes the
//! host's window operator; what it needs and what it refuses.

use super::{SINK, SRC, assert_problem, edge, valid};
use crate::{Aggregate, KeySelector, VertexKind, WindowAssigner, WindowSpec};

fn window_job(fields: &str) -> String {
    format!(
        "{SRC}\n[[operator]]\nid = \"w\"\n{fields}\n{SINK}{}{}",
        edge("src", "w"),
        edge("w", "out")
    )
}

#[test]
fn a_window_table_makes_a_window_operator() {
    let graph = valid(&window_job(
        "window = { type = \"sliding\", size_ms = 1000, slide_ms = 250 }\n\
         aggregate = \"avg\"\nfield = \"json:amount\"\nallowed_lateness_ms = 50\nkey_by = \"key\"",
    ));
    assert_eq!(
        graph.vertices[1].kind,
        VertexKind::Window(WindowSpec {
            assigner: WindowAssigner::Sliding {
                size_ms: 1000,
                slide_ms: 250
            },
            aggregate: Aggregate::Avg,
            field: Some(KeySelector::JsonField("amount".into())),
            allowed_lateness_ms: 50,
            key_by: KeySelector::RecordKey,
            function: None,
        })
    );
    assert_eq!(graph.vertices[1].kind.role(), "operator");
    // Its input edge is hash-partitioned by its key.
    assert!(matches!(
        graph.edges[0].partitioner,
        crate::Partitioner::Hash(KeySelector::RecordKey)
    ));
    // Sum defaults to the value as a number; count has no field.
    let graph = valid(&window_job(
        "window = { type = \"session\", gap_ms = 10 }\naggregate = \"sum\"\nkey_by = \"value\"",
    ));
    let VertexKind::Window(w) = &graph.vertices[1].kind else {
        panic!("a window")
    };
    assert_eq!(w.field, Some(KeySelector::Value));
}

#[test]
fn a_window_with_a_module_runs_a_window_function() {
    let graph = valid(&window_job(
        "window = { type = \"tumbling\", size_ms = 10 }\nmodule = \"agg.wasm\"\n\
         key_by = \"key\"\nconfig = { top = 3 }",
    ));
    let VertexKind::Window(w) = &graph.vertices[1].kind else {
        panic!("a window")
    };
    let function = w.function.as_ref().expect("a window function");
    assert!(
        matches!(&function.module, crate::ModuleRef::Path(p) if p.ends_with("agg.wasm")),
        "{function:?}"
    );
    assert_eq!(function.config, [("top".to_owned(), "3".to_owned())]);
    assert_eq!(graph.vertices[1].kind.module_spec(), Some(function));
}

#[test]
fn what_a_window_needs_is_named() {
    let tumbling = "window = { type = \"tumbling\", size_ms = 10 }";
    assert_problem(
        &window_job(&format!("{tumbling}\nkey_by = \"key\"")),
        "operator[0] \"w\".aggregate",
        &["missing", "\"count\""],
    );
    assert_problem(
        &window_job(&format!("{tumbling}\naggregate = \"count\"")),
        "operator[0] \"w\".key_by",
        &["missing", "per key"],
    );
    assert_problem(
        &window_job(&format!(
            "{tumbling}\naggregate = \"count\"\nkey_by = \"key\"\nmodule = \"agg.wasm\""
        )),
        "operator[0] \"w\".aggregate",
        &["window function in a `module`"],
    );
    assert_problem(
        &window_job(&format!(
            "{tumbling}\nkey_by = \"key\"\nconfig = {{ n = 1 }}"
        )),
        "operator[0] \"w\".config",
        &["built-in `aggregate` takes no `config`"],
    );
    assert_problem(
        &window_job(&format!(
            "{tumbling}\naggregate = \"count\"\nfield = \"json:x\"\nkey_by = \"key\""
        )),
        "operator[0] \"w\".field",
        &["count"],
    );
    assert_problem(
        &window_job(&format!(
            "{tumbling}\naggregate = \"max\"\nfield = \"key\"\nkey_by = \"key\""
        )),
        "operator[0] \"w\".field",
        &["\"json:<field>\""],
    );
    assert_problem(
        &window_job(
            "window = { type = \"sliding\", size_ms = 100000, slide_ms = 1 }\n\
             aggregate = \"count\"\nkey_by = \"key\"",
        ),
        "operator[0] \"w\".window.slide_ms",
        &["100000 windows", "at most 1000"],
    );
    assert_problem(
        &window_job(
            "window = { type = \"session\", gap_ms = 0 }\naggregate = \"count\"\nkey_by = \"key\"",
        ),
        "operator[0] \"w\".window.gap_ms",
        &["found 0"],
    );
}

#[test]
fn an_operator_needs_a_module_or_a_window_and_window_fields_need_a_window() {
    assert_problem(
        &window_job("key_by = \"key\""),
        "operator[0] \"w\".module",
        &["missing", "window"],
    );
    assert_problem(
        &window_job("module = \"a.wasm\"\naggregate = \"count\""),
        "operator[0] \"w\".aggregate",
        &["window"],
    );
}
