//! `ferry`: the command-line tool. Argument parsing and output only; the engine lives in
//! `ferry-core`.
//!
//! ```text
//!  argv ─▶ clap ─▶ translate | test | check | policy pin | schema init | rbac | manifests
//!                  | run | shard plan | completions
//!                     │
//!                     └─▶ ferry_core (policy, schema, translate, sandbox workers = this binary)
//! ```
//!
//! Exit codes: 0 ok; 1 usage or policy/schema/transform load error; 3 a document refused.

mod deploy;
mod documents;
mod test;
mod translate;

use std::io::IsTerminal;
use std::path::PathBuf;

use std::process::ExitCode;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};

/// Exit code for a refused document.
pub const EXIT_REFUSED: u8 = 3;

/// The hidden subcommand a transform worker runs as.
pub const WORKER_SUBCOMMAND: &str = "__sandbox-worker";

#[derive(Parser)]
#[command(
    name = "ferry",
    version,
    about = "Sync approved Kubernetes resources between tenant control planes and a super cluster"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print what ferry would write for the given objects (offline dry run).
    Translate(translate::Args),
    /// Run the test cases (`tests/*.yaml`) beside policies; exit 1 when one fails.
    Test(test::Args),
    /// Lint policies, schemas and transforms.
    Check {
        /// A policy file, or a directory of them.
        #[arg(long)]
        policy: PathBuf,
        /// Also check that every annotated field exists in the CRDs installed in this cluster.
        #[arg(long, value_name = "KUBECONFIG")]
        against: Option<PathBuf>,
    },
    /// Sync live: watch the super cluster and every tenant, and keep them in step.
    Run {
        /// The SyncConfig file.
        #[arg(long)]
        config: PathBuf,
        /// Elect a leader with a Lease in the super cluster (also `leaderElection.enabled`).
        #[arg(long)]
        leader_elect: bool,
        /// This replica's name in Leases, Events and User-Agents (default: the pod name, else
        /// hostname-pid); with sharding, each replica needs its own.
        #[arg(long)]
        identity: Option<String>,
        /// Log format.
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
        /// Log debug details too.
        #[arg(short, long)]
        verbose: bool,
    },
    /// Print the least-privilege ClusterRoles for the super and tenant sides (and, with
    /// --config, the Role reading tenantSecrets).
    Rbac {
        /// A policy file, or a directory of them (default: the policy of --config).
        #[arg(long, required_unless_present = "config")]
        policy: Option<PathBuf>,
        /// A SyncConfig: its policy, its tenantSecrets namespace and ferry's namespace (its
        /// leaderElection.namespace).
        #[arg(long)]
        config: Option<PathBuf>,
        /// ferry's own namespace: also print the Role holding its Lease there (with --config,
        /// the config's leaderElection.namespace).
        #[arg(long)]
        namespace: Option<String>,
    },
    /// Print the manifests that run ferry in its (first) super cluster, or what to apply in a
    /// tenant's cluster.
    Manifests {
        /// The SyncConfig.
        #[arg(long)]
        config: PathBuf,
        /// The container image.
        #[arg(long, default_value = concat!("ferry:", env!("CARGO_PKG_VERSION")))]
        image: String,
        /// Replicas (more than one turns leader election on).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=9))]
        replicas: u32,
        /// Print what to apply in this tenant's cluster instead.
        #[arg(long)]
        tenant: Option<String>,
        /// A namespace allowed to reach ferry's metrics port (where Prometheus runs);
        /// repeatable. Without one, the NetworkPolicy lets only the kubelet's probes in.
        #[arg(long = "metrics-namespace", value_name = "NAMESPACE")]
        metrics_namespaces: Vec<String>,
    },
    /// Sharding across replicas.
    Shard {
        #[command(subcommand)]
        command: ShardCommand,
    },
    /// Policy maintenance.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Schema helpers.
    Schema {
        #[command(subcommand)]
        command: SchemaCommand,
    },
    /// Print shell completions.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Serve transform calls on stdin/stdout (started by ferry itself).
    #[command(name = WORKER_SUBCOMMAND, hide = true)]
    SandboxWorker,
}

