//! `weir upgrade JOB --module OP=name@version` and `weir rescale JOB
//! OP=N`: upgrading a running job in place through the JobManager
//! (`POST /v1/jobs/{id}/upgrades`), waiting for the upgrade with its
//! progress on the terminal, and reporting the downtime and what was
//! migrated. The JobManager checks the new version before the job stops;
//! see `host/jobmanager/src/upgrade.rs` for the steps.

use std::collections::BTreeMap;

use super::*;
use weir_host::jobmanager::{UpgradePlan, UpgradeStatus, UpgradeView};

/// `weir upgrade`.
#[derive(Debug, Args)]
pub struct UpgradeArgs {
    /// The job's id.
    pub job: String,

    /// An operator's new module: `OP=name@version` (uploaded before), or
    /// `OP=path/to/op.wasm` (uploaded now, named after the file). Repeat
    /// for several operators.
    #[arg(long = "module", value_name = "OP=MODULE", value_parser = parse_module_change)]
    pub modules: Vec<(String, String)>,

    /// A change to the job's spec, as `weir run --set` takes it
    /// (`operator.count.parallelism=4`, `operator.count.config.emit=updates`).
    /// Sources and sinks keep their parallelism.
    #[arg(long, value_name = "KEY=VALUE")]
    pub set: Vec<String>,

    /// Upgrade even if the new version no longer declares a state the old
    /// one holds (it is dropped).
    #[arg(long)]
    pub allow_non_restored_state: bool,

    /// Only check: print what would change and be migrated (exit 0), or
    /// why it would be refused (exit 2); the job is not stopped. Modules
    /// given as files are uploaded all the same.
    #[arg(long)]
    pub dry_run: bool,

    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// `weir rescale`.
#[derive(Debug, Args)]
pub struct RescaleArgs {
    /// The job's id.
    pub job: String,

    /// An operator's new parallelism, `OP=N`; repeat for several.
    #[arg(value_name = "OP=N", value_parser = parse_parallelism)]
    pub operators: Vec<(String, u32)>,

    /// Every operator's new parallelism (sources and sinks keep theirs).
    #[arg(long, value_name = "N", conflicts_with = "operators")]
    pub parallelism: Option<u32>,

    /// Any other change, as `weir upgrade --set` takes it
    /// (`operator.count.parallelism=4`).
    #[arg(long, value_name = "KEY=VALUE")]
    pub set: Vec<String>,

