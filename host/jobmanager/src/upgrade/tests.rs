//! Tests of [`super`] (`upgrade.rs`): the checks before anything stops,
//! and which states a new version migrates.

use super::*;
use crate::savepoints::tests::graph_with as graph;
use weir_runtime::state::StateKind;

fn states(declared: &[(&str, StateKind)]) -> HashMap<usize, Vec<StateDescriptor>> {
    HashMap::from([(
        1,
        declared
            .iter()
            .map(|(n, k)| StateDescriptor::new(*n, *k))
            .collect(),
    )])
}

#[test]
fn an_upgrade_is_checked_against_what_runs_before_anything_stops() {
    let old = states(&[("count", StateKind::Value), ("seen", StateKind::Map)]);
    let check = |new_graph: JobGraph, new: &[(&str, StateKind)], allow| {
        check_upgrade(&graph(2, 2, 128), &old, &new_graph, &states(new), allow)
    };
    let same = [("count", StateKind::Value), ("seen", StateKind::Map)];
    check(graph(2, 2, 128), &same, false).unwrap();
    // Keyed operators rescale; a new state starts empty.
    let more = [
        ("count", StateKind::Value),
        ("seen", StateKind::Map),
        ("new", StateKind::List),
    ];
    check(graph(2, 4, 128), &more, false).unwrap();

    let err = check(
        graph(2, 2, 128),
        &[("count", StateKind::List), ("seen", StateKind::Map)],
        true,
    )
    .unwrap_err();
    assert!(
        err.contains("operator `count` state `count` is value state")
            && err.contains("as list state"),
        "{err}"
    );
    let err = check(graph(2, 2, 128), &[("count", StateKind::Value)], false).unwrap_err();
    assert!(
        err.contains("operator `count` state `seen`") && err.contains("--allow-non-restored-state"),
        "{err}"
    );
    check(graph(2, 2, 128), &[("count", StateKind::Value)], true).unwrap();
    let err = check(graph(3, 2, 128), &same, false).unwrap_err();
    assert!(err.contains("source `src`"), "{err}");
    let err = check(graph(2, 2, 64), &same, false).unwrap_err();
    assert!(err.contains("max_parallelism"), "{err}");
    let mut without = graph(2, 2, 128);
    without.settings.checkpoints = None;
    let err = check(without, &same, false).unwrap_err();
    assert!(err.contains("takes no checkpoints"), "{err}");
}

#[test]
fn only_a_changed_module_that_exports_migration_migrates_the_states_both_declare() {
    let g = graph(2, 2, 128);
    let module = |hash: &str, version: &str| RunningModule {
        operator: "count".into(),
        module: format!("m@{version}"),
        hash: hash.into(),
        version: version.into(),
    };
    let old = states(&[("count", StateKind::Value), ("gone", StateKind::Value)]);
    let new = states(&[("count", StateKind::Value), ("fresh", StateKind::Value)]);
    let can = HashSet::from(["h2".to_owned()]);
    let found = migrations(
        &[module("h1", "1.0")],
        &[module("h2", "2.0")],
        &g,
        &old,
        &g,
        &new,
        &can,
    );
    assert_eq!(
        found.get("count"),
        Some(&MigrationDeploy {
            from_version: "1.0".into(),
            states: vec!["count".into()],
        })
    );
    // The same version, or a module without `migration`: bytes as they are.
    let same_version = [module("h2", "1.0")];
    let none = migrations(
        &[module("h1", "1.0")],
        &same_version,
        &g,
        &old,
        &g,
        &new,
        &can,
    );
    assert!(none.is_empty());
    let cannot = migrations(
        &[module("h1", "1.0")],
        &[module("h3", "2.0")],
        &g,
        &old,
        &g,
        &new,
        &can,
    );
    assert!(cannot.is_empty());
}