#[derive(Subcommand)]
enum ShardCommand {
    /// Print which member syncs each tenant of a SyncConfig (`tenant owner` lines, then the
    /// count per member), offline: rendezvous hashing, as `ferry run` does.
    Plan {
        /// The SyncConfig.
        #[arg(long)]
        config: PathBuf,
        /// The members' identities, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        members: Vec<String>,
    },
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Rewrite the sha256 pins of every transform in place, printing what changed.
    Pin {
        /// A policy file, or a directory of them.
        policy: PathBuf,
    },
}

#[derive(Subcommand)]
enum SchemaCommand {
    /// Print an annotation overlay skeleton for a CRD.
    Init {
        /// The CRD manifest (`-` for stdin).
        #[arg(short = 'f', long = "filename")]
        file: String,
    },
}

/// Log format of `ferry run`.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    /// One readable line per event.
    Text,
    /// One JSON object per line.
    Json,
}

/// Output format.
#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub enum Output {
    /// YAML documents separated by `---`.
    #[default]
    Yaml,
    /// JSON (one object, or a List of several).
    Json,
}

/// Reports an error on stderr, the one way the command line does (`error: …`); the exit code.
fn fail(e: &dyn std::fmt::Display) -> u8 {
    eprintln!("error: {e}");
    1
}

/// jemalloc, not the C library's allocator: less memory per synced object and less CPU
/// (docs/decisions.md, "jemalloc is the global allocator"). The image, static with musl,
/// uses it too in place of musl's. Transform workers, this binary too, are told to give
/// freed memory back at once (`sandbox/pool.rs`): their memory limit is set from their
/// address space.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 1 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => ExitCode::from(fail(&format!("{e:#}"))),
    }
}

fn run(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Translate(args) => translate::run(args),
        Command::Test(args) => test::run(args),
        Command::Check { policy, against } => check(&policy, against.as_deref()),
        Command::Run {
            config,
            leader_elect,
            identity,
            log_format,
            verbose,
        } => live(config, (leader_elect, identity), log_format, verbose),
        Command::Shard {
            command: ShardCommand::Plan { config, members },
        } => shard_plan(&config, &members),
        Command::Rbac {
            policy,
            config,
            namespace,
        } => deploy::rbac(policy.as_deref(), config.as_deref(), namespace.as_deref()),
        Command::Manifests {
            config,
            image,
            replicas,
            tenant,
            metrics_namespaces,
        } => {
            let options = ferry_core::manifests::Options {
                image,
                replicas,
                metrics_namespaces,
            };
            deploy::manifests(&config, options, tenant.as_deref())
        }
        Command::Policy {
            command: PolicyCommand::Pin { policy },
        } => pin(&policy),
        Command::Schema {
            command: SchemaCommand::Init { file },
        } => schema_init(&file),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "ferry", &mut std::io::stdout());
            Ok(0)
        }
        Command::SandboxWorker => {
            ferry_core::sandbox::worker::serve()?;
            Ok(0)
        }
    }
}

fn check(policy_path: &std::path::Path, against: Option<&std::path::Path>) -> anyhow::Result<u8> {
    let policy = match ferry_core::policy::load(policy_path) {
        Ok(p) => p,
        Err(e) => {
            return Ok(fail(&e));
        }
    };
    let warnings = ferry_core::check::warnings(&policy);
    for w in &warnings {
        eprintln!("warning: {}: {}", w.at, w.message);
    }
    if let Some(kubeconfig) = against {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let mismatches = runtime.block_on(async {
            let client = ferry_sync::against::connect(kubeconfig).await?;
            ferry_sync::against::check(&policy, client).await
        });
        match mismatches {
            Ok(m) if m.is_empty() => {
                println!(
                    "{}: every annotated field exists in the cluster's CRDs",
                    kubeconfig.display()
                );
            }
            Ok(m) => {
                for mismatch in &m {
                    eprintln!("error: {}: {}", mismatch.at, mismatch.message);
                }
                eprintln!("{} mismatch(es) against {}", m.len(), kubeconfig.display());
                return Ok(1);
            }
            Err(e) => {
                return Ok(fail(&e));
            }
        }
    }
    println!(
        "{}: {} kind(s), {} transform(s), {} warning(s)",
        policy_path.display(),
        policy.resources.len(),
        policy.transforms.len(),
        warnings.len()
    );
    Ok(0)
}

