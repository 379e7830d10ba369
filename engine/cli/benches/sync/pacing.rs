//! The fairness measurement under each way of pacing ferry's writes to the super cluster:
//! none (`superWrites: unlimited`, the default), ferry's adaptive limit (`adaptive`), and none
//! in ferry but the API Priority and Fairness objects `ferry manifests` ships, applied to the
//! local super (ferry then runs as a restricted user: the harness's admin is exempt from
//! APF).

use std::path::Path;

use anyhow::{Context, Result};
use ferry_testkit::live::{install_rbac, sum_metric, Ferry, Identity, Settings, RBAC_USER};
use ferry_testkit::Clusters;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};

use crate::fairness::{fairness, Fairness};
use crate::load::settle;

/// One way of pacing: its name, `superWrites`, and whether APF holds ferry's requests.
pub struct Pacing {
    pub name: &'static str,
    writes: &'static str,
    apf: bool,
}

/// The ways compared, the default first.
pub const PACINGS: [Pacing; 3] = [
    Pacing {
        name: "unlimited",
        writes: "unlimited",
        apf: false,
    },
    Pacing {
        name: "adaptive",
        writes: "adaptive",
        apf: false,
    },
    Pacing {
        name: "apf",
        writes: "unlimited",
        apf: true,
    },
];

/// Runs a ferry paced as `pacing` (the binary `ferry`, in `dir`) and measures fairness with
/// it; the APF objects are applied first when it wants them (and stay: ferry's user matches
/// them only under `Identity::Rbac`).
pub async fn fairness_paced(
    (ferry, dir): (&Path, &Path),
    settings: &Settings,
    clusters: &Clusters,
    pacing: &Pacing,
) -> Result<Fairness> {
    let mut settings = settings.clone();
    settings
        .spec
        .insert("superWrites".into(), json!(pacing.writes));
    let s = &clusters.super_cluster;
    let level = if pacing.apf {
        install_rbac(ferry, &settings.policy, clusters).await?;
        settings.identity = Identity::Rbac;
        Some(apply_flow_control(s).await?)
    } else {
        None
    };
    let log = format!("ferry-fairness-{}.log", pacing.name);
    let mut running = Ferry::start(ferry, dir, &settings, &log)?;
    running.ready().await?;
    // What earlier phases left is compared once at start: measured after.
    settle(&running).await?;
    let before = match &level {
        Some(level) => Some(Level::now(s, level).await?),
        None => None,
    };
    let measured = fairness(
        &running,
        clusters.tenant("team-a"),
        clusters.tenant("team-b"),
        s,
    )
    .await
    .with_context(|| format!("fairness, {}", pacing.name))?;
    settle(&running).await?;
    running.stop()?;
    if let (Some(level), Some(before)) = (&level, before) {
        let after = Level::now(s, level).await?;
        anyhow::ensure!(
            after.dispatched > before.dispatched,
            "the super dispatched no request in ferry's priority level `{level}`: is API \
             Priority and Fairness on there?"
        );
        println!("fairness, apf: {}", after.since(&before));
    }
    Ok(measured)
}

/// What the super's API Priority and Fairness says of one priority level (its own
/// `apiserver_flowcontrol_*` metrics): requests dispatched there (none means the objects
/// matched nothing, and the APF figures would measure an unpaced ferry), their time queued and
/// executing, and the seats executing when read.
struct Level {
    name: String,
    dispatched: f64,
    waited: (f64, f64),
    executed: (f64, f64),
    executing_seats: f64,
    nominal_seats: f64,
}

impl Level {
    async fn now(s: &Client, name: &str) -> Result<Self> {
        let request = http::Request::get("/metrics").body(Vec::new())?;
        let text = s.request_text(request).await?;
        let of = |metric: &str| sum_metric(&text, metric, &[("priority_level", name)]);
        let time = |metric: &str| (of(&format!("{metric}_sum")), of(&format!("{metric}_count")));
        Ok(Self {
            name: name.to_string(),
            dispatched: of("apiserver_flowcontrol_dispatched_requests_total"),
            waited: time("apiserver_flowcontrol_request_wait_duration_seconds"),
            executed: time("apiserver_flowcontrol_request_execution_seconds"),
            executing_seats: of("apiserver_flowcontrol_current_executing_seats"),
            nominal_seats: of("apiserver_flowcontrol_nominal_limit_seats"),
        })
    }

    /// What happened in the level between `before` and now, for the report.
    fn since(&self, before: &Level) -> String {
        let mean =
            |now: (f64, f64), then: (f64, f64)| (now.0 - then.0) / (now.1 - then.1).max(1.0) * 1e3;
        format!(
            "the super dispatched {} of ferry's requests in its level `{}` ({} seats), queued \
             {:.1} ms and executing {:.1} ms on average; {} seats were executing there when the \
             measurement started",
            self.dispatched - before.dispatched,
            self.name,
            self.nominal_seats,
            mean(self.waited, before.waited),
            mean(self.executed, before.executed),
            before.executing_seats,
        )
    }
}

/// Applies the PriorityLevelConfiguration and FlowSchemas of `ferry manifests` to the super,
/// their subject the restricted user the benchmark's ferry runs as; returns the priority
/// level's name.
async fn apply_flow_control(s: &Client) -> Result<String> {
    let subject = json!({"kind": "User", "user": {"name": RBAC_USER}});
    let mut level = None;
    for object in ferry_core::manifests::flow_control(subject) {
        let kind = object["kind"].as_str().unwrap_or_default();
        let plural = match kind {
            "FlowSchema" => "flowschemas",
            "PriorityLevelConfiguration" => {
                level = object["metadata"]["name"].as_str().map(String::from);
                "prioritylevelconfigurations"
            }
            other => anyhow::bail!("`ferry manifests` gives a {other} among its APF objects"),
        };
        let gvk = GroupVersionKind::gvk("flowcontrol.apiserver.k8s.io", "v1", kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
        let api: Api<DynamicObject> = Api::all_with(s.clone(), &resource);
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        api.patch(
            name,
            &PatchParams::apply("ferry-bench").force(),
            &Patch::Apply(&object),
        )
        .await
        .with_context(|| format!("applying {kind} {name}"))?;
    }
    level.context("`ferry manifests` gives no PriorityLevelConfiguration")
}

/// One pacing's figures in the report.
pub fn report(m: &Fairness) -> Value {
    json!({
        "fairness_ratio": m.loaded.p99[0] / m.idle.p99[0],
        "quiet_p99_ms": {"idle": m.idle.p99[0], "loaded": m.loaded.p99[0]},
        "fairness_noisy_throughput_ratio": m.noisy_with_quiet / m.noisy_alone,
        "noisy_creates_per_second": {"alone": m.noisy_alone, "beside_quiet": m.noisy_with_quiet},
    })
}
