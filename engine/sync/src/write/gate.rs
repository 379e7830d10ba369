//! Whether this replica may write now: the leader (leader election), or, with sharding, a
//! member whose last successful membership renewal is fresh (DESIGN.md "Sharding across
//! replicas": younger than two thirds of leaseDuration on this process's monotonic clock).
//! Checked by the writer immediately before every write.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::cache::Owned;

/// The write fence of a sharded replica.
#[derive(Debug)]
pub struct Fence {
    lease: Duration,
    /// When the last renewal that counts was sent (a renewal counts once the Leases read
    /// after it confirmed which tenants are still this replica's).
    renewed: Mutex<Option<Instant>>,
    /// Shut for good (shutting down, or the identity taken over by another process).
    closed: AtomicBool,
}

impl Fence {
    /// A closed fence for a membership lasting `lease`.
    pub fn new(lease: Duration) -> Self {
        Self {
            lease,
            renewed: Mutex::new(None),
            closed: AtomicBool::new(false),
        }
    }

    /// How long a renewal keeps the fence open: two thirds of the lease.
    pub fn window(&self) -> Duration {
        self.lease * 2 / 3
    }

    /// Whether a write may go now.
    pub fn open(&self) -> bool {
        !self.closed.load(Ordering::SeqCst) && self.age().is_some_and(|age| age < self.window())
    }

    /// How long ago the last renewal that counts was sent.
    pub fn age(&self) -> Option<Duration> {
        self.renewed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map(|t| t.elapsed())
    }

    /// Records a renewal sent at `at` (never moving backwards).
    pub fn renewed(&self, at: Instant) {
        let mut renewed = self.renewed.lock().unwrap_or_else(|e| e.into_inner());
        if renewed.is_none_or(|t| t < at) {
            *renewed = Some(at);
        }
    }

    /// Shuts the fence for good.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Whether [`Fence::close`] was called.
    pub fn closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

/// What a sharded replica shares with the writers and the super caches.
#[derive(Clone)]
pub struct Sharded {
    /// The write fence.
    pub fence: Arc<Fence>,
    /// The tenants owned now.
    pub owned: watch::Receiver<Owned>,
}

/// What a writer checks before every write.
#[derive(Clone)]
pub struct Gate {
    /// Leadership (always true without leader election).
    pub leader: watch::Receiver<bool>,
    /// With sharding, the fence and the ownership.
    pub sharded: Option<Sharded>,
}

impl Gate {
    /// Whether a write may go now; why not.
    pub fn check(&self) -> Result<(), super::Error> {
        if !*self.leader.borrow() {
            return Err(super::Error::NotLeader);
        }
        match &self.sharded {
            Some(s) if !s.fence.open() => Err(super::Error::Fenced),
            _ => Ok(()),
        }
    }

    /// Whether a write may go now.
    pub fn open(&self) -> bool {
        self.check().is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_opens_for_two_thirds_of_the_lease() {
        let fence = Fence::new(Duration::from_millis(300));
        assert!(!fence.open(), "closed before any renewal");
        fence.renewed(Instant::now());
        assert!(fence.open());
        std::thread::sleep(Duration::from_millis(220));
        assert!(!fence.open(), "stale after 2/3 of the lease");
        fence.renewed(Instant::now());
        assert!(fence.open());
        fence.close();
        assert!(!fence.open(), "closed for good");
        fence.renewed(Instant::now());
        assert!(!fence.open());
    }

    #[test]
    fn renewals_never_move_backwards() {
        let fence = Fence::new(Duration::from_secs(3));
        let now = Instant::now();
        fence.renewed(now);
        fence.renewed(now - Duration::from_secs(5));
        assert!(fence.age().unwrap() < Duration::from_secs(1));
    }
}