fn pin(policy: &std::path::Path) -> anyhow::Result<u8> {
    let changes = match ferry_core::policy::pin::pin(policy) {
        Ok(c) => c,
        Err(e) => {
            return Ok(fail(&e));
        }
    };
    if changes.is_empty() {
        println!("{}: no transforms to pin", policy.display());
    }
    for c in &changes {
        if c.changed() {
            println!(
                "{}: {}: sha256 {} -> {}",
                c.policy.display(),
                c.name,
                c.before.as_deref().unwrap_or("(none)"),
                c.after
            );
        } else {
            println!(
                "{}: {}: unchanged ({})",
                c.policy.display(),
                c.name,
                c.after
            );
        }
    }
    Ok(0)
}

fn schema_init(file: &str) -> anyhow::Result<u8> {
    let docs = documents::read(file)?;
    let crds: Vec<_> = docs
        .iter()
        .filter(|d| {
            d.value.get("kind").and_then(|k| k.as_str()) == Some("CustomResourceDefinition")
        })
        .collect();
    if crds.is_empty() {
        eprintln!("error: {file}: expected a CustomResourceDefinition, found none");
        return Ok(1);
    }
    let mut out = Vec::new();
    for crd in crds {
        match ferry_core::scaffold::skeleton(&crd.value) {
            Ok(text) => out.push(text),
            Err(e) => {
                eprintln!("error: {}: {e}", crd.label);
                return Ok(1);
            }
        }
    }
    print!("{}", out.join("---\n"));
    Ok(0)
}

/// `ferry shard plan`.
fn shard_plan(config: &std::path::Path, members: &[String]) -> anyhow::Result<u8> {
    let config = ferry_core::config::load(config)?;
    for m in members {
        if let Some(why) = ferry_core::shard::identity_problem(m) {
            anyhow::bail!("--members: member {m:?}: {why}");
        }
    }
    let tenants: Vec<String> = config
        .tenants
        .iter()
        .map(|t| t.name.as_str().to_string())
        .collect();
    let members: Vec<&str> = members.iter().map(String::as_str).collect();
    let plan = ferry_core::shard::plan(&tenants, &members);
    let mut out = String::new();
    for (tenant, owner) in &plan {
        out.push_str(&format!("{tenant} {owner}\n"));
    }
    let mut seen = std::collections::BTreeSet::new();
    for m in members.iter().filter(|m| seen.insert(**m)) {
        let n = plan.iter().filter(|(_, o)| o == m).count();
        out.push_str(&format!("# {m}: {n} of {} tenants\n", plan.len()));
    }
    print!("{out}");
    Ok(0)
}

fn live(
    config: PathBuf,
    (leader_elect, identity): (bool, Option<String>),
    format: LogFormat,
    verbose: bool,
) -> anyhow::Result<u8> {
    let level = if verbose {
        tracing::Level::DEBUG
    } else {
        tracing::Level::INFO
    };
    // Debug lines of the HTTP and client libraries drown ferry's own; they stay at info.
    let filter = tracing_subscriber::filter::Targets::new()
        .with_default(tracing::Level::INFO)
        .with_target("ferry_sync", level);
    let stderr = std::io::stderr;
    match format {
        LogFormat::Text => tracing_subscriber::fmt()
            .with_max_level(level)
            .with_target(false)
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(stderr)
            .finish()
            .with(filter)
            .init(),
        LogFormat::Json => tracing_subscriber::fmt()
            .json()
            .with_max_level(level)
            .with_writer(stderr)
            .finish()
            .with(filter)
            .init(),
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let options = ferry_sync::run::Options {
        config,
        leader_elect,
        identity,
        sandbox: translate::sandbox()?,
    };
    match runtime.block_on(ferry_sync::run::run(options)) {
        Ok(()) => Ok(0),
        Err(e) => Ok(fail(&e)),
    }
}
