//! The queues' semantics: turns, deduplication, priorities, shares, backoff, closing.

use super::*;

use crate::key::Kind;

fn key(tenant: &str, name: &str) -> Key {
    Key::new(
        &tenant.into(),
        Kind::Resource(crate::key::EntryId(0)),
        "ns",
        name,
    )
}

#[tokio::test]
async fn tenants_are_served_in_turn() {
    let q = Queues::default();
    for t in ["a", "b"] {
        q.add_tenant(t.into());
        q.open(t);
    }
    for i in 0..5 {
        q.add(key("a", &format!("x{i}")));
    }
    q.add(key("b", "y0"));
    q.add(key("b", "y1"));
    let mut order = Vec::new();
    for _ in 0..7 {
        let (k, _) = q.next().await.unwrap();
        q.done(&k);
        order.push(format!("{}/{}", k.tenant, k.name));
    }
    assert_eq!(
        order,
        ["a/x0", "b/y0", "a/x1", "b/y1", "a/x2", "a/x3", "a/x4"]
    );
}

#[tokio::test]
async fn a_key_is_queued_once_and_requeued_after_processing() {
    let q = Queues::default();
    q.add_tenant("a".into());
    q.open("a");
    q.add(key("a", "x"));
    q.add(key("a", "x"));
    assert_eq!(q.depth("a"), 1);
    let (k, _) = q.next().await.unwrap();
    // Added again while held: not handed out twice, queued again on done.
    q.add(key("a", "x"));
    assert_eq!(q.depth("a"), 1);
    q.done(&k);
    let (again, _) = q.next().await.unwrap();
    assert_eq!(again, k);
    q.done(&again);
    assert_eq!(q.depth("a"), 0);
}

#[tokio::test]
async fn changes_go_before_a_resync() {
    let q = Queues::default();
    q.add_tenant("a".into());
    q.open("a");
    for i in 0..3 {
        q.add_background(key("a", &format!("old{i}")));
    }
    q.add(key("a", "new"));
    // Already queued by the resync, then changed: served with the changes.
    q.add(key("a", "old2"));
    let mut order = Vec::new();
    while q.depth("a") > 0 {
        let (k, _) = q.next().await.unwrap();
        q.done(&k);
        order.push(k.name);
    }
    assert_eq!(order, ["new", "old2", "old0", "old1"]);
}

#[tokio::test]
async fn a_drained_queue_gives_its_memory_back() {
    let q = Queues::default();
    q.add_tenant("a".into());
    q.open("a");
    let held = |q: &Queues| {
        let state = q.lock();
        let t = &state.tenants["a"];
        t.ready.capacity() + t.background.capacity() + t.waiting.capacity()
    };
    for i in 0..3000 {
        q.add_background(key("a", &format!("x{i}")));
    }
    // A change queued behind the patrol's keys, and one key added again while held.
    q.add(key("a", "x7"));
    let (first, _) = q.next().await.unwrap();
    q.add(key("a", &first.name));
    assert!(held(&q) > 3000);
    let mut served = vec![first.name.clone()];
    q.done(&first);
    while q.depth("a") > 0 {
        let (k, _) = q.next().await.unwrap();
        q.done(&k);
        served.push(k.name);
    }
    assert!(held(&q) <= DRAINED_KEPT, "kept {} slots", held(&q));
    assert_eq!(
        served.len(),
        3001,
        "every key served, the one added while held twice"
    );
    // Still a queue: later keys are served.
    q.add(key("a", "later"));
    assert_eq!(q.next().await.unwrap().0.name, "later");
    // Every key failed (the tenant's API server was down during a patrol), then succeeded.
    let failed: Vec<Key> = (0..3000).map(|i| key("a", &format!("f{i}"))).collect();
    for k in &failed {
        q.add_after(k.clone(), Duration::ZERO);
        q.retry(k);
    }
    for k in &failed {
        q.forget(k);
    }
    assert!(q.lock().tenants["a"].failures.capacity() <= DRAINED_KEPT);
}

