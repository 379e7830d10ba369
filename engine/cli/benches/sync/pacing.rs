//! The fairness measurement under each way of pacing ferry's writes to the super cluster:
//! none (`superWrites: unlimited`, the default), ferry's adaptive limit (`adaptive`), and none
//! in ferry but the API Priority and Fairness objects `ferry manifests` ships, applied to the
//! local super (ferry then runs as a restricted user: the harness's admin is exempt from
//! APF).

use std::path::Path;

use anyhow::{Context, Result};
use ferry_testkit::live::{install_rbac, Ferry, Identity, Settings, RBAC_USER};
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
    let level = if pacing.apf {
        install_rbac(ferry, &settings.policy, clusters).await?;
        settings.identity = Identity::Rbac;
        Some(apply_flow_control(&clusters.super_cluster).await?)
    } else {
        None
    };
    let log = format!("ferry-fairness-{}.log", pacing.name);
    let mut running = Ferry::start(ferry, dir, &settings, &log)?;
    running.ready().await?;
    // What earlier phases left is compared once at start: measured after.
    settle(&running).await?;
    let s = &clusters.super_cluster;
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
    if let Some(level) = level {
        let dispatched = dispatched_in(s, &level).await?;
        anyhow::ensure!(
            dispatched > 0.0,
            "the super dispatched no request in ferry's priority level `{level}`: is API \
             Priority and Fairness on there?"
        );
        println!(
            "fairness, apf: the super dispatched {dispatched} requests in ferry's level `{level}`"
        );
    }
    Ok(measured)
}

/// Requests the super has dispatched in priority level `level` (its own
/// `apiserver_flowcontrol_dispatched_requests_total`): none means the objects matched nothing,
/// and the APF figures would measure an unpaced ferry.
async fn dispatched_in(s: &Client, level: &str) -> Result<f64> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = s.request_text(request).await?;
    let schema = format!("priority_level=\"{level}\"");
    Ok(text
        .lines()
        .filter(|l| l.starts_with("apiserver_flowcontrol_dispatched_requests_total{"))
        .filter(|l| l.contains(&schema))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum())
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
            _ => {
                level = object["metadata"]["name"].as_str().map(String::from);
                "prioritylevelconfigurations"
            }
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
