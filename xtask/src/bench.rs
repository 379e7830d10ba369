//! `cargo xtask bench`: the benchmarks, each written to `target/bench/`, then printed beside
//! the last committed run of the same benchmark (`bench/*.json`), figure by figure, so that a
//! change that moves one is seen in the run that shows it. `--record` makes this run the
//! committed one (commit the file with the change it measures).

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::{cargo, controlplane};

/// `cargo xtask bench [--translate|--sync|--shard] [--record]`.
pub fn run(args: &[&str]) -> Result<()> {
    let record = args.contains(&"--record");
    let args: Vec<&str> = args.iter().copied().filter(|a| *a != "--record").collect();
    let all = args.is_empty();
    for a in &args {
        if !matches!(*a, "--translate" | "--sync" | "--shard") {
            bail!("bench: unknown option {a} (expected --translate, --sync, --shard or --record)");
        }
    }
    if all || args.contains(&"--translate") {
        println!("== bench --translate (release build; ratios to serde_json in the same run)");
        cargo(&["bench", "-q", "-p", "ferry-cli", "--bench", "translate"])?;
        beside_committed(("report.json", "translate.json"), record)?;
    }
    if all || args.contains(&"--sync") {
        println!("== bench --sync (release build; synced over direct writes to the same super API server)");
        // Control planes of its own: the tenants' etcd and API servers and the load generator
        // on CPU 0, the super cluster's (with its own etcd) and ferry on CPU 1.
        // What an earlier run wrote is not this run's.
        let _ = std::fs::remove_file(controlplane::root().join("target/bench/sync.json"));
        std::env::set_var("FERRY_PIN", "1");
        std::env::set_var("FERRY_BENCH_FERRY_CPUS", "1");
        clusters_up(false)?;
        cargo(&[
            "bench",
            "-q",
            "-p",
            "ferry-cli",
            "--bench",
            "sync",
            "--no-run",
        ])?;
        let status = Command::new("taskset")
            .args(["-c", "0"])
            .arg(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["bench", "-q", "-p", "ferry-cli", "--bench", "sync"])
            .current_dir(controlplane::root())
            .status()?;
        controlplane::down()?;
        if !status.success() {
            bail!("the sync benchmark failed ({status})");
        }
        beside_committed(("sync.json", "sync.json"), record)?;
    }
    if args.contains(&"--shard") {
        shard()?;
        beside_committed(("shard.json", "shard.json"), record)?;
    }
    Ok(())
}

/// Fresh control planes of the benchmarks' own (`target/clusters-bench`: a super and the
/// tenants team-a and team-b), with audit logs when `audit`.
fn clusters_up(audit: bool) -> Result<()> {
    let dir = controlplane::root().join("target/clusters-bench");
    std::env::set_var("FERRY_CLUSTERS_DIR", &dir);
    controlplane::down()?;
    controlplane::up(
        &[controlplane::DEFAULT_SUPER.to_string()],
        &["team-a".to_string(), "team-b".to_string()],
        audit,
    )
}

/// `cargo xtask bench --shard`: control planes of its own, with audit logs.
fn shard() -> Result<()> {
    println!(
        "== bench --shard (release build; replicas over many tenants on the local control planes)"
    );
    clusters_up(true)?;
    let result = cargo(&["bench", "-q", "-p", "ferry-cli", "--bench", "shard"]);
    controlplane::down()?;
    result
}

