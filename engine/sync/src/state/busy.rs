//! Whether a tenant is stopped and how many of its keys are being reconciled: what a hand-over
//! waits for before it releases the tenant (DESIGN.md "Sharding across replicas").
//!
//! A worker counts itself in, then looks whether the tenant stopped; the stopper marks it
//! stopped, then waits for the count to reach zero. Both in sequentially consistent order, so
//! either the worker sees the stop or the stopper sees the worker.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A tenant's work in flight.
#[derive(Debug, Default)]
pub struct Busy {
    stopped: AtomicBool,
    in_flight: AtomicUsize,
}

/// One reconcile in flight; counted out when dropped.
pub struct InFlight<'a>(&'a Busy);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Busy {
    /// Counts a reconcile in, unless the tenant stopped.
    pub fn enter(&self) -> Option<InFlight<'_>> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let entered = InFlight(self);
        (!self.stopped.load(Ordering::SeqCst)).then_some(entered)
    }

    /// Marks the tenant stopped: no reconcile starts from now on.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }

    /// Whether the tenant stopped.
    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Reconciles in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Waits until the tenant stopped and nothing is in flight, at most `bound`; whether it
    /// drained.
    pub async fn drained(&self, bound: Duration) -> bool {
        let until = Instant::now() + bound;
        loop {
            if self.stopped() && self.in_flight() == 0 {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_tenant_takes_no_work() {
        let busy = Busy::default();
        let first = busy.enter().expect("running");
        assert_eq!(busy.in_flight(), 1);
        busy.stop();
        assert!(busy.enter().is_none());
        assert_eq!(busy.in_flight(), 1, "the refused entry is counted out");
        drop(first);
        assert_eq!(busy.in_flight(), 0);
    }
}
