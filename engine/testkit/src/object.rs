//! A handle on one object of one cluster, so that a test names an object once and then reads,
//! patches, deletes and waits for it.
//!
//! ```text
//!  Kind { apiVersion, kind } ─at(client, namespace, name)─▶ Obj ─▶ get / merge / delete / until
//! ```

use std::time::Duration;

use anyhow::{Context, Result};
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::Value;

use crate::live::{api, eventually};

/// How long a test waits for ferry to do something.
pub const WAIT: Duration = Duration::from_secs(60);

/// A kind, as `apiVersion` and `kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kind {
    /// `group/version`, or `v1` for the core group.
    pub api_version: &'static str,
    /// The kind.
    pub kind: &'static str,
}

impl Kind {
    /// The kind `kind` of `api_version`.
    pub const fn new(api_version: &'static str, kind: &'static str) -> Self {
        Self { api_version, kind }
    }

    /// The object `namespace`/`name` (namespace empty when cluster-scoped) in `client`'s
    /// cluster.
    pub fn at(self, client: &Client, namespace: &str, name: &str) -> Obj {
        Obj {
            client: client.clone(),
            kind: self,
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    /// Every object of the kind in `namespace`.
    pub async fn list(self, client: &Client, namespace: &str) -> Result<Vec<Value>> {
        let list = api(client, self.api_version, self.kind, namespace)
            .list(&Default::default())
            .await
            .with_context(|| format!("listing {} in {namespace:?}", self.kind))?;
        list.items
            .into_iter()
            .map(|o| Ok(serde_json::to_value(o)?))
            .collect()
    }
}

/// One object of one cluster, present or not.
#[derive(Clone)]
pub struct Obj {
    client: Client,
    kind: Kind,
    namespace: String,
    name: String,
}

/// Creates `object` (its apiVersion, kind and namespace say where) in `client`'s cluster.
pub async fn create(client: &Client, object: Value) -> Result<Value> {
    let s = |k: &str| object[k].as_str().unwrap_or_default().to_string();
    let (api_version, kind) = (s("apiVersion"), s("kind"));
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let o: DynamicObject = serde_json::from_value(object)?;
    let out = api(client, &api_version, &kind, &namespace)
        .create(&PostParams::default(), &o)
        .await
        .with_context(|| format!("creating {kind} {namespace}/{:?}", o.metadata.name))?;
    Ok(serde_json::to_value(out)?)
}

impl Obj {
    fn api(&self) -> kube::Api<DynamicObject> {
        api(
            &self.client,
            self.kind.api_version,
            self.kind.kind,
            &self.namespace,
        )
    }

    /// `Kind namespace/name`, for messages.
    pub fn describe(&self) -> String {
        format!("{} {}/{}", self.kind.kind, self.namespace, self.name)
    }

    /// The object, if it exists.
    pub async fn get(&self) -> Result<Option<Value>> {
        let out = self
            .api()
            .get_opt(&self.name)
            .await
            .with_context(|| format!("reading {}", self.describe()))?;
        Ok(out.map(|o| serde_json::to_value(o).unwrap_or_default()))
    }

    /// Merge-patches the object.
    pub async fn merge(&self, patch: Value) -> Result<Value> {
        self.patch(patch, false).await
    }

    /// Merge-patches the object's status subresource.
    pub async fn merge_status(&self, patch: Value) -> Result<Value> {
        self.patch(patch, true).await
    }

    async fn patch(&self, patch: Value, status: bool) -> Result<Value> {
        let params = PatchParams::default();
        let api = self.api();
        let out = if status {
            api.patch_status(&self.name, &params, &Patch::Merge(&patch))
                .await
        } else {
            api.patch(&self.name, &params, &Patch::Merge(&patch)).await
        }
        .with_context(|| format!("patching {}", self.describe()))?;
        Ok(serde_json::to_value(out)?)
    }

    /// Deletes the object.
    pub async fn delete(&self) -> Result<()> {
        self.api()
            .delete(&self.name, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting {}", self.describe()))?;
        Ok(())
    }

    /// Waits for the object and returns it once `test` holds.
    pub async fn until(&self, what: &str, test: impl Fn(&Value) -> bool) -> Result<Value> {
        eventually(&format!("{what} ({})", self.describe()), WAIT, || async {
            Ok(self.get().await?.filter(|o| test(o)))
        })
        .await
    }

    /// Waits until the object is gone.
    pub async fn until_gone(&self, what: &str) -> Result<()> {
        eventually(&format!("{what} ({})", self.describe()), WAIT, || async {
            Ok(self.get().await?.is_none().then_some(()))
        })
        .await
    }
}
