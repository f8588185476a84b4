//! Validation of the edges and of the graph as a whole: unique ids and
//! sink paths, each edge's ends and partitioner, every operator and sink
//! reachable from a source, no cycles.

use super::*;

impl Builder {
    pub(super) fn unique_ids(&mut self, declared: &[Declared]) {
        let mut first: HashMap<&str, &str> = HashMap::new();
        for d in declared {
            if let Some(previous) = first.get(d.vertex.id.as_str()) {
                let message = format!(
                    "duplicate id {:?}: already used by {previous}; ids must be unique across sources, operators and sinks",
                    d.vertex.id.0
                );
                self.problem(format!("{}.id", d.label), message);
            } else {
                first.insert(d.vertex.id.as_str(), &d.label);
            }
        }
    }

    pub(super) fn unique_sink_paths(&mut self, declared: &[Declared]) {
        let mut first: HashMap<&Path, &str> = HashMap::new();
        for d in declared {
            if let VertexKind::Sink(SinkSpec::File(sink)) = &d.vertex.kind {
                if sink.path.as_os_str().is_empty() {
                    continue;
                }
                if let Some(previous) = first.get(sink.path.as_path()) {
                    let message = format!(
                        "{} is also written by {previous}; expected a distinct file per sink",
                        sink.path.display()
                    );
                    self.problem(format!("{}.path", d.label), message);
                } else {
                    first.insert(&sink.path, &d.label);
                }
            }
        }
    }

    /// Resolves and checks one edge; `None` when an endpoint is unusable.
    /// Problems are recorded.
    pub(super) fn edge(
        &mut self,
        i: usize,
        t: &EdgeTable,
        declared: &[Declared],
        index: &HashMap<&str, usize>,
    ) -> Option<JobEdge> {
        let producers = ids_with_role(declared, |k| !matches!(k, VertexKind::Sink(_)));
        let consumers = ids_with_role(declared, |k| !matches!(k, VertexKind::Source(_)));

        // from = "id" or "operator-id:tag"
        let (from_id, from_tag) = match t.from.split_once(':') {
            Some((id, tag)) => (id, Some(tag)),
            None => (t.from.as_str(), None),
        };
        let from = match index.get(from_id) {
            None => {
                self.problem(
                    format!("edge[{i}].from"),
                    format!(
                        "found {:?}, but there is no source or operator with id {from_id:?}; expected one of: {producers}",
                        t.from
                    ),
                );
                None
            }
            Some(&v) => match (&declared[v].vertex.kind, from_tag) {
                (VertexKind::Sink(_), _) => {
                    self.problem(
                        format!("edge[{i}].from"),
                        format!(
                            "found {:?}, which is a sink; sinks have no outputs (expected a source or operator: {producers})",
                            t.from
                        ),
                    );
                    None
                }
                (VertexKind::Source(_), Some(_)) => {
                    self.problem(
                        format!("edge[{i}].from"),
                        format!(
                            "found {:?}, but {from_id:?} is a source; only operators have side outputs (\"op:tag\")",
                            t.from
                        ),
                    );
                    None
                }
                (_, Some(tag)) if check_id(tag).is_err() => {
                    self.problem(
                        format!("edge[{i}].from"),
                        format!(
                            "found side-output tag {tag:?}; expected a tag matching [a-z0-9][a-z0-9_-]* (\"op:tag\")"
                        ),
                    );
                    None
                }
                _ => Some(v),
            },
        };
        let to = match index.get(t.to.as_str()) {
            None => {
                let hint = if t.to.contains(':') {
                    " (side-output tags belong in `from`)"
                } else {
                    ""
                };
                self.problem(
                    format!("edge[{i}].to"),
                    format!(
                        "found {:?}, but there is no operator or sink with that id{hint}; expected one of: {consumers}",
                        t.to
                    ),
                );
                None
            }
            Some(&v) if matches!(declared[v].vertex.kind, VertexKind::Source(_)) => {
                self.problem(
                    format!("edge[{i}].to"),
                    format!(
                        "found {:?}, which is a source; sources have no inputs (expected an operator or sink: {consumers})",
                        t.to
                    ),
                );
                None
            }
            Some(&v) => Some(v),
        };
        let (from, to) = (from?, to?);
        // A bad partition is recorded, and the edge still counts as the
        // consumer's input (no spurious "has no input"): the graph is
        // discarded anyway once there is a problem.
        let partitioner = self
            .partitioner(i, t, &declared[from], &declared[to])
            .unwrap_or(Partitioner::Rebalance);
        let input = self.input(i, t, &declared[to]);
        Some(JobEdge {
            input,
            from,
            from_tag: from_tag.map(str::to_owned),
            to,
            partitioner,
        })
    }

