//! How many of ferry's writes are in flight to one super cluster, and whose goes next
//! (`superWrites: adaptive`; off by default: `docs/decisions.md`).
//!
//! A super API server has one queue ferry cannot see into: once it is saturated, every
//! tenant's write waits behind every write in flight there. So ferry keeps that queue short
//! with an adaptive limit on its writes in flight (TCP Vegas' rule, as in Netflix's
//! concurrency-limits): from the fastest answer seen lately (`base`, what a write costs with
//! nothing queued) and each answer's time, it estimates how many of its writes wait in the
//! server (`limit × (1 − base / rtt)`) and keeps that between [`ALPHA`] and [`BETA`]: one
//! more when fewer wait, one less when more do, halved when a request gets no answer, a 429 or
//! a server error (a refusal, 404 or 409, teaches nothing). Writes
//! over the limit wait in ferry, in one line per tenant, served in turn: a tenant's burst
//! fills its own line, and another tenant's write goes at the next free place.
//!
//! ```text
//!  write ─▶ permit? ── yes ─▶ send ─▶ answered: rtt → limit ─▶ release ─▶ next tenant's waiter
//!              └── no ─▶ its tenant's line ─(round-robin)─┘
//! ```

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// Fewer of ferry's writes than this waiting in the server: the limit grows by one.
const ALPHA: f64 = 1.0;
/// More than this: it shrinks by one.
const BETA: f64 = 2.0;
/// The smallest limit.
pub const MIN_LIMIT: usize = 1;
/// The largest limit.
pub const MAX_LIMIT: usize = 64;
/// The fastest answer is forgotten after this long, so that a server that became slower for
/// good (more objects, more watchers) sets a new base.
const BASE_FOR: Duration = Duration::from_secs(10);

/// The writes in flight to one cluster and the writes waiting for a place.
pub struct Pace {
    state: Mutex<State>,
}

struct State {
    limit: f64,
    in_flight: usize,
    /// The fastest answer since `base_since`, and the one before (used until a new window
    /// has its own).
    base: Option<Duration>,
    base_since: Instant,
    previous_base: Option<Duration>,
    /// Waiting writes, one line per tenant, tenants in turn.
    lines: VecDeque<(Arc<str>, VecDeque<oneshot::Sender<()>>)>,
}

/// A place in flight; given back (to the next waiter in turn) when dropped. A permit dropped
/// without an answer recorded (a cancelled request) teaches the limit nothing.
pub struct Permit {
    pace: Arc<Pace>,
    sent: Instant,
}

impl Pace {
    /// A pace starting at `initial` writes in flight.
    pub fn new(initial: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                limit: initial.clamp(MIN_LIMIT, MAX_LIMIT) as f64,
                in_flight: 0,
                base: None,
                base_since: Instant::now(),
                previous_base: None,
                lines: VecDeque::new(),
            }),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current limit (for the metric).
    pub fn limit(&self) -> usize {
        self.state().limit as usize
    }

    /// Writes now in flight.
    pub fn in_flight(&self) -> usize {
        self.state().in_flight
    }

    /// A place for a write of `tenant`: at once while under the limit and nobody waits, else
    /// when its turn comes.
    pub async fn permit(self: &Arc<Self>, tenant: &Arc<str>) -> Permit {
        let waiting = {
            let mut state = self.state();
            if state.lines.is_empty() && (state.in_flight as f64) < state.limit.floor() {
                state.in_flight += 1;
                None
            } else {
                let (tx, rx) = oneshot::channel();
                match state.lines.iter_mut().find(|(t, _)| t == tenant) {
                    Some((_, line)) => line.push_back(tx),
                    None => state
                        .lines
                        .push_back((tenant.clone(), VecDeque::from([tx]))),
                }
                Some(Waiting {
                    pace: self.clone(),
                    rx: Some(rx),
                })
            }
        };
        if let Some(mut waiting) = waiting {
            // The place is handed over by `release` (in_flight counted for us). A closed
            // channel cannot happen while the pace lives; go on rather than hang.
            if let Some(rx) = waiting.rx.as_mut() {
                let _ = rx.await;
            }
            waiting.rx = None;
        }
        Permit {
            pace: self.clone(),
            sent: Instant::now(),
        }
    }

    /// Gives a place back, and hands places to the waiters in turn while the limit allows.
    fn release(&self) {
        let mut state = self.state();
        state.in_flight -= 1;
        while (state.in_flight as f64) < state.limit.floor() {
            let Some((tenant, mut line)) = state.lines.pop_front() else {
                return;
            };
            let Some(waiter) = line.pop_front() else {
                continue;
            };
            if !line.is_empty() {
                state.lines.push_back((tenant, line));
            }
            // A waiter whose write was cancelled no longer wants it: the next one.
            if waiter.send(()).is_ok() {
                state.in_flight += 1;
            }
        }
    }

    /// Learns from one answer.
    fn learn(&self, answer: Answer) {
        let mut state = self.state();
        let rtt = match answer {
            Answer::Written(rtt) => rtt,
            Answer::Refused => return,
            Answer::Congested => {
                state.limit = (state.limit / 2.0).max(MIN_LIMIT as f64);
                return;
            }
        };
        let now = Instant::now();
        if now.duration_since(state.base_since) > BASE_FOR {
            state.previous_base = state.base;
            state.base = None;
            state.base_since = now;
        }
        state.base = Some(state.base.map_or(rtt, |b| b.min(rtt)));
        let base = match state.previous_base {
            Some(p) => p.min(state.base.unwrap_or(p)),
            None => state.base.unwrap_or(rtt),
        };
        let rtt = rtt.as_secs_f64().max(1e-6);
        let queued = state.limit * (1.0 - base.as_secs_f64() / rtt);
        if queued < ALPHA {
            state.limit = (state.limit + 1.0).min(MAX_LIMIT as f64);
        } else if queued > BETA {
            state.limit = (state.limit - 1.0).max(MIN_LIMIT as f64);
        }
    }
}

/// What an answer teaches the limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The write went through in this long: the time a write takes.
    Written(Duration),
    /// Refused at once (404, 409, 422): says nothing of the server's queue.
    Refused,
    /// No answer, too many requests (429) or a server error: halve the limit.
    Congested,
}

impl Answer {
    /// What `result`, answered `rtt` after it was sent, teaches.
    pub fn of<T>(result: &kube::Result<T>, rtt: Duration) -> Self {
        match result {
            Ok(_) => Answer::Written(rtt),
            Err(kube::Error::Api(s)) if s.code == 429 || s.code >= 500 => Answer::Congested,
            Err(kube::Error::Api(_) | kube::Error::SerdeError(_)) => Answer::Refused,
            Err(_) => Answer::Congested,
        }
    }
}

/// A write waiting for its place: dropped before it has one (its write cancelled), it
/// closes its line's ticket, and a place already handed to it goes on to the next waiter.
struct Waiting {
    pace: Arc<Pace>,
    rx: Option<oneshot::Receiver<()>>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take() {
            rx.close();
            if rx.try_recv().is_ok() {
                self.pace.release();
            }
        }
    }
}

impl Permit {
    /// The time since the write was let through.
    pub fn elapsed(&self) -> Duration {
        self.sent.elapsed()
    }

    /// Records what the answer of the write this permit let through teaches.
    pub fn answered(&self, answer: Answer) {
        self.pace.learn(answer);
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.pace.release();
    }
}

#[cfg(test)]
mod tests;
