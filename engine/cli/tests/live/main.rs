//! End-to-end tests of `ferry run` on the local control planes (super + team-a + team-b),
//! each in fresh namespaces, one file per group of scenarios. A scenario is registered where
//! it is written (`live!`): most run twice, as the harness's admin and as a user bound only to
//! the ClusterRoles `ferry rbac --policy policies` prints. Scenarios run one at a time (each
//! starts its own ferry, and two ferrys on the same tenants would share the work).

/// Registers a live scenario where it is written: `live!(name: admin, rbac)` makes one test
/// per identity, `<file>::<name>::admin` as the harness's admin and `<file>::<name>::rbac` as a
/// user bound only to the ClusterRoles `ferry rbac --policy policies` prints. Faults, and
/// scenarios with a policy or identities of their own, run as one of them.
macro_rules! live {
    ($name:ident: $($who:ident),+) => {
        mod $name {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $who() {
                    super::$name(crate::identity(stringify!($who))).await.unwrap();
                }
            )+
        }
    };
}

/// The identity a registered scenario runs as.
fn identity(who: &str) -> Identity {
    match who {
        "admin" => Identity::Admin,
        "rbac" => Identity::Rbac,
        other => panic!("live!: no identity {other:?} (admin or rbac)"),
    }
}

mod cluster;
mod crds;
mod faults;
mod gateway;
mod isolation;
mod lifecycle;
mod names;
mod operators;
mod produced;
mod public;
mod shards;
mod supers;
mod sync;

use gateway::*;
use isolation::*;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use ferry_testkit::live::{
    eventually, install_rbac, scratch, write_config, Ferry, Identity, Settings,
};
use ferry_testkit::object::{create, Kind, Obj, WAIT};
use ferry_testkit::{fresh_namespace, install_crds, unique, Clusters};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams};
use kube::Client;
use serde_json::{json, Value};
use tokio::sync::{Mutex, MutexGuard, OnceCell};

static SERIAL: Mutex<()> = Mutex::const_new(());
static CRDS: OnceCell<()> = OnceCell::const_new();
static RBAC: OnceCell<()> = OnceCell::const_new();

fn ferry_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ferry"))
}

struct Env {
    _serial: MutexGuard<'static, ()>,
    clusters: Clusters,
    dir: PathBuf,
    identity: Identity,
    cleanup: Vec<(Client, String)>,
}

impl Env {
    async fn new(identity: Identity, name: &str) -> Result<Self> {
        let serial = SERIAL.lock().await;
        let clusters = Clusters::connect().await?;
        CRDS.get_or_try_init(|| async {
            for client in std::iter::once(&clusters.super_cluster)
                .chain(clusters.supers.values())
                .chain(clusters.tenants.values())
            {
                install_crds(client).await?;
            }
            anyhow::Ok(())
        })
        .await?;
        if identity == Identity::Rbac {
            RBAC.get_or_try_init(|| async {
                install_rbac(
                    ferry_bin(),
                    &ferry_testkit::root().join("policies"),
                    &clusters,
                )
                .await
            })
            .await?;
        }
        Ok(Self {
            _serial: serial,
            clusters,
            dir: scratch(name)?,
            identity,
            cleanup: Vec::new(),
        })
    }

    fn settings(&self, tenants: &[&str]) -> Settings {
        Settings::new(tenants, self.identity)
    }

    async fn ferry(&self, tenants: &[&str]) -> Result<Ferry> {
        self.start(&self.settings(tenants), "ferry.log").await
    }

    async fn start(&self, settings: &Settings, log: &str) -> Result<Ferry> {
        let mut ferry = Ferry::start(ferry_bin(), &self.dir, settings, log)?;
        ferry.ready().await?;
        Ok(ferry)
    }

    fn tenant(&self, name: &str) -> Client {
        self.clusters.tenant(name).clone()
    }

    fn super_(&self) -> Client {
        self.clusters.super_cluster.clone()
    }

    /// A fresh tenant namespace, deleted at the end of the test.
    async fn namespace(&mut self, tenant: &str, prefix: &str) -> Result<String> {
        let client = self.tenant(tenant);
        let ns = fresh_namespace(&client, prefix).await?;
        self.cleanup.push((client, ns.clone()));
        Ok(ns)
    }

    /// A fresh namespace `shop-…` of team-a with Database `orders` in it, once its super copy
    /// (`what`) exists: the namespace, its super namespace and the copy.
    async fn orders(&mut self, what: &str) -> Result<(String, String, Value)> {
        let ns = self.namespace("team-a", "shop").await?;
        let super_ns = format!("team-a-{ns}");
        create(
            &self.tenant("team-a"),
            database(&ns, "orders", db_spec("small")),
        )
        .await?;
        let copy = DATABASE
            .at(&self.super_(), &super_ns, "orders")
            .until(what, |_| true)
            .await?;
        Ok((ns, super_ns, copy))
    }

    /// Deletes the test's tenant namespaces and waits until ferry removed their super
    /// namespaces (so that no leftovers reach later tests).
    async fn finish(self, ferry: Ferry) -> Result<()> {
        for (client, ns) in &self.cleanup {
            let _ = kube::Api::<Namespace>::all(client.clone())
                .delete(ns, &DeleteParams::default())
                .await;
        }
        ferry.stop()
    }
}

fn database(ns: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Database",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": "shop"}},
        "spec": spec,
    })
}

fn db_spec(tier: &str) -> Value {
    json!({"engine": "postgres", "version": "16", "tier": tier})
}

/// Waits for an Event with `reason` regarding `name` in `ns`.
async fn until_event(client: &Client, ns: &str, name: &str, reason: &str) -> Result<String> {
    let events = kube::Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), ns);
    eventually(&format!("Event {reason} on {ns}/{name}"), WAIT, || async {
        let list = events.list(&ListParams::default()).await?;
        Ok(list.items.into_iter().find_map(|e| {
            let regarding = e.regarding.as_ref()?.name.as_deref()?;
            (regarding == name && e.reason.as_deref() == Some(reason))
                .then(|| e.note.clone().unwrap_or_default())
        }))
    })
    .await
}

/// Waits until no key waits (the depth of every queue stays 0 for half a second).
async fn drained(ferry: &Ferry) -> Result<()> {
    let mut calm = 0;
    for _ in 0..600 {
        if ferry.metric("ferry_queue_depth", &[]).await? == 0.0 {
            calm += 1;
            if calm >= 5 {
                return Ok(());
            }
        } else {
            calm = 0;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("the queue did not drain in 60s:\n{}", ferry.log())
}

/// The super copy `copy` reports phase Ready; waits until the tenant object `tenant` does.
async fn ready_flows_up(copy: &Obj, tenant: &Obj) -> Result<Value> {
    copy.merge_status(json!({"status": {"phase": "Ready"}}))
        .await?;
    tenant
        .until("status up", |o| o["status"]["phase"] == "Ready")
        .await
}

const DB: &str = "example.com/v1";
const DATABASE: Kind = Kind::new(DB, "Database");