    /// The edge's partitioner: as given, or the default; checked against
    /// the consumer's key_by and both parallelisms.
    pub(super) fn partitioner(
        &mut self,
        i: usize,
        t: &EdgeTable,
        from: &Declared,
        to: &Declared,
    ) -> Option<Partitioner> {
        let key_by = match &to.vertex.kind {
            VertexKind::Operator(op) => op.key_by.clone(),
            VertexKind::Window(w) => Some(w.key_by.clone()),
            VertexKind::Join(j) => Some(j.key_by.clone()),
            _ => None,
        };
        let (p_from, p_to) = (from.vertex.parallelism, to.vertex.parallelism);
        let field = format!("edge[{i}].partition");
        match (t.partition, key_by) {
            (None | Some(PartitionName::Hash), Some(key)) => Some(Partitioner::Hash(key)),
            (Some(other), Some(key)) => {
                self.problem(
                    field,
                    format!(
                        "found {:?}, expected \"hash\" (or no partition): {} has key_by = \"{key}\", so every input edge must be hash-partitioned",
                        partition_str(other),
                        to.label
                    ),
                );
                None
            }
            (Some(PartitionName::Hash), None) => {
                self.problem(
                    field,
                    format!(
                        "found \"hash\", but {} has no key_by; expected \"forward\", \"rebalance\" or \"broadcast\", or set key_by on the consumer",
                        to.label
                    ),
                );
                None
            }
            (Some(PartitionName::Forward), None) if p_from != p_to => {
                self.problem(
                    field,
                    format!(
                        "found \"forward\", which needs equal parallelism, but {} has {p_from} and {} has {p_to}; expected \"rebalance\" or \"broadcast\", or equal parallelism",
                        from.label, to.label
                    ),
                );
                None
            }
            (Some(PartitionName::Forward), None) => Some(Partitioner::Forward),
            (Some(PartitionName::Rebalance), None) => Some(Partitioner::Rebalance),
            (Some(PartitionName::Broadcast), None) => Some(Partitioner::Broadcast),
            (None, None) if p_from == p_to => Some(Partitioner::Forward),
            (None, None) => Some(Partitioner::Rebalance),
        }
    }

    /// The edge's `input`: required into a join (left 0, right 1), optional
    /// into an operator (a module's `two-input`; default left), refused
    /// elsewhere.
    fn input(&mut self, i: usize, t: &EdgeTable, to: &Declared) -> u8 {
        let field = format!("edge[{i}].input");
        let is_join = matches!(to.vertex.kind, VertexKind::Join(_));
        let input = match &t.input {
            None if is_join => {
                self.problem(
                    field,
                    format!(
                        "missing; {} is a join: expected input = \"left\" or \"right\"",
                        to.label
                    ),
                );
                return 0;
            }
            None => return 0,
            Some(InputName::Index(0)) => 0,
            Some(InputName::Index(1)) => 1,
            Some(InputName::Name(n)) if n == "left" => 0,
            Some(InputName::Name(n)) if n == "right" => 1,
            Some(other) => {
                let found = match other {
                    InputName::Index(n) => n.to_string(),
                    InputName::Name(n) => format!("{n:?}"),
                };
                self.problem(
                    field,
                    format!("found {found}, expected \"left\" (or 0) or \"right\" (or 1)"),
                );
                return 0;
            }
        };
        if !matches!(
            to.vertex.kind,
            VertexKind::Join(_) | VertexKind::Operator(_)
        ) {
            self.problem(
                field,
                format!(
                    "{} has one input; only a join (`join = {{ … }}`) or an operator with a \
                     module that exports `two-input` has a left and a right",
                    to.label
                ),
            );
        }
        input
    }