/// Prints the numbers of `target/bench/<now>` beside those of `bench/<committed>`; with
/// `record`, this run becomes the committed one.
fn beside_committed((now, committed): (&str, &str), record: bool) -> Result<()> {
    let root = controlplane::root();
    let now_path = root.join("target/bench").join(now);
    let committed_path = root.join("bench").join(committed);
    let read = |p: &Path| -> Result<Option<Value>> {
        match std::fs::read_to_string(p) {
            Ok(t) => Ok(Some(
                serde_json::from_str(&t).with_context(|| format!("{} is not JSON", p.display()))?,
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
        }
    };
    // A partial run (`FERRY_BENCH_ONLY`) prints its figures and writes no report.
    let Some(fresh) = read(&now_path)? else {
        println!("{} was not written (a partial run?)", now_path.display());
        return Ok(());
    };
    let last = read(&committed_path)?;
    match &last {
        Some(last) => {
            let commit = last["recorded"]["commit"].as_str().unwrap_or("unknown");
            println!(
                "{} (this run) beside {} (commit {commit}):",
                now_path.display(),
                committed_path.display()
            );
            for line in side_by_side(last, &fresh) {
                println!("  {line}");
            }
        }
        None => println!(
            "{} (no committed run at {} yet)",
            now_path.display(),
            committed_path.display()
        ),
    }
    if record {
        let mut recorded = fresh;
        recorded["recorded"] =
            json!({"commit": head_commit(), "from": format!("target/bench/{now}")});
        std::fs::create_dir_all(committed_path.parent().unwrap_or(&root))?;
        std::fs::write(
            &committed_path,
            serde_json::to_string_pretty(&recorded)? + "\n",
        )?;
        println!("recorded: {}", committed_path.display());
    }
    Ok(())
}

/// The numbers of both runs, one line each: `key  last  now  change`, keys as paths (`a.b`),
/// the targets and the record left out.
fn side_by_side(last: &Value, now: &Value) -> Vec<String> {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    numbers("", last, &mut a);
    numbers("", now, &mut b);
    let mut keys: Vec<&String> = b.iter().map(|(k, _)| k).collect();
    keys.extend(
        a.iter()
            .map(|(k, _)| k)
            .filter(|k| !b.iter().any(|(n, _)| n == *k)),
    );
    let find = |v: &[(String, f64)], k: &str| v.iter().find(|(n, _)| n == k).map(|(_, x)| *x);
    let width = keys.iter().map(|k| k.len()).max().unwrap_or(0);
    let show = |x: Option<f64>| {
        x.map_or("-".to_string(), |x| {
            format!("{x:.4}")
                .trim_end_matches('0')
                .trim_end_matches('.')
                .to_string()
        })
    };
    keys.into_iter()
        .map(|k| {
            let (was, is) = (find(&a, k), find(&b, k));
            let change = match (was, is) {
                (Some(w), Some(i)) if w != 0.0 => format!("{:+.1}%", (i / w - 1.0) * 100.0),
                _ => String::new(),
            };
            format!("{k:width$}  {:>12}  {:>12}  {change}", show(was), show(is))
        })
        .collect()
}

/// Every number in `value` with its path, leaving out `targets` and `recorded`.
fn numbers(path: &str, value: &Value, out: &mut Vec<(String, f64)>) {
    match value {
        Value::Number(n) => out.extend(n.as_f64().map(|x| (path.to_string(), x))),
        Value::Object(map) => {
            for (k, v) in map {
                if path.is_empty() && (k == "targets" || k == "recorded") {
                    continue;
                }
                let key = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                numbers(&key, v, out);
            }
        }
        _ => {}
    }
}

/// The commit measured (with `+dirty` when the tree has changes).
fn head_commit() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(controlplane::root())
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let commit = git(&["rev-parse", "--short", "HEAD"]);
    if git(&["status", "--porcelain", "--untracked-files=no"]).is_empty() {
        commit
    } else {
        format!("{commit}+dirty")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn numbers_side_by_side_with_their_change() {
        let last =
            json!({"a": 2.0, "b": {"c": 1}, "gone": 3, "targets": {"a": 1}, "recorded": {"n": 1}});
        let now = json!({"a": 3.0, "b": {"c": 1}, "new": 4, "note": "text"});
        let lines = super::side_by_side(&last, &now);
        let squeezed: Vec<String> = lines
            .iter()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        assert_eq!(
            squeezed,
            ["a 2 3 +50.0%", "b.c 1 1 +0.0%", "new - 4", "gone 3 -"]
        );
    }
}
