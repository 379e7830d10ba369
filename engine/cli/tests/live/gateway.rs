//! Gateway API on real API servers: references across namespaces, a listener selecting namespaces
//! by label, one kind approved both ways.

use super::*;

const GW: &str = "gateway.networking.k8s.io/v1";

/// Gateway API on real API servers: a route refers across the tenant's namespaces (allowed by
/// a ReferenceGrant), a listener admits routes from namespaces by label, and super namespaces
/// carry their tenant namespace's allowed labels, so the label selects the tenant's namespaces
/// only.
pub async fn gateway_api_stays_in_tenant(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "gateway").await?;
    let mut settings = env.settings(&["team-a", "team-b"]);
    settings.spec.insert(
        "namespaceLabels".into(),
        json!({"allow": ["gateway-access"]}),
    );
    let ferry = env.start(&settings, "ferry.log").await?;
    let (a, b, s) = (env.tenant("team-a"), env.tenant("team-b"), env.super_());
    let infra = env.namespace("team-a", "infra").await?;
    let shop = env.namespace("team-a", "shop").await?;
    let catalog = env.namespace("team-a", "catalog").await?;
    let other = env.namespace("team-b", "shop").await?;
    for (client, ns) in [(&a, &shop), (&b, &other)] {
        Kind::new("v1", "Namespace")
            .at(client, "", ns)
            .merge(json!({"metadata": {"labels": {"gateway-access": "yes"}}}))
            .await?;
    }
    // The platform's GatewayClass, published to every tenant.
    let class = shared_class(&s).await?;
    create(&a, json!({
        "apiVersion": GW, "kind": "Gateway",
        "metadata": {"name": "edge", "namespace": infra},
        "spec": {"gatewayClassName": class, "listeners": [
            {"name": "http", "hostname": "*.team-a.apps.example.com", "port": 80, "protocol": "HTTP",
             "allowedRoutes": {"namespaces": {"from": "Selector", "selector": {"matchLabels": {"gateway-access": "yes"}}}}},
            {"name": "all", "hostname": "*.team-a.apps.example.com", "port": 8080, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}},
        ]},
    })).await?;
    create(&a, json!({
        "apiVersion": GW, "kind": "HTTPRoute",
        "metadata": {"name": "shop", "namespace": shop},
        "spec": {"hostnames": ["shop.team-a.apps.example.com"], "parentRefs": [{"name": "edge", "namespace": infra}],
                 "rules": [{"backendRefs": [{"name": "catalog", "namespace": catalog, "port": 8080}]}]},
    })).await?;
    create(&a, json!({
        "apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant",
        "metadata": {"name": "from-shop", "namespace": catalog},
        "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": shop}],
                 "to": [{"group": "", "kind": "Service", "name": "catalog"}]},
    })).await?;
    // team-b has a route of its own, so its labelled namespace exists in the super cluster.
    create(
        &b,
        json!({
            "apiVersion": GW, "kind": "HTTPRoute",
            "metadata": {"name": "shop", "namespace": other},
            "spec": {"hostnames": ["shop.team-b.apps.example.com"], "parentRefs": [{"name": "edge"}]},
        }),
    )
    .await?;
    let sup = |ns: &str| format!("team-a-{ns}");
    let gateway = Kind::new(GW, "Gateway")
        .at(&s, &sup(&infra), "edge")
        .until("the Gateway's copy", |_| true)
        .await?;
    let listeners = &gateway["spec"]["listeners"];
    ensure!(
        listeners[0]["allowedRoutes"]["namespaces"]["selector"]["matchLabels"]
            == json!({"gateway-access": "yes", "ferry.dev/tenant": "team-a"}),
        "selector scoped to the tenant: {gateway:#}"
    );
    ensure!(
        listeners[1]["allowedRoutes"]["namespaces"]
            == json!({"from": "Selector", "selector": {"matchLabels": {"ferry.dev/tenant": "team-a"}}}),
        "from: All admits only the tenant's namespaces: {gateway:#}"
    );
    let route = Kind::new(GW, "HTTPRoute")
        .at(&s, &sup(&shop), "shop")
        .until("the route's copy", |_| true)
        .await?;
    ensure!(
        route["spec"]["parentRefs"][0]["namespace"] == sup(&infra).as_str()
            && route["spec"]["rules"][0]["backendRefs"][0]["namespace"] == sup(&catalog).as_str(),
        "references mapped into the tenant's namespaces: {route:#}"
    );
    let grant = Kind::new("gateway.networking.k8s.io/v1beta1", "ReferenceGrant")
        .at(&s, &sup(&catalog), "from-shop")
        .until("the grant's copy", |_| true)
        .await?;
    ensure!(
        grant["spec"]["from"][0]["namespace"] == sup(&shop).as_str(),
        "{grant:#}"
    );
    Kind::new(GW, "HTTPRoute")
        .at(&s, &format!("team-b-{other}"), "shop")
        .until("team-b's route", |_| true)
        .await?;
    // The Gateway's selector, as a super-side controller evaluates it, selects the tenant's
    // labelled namespace and not team-b's, which carries the same label.
    let selected = |labels: String| {
        let s = s.clone();
        async move {
            let list = kube::Api::<Namespace>::all(s)
                .list(&ListParams::default().labels(&labels))
                .await?;
            anyhow::Ok(
                list.items
                    .into_iter()
                    .filter_map(|n| n.metadata.name)
                    .collect::<Vec<_>>(),
            )
        }
    };
    let wanted = sup(&shop);
    eventually(
        "the tenant's labelled super namespace is selected",
        WAIT,
        || async {
            // (Earlier runs' namespaces may linger as Terminating; none of them is team-b's.)
            let names = selected("gateway-access=yes,ferry.dev/tenant=team-a".into()).await?;
            let ours = names.iter().all(|n| n.starts_with("team-a-"));
            Ok((ours && names.contains(&wanted)).then_some(()))
        },
    )
    .await?;
    ensure!(
        selected("gateway-access=yes".into())
            .await?
            .contains(&format!("team-b-{other}")),
        "team-b's namespace carries its label too (so the tenant label is what keeps it out)"
    );
    // The label leaves the tenant namespace: it leaves the super namespace.
    Kind::new("v1", "Namespace")
        .at(&a, "", &shop)
        .merge(json!({"metadata": {"labels": {"gateway-access": null}}}))
        .await?;
    eventually(
        "a removed label leaves the super namespace",
        WAIT,
        || async {
            let names = selected("gateway-access=yes,ferry.dev/tenant=team-a".into()).await?;
            Ok((!names.contains(&wanted)).then_some(()))
        },
    )
    .await?;
    Kind::new(GW, "GatewayClass")
        .at(&s, "", &class)
        .delete()
        .await?;
    env.finish(ferry).await
}
live!(gateway_api_stays_in_tenant: admin, rbac);