    /// Operators and sinks need an input; a source or operator without an
    /// output is a warning (its records are dropped).
    pub(super) fn connectivity(&mut self, declared: &[Declared], edges: &[JobEdge]) {
        for (v, d) in declared.iter().enumerate() {
            let has_input = edges.iter().any(|e| e.to == v);
            let has_output = edges.iter().any(|e| e.from == v);
            match d.vertex.kind {
                VertexKind::Source(_) => {}
                VertexKind::Join(_) => {
                    for (input, name) in [(0, "left"), (1, "right")] {
                        if !edges.iter().any(|e| e.to == v && e.input == input) {
                            self.problem(
                                d.label.clone(),
                                format!(
                                    "a join has no {name} input; expected an [[edge]] with \
                                     to = {:?} and input = \"{name}\"",
                                    d.vertex.id.0
                                ),
                            );
                        }
                    }
                }
                VertexKind::Operator(_) | VertexKind::Window(_) | VertexKind::Sink(_)
                    if !has_input =>
                {
                    self.problem(
                        d.label.clone(),
                        format!(
                            "has no input; expected an [[edge]] with to = {:?}",
                            d.vertex.id.0
                        ),
                    );
                }
                _ => {}
            }
            if !has_output && !matches!(d.vertex.kind, VertexKind::Sink(_)) {
                self.warnings.push(Problem::new(
                    d.label.clone(),
                    format!(
                        "has no output: its records are dropped (no [[edge]] has from = {:?})",
                        d.vertex.id.0
                    ),
                ));
            }
        }
    }

    /// Reports each cycle (well, one per strongly connected tangle) by the
    /// ids on it.
    pub(super) fn cycles(
        &mut self,
        declared: &[Declared],
        edges: &[JobEdge],
        edge_positions: &[usize],
    ) {
        let pairs = edges.iter().map(|e| (e.from, e.to));
        let placed: BTreeSet<usize> = graph::topological_order(declared.len(), pairs.clone())
            .into_iter()
            .collect();
        let mut unplaced: BTreeSet<usize> = (0..declared.len())
            .filter(|v| !placed.contains(v))
            .collect();
        // Vertices left by Kahn's algorithm are on a cycle or downstream of
        // one. Walk back from any of them along unplaced predecessors until
        // a vertex repeats: that closes a cycle.
        while let Some(&start) = unplaced.first() {
            let mut path: Vec<usize> = vec![start];
            let mut edge_path: Vec<usize> = Vec::new();
            let cycle_start = loop {
                let v = *path.last().expect("path starts non-empty");
                let (k, e) = edges
                    .iter()
                    .enumerate()
                    .find(|(_, e)| e.to == v && unplaced.contains(&e.from))
                    .expect("an unplaced vertex has an unplaced predecessor");
                edge_path.push(k);
                if let Some(pos) = path.iter().position(|&u| u == e.from) {
                    break pos;
                }
                path.push(e.from);
            };
            // path[cycle_start..] walks the cycle backwards.
            let mut cycle: Vec<usize> = path[cycle_start..].to_vec();
            cycle.reverse();
            // Start at the vertex declared first, so the message is stable.
            let first = (0..cycle.len()).min_by_key(|&k| cycle[k]).unwrap_or(0);
            cycle.rotate_left(first);
            let mut cycle_edges: Vec<usize> = edge_path[cycle_start..]
                .iter()
                .map(|&k| edge_positions[k])
                .collect();
            cycle_edges.sort_unstable();
            let mut names: Vec<String> = cycle
                .iter()
                .map(|&v| format!("{:?}", declared[v].vertex.id.0))
                .collect();
            names.push(names[0].clone());
            let edge_names: Vec<String> =
                cycle_edges.iter().map(|k| format!("edge[{k}]")).collect();
            self.problem(
                "[[edge]]",
                format!(
                    "cycle {} (through {}); expected an acyclic graph",
                    names.join(" -> "),
                    edge_names.join(", ")
                ),
            );
            // Drop the cycle and everything downstream of it only.
            let mut stack = cycle.clone();
            while let Some(v) = stack.pop() {
                if unplaced.remove(&v) {
                    stack.extend(edges.iter().filter(|e| e.from == v).map(|e| e.to));
                }
            }
        }
    }
}
