//! Operating a fleet (DESIGN.md "Sharding across replicas"): the alerts of `ferry manifests`
//! as a Prometheus Operator `PrometheusRule`, and a Grafana dashboard in a ConfigMap (the
//! label Grafana's sidecar looks for). Every query names only metrics ferry serves (a test
//! checks), and `promtool test rules` runs the alerts against series in `cargo xtask test`.

use serde_json::{json, Value};

use super::meta;

/// One alert: name, expression, how long it must hold, severity, and what to do.
struct Alert {
    name: &'static str,
    expr: &'static str,
    hold: &'static str,
    severity: &'static str,
    summary: &'static str,
    action: &'static str,
}

const ALERTS: &[Alert] = &[
    Alert {
        name: "FerryAbsent",
        expr: "absent(ferry_leader)",
        hold: "5m",
        severity: "critical",
        summary: "no ferry replica is scraped: nothing syncs, and no other alert of ferry can fire",
        action: "Check ferry's pods (kubectl -n <ferry namespace> get pods), the ServiceMonitor and the NetworkPolicy's --metrics-namespace.",
    },
    Alert {
        name: "FerryTenantsUnowned",
        expr: "max(ferry_tenants_unowned) > 0",
        hold: "5m",
        severity: "critical",
        summary: "{{ $value }} tenants have had no live owner for over two lease durations",
        action: "Check that ferry's replicas are running and renewing their membership Leases (kubectl -n <ferry namespace> get leases); a tenant nobody owns is not synced.",
    },
    Alert {
        name: "FerryMembershipRenewFailing",
        expr: "ferry_shard_member == 0",
        hold: "2m",
        severity: "critical",
        summary: "replica {{ $labels.pod }} cannot renew its membership Lease; it writes nothing",
        action: "The replica's requests to the first super cluster fail or are too slow: look at its log and the API server's health; its tenants move to the others after one lease duration.",
    },
    Alert {
        name: "FerryClusterUnreachable",
        expr: "ferry_cluster_reachable == 0",
        hold: "5m",
        severity: "warning",
        summary: "cluster {{ $labels.cluster }} has not answered ferry for 5 minutes",
        action: "A tenant (or super) API server is down or hung: its objects are not synced until it answers; the other tenants are not affected.",
    },
    Alert {
        name: "FerryRefusalsRising",
        expr: "sum by (tenant, reason) (increase(ferry_refusals_total[15m])) > 10",
        hold: "15m",
        severity: "warning",
        summary: "tenant {{ $labels.tenant }}: {{ $value }} objects refused ({{ $labels.reason }}) in 15 minutes",
        action: "Read the Events on the tenant's objects (kubectl get events --field-selector reason=<reason>); the tenant writes what the policy does not allow, or the policy lacks a kind.",
    },
    Alert {
        name: "FerrySyncLatencyHigh",
        expr: "histogram_quantile(0.99, sum by (le) (rate(ferry_sync_latency_seconds_bucket[5m]))) > 10",
        hold: "15m",
        severity: "warning",
        summary: "99% of syncs take up to {{ $value }}s",
        action: "Look at ferry_queue_depth by tenant (one noisy tenant?) and ferry_request_seconds by cluster (a slow API server?); add replicas if every replica is busy.",
    },
];

/// The alert rules, as Prometheus reads them (`groups:`).
pub fn rule_groups() -> Value {
    let rules: Vec<Value> = ALERTS
        .iter()
        .map(|a| {
            json!({
                "alert": a.name,
                "expr": a.expr,
                "for": a.hold,
                "labels": {"severity": a.severity},
                "annotations": {"summary": a.summary, "description": a.action},
            })
        })
        .collect();
    json!({"groups": [{"name": "ferry", "rules": rules}]})
}

/// The `PrometheusRule` in `namespace`.
pub(super) fn prometheus_rule(namespace: &str) -> Value {
    json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": meta("ferry", Some(namespace)),
        "spec": rule_groups(),
    })
}

/// The `ServiceMonitor` scraping the metrics Service in `namespace` (Prometheus Operator).
pub(super) fn service_monitor(namespace: &str) -> Value {
    json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": meta("ferry", Some(namespace)),
        "spec": {
            "selector": {"matchLabels": super::labels()},
            "endpoints": [{"port": "metrics", "interval": "30s"}],
        },
    })
}

/// One dashboard panel: title, queries (legend, expression), unit.
fn panel(id: u32, title: &str, queries: &[(&str, &str)], unit: &str) -> Value {
    let targets: Vec<Value> = queries
        .iter()
        .enumerate()
        .map(|(i, (legend, expr))| {
            json!({"refId": ((b'A' + i as u8) as char).to_string(), "expr": expr, "legendFormat": legend})
        })
        .collect();
    let (x, y) = ((id - 1) % 2 * 12, (id - 1) / 2 * 8);
    json!({
        "id": id,
        "type": "timeseries",
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": targets,
    })
}

/// The dashboard's panels.
fn panels() -> Vec<Value> {
    vec![
        panel(1, "Tenants owned per replica", &[("{{pod}}", "ferry_tenants_owned"), ("unowned", "max(ferry_tenants_unowned)")], "short"),
        panel(2, "Tenant moves", &[("{{reason}}", "sum by (reason) (increase(ferry_shard_moves_total[5m]))")], "short"),
        panel(3, "Sync latency", &[("p50", "histogram_quantile(0.5, sum by (le) (rate(ferry_sync_latency_seconds_bucket[5m])))"), ("p99", "histogram_quantile(0.99, sum by (le) (rate(ferry_sync_latency_seconds_bucket[5m])))")], "s"),
        panel(4, "Hand-over time (p90)", &[("p90", "histogram_quantile(0.9, sum by (le) (rate(ferry_tenant_handover_seconds_bucket[15m])))")], "s"),
        panel(5, "Writes by cluster", &[("{{cluster}} {{verb}}", "sum by (cluster, verb) (rate(ferry_writes_total[5m]))")], "ops"),
        panel(6, "Refusals by tenant and reason", &[("{{tenant}} {{reason}}", "sum by (tenant, reason) (increase(ferry_refusals_total[15m]))")], "short"),
        panel(7, "Queue depth by tenant", &[("{{tenant}}", "sum by (tenant) (ferry_queue_depth)")], "short"),
        panel(8, "Clusters answering", &[("{{cluster}}", "min by (cluster) (ferry_cluster_reachable)"), ("member {{pod}}", "ferry_shard_member")], "short"),
    ]
}

/// The Grafana dashboard (JSON model).
pub fn dashboard() -> Value {
    json!({
        "title": "ferry",
        "uid": "ferry",
        "tags": ["ferry"],
        "timezone": "browser",
        "schemaVersion": 39,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Data source"}]},
        "panels": panels(),
    })
}

/// The dashboard in a ConfigMap of `namespace` (label `grafana_dashboard: "1"`).
pub(super) fn dashboard_config_map(namespace: &str) -> Value {
    let mut metadata = meta("ferry-dashboard", Some(namespace));
    metadata["labels"]["grafana_dashboard"] = json!("1");
    let text = serde_json::to_string_pretty(&dashboard()).unwrap_or_default();
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "data": {"ferry.json": text},
    })
}

/// Every query of the alerts and the dashboard.
pub fn queries() -> Vec<String> {
    let mut out: Vec<String> = ALERTS.iter().map(|a| a.expr.to_string()).collect();
    for p in panels() {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.extend(t["expr"].as_str().map(str::to_string));
        }
    }
    out
}