/// One kind both ways: the platform's shared Gateway is copied into the tenant, the tenant's
/// own Gateway goes down, and a route attaches to each — the shared one unchanged.
pub async fn shared_gateway_both_ways(identity: Identity) -> Result<()> {
    let mut env = Env::new(identity, "both-ways").await?;
    let ferry = env.ferry(&["team-a"]).await?;
    let (a, s) = (env.tenant("team-a"), env.super_());
    // The platform's namespace, and the tenant namespace of the same name its copy lands in.
    let platform = unique("platform-gw");
    for client in [&s, &a] {
        create(
            client,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": platform}}),
        )
        .await?;
    }
    env.cleanup.push((a.clone(), platform.clone()));
    let class = shared_class(&s).await?;
    let listener = json!([{"name": "http", "hostname": "*.team-a.apps.example.com", "port": 80, "protocol": "HTTP"}]);
    create(&s, json!({
        "apiVersion": GW, "kind": "Gateway",
        "metadata": {"name": "shared", "namespace": platform, "labels": {"tenancy.x-k8s.io/super.public": "true"}},
        "spec": {"gatewayClassName": class, "listeners": listener},
    })).await?;
    let copy = Kind::new(GW, "Gateway")
        .at(&a, &platform, "shared")
        .until("the shared Gateway copied into the tenant", |_| true)
        .await?;
    ensure!(
        copy["metadata"]["labels"]["ferry.dev/from-super"] == "true",
        "{copy:#}"
    );
    let infra = env.namespace("team-a", "infra").await?;
    let shop = env.namespace("team-a", "shop").await?;
    create(
        &a,
        json!({
            "apiVersion": GW, "kind": "Gateway",
            "metadata": {"name": "edge", "namespace": infra},
            "spec": {"gatewayClassName": class, "listeners": listener},
        }),
    )
    .await?;
    create(&a, json!({
        "apiVersion": GW, "kind": "HTTPRoute",
        "metadata": {"name": "shop", "namespace": shop},
        "spec": {"hostnames": ["shop.team-a.apps.example.com"], "parentRefs": [{"name": "shared", "namespace": platform}, {"name": "edge", "namespace": infra}]},
    })).await?;
    Kind::new(GW, "Gateway")
        .at(&s, &format!("team-a-{infra}"), "edge")
        .until("the tenant's own Gateway goes down", |_| true)
        .await?;
    let route = Kind::new(GW, "HTTPRoute")
        .at(&s, &format!("team-a-{shop}"), "shop")
        .until("the route's copy", |_| true)
        .await?;
    ensure!(
        route["spec"]["parentRefs"][0]["namespace"] == platform.as_str()
            && route["spec"]["parentRefs"][1]["namespace"] == format!("team-a-{infra}").as_str(),
        "the shared parent unchanged, the own one mapped: {route:#}"
    );
    ensure!(
        Kind::new(GW, "Gateway")
            .at(&s, &format!("team-a-{platform}"), "shared")
            .get()
            .await?
            .is_none(),
        "a copy from the super cluster never goes back down"
    );
    Kind::new(GW, "Gateway")
        .at(&s, &platform, "shared")
        .delete()
        .await?;
    Kind::new(GW, "Gateway")
        .at(&a, &platform, "shared")
        .until_gone("the copy goes with the public Gateway")
        .await?;
    Kind::new(GW, "GatewayClass")
        .at(&s, "", &class)
        .delete()
        .await?;
    Kind::new("v1", "Namespace")
        .at(&s, "", &platform)
        .delete()
        .await?;
    env.finish(ferry).await
}
live!(shared_gateway_both_ways: admin, rbac);

/// The platform's GatewayClass in the super cluster, labelled public: its name.
/// A GatewayClass the platform publishes to every tenant; its name.
pub async fn shared_class(s: &Client) -> Result<String> {
    let class = unique("shared");
    create(
        s,
        json!({
            "apiVersion": GW, "kind": "GatewayClass",
            "metadata": {"name": class, "labels": {"tenancy.x-k8s.io/super.public": "true"}},
            "spec": {"controllerName": "example.com/gateway"},
        }),
    )
    .await?;
    Ok(class)
}
