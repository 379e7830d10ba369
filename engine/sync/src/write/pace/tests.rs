//! The pace: places in flight, tenants served in turn, and the limit learnt from answers.

use std::sync::Arc;
use std::time::Duration;

use super::*;

fn tenant(name: &str) -> Arc<str> {
    Arc::from(name)
}

/// A write of `who` waiting for its place, in a task of its own.
fn waiter(pace: &Arc<Pace>, who: &'static str) -> tokio::task::JoinHandle<Permit> {
    let pace = pace.clone();
    tokio::spawn(async move { pace.permit(&tenant(who)).await })
}

/// The waiter's permit, if it comes within 20 ms.
async fn granted(handle: &mut tokio::task::JoinHandle<Permit>) -> Option<Permit> {
    tokio::time::timeout(Duration::from_millis(20), handle)
        .await
        .ok()
        .map(|p| p.expect("the waiter ran"))
}

#[tokio::test]
async fn under_the_limit_a_write_goes_at_once_and_over_it_waits_for_a_place() {
    let pace = Pace::new(2);
    let a = tenant("a");
    let first = pace.permit(&a).await;
    let _second = pace.permit(&a).await;
    assert_eq!(pace.in_flight(), 2);
    let mut third = waiter(&pace, "a");
    assert!(
        granted(&mut third).await.is_none(),
        "over the limit, it waits"
    );
    drop(first);
    let third = granted(&mut third).await;
    assert!(third.is_some(), "a place given back is handed on");
    assert_eq!(
        pace.in_flight(),
        2,
        "handed over, not freed and taken again"
    );
}

#[tokio::test]
async fn waiting_tenants_are_served_in_turn_not_in_arrival_order() {
    let pace = Pace::new(1);
    let held = pace.permit(&tenant("noisy")).await;
    let (tx, mut order) = tokio::sync::mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    // Five of the noisy tenant's writes wait, then one of the quiet tenant's.
    for (i, who) in ["noisy"; 5].into_iter().chain(["quiet"]).enumerate() {
        let (pace, tx) = (pace.clone(), tx.clone());
        waiters.push(tokio::spawn(async move {
            let permit = pace.permit(&tenant(who)).await;
            tx.send(format!("{who}{i}")).unwrap();
            drop(permit);
        }));
        tokio::task::yield_now().await;
    }
    drop(held);
    for w in waiters {
        w.await.unwrap();
    }
    drop(tx);
    let mut served = Vec::new();
    while let Some(s) = order.recv().await {
        served.push(s);
    }
    assert_eq!(
        served[..2],
        ["noisy0", "quiet5"],
        "the quiet write goes second: {served:?}"
    );
    assert_eq!(pace.in_flight(), 0);
}

#[tokio::test]
async fn a_cancelled_waiter_passes_its_turn_on() {
    let pace = Pace::new(1);
    let held = pace.permit(&tenant("a")).await;
    let cancelled = waiter(&pace, "b");
    tokio::task::yield_now().await;
    let mut next = waiter(&pace, "c");
    tokio::task::yield_now().await;
    cancelled.abort();
    let _ = cancelled.await;
    drop(held);
    let next = granted(&mut next).await;
    assert!(next.is_some());
    assert_eq!(pace.in_flight(), 1);
}

#[test]
fn the_limit_grows_while_answers_stay_fast_and_shrinks_when_they_queue() {
    let pace = Pace::new(4);
    let fast = Duration::from_millis(2);
    for _ in 0..10 {
        pace.learn(Answer::Written(fast));
    }
    assert_eq!(pace.limit(), 14, "nothing queued: one more each answer");
    // Answers three times slower than the fastest: about 2/3 of the limit wait in the
    // server, more than BETA: one less each answer, down to where few wait.
    for _ in 0..40 {
        pace.learn(Answer::Written(fast * 3));
    }
    let limit = pace.limit();
    assert!(limit <= 3, "{limit}");
    pace.learn(Answer::Congested);
    assert!(pace.limit() <= limit / 2 + 1, "no answer halves it");
    let before = pace.limit();
    pace.learn(Answer::Refused);
    assert_eq!(pace.limit(), before, "a refusal teaches nothing");
    for _ in 0..200 {
        pace.learn(Answer::Congested);
    }
    assert_eq!(pace.limit(), MIN_LIMIT);
}

#[tokio::test]
async fn a_waiter_cancelled_after_its_place_was_handed_over_gives_it_back() {
    let pace = Pace::new(1);
    let held = pace.permit(&tenant("a")).await;
    let waiter = waiter(&pace, "b");
    tokio::task::yield_now().await;
    // The place goes to the waiter; it is cancelled before it runs again.
    drop(held);
    waiter.abort();
    let _ = waiter.await;
    assert_eq!(pace.in_flight(), 0, "the place handed over came back");
    let _again = pace.permit(&tenant("c")).await;
    assert_eq!(pace.in_flight(), 1);
}

#[tokio::test]
async fn while_writes_wait_a_newcomer_queues_behind_them_and_a_grown_limit_serves_them() {
    let pace = Pace::new(1);
    let held = pace.permit(&tenant("a")).await;
    let mut waiting = waiter(&pace, "b");
    tokio::task::yield_now().await;
    // The limit grows while b waits: a newcomer does not take the new place ahead of b.
    pace.learn(Answer::Written(Duration::from_millis(1)));
    assert_eq!(pace.limit(), 2);
    let mut newcomer = waiter(&pace, "c");
    assert!(granted(&mut newcomer).await.is_none(), "c waits behind b");
    drop(held);
    let b = granted(&mut waiting).await;
    let c = granted(&mut newcomer).await;
    assert!(
        b.is_some() && c.is_some(),
        "both places of the grown limit are handed over"
    );
    assert_eq!(pace.in_flight(), 2);
}
