//! Placing a job's subtasks into task slots.
//!
//! Flink's slot sharing: subtask *i* of every task in one slot sharing group
//! runs in the group's slot *i*, so a group needs as many slots as its
//! largest parallelism and a job needs the sum over its groups. A slot thus
//! holds a whole pipeline slice (source → … → sink) and the chained and
//! forward-connected work of one slice stays in one process.
//!
//! Which TaskManager gives each slot is the [`Strategy`]:
//!
//! - [`Strategy::Spread`] (the default) takes every next slot from the
//!   TaskManager with the most free slots (ties: the lowest id), so a job's
//!   slots spread evenly and parallel subtasks use every machine.
//! - [`Strategy::Pack`] fills one TaskManager before taking from the next
//!   (lowest id first), leaving whole TaskManagers free for other jobs and
//!   keeping more exchanges in-process.
//!
//! Pure functions: no sockets, no clocks.

use std::collections::BTreeMap;

use weir_runtime::job::{JobGraph, TaskSpec};
use weir_runtime::rpc::SlotRef;

/// How slots are chosen among TaskManagers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// Even out the load: next slot from the TaskManager with the most free slots.
    #[default]
    Spread,
    /// Fill one TaskManager before the next.
    Pack,
}

impl std::str::FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "spread" => Ok(Strategy::Spread),
            "pack" => Ok(Strategy::Pack),
            other => Err(format!(
                "unknown scheduling strategy {other:?}: expected spread or pack"
            )),
        }
    }
}

/// The slot groups of a job: per group (in order of first appearance), the
/// number of slots it needs, and per task its group's index.
pub fn slot_groups(graph: &JobGraph, tasks: &[TaskSpec]) -> (Vec<u32>, Vec<usize>) {
    let mut names: Vec<&str> = Vec::new();
    let mut needs: Vec<u32> = Vec::new();
    let mut group_of = Vec::with_capacity(tasks.len());
    for task in tasks {
        let name = graph.vertices[task.head()].slot_sharing_group.as_str();
        let g = match names.iter().position(|n| *n == name) {
            Some(g) => g,
            None => {
                names.push(name);
                needs.push(0);
                names.len() - 1
            }
        };
        needs[g] = needs[g].max(task.parallelism);
        group_of.push(g);
    }
    (needs, group_of)
}

/// Slots a job needs.
pub fn slots_needed(graph: &JobGraph, tasks: &[TaskSpec]) -> u32 {
    slot_groups(graph, tasks).0.iter().sum()
}

/// Places every subtask. `free` maps each usable TaskManager to its free
/// slot indices (ascending). Errors when there are not enough free slots.
pub fn place(
    graph: &JobGraph,
    tasks: &[TaskSpec],
    free: &BTreeMap<String, Vec<u32>>,
    strategy: Strategy,
) -> Result<Vec<Vec<SlotRef>>, String> {
    let (needs, group_of) = slot_groups(graph, tasks);
    let needed: u32 = needs.iter().sum();
    let available: usize = free.values().map(Vec::len).sum();
    if (needed as usize) > available {
        return Err(format!(
            "job `{}` needs {needed} task slots and the cluster has {available} free \
             ({} TaskManager(s)); start more TaskManagers or give them more --slots",
            graph.name,
            free.len()
        ));
    }
    let mut remaining: Vec<(&String, std::collections::VecDeque<u32>)> = free
        .iter()
        .map(|(id, slots)| (id, slots.iter().copied().collect()))
        .collect();
    let mut take = || -> SlotRef {
        let pick = match strategy {
            Strategy::Spread => remaining
                .iter()
                .enumerate()
                .max_by(|(ia, a), (ib, b)| a.1.len().cmp(&b.1.len()).then(ib.cmp(ia)))
                .map(|(i, _)| i),
            Strategy::Pack => remaining.iter().position(|(_, s)| !s.is_empty()),
        }
        .expect("enough slots were checked");
        let (id, slots) = &mut remaining[pick];
        SlotRef {
            taskmanager: (*id).clone(),
            slot: slots
                .pop_front()
                .expect("picked a TaskManager with a free slot"),
        }
    };
    let group_slots: Vec<Vec<SlotRef>> = needs
        .iter()
        .map(|n| (0..*n).map(|_| take()).collect())
        .collect();
    Ok(tasks
        .iter()
        .zip(&group_of)
        .map(|(task, g)| group_slots[*g][..task.parallelism as usize].to_vec())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_runtime::job::{JobSpec, chain};

    fn graph(text: &str) -> JobGraph {
        JobGraph::from_spec(JobSpec::parse(text, "/tmp/job.toml", &[]).unwrap()).unwrap()
    }

    const WORDS: &str = r#"
        [job]
        name = "wc"
        parallelism = 4
        [[source]]
        id = "gen"
        type = "generator"
        kind = "words"
        count = 10
        [[operator]]
        id = "tok"
        module = "tok.wasm"
        [[operator]]
        id = "count"
        module = "count.wasm"
        key_by = "key"
        [[sink]]
        id = "out"
        type = "blackhole"
        parallelism = 1
        slot_sharing_group = "sinks"
        [[edge]]
        from = "gen"
        to = "tok"
        [[edge]]
        from = "tok"
        to = "count"
        partition = "hash"
        [[edge]]
        from = "count"
        to = "out"
        partition = "rebalance"
    "#;

    fn free(tms: &[(&str, u32)]) -> BTreeMap<String, Vec<u32>> {
        tms.iter()
            .map(|(id, n)| (id.to_string(), (0..*n).collect()))
            .collect()
    }

    #[test]
    fn groups_need_their_largest_parallelism() {
        let g = graph(WORDS);
        let tasks = chain(&g);
        assert_eq!(slots_needed(&g, &tasks), 5);
    }

    #[test]
    fn spread_alternates_and_subtask_i_of_a_group_shares_slot_i() {
        let g = graph(WORDS);
        let tasks = chain(&g);
        let p = place(&g, &tasks, &free(&[("a", 3), ("b", 3)]), Strategy::Spread).unwrap();
        let tms = |t: usize| -> Vec<&str> { p[t].iter().map(|s| s.taskmanager.as_str()).collect() };
        assert_eq!(tms(0), ["a", "b", "a", "b"]);
        // Same group: same slots as task 0.
        assert_eq!(p[1], p[0]);
        // The sink's own group takes the fifth slot, from the emptier TaskManager.
        assert_eq!(p[2].len(), 1);
        assert_eq!(
            p[2][0],
            SlotRef {
                taskmanager: "a".into(),
                slot: 2
            }
        );
    }

    #[test]
    fn pack_fills_one_taskmanager_first() {
        let g = graph(WORDS);
        let tasks = chain(&g);
        let p = place(&g, &tasks, &free(&[("a", 4), ("b", 4)]), Strategy::Pack).unwrap();
        assert!(p[0].iter().all(|s| s.taskmanager == "a"));
        assert_eq!(p[2][0].taskmanager, "b");
    }

    #[test]
    fn too_few_slots_is_an_error_naming_both_numbers() {
        let g = graph(WORDS);
        let tasks = chain(&g);
        let e = place(&g, &tasks, &free(&[("a", 2), ("b", 2)]), Strategy::Spread).unwrap_err();
        assert!(
            e.contains("needs 5 task slots") && e.contains("has 4 free"),
            "{e}"
        );
    }
}
