//! What a phase of the sync benchmark cost the super side: the super API server's requests
//! for Databases (its own `apiserver_request_total`) and CPU seconds from `/proc/<pid>/stat`.

use anyhow::Result;
use kube::Client;

/// Requests the super API server has served for Databases, watches and lists aside (one
/// watch per watcher; what each create or update costs is the rest).
pub async fn database_requests(client: &Client) -> Result<f64> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(request).await?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| l.contains("resource=\"databases\""))
        .filter(|l| !l.contains("verb=\"WATCH\"") && !l.contains("verb=\"LIST\""))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum())
}

/// CPU seconds (user + system) process `pid` and its children (ferry's transform workers)
/// have used.
pub fn cpu_seconds_tree(pid: u32) -> f64 {
    let children = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| parent(*p) == Some(pid));
    cpu_seconds(pid) + children.map(cpu_seconds).sum::<f64>()
}

pub fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// CPU seconds (user + system) processes `pids` have used, together.
pub fn cpu_of(pids: &[u32]) -> f64 {
    pids.iter().map(|p| cpu_seconds(*p)).sum()
}

/// CPU seconds (user + system) process `pid` has used.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which may hold spaces) in parentheses.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of stat, 11 and 12 after the name.
    (ticks(11) + ticks(12)) / clock_ticks()
}

pub fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// What one phase cost: super requests for Databases, the super API server's and ferry's CPU.
#[derive(Clone, Copy, Default)]
pub struct Cost {
    pub requests: f64,
    pub super_cpu: f64,
    pub ferry_cpu: f64,
    /// Wall-clock seconds: since the first reading, or of a phase.
    pub seconds: f64,
}

/// Seconds since the first reading of the clock.
fn clock() -> f64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs_f64()
}

impl Cost {
    pub async fn now(s: &Client, super_pids: &[u32], ferry_pid: u32) -> Result<Self> {
        Ok(Self {
            requests: database_requests(s).await?,
            super_cpu: cpu_of(super_pids),
            ferry_cpu: cpu_seconds_tree(ferry_pid),
            seconds: clock(),
        })
    }

    /// Adds `phase`'s cost to this total.
    pub fn add(&mut self, phase: Self) {
        self.requests += phase.requests;
        self.super_cpu += phase.super_cpu;
        self.ferry_cpu += phase.ferry_cpu;
        self.seconds += phase.seconds;
    }

    /// The super's CPU seconds less what it uses in as long when nothing happens
    /// (`idle_per_second`).
    pub fn super_cpu_less(&self, idle_per_second: f64) -> f64 {
        self.super_cpu - idle_per_second * self.seconds
    }

    pub fn since(self, before: Self) -> Self {
        Self {
            requests: self.requests - before.requests,
            super_cpu: self.super_cpu - before.super_cpu,
            ferry_cpu: self.ferry_cpu - before.ferry_cpu,
            seconds: self.seconds - before.seconds,
        }
    }
}

/// How many of the observations of one of ferry's histograms fell within some of its bucket
/// bounds, and how many there were.
#[derive(Clone, Default)]
pub struct Within {
    within: Vec<f64>,
    all: f64,
}

impl Within {
    /// `metric`'s (`…_bucket`) series with `labels`, at each of `bounds` (as `le` reads).
    pub async fn read(
        ferry: &ferry_testkit::live::Ferry,
        metric: &str,
        labels: &[(&str, &str)],
        bounds: &[&str],
    ) -> Result<Self> {
        let (_, body) = ferry.get("/metrics").await?;
        let bucket = |le: &str| {
            let mut with = labels.to_vec();
            with.push(("le", le));
            ferry_testkit::live::sum_metric(&body, metric, &with)
        };
        Ok(Self {
            within: bounds.iter().map(|le| bucket(le)).collect(),
            all: bucket("+Inf"),
        })
    }

    /// Of ferry's writes, how many were done within 8 and 16 ms of their change being queued
    /// (`ferry_sync_latency_seconds`, whose span ends when the write's request is answered).
    pub async fn reconciles(ferry: &ferry_testkit::live::Ferry) -> Result<Self> {
        let metric = "ferry_sync_latency_seconds_bucket";
        Self::read(ferry, metric, &[], &["0.008", "0.016"]).await
    }

    /// Of ferry's requests to the super cluster, how many it answered within 32 and 128 ms
    /// (`ferry_request_seconds`).
    pub async fn super_requests(ferry: &ferry_testkit::live::Ferry) -> Result<Self> {
        let metric = "ferry_request_seconds_bucket";
        Self::read(ferry, metric, &[("cluster", "super")], &["0.032", "0.128"]).await
    }

    pub fn since(self, before: Self) -> Self {
        Self {
            within: (self.within.iter().zip(&before.within))
                .map(|(now, then)| now - then)
                .collect(),
            all: self.all - before.all,
        }
    }

    /// The percentage over each bound, and how many there were.
    pub fn over(&self) -> (Vec<f64>, f64) {
        let pct = |within: &f64| 100.0 * (1.0 - within / self.all.max(1.0));
        (self.within.iter().map(pct).collect(), self.all)
    }
}

/// The percentage of `ms` over `limit`.
pub fn share_over(ms: &[f64], limit: f64) -> f64 {
    100.0 * ms.iter().filter(|x| **x > limit).count() as f64 / ms.len().max(1) as f64
}

/// Every bucket of one of ferry's histograms without labels (`le` bound, cumulative count),
/// for its quantiles over a phase.
#[derive(Clone, Default)]
pub struct Buckets(Vec<(f64, f64)>);

impl Buckets {
    /// `metric`'s buckets now (`ferry_own_seconds`, say).
    pub async fn read(ferry: &ferry_testkit::live::Ferry, metric: &str) -> Result<Self> {
        let (_, body) = ferry.get("/metrics").await?;
        let prefix = format!("{metric}_bucket{{le=\"");
        let mut buckets: Vec<(f64, f64)> = body
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .filter_map(|rest| {
                let (le, rest) = rest.split_once('"')?;
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().ok()?
                };
                Some((le, rest.rsplit_once(' ')?.1.parse().ok()?))
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        Ok(Self(buckets))
    }

    pub fn since(self, before: &Self) -> Self {
        Self(
            self.0
                .iter()
                .map(|(le, n)| {
                    let then = before.0.iter().find(|(b, _)| b == le).map_or(0.0, |b| b.1);
                    (*le, n - then)
                })
                .collect(),
        )
    }

    /// How many observations there were.
    pub fn count(&self) -> f64 {
        self.0.last().map_or(0.0, |b| b.1)
    }

    /// The `q` quantile, linear within its bucket (as Prometheus' `histogram_quantile`).
    pub fn quantile(&self, q: f64) -> f64 {
        let target = q * self.count();
        let mut lower = (0.0, 0.0);
        for &(le, n) in &self.0 {
            if n >= target && n > lower.1 {
                if le.is_infinite() {
                    return lower.0;
                }
                return lower.0 + (le - lower.0) * (target - lower.1) / (n - lower.1);
            }
            lower = (le, n);
        }
        lower.0
    }
}
