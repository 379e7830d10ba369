//! The demo's produced object: cert-manager (played by the demo) writes the Secret a
//! Certificate of team-a names in its super namespace, and ferry copies it up, read-only.

use std::time::Instant;

use anyhow::Result;
use kube::Client;
use serde_json::json;

use super::report::{item, ms, Row};
use super::{appears, apply, NS};

/// Certificate `NS/storefront` of team-a (`a`) and the Secret it names, written in the
/// super cluster (`s`).
pub async fn certificate_secret(a: &Client, s: &Client, rows: &mut Vec<Row>) -> Result<()> {
    let cm = "cert-manager.io/v1";
    apply(a, "ferry-demo", json!({"apiVersion": cm, "kind": "Certificate", "metadata": {"name": "storefront", "namespace": NS}, "spec": {"secretName": "storefront-tls", "dnsNames": ["shop.team-a.apps.example.com"], "issuerRef": {"name": "ca", "kind": "Issuer"}}})).await?;
    println!("    team-a: Certificate {NS}/storefront (spec.secretName: storefront-tls)");
    let super_ns = format!("team-a-{NS}");
    appears(
        s,
        cm,
        "Certificate",
        &super_ns,
        "storefront",
        Instant::now(),
        |_| true,
    )
    .await?;
    let t0 = Instant::now();
    apply(s, "cert-manager", json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": {"name": "storefront-tls", "namespace": super_ns}, "stringData": {"tls.crt": "-----BEGIN CERTIFICATE-----", "tls.key": "-----BEGIN PRIVATE KEY-----"}})).await?;
    println!("    super: cert-manager writes Secret {super_ns}/storefront-tls");
    let (copy, d) = appears(a, "v1", "Secret", NS, "storefront-tls", t0, |o| {
        o["metadata"]["labels"]["ferry.dev/from-super"] == "true"
    })
    .await?;
    let produced_for = copy["metadata"]["annotations"]["ferry.dev/produced-for"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    item(&format!(
        "team-a sees Secret {NS}/storefront-tls in {} (read-only copy, ferry.dev/produced-for={produced_for})",
        ms(d)
    ));
    rows.push(Row {
        tenant: "team-a",
        object: format!("Secret {NS}/storefront-tls"),
        super_object: format!("{super_ns}/storefront-tls"),
        outcome: "produced".into(),
        latency: Some(d),
    });
    Ok(())
}
