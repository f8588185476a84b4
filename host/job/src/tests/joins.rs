//! Joins in the spec: a `join` table, edges naming the left and right
//! input, and what is refused.

use super::{SINK, assert_problem, edge, valid};
use crate::{JoinKind, KeySelector, VertexKind};

const TWO_SOURCES: &str = r#"
[[source]]
id = "a"
type = "generator"
kind = "sequence"

[[source]]
id = "b"
type = "generator"
kind = "sequence"
"#;

fn join_job(join: &str, left: &str, right: &str) -> String {
    format!(
        "{TWO_SOURCES}\n[[operator]]\nid = \"j\"\n{join}\n{SINK}\
         \n[[edge]]\nfrom = \"a\"\nto = \"j\"\n{left}\n\
         \n[[edge]]\nfrom = \"b\"\nto = \"j\"\n{right}\n{}",
        edge("j", "out")
    )
}

const INTERVAL: &str =
    "join = { type = \"interval\", lower_ms = -5, upper_ms = 10 }\nkey_by = \"json:id\"";

#[test]
fn a_join_reads_its_bounds_and_each_edge_its_side() {
    let graph = valid(&join_job(INTERVAL, "input = \"left\"", "input = 1"));
    let VertexKind::Join(join) = &graph.vertices[2].kind else {
        panic!("a join: {:?}", graph.vertices[2].kind)
    };
    assert_eq!(
        join.kind,
        JoinKind::Interval {
            lower_ms: -5,
            upper_ms: 10
        }
    );
    assert_eq!(join.key_by, KeySelector::JsonField("id".into()));
    let inputs: Vec<u8> = graph.edges.iter().map(|e| e.input).collect();
    assert_eq!(inputs, [0, 1, 0]);
    assert!(
        graph.edges[..2]
            .iter()
            .all(|e| matches!(e.partitioner, crate::Partitioner::Hash(_))),
        "both inputs are keyed"
    );
}

#[test]
fn a_join_needs_both_sides_bounds_in_order_and_a_key() {
    assert_problem(
        &join_job(INTERVAL, "input = \"left\"", "input = \"left\""),
        "operator[0] \"j\"",
        &["no right input", "input = \"right\""],
    );
    assert_problem(
        &join_job(INTERVAL, "input = \"left\"", ""),
        "edge[1].input",
        &["missing", "is a join"],
    );
    assert_problem(
        &join_job(INTERVAL, "input = \"left\"", "input = \"middle\""),
        "edge[1].input",
        &["\"middle\"", "\"right\" (or 1)"],
    );
    assert_problem(
        &join_job(
            "join = { type = \"interval\", lower_ms = 5, upper_ms = -5 }\nkey_by = \"key\"",
            "input = 0",
            "input = 1",
        ),
        "operator[0] \"j\".join.upper_ms",
        &["below lower_ms"],
    );
    assert_problem(
        &join_job(
            "join = { type = \"window\", size_ms = 10 }",
            "input = 0",
            "input = 1",
        ),
        "operator[0] \"j\".key_by",
        &["missing"],
    );
    assert_problem(
        &join_job(
            "join = { type = \"window\", size_ms = 10 }\nkey_by = \"key\"\nmodule = \"f.wasm\"",
            "input = 0",
            "input = 1",
        ),
        "operator[0] \"j\".module",
        &["not supported yet"],
    );
}

#[test]
fn a_sink_or_window_takes_no_input_side_but_an_operator_may() {
    let graph = valid(&format!(
        "{TWO_SOURCES}\n[[operator]]\nid = \"j\"\nmodule = \"m.wasm\"\n{SINK}\
         \n[[edge]]\nfrom = \"a\"\nto = \"j\"\ninput = \"right\"\n{}{}",
        edge("b", "j"),
        edge("j", "out")
    ));
    assert_eq!(graph.edges[0].input, 1);
    assert_eq!(graph.edges[1].input, 0, "left by default");
    assert_problem(
        &format!(
            "{TWO_SOURCES}\n{SINK}\n[[edge]]\nfrom = \"a\"\nto = \"out\"\ninput = \"right\"\n{}",
            edge("b", "out")
        ),
        "edge[0].input",
        &["one input", "only a join"],
    );
}

#[test]
fn one_source_may_feed_both_sides_of_a_self_join_but_not_one_side_twice() {
    let self_join = |right: &str| {
        format!(
            "{TWO_SOURCES}\n[[operator]]\nid = \"j\"\n{INTERVAL}\n{SINK}\
             \n[[edge]]\nfrom = \"a\"\nto = \"j\"\ninput = \"left\"\n\
             \n[[edge]]\nfrom = \"a\"\nto = \"j\"\n{right}\n{}{}",
            edge_with_input("b", "j", "right"),
            edge("j", "out")
        )
    };
    let graph = valid(&self_join("input = \"right\""));
    assert_eq!(graph.edges.iter().filter(|e| e.from == 0).count(), 2);
    assert_problem(
        &self_join("input = \"left\""),
        "edge[1]",
        &["duplicate edge", "delivered twice"],
    );
}

fn edge_with_input(from: &str, to: &str, input: &str) -> String {
    format!("\n[[edge]]\nfrom = \"{from}\"\nto = \"{to}\"\ninput = \"{input}\"\n")
}