    #[command(flatten)]
    pub connect: ConnectArgs,
}

fn parse_module_change(arg: &str) -> Result<(String, String), String> {
    match arg.split_once('=') {
        Some((op, module)) if !op.trim().is_empty() && !module.trim().is_empty() => {
            Ok((op.trim().to_owned(), module.trim().to_owned()))
        }
        _ => Err(format!(
            "expected OP=MODULE (like count=word-count@2 or count=target/count.wasm), found {arg:?}"
        )),
    }
}

fn parse_parallelism(arg: &str) -> Result<(String, u32), String> {
    let bad = || format!("expected OP=N with N ≥ 1 (like count=4), found {arg:?}");
    let (op, n) = arg.split_once('=').ok_or_else(bad)?;
    let n: u32 = n.trim().parse().map_err(|_| bad())?;
    if op.trim().is_empty() || n == 0 {
        return Err(bad());
    }
    Ok((op.trim().to_owned(), n))
}

pub(super) fn upgrade(args: UpgradeArgs) -> Result<(), Failure> {
    let rest = args.connect.rest()?;
    let mut modules = BTreeMap::new();
    for (op, module) in &args.modules {
        let reference = if is_module_path(module) {
            let path = Path::new(module);
            let (_, v) = rest.upload(path, &module_name_for(path), None, true)?;
            let m: ModuleInfo = decode(v, "module")?;
            if !args.connect.json {
                eprintln!("uploaded {} as {}@{}", path.display(), m.name, m.version);
            }
            format!("{}@{}", m.name, m.version)
        } else {
            module.clone()
        };
        modules.insert(op.clone(), reference);
    }
    let request = serde_json::json!({
        "modules": modules,
        "set": args.set,
        "allow_non_restored_state": args.allow_non_restored_state,
        "dry_run": args.dry_run,
    });
    if args.dry_run {
        let v = rest.post_json(
            &format!("/v1/jobs/{}/upgrades", path_segment(&args.job)),
            &request,
        )?;
        if args.connect.json {
            print_json(&v);
            return Ok(());
        }
        let plan: UpgradePlan = decode(v, "answer")?;
        println!("upgrade of job {} checked: it would go through", args.job);
        for change in &plan.changes {
            println!("{change}");
        }
        for m in &plan.migrated {
            println!(
                "operator `{}` state `{}`: would be migrated from version {} to {}",
                m.operator, m.state, m.from_version, m.to_version
            );
        }
        return Ok(());
    }
    run_upgrade(&rest, &args.job, &request, args.connect.json)
}

pub(super) fn rescale(args: RescaleArgs) -> Result<(), Failure> {
    let rest = args.connect.rest()?;
    let mut operators = args.operators.clone();
    if let Some(n) = args.parallelism {
        if n == 0 {
            return Err(Failure::refused(anyhow!(
                "--parallelism must be at least 1"
            )));
        }
        let v = rest.get(&format!("/v1/jobs/{}", path_segment(&args.job)))?;
        let job: JobDetail = decode(v, "job")?;
        operators.extend(
            job.vertices
                .iter()
                .filter(|v| v.role == "operator")
                .map(|v| (v.id.clone(), n)),
        );
    }
    let mut set: Vec<String> = operators
        .iter()
        .map(|(op, n)| format!("operator.{op}.parallelism={n}"))
        .collect();
    set.extend(args.set.iter().cloned());
    if set.is_empty() {
        return Err(Failure::refused(anyhow!(
            "nothing to rescale: give OP=N, --parallelism N or --set operator.OP.parallelism=N"
        )));
    }
    let request = serde_json::json!({ "set": set });
    run_upgrade(&rest, &args.job, &request, args.connect.json)
}

/// Starts the upgrade `request` of `job` and waits for its end.
fn run_upgrade(rest: &Rest, job: &str, request: &Value, json: bool) -> Result<(), Failure> {
    let v = rest.post_json(&format!("/v1/jobs/{}/upgrades", path_segment(job)), request)?;
    let view: UpgradeView = decode(v, "answer")?;
    if !json {
        for change in &view.changes {
            eprintln!("{change}");
        }
        for m in &view.migrated {
            eprintln!(
                "operator `{}` state `{}`: migrated from version {} to {}",
                m.operator, m.state, m.from_version, m.to_version
            );
        }
    }
    let view = wait(rest, job, view.id, !json)?;
    if json {
        print_json(&serde_json::to_value(&view).expect("a view serializes"));
    }
    match view.status {
        UpgradeStatus::Completed => {
            if !json {
                print!("{}", completed_report(job, &view));
            }
            Ok(())
        }
        UpgradeStatus::RolledBack => Err(Failure::failed(anyhow!(
            "upgrade {} of job {job} rolled back: {}",
            view.id,
            view.failure.as_deref().unwrap_or("no reason given")
        ))),
        _ => Err(Failure::failed(anyhow!(
            "upgrade {} of job {job} failed: {}",
            view.id,
            view.failure.as_deref().unwrap_or("no reason given")
        ))),
    }
}

/// What `weir upgrade` prints for a completed upgrade.
pub(super) fn completed_report(job: &str, view: &UpgradeView) -> String {
    let mut out = format!(
        "job {job} upgraded (upgrade {}): down for {} ms (from the savepoint's barrier to \
         every new subtask running); savepoint {}\n",
        view.id,
        view.downtime_ms.map_or("?".into(), |d| d.to_string()),
        view.savepoint
    );
    for m in &view.migrated {
        let _ = writeln!(
            out,
            "migrated operator `{}` state `{}`: {} entries, version {} → {}",
            m.operator, m.state, m.entries, m.from_version, m.to_version
        );
    }
    out
}

/// Polls job `job`'s upgrade `number` until it ends, showing its steps on
/// a terminal.
fn wait(rest: &Rest, job: &str, number: u32, show: bool) -> Result<UpgradeView, Failure> {
    let show = show && std::io::stderr().is_terminal();
    loop {
        let v = rest.get(&format!("/v1/jobs/{}/upgrades", path_segment(job)))?;
        let all: Vec<UpgradeView> = decode(v, "upgrade list")?;
        let Some(view) = all.into_iter().find(|u| u.id == number) else {
            return Err(Failure::failed(anyhow!(
                "the JobManager no longer knows upgrade {number} of job {job}"
            )));
        };
        if view.status.is_final() {
            if show {
                eprint!("\r\x1b[2K");
            }
            return Ok(view);
        }
        if show {
            let step = match view.status {
                UpgradeStatus::Stopping => "taking the savepoint",
                UpgradeStatus::Restoring => "restoring the new version",
                _ => "waiting for the new version's first checkpoint",
            };
            eprint!("\r\x1b[2Kupgrade: {step}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
