//! Chaining vertices into tasks, and the edges left between tasks.

use super::{SINK, SRC, edge, edge_with, operator, valid};
use crate::{JobGraph, Partitioner, TaskSpec, chain, check_tasks, task_edges};

fn task_ids(tasks: &[TaskSpec]) -> Vec<&str> {
    tasks.iter().map(|t| t.id.as_str()).collect()
}

/// Every vertex in exactly one task; tasks topologically ordered.
#[track_caller]
fn check_invariants(graph: &JobGraph, tasks: &[TaskSpec]) {
    let mut seen = vec![0; graph.vertices.len()];
    for task in tasks {
        for &v in &task.vertices {
            seen[v] += 1;
            assert_eq!(graph.vertices[v].parallelism, task.parallelism);
        }
    }
    assert!(seen.iter().all(|&n| n == 1), "{seen:?}");
    assert_eq!(check_tasks(graph, tasks), Ok(()));
    for e in task_edges(graph, tasks) {
        assert!(e.from_task < e.to_task, "task edge goes backwards: {e:?}");
        assert_eq!(tasks[e.to_task].head(), e.to_vertex);
    }
}

#[test]
fn linear_forward_chain_is_fused_into_one_task() {
    let graph = valid(&format!(
        "{SRC}{}{}{SINK}{}{}{}",
        operator("a", ""),
        operator("b", ""),
        edge("src", "a"),
        edge("a", "b"),
        edge("b", "out")
    ));
    let tasks = chain(&graph);
    assert_eq!(task_ids(&tasks), ["src+a+b+out"]);
    assert_eq!(tasks[0].vertices, [0, 1, 2, 3]);
    assert!(task_edges(&graph, &tasks).is_empty());
    check_invariants(&graph, &tasks);
}

#[test]
fn parallelism_change_breaks_the_chain() {
    let graph = valid(&format!(
        "{SRC}{}{}{SINK}{}{}{}",
        operator("a", ""),
        operator("b", "parallelism = 2"),
        edge("src", "a"),
        edge("a", "b"),
        edge("b", "out")
    ));
    let tasks = chain(&graph);
    assert_eq!(task_ids(&tasks), ["src+a", "b", "out"]);
    assert_eq!(tasks[1].parallelism, 2);
    let edges = task_edges(&graph, &tasks);
    assert_eq!(edges.len(), 2);
    assert_eq!((edges[0].from_task, edges[0].to_task), (0, 1));
    assert_eq!(edges[0].partitioner, Partitioner::Rebalance);
    assert_eq!(edges[0].from_vertex, graph.vertex_index("a").unwrap());
    check_invariants(&graph, &tasks);
}

#[test]
fn fan_out_breaks_the_chain() {
    let graph = valid(&format!(
        "{SRC}{}{}{SINK}{}{}{}{}",
        operator("a", ""),
        operator("b", ""),
        edge("src", "a"),
        edge("src", "b"),
        edge("a", "out"),
        edge("b", "out")
    ));
    let tasks = chain(&graph);
    // src has two outputs, out has two inputs: nothing fuses.
    assert_eq!(task_ids(&tasks), ["src", "a", "b", "out"]);
    assert_eq!(task_edges(&graph, &tasks).len(), 4);
    check_invariants(&graph, &tasks);
}

#[test]
fn fan_in_breaks_the_chain_but_not_the_rest() {
    let graph = valid(&format!(
        "{SRC}\n[[source]]\nid = \"src2\"\ntype = \"generator\"\nkind = \"words\"\n{}{SINK}{}{}{}",
        operator("a", ""),
        edge("src", "a"),
        edge("src2", "a"),
        edge("a", "out")
    ));
    let tasks = chain(&graph);
    assert_eq!(task_ids(&tasks), ["src", "src2", "a+out"]);
    check_invariants(&graph, &tasks);
}

