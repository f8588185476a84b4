//! Operator chaining: fusing vertices of a [`JobGraph`] into tasks.
//!
//! A task runs a chain of vertices in one slot, passing batches between
//! them in memory with no serialization and no channel. Two vertices A → B
//! are chained when (Flink's rules, simplified):
//!
//! * the edge is [`Partitioner::Forward`] and reads A's main output (no side-output tag),
//! * parallelism(A) == parallelism(B),
//! * A has exactly one outgoing edge and B exactly one incoming edge.
//!
//! Every vertex is in exactly one [`TaskSpec`]; a task's vertices are in
//! chain order (head first); tasks come in topological order. Records enter
//! a task only at its head. [`task_edges`] lists the [`JobEdge`]s that cross
//! task boundaries: those become bounded channels between subtasks (in
//! memory locally, QUIC between TaskManagers).
//!
//! Pure functions of the graph; nothing here runs anything.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::graph::{JobEdge, JobGraph, Partitioner};

/// A task's id: the ids of its vertices joined by `+`, head first
/// (`lines+tokenize`). Unique within a job, since vertex ids cannot contain `+`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TaskId(pub String);

impl TaskId {
    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A chain of vertices run together, `parallelism` times.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSpec {
    /// `a+b+c`.
    pub id: TaskId,
    /// Indices into [`JobGraph::vertices`], in chain order, head first.
    pub vertices: Vec<usize>,
    /// The parallelism shared by all its vertices.
    pub parallelism: u32,
}

impl TaskSpec {
    /// The vertex records enter the task at.
    pub fn head(&self) -> usize {
        self.vertices[0]
    }

    /// The last vertex of the chain.
    pub fn tail(&self) -> usize {
        self.vertices[self.vertices.len() - 1]
    }
}

/// A [`JobEdge`] between two tasks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskEdge {
    /// Index of the edge in [`JobGraph::edges`] (its position among the
    /// consumer's inputs follows from [`JobGraph::inputs`]).
    pub edge: usize,
    /// Index of the producing task.
    pub from_task: usize,
    /// The producing vertex inside it (any vertex of the chain, not only the tail).
    pub from_vertex: usize,
    /// The side output read, `None` for the main output.
    pub from_tag: Option<String>,
    /// Index of the consuming task.
    pub to_task: usize,
    /// The consuming vertex: always the head of `to_task`.
    pub to_vertex: usize,
    /// How records are distributed among the consuming subtasks.
    pub partitioner: Partitioner,
}

/// Whether `edge` is fused into a chain (see the module docs).
pub fn is_chained(graph: &JobGraph, edge: &JobEdge) -> bool {
    edge.partitioner == Partitioner::Forward
        && edge.from_tag.is_none()
        && graph.vertices[edge.from].parallelism == graph.vertices[edge.to].parallelism
        && graph.vertices[edge.from].slot_sharing_group
            == graph.vertices[edge.to].slot_sharing_group
        && graph.outputs(edge.from).count() == 1
        && graph.inputs(edge.to).count() == 1
}

/// Checks that `tasks` is a chaining of `graph` that the runtime can
/// build: every vertex in exactly one task, chains of vertices with the
/// task's parallelism, each link a chained edge. What a TaskManager checks
/// of the task list a deployment carries (the JobManager computed it once
/// with [`chain`]; the placement indexes into it) before building anything
/// from it.
pub fn check_tasks(graph: &JobGraph, tasks: &[TaskSpec]) -> Result<(), String> {
    let mut seen = vec![false; graph.vertices.len()];
    for (t, task) in tasks.iter().enumerate() {
        if task.vertices.is_empty() {
            return Err(format!("task {t} has no vertex"));
        }
        for (i, &v) in task.vertices.iter().enumerate() {
            let Some(vertex) = graph.vertices.get(v) else {
                return Err(format!(
                    "task {t} names vertex {v}, the graph has {}",
                    seen.len()
                ));
            };
            if std::mem::replace(&mut seen[v], true) {
                return Err(format!("vertex `{}` is in two tasks", vertex.id));
            }
            if vertex.parallelism != task.parallelism {
                return Err(format!(
                    "task {t} has parallelism {}, its vertex `{}` {}",
                    task.parallelism, vertex.id, vertex.parallelism
                ));
            }
            if i > 0 {
                let from = task.vertices[i - 1];
                let linked = graph
                    .inputs(v)
                    .any(|edge| edge.from == from && is_chained(graph, edge));
                if !linked {
                    return Err(format!(
                        "task {t} chains `{}` to `{}` without a chainable edge",
                        graph.vertices[from].id, vertex.id
                    ));
                }
            }
        }
    }
    match seen.iter().position(|s| !s) {
        Some(v) => Err(format!("vertex `{}` is in no task", graph.vertices[v].id)),
        None => Ok(()),
    }
}

/// Fuses `graph` into tasks, in topological order.
pub fn chain(graph: &JobGraph) -> Vec<TaskSpec> {
    let mut task_of: Vec<Option<usize>> = vec![None; graph.vertices.len()];
    let mut chains: Vec<Vec<usize>> = Vec::new();
    for v in graph.topological_order() {
        // A chained vertex has exactly one input, from the tail of an
        // earlier chain (the producer has one output, so nothing else
        // follows it in that chain).
        let mut inputs = graph.inputs(v);
        let upstream = match (inputs.next(), inputs.next()) {
            (Some(edge), None) if is_chained(graph, edge) => task_of[edge.from],
            _ => None,
        };
        let task = match upstream {
            Some(task) => {
                chains[task].push(v);
                task
            }
            None => {
                chains.push(vec![v]);
                chains.len() - 1
            }
        };
        task_of[v] = Some(task);
    }
    chains
        .into_iter()
        .map(|vertices| {
            let id = vertices
                .iter()
                .map(|&v| graph.vertices[v].id.as_str())
                .collect::<Vec<_>>()
                .join("+");
            TaskSpec {
                id: TaskId(id),
                parallelism: graph.vertices[vertices[0]].parallelism,
                vertices,
            }
        })
        .collect()
}

/// The edges of `graph` that cross the boundaries of `tasks` (as returned
/// by [`chain`]), in the order of [`JobGraph::edges`].
pub fn task_edges(graph: &JobGraph, tasks: &[TaskSpec]) -> Vec<TaskEdge> {
    let mut task_of = vec![usize::MAX; graph.vertices.len()];
    for (t, task) in tasks.iter().enumerate() {
        for &v in &task.vertices {
            task_of[v] = t;
        }
    }
    graph
        .edges
        .iter()
        .enumerate()
        .filter(|(_, e)| !(task_of[e.from] == task_of[e.to] && is_chained(graph, e)))
        .map(|(k, e)| TaskEdge {
            edge: k,
            from_task: task_of[e.from],
            from_vertex: e.from,
            from_tag: e.from_tag.clone(),
            to_task: task_of[e.to],
            to_vertex: e.to,
            partitioner: e.partitioner.clone(),
        })
        .collect()
}
