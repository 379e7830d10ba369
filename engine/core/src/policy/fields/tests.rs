//! The compilation of field rules: paths, refusals, and how rules land in a plan.

use super::*;

fn paths(p: &str) -> Vec<String> {
    steps(p).unwrap().iter().map(|s| show(s)).collect()
}

#[test]
fn compiles_names_and_wildcards() {
    assert_eq!(
        paths("$.spec.tls[*].secretName"),
        ["$.spec.tls[*].secretName"]
    );
    assert_eq!(
        paths("$.metadata.annotations['nginx.ingress.kubernetes.io/auth-secret']"),
        ["$.metadata.annotations[\"nginx.ingress.kubernetes.io/auth-secret\"]"]
    );
    assert_eq!(paths("$.spec['a','b'].c"), ["$.spec.a.c", "$.spec.b.c"]);
    // `.*` marks the members of an object, `[*]` the elements of a list.
    assert_eq!(paths("$.spec.*.c"), ["$.spec.*.c"]);
    assert_eq!(paths("$.spec[*].c"), ["$.spec[*].c"]);
    assert_eq!(
        paths("$['spec'] [ 'a.b' ].*[*]['x]y'].*"),
        ["$.spec[\"a.b\"].*[*][\"x]y\"].*"]
    );
}

#[test]
fn refuses_selectors_that_depend_on_data() {
    for bad in [
        "$..name",
        "$.spec.tls[0].secretName",
        "$.spec.a[1:]",
        "$.spec.a[?@.x == 1]",
    ] {
        assert!(steps(bad).is_err(), "{bad}");
    }
    let e = steps("$.spec[").unwrap_err();
    assert!(e.contains("not an RFC 9535 JSONPath"), "{e}");
    assert!(steps("spec.name").is_err());
}

#[test]
fn refuses_ferrys_fields() {
    let rule = Rule::Namespace;
    for bad in [
        "$.metadata.name",
        "$.metadata.namespace",
        "$.metadata.labels['ferry.dev/tenant']",
        "$.spec['ferry.dev/x']",
        "$.metadata.annotations[*]",
        "$.*",
        "$",
        "$.kind",
    ] {
        let paths = steps(bad).unwrap();
        assert!(paths.iter().any(|p| allowed(p, &rule).is_err()), "{bad}");
    }
    let ok = steps("$.metadata.annotations['a/b']").unwrap();
    assert!(allowed(&ok[0], &rule).is_ok());
    assert!(allowed(&ok[0], &Rule::OwnerSuper).is_err());
}

#[test]
fn a_wildcard_marks_named_members_too() {
    let origin = Location::file(std::path::Path::new("p.yaml"));
    let rule = |r: Rule| Annotated {
        rule: r,
        origin: origin.clone(),
        jsonpath: Some("$".into()),
    };
    let mut root = Node::default();
    for (p, r) in [("$.spec.a.x", Rule::Namespace), ("$.spec.*.y", Rule::Text)] {
        insert(&mut root, &steps(p).unwrap()[0], &rule(r)).unwrap();
    }
    insert(
        &mut root,
        &steps("$.spec.b.z").unwrap()[0],
        &rule(Rule::Drop),
    )
    .unwrap();
    let spec = &root.fields["spec"];
    assert!(spec.fields["a"].fields["y"].has(|r| *r == Rule::Text));
    assert!(spec.fields["b"].fields["y"].has(|r| *r == Rule::Text));
    assert!(spec.values.as_ref().unwrap().fields["y"].has(|r| *r == Rule::Text));
    assert!(spec.items.is_none(), "`.*` marks no list elements");
    assert!(spec.values.as_ref().unwrap().fields["y"].has(|r| *r == Rule::Text));
    let mut twice = root.clone();
    insert(
        &mut twice,
        &steps("$.spec.a.x").unwrap()[0],
        &rule(Rule::Namespace),
    )
    .unwrap();
    assert_eq!(twice, root, "the same rule is applied once");
    assert!(insert(
        &mut root,
        &steps("$.spec.b.z").unwrap()[0],
        &rule(Rule::OwnerSuper)
    )
    .is_err());
}