#[test]
fn keyed_edge_breaks_the_chain() {
    let graph = valid(&format!(
        "{SRC}{}{}{SINK}{}{}{}",
        operator("a", ""),
        operator("count", "key_by = \"key\""),
        edge("src", "a"),
        edge("a", "count"),
        edge("count", "out")
    ));
    let tasks = chain(&graph);
    assert_eq!(task_ids(&tasks), ["src+a", "count+out"]);
    let edges = task_edges(&graph, &tasks);
    assert_eq!(edges.len(), 1);
    assert!(matches!(edges[0].partitioner, Partitioner::Hash(_)));
    check_invariants(&graph, &tasks);
}

#[test]
fn explicit_rebalance_breaks_the_chain() {
    let graph = valid(&format!(
        "{SRC}{}{SINK}{}{}",
        operator("a", ""),
        edge_with("src", "a", "rebalance"),
        edge("a", "out")
    ));
    assert_eq!(task_ids(&chain(&graph)), ["src", "a+out"]);
}

#[test]
fn side_output_edge_is_not_chained() {
    // a's only outgoing edge reads a side output: not fused even though
    // it is forward with equal parallelism.
    let graph = valid(&format!(
        "{SRC}{}{}{SINK}{}{}{}",
        operator("a", ""),
        operator("b", ""),
        edge("src", "a"),
        edge("a:late", "b"),
        edge("b", "out")
    ));
    assert_eq!(graph.edges[1].partitioner, Partitioner::Forward);
    let tasks = chain(&graph);
    assert_eq!(task_ids(&tasks), ["src+a", "b+out"]);
    let edges = task_edges(&graph, &tasks);
    assert_eq!(edges.len(), 1);
    assert_eq!(edges[0].from_tag.as_deref(), Some("late"));
    assert_eq!(edges[0].edge, 1);
    check_invariants(&graph, &tasks);
}

#[test]
fn tasks_follow_topological_order_not_declaration_order() {
    // Declared sink-side first; the tasks still start at the source.
    let graph = valid(&format!(
        "{SRC}{}{}{SINK}{}{}{}",
        operator("late", "parallelism = 2"),
        operator("early", ""),
        edge("early", "late"),
        edge("src", "early"),
        edge("late", "out")
    ));
    let tasks = chain(&graph);
    assert_eq!(task_ids(&tasks), ["src+early", "late", "out"]);
    check_invariants(&graph, &tasks);
}

#[test]
fn a_task_list_that_is_no_chaining_of_the_graph_is_refused() {
    let graph = valid(&format!(
        "{SRC}{}{}{SINK}{}{}{}",
        operator("a", ""),
        operator("b", "parallelism = 2"),
        edge("src", "a"),
        edge("a", "b"),
        edge("b", "out")
    ));
    let tasks = chain(&graph);
    assert_eq!(check_tasks(&graph, &tasks), Ok(()));
    let refused = |tasks: Vec<TaskSpec>, why: &str| {
        let err = check_tasks(&graph, &tasks).unwrap_err();
        assert!(err.contains(why), "{err}");
    };
    // A vertex left out, or placed twice.
    refused(tasks[..2].to_vec(), "vertex `out` is in no task");
    let mut twice = tasks.clone();
    twice[2].vertices.push(0);
    refused(twice, "vertex `src` is in two tasks");
    // A parallelism that is not the vertices'.
    let mut wider = tasks.clone();
    wider[0].parallelism = 3;
    refused(wider, "task 0 has parallelism 3");
    // A chain in the wrong order: no edge leads from `a` to `src`.
    let mut reversed = tasks.clone();
    reversed[0].vertices.reverse();
    refused(reversed, "chains `a` to `src` without a chainable edge");
    // Indices out of the graph; an empty task.
    let mut outside = tasks.clone();
    outside[2].vertices = vec![9];
    refused(outside, "names vertex 9");
    let mut empty = tasks;
    empty.push(TaskSpec {
        id: crate::TaskId("x".to_owned()),
        vertices: vec![],
        parallelism: 1,
    });
    refused(empty, "has no vertex");
}