#[tokio::test]
async fn a_tenant_holds_at_most_its_share_of_workers() {
    let q = Queues::new(2, None);
    for t in ["hung", "b"] {
        q.add_tenant(t.into());
        q.open(t);
    }
    for i in 0..5 {
        q.add(key("hung", &format!("x{i}")));
    }
    let (first, _) = q.next().await.unwrap();
    let (second, _) = q.next().await.unwrap();
    assert_eq!((&*first.tenant, &*second.tenant), ("hung", "hung"));
    // Both of its keys are held (its API server hangs): the next worker serves b.
    q.add(key("b", "y"));
    let (k, _) = q.next().await.unwrap();
    assert_eq!(k, key("b", "y"));
    q.done(&first);
    let (k, _) = q.next().await.unwrap();
    assert_eq!(&*k.tenant, "hung");
}

#[tokio::test]
async fn a_tenant_holds_fewer_workers_while_another_has_work() {
    let q = Queues::new(4, None).sharing(1);
    for t in ["noisy", "quiet"] {
        q.add_tenant(t.into());
        q.open(t);
    }
    for i in 0..10 {
        q.add(key("noisy", &format!("x{i}")));
    }
    // Alone, the noisy tenant takes its whole share.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(q.next().await.unwrap().0);
    }
    assert!(held.iter().all(|k| &*k.tenant == "noisy"));
    // The quiet tenant's key comes next; then the noisy tenant gets one more only once it
    // holds fewer than one, i.e. after all four are done.
    q.add(key("quiet", "y"));
    let (k, _) = q.next().await.unwrap();
    assert_eq!(k, key("quiet", "y"));
    q.done(&k);
    for k in held.drain(..3) {
        q.done(&k);
    }
    let next = tokio::time::timeout(Duration::from_millis(10), q.next()).await;
    assert!(next.is_err(), "the noisy tenant still holds its one share");
    q.done(&held.remove(0));
    let (k, _) = q.next().await.unwrap();
    assert_eq!(&*k.tenant, "noisy");
    // Once the quiet tenant had nothing for a while, the noisy tenant has its share again,
    // though no key was done meanwhile.
    let started = Instant::now();
    let (k2, _) = tokio::time::timeout(SHARING_WINDOW * 3, q.next())
        .await
        .expect("woken when the window ends")
        .unwrap();
    assert_eq!(&*k2.tenant, "noisy");
    assert!(started.elapsed() >= SHARING_WINDOW / 2);
}

#[tokio::test]
async fn failures_back_off_and_delays_are_deduplicated() {
    let q = Queues::default();
    q.add_tenant("a".into());
    q.open("a");
    let k = key("a", "x");
    assert_eq!(q.retry(&k), (1, Duration::from_millis(400)));
    assert_eq!(q.retry(&k), (2, Duration::from_millis(800)));
    q.forget(&k);
    assert_eq!(q.retry(&k).0, 1);
    // Delayed, not waiting yet; a later delay does not postpone an earlier one.
    let soon = key("a", "soon");
    q.add_after(soon.clone(), Duration::from_millis(20));
    q.add_after(soon.clone(), Duration::from_secs(60));
    assert_eq!(q.depth("a"), 0);
    let started = Instant::now();
    let (got, _) = q.next().await.unwrap();
    assert_eq!(got, soon);
    assert!(started.elapsed() < Duration::from_secs(5));
    q.done(&got);
    assert_eq!(q.depth("a"), 0);
}

#[tokio::test]
async fn a_restarted_tenant_keeps_the_keys_its_old_instance_holds() {
    let q = Queues::new(1, None);
    q.add_tenant("a".into());
    q.open("a");
    q.add(key("a", "x"));
    let (held, _) = q.next().await.unwrap();
    q.remove_tenant("a");
    q.add_tenant("a".into());
    q.open("a");
    q.add(key("a", "x"));
    q.add(key("a", "y"));
    // Still held by the old instance's worker: neither x nor the tenant's share is free.
    let next = tokio::time::timeout(Duration::from_millis(50), q.next()).await;
    assert!(next.is_err(), "handed out {next:?}");
    q.done(&held);
    let (first, _) = q.next().await.unwrap();
    q.done(&first);
    let (second, _) = q.next().await.unwrap();
    assert_eq!((first, second), (key("a", "y"), key("a", "x")));
}

#[tokio::test]
async fn closed_tenants_wait_and_close_ends_workers() {
    let q = Arc::new(Queues::default());
    q.add_tenant("a".into());
    q.add(key("a", "x"));
    let worker = {
        let q = q.clone();
        tokio::spawn(async move { q.next().await.map(|(k, _)| k) })
    };
    tokio::task::yield_now().await;
    q.close();
    assert_eq!(worker.await.unwrap(), None);
}
