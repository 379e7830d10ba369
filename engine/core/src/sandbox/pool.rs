//! Worker processes: started on demand, reused while healthy, killed when a call overruns its
//! deadline, replaced when they die.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use serde::Serialize;

use super::protocol::{self, Hook, Response, MAX_FRAME};
use super::{Error, Result, Script};

/// The allocator settings of a worker process: freed address space unmapped rather than kept
/// (see where a [`Pool`] spawns one); no background thread, and freed pages kept for reuse
/// between calls for jemalloc's usual ten seconds (ferry's own settings, `.cargo/config.toml`,
/// give them back after one).
const WORKER_ALLOCATOR: &str =
    "retain:false,oversize_threshold:1048576,background_thread:false,dirty_decay_ms:10000";

/// Time a worker gets beyond `timeoutMs` before it is killed. The interpreter stops itself at
/// `timeoutMs` between statements; this covers a native operation that cannot be interrupted.
pub const KILL_GRACE: Duration = Duration::from_millis(250);

/// How long a new worker may take to start (process start, Starlark globals) before it is
/// given up. Start-up is awaited before a call's deadline starts, so that a loaded machine
/// does not turn start-up into a timeout.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// How long compiling a script (parsing it, running its top level) may take. The script is
/// the platform's reviewed code, not tenant data, and compiles once per worker.
pub const COMPILE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a caller spins on a worker's pipe before sleeping in `poll`. Most transform calls
/// answer within this; sleeping and being woken costs more than the call on a virtual
/// machine, where a wake-up is an inter-processor interrupt.
pub const SPIN: Duration = Duration::from_micros(300);

/// [`SPIN`], or nothing when this process may run on one CPU only (`taskset`, a cgroup quota
/// of one CPU): there, spinning only delays the process it waits for.
pub fn spin() -> Duration {
    static SPIN_FOR: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *SPIN_FOR.get_or_init(
        || match std::thread::available_parallelism().map_or(1, |n| n.get()) {
            1 => Duration::ZERO,
            _ => SPIN,
        },
    )
}

/// Bytes read from a worker's pipe at once.
const READ_CHUNK: usize = 16 * 1024;

/// Idle workers kept for reuse.
const MAX_IDLE: usize = 8;

/// How to start a worker: a program and its arguments (for `ferry`, itself with a hidden
/// subcommand).
#[derive(Clone, Debug)]
pub struct WorkerCommand {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
}

/// The pool of workers.
#[derive(Debug)]
pub struct Pool {
    command: WorkerCommand,
    idle: Mutex<Vec<Process>>,
}

/// One running worker.
#[derive(Debug)]
struct Process {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    stderr: ChildStderr,
    /// Script digests this worker has compiled, so their source need not be sent again.
    known: HashSet<String>,
    /// Its last answer said it exits ([`protocol::LAST`]).
    retiring: bool,
}

/// The wire form of a request, borrowing from the caller.
#[derive(Serialize)]
struct RequestRef<'a> {
    digest: &'a str,
    file: &'a str,
    source: &'a str,
    compile_only: bool,
    hook: Hook,
    object: &'a serde_json::Value,
    tenant: &'a str,
    learnt: &'a std::collections::BTreeMap<String, String>,
    namespaces: &'a [String],
    limits: super::Limits,
}

/// One call, borrowed from the caller.
pub(super) struct Call<'a> {
    pub script: &'a Script,
    pub hook: Hook,
    pub object: &'a serde_json::Value,
    pub tenant: &'a str,
    pub learnt: &'a std::collections::BTreeMap<String, String>,
    pub namespaces: &'a [String],
}

/// How an exchange with a worker went wrong.
enum Failure {
    /// The deadline passed.
    Timeout,
    /// The worker closed its end: it died or exited.
    Died,
    /// Anything else on the pipes.
    Io(std::io::Error),
}

impl Pool {
    /// An empty pool; workers start on the first call.
    pub fn new(command: WorkerCommand) -> Self {
        Self {
            command,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Sends one request and waits for its response until the deadline. A worker that has not
    /// compiled the script yet compiles it first, in an exchange of its own with its own
    /// deadline, so that the call's deadline covers the call alone.
    pub(super) fn call(&self, call: &Call<'_>) -> Result<Response> {
        let script = call.script;
        let mut process = self.take()?;
        let encode = |source: bool| {
            let wire = RequestRef {
                digest: &script.digest,
                file: &script.file,
                source: if source { &script.source } else { "" },
                compile_only: source,
                hook: call.hook,
                object: if source {
                    &serde_json::Value::Null
                } else {
                    call.object
                },
                tenant: call.tenant,
                learnt: call.learnt,
                namespaces: call.namespaces,
                limits: script.limits,
            };
            serde_json::to_vec(&wire).map_err(|e| Error::Worker(e.to_string()))
        };
        let call_deadline =
            || Instant::now() + Duration::from_millis(script.limits.timeout_ms) + KILL_GRACE;
        for attempt in 0..2 {
            if !process.known.contains(&script.digest) {
                match process.exchange(&encode(true)?, Instant::now() + COMPILE_TIMEOUT) {
                    // Its last answer: the call goes to a fresh worker, which compiles first.
                    Ok(Response::Compiled) if process.retiring => {
                        let _ = process.child.wait();
                        process = self.spawn()?;
                        continue;
                    }
                    Ok(Response::Compiled) => {
                        process.known.insert(script.digest.clone());
                    }
                    Ok(other) => {
                        self.give_back(process);
                        return Ok(other);
                    }
                    Err(failure) => {
                        return Err(self.failed(process, failure, script, COMPILE_TIMEOUT))
                    }
                }
            }
            match process.exchange(&encode(false)?, call_deadline()) {
                // The worker evicted the module: compile again, once.
                Ok(Response::NeedSource) if attempt == 0 => {
                    process.known.remove(&script.digest);
                    if process.retiring {
                        let _ = process.child.wait();
                        process = self.spawn()?;
                    }
                }
                Ok(Response::NeedSource) | Ok(Response::Compiled) => break,
                Ok(response) => {
                    self.give_back(process);
                    return Ok(response);
                }
                Err(failure) => {
                    let limit = Duration::from_millis(script.limits.timeout_ms);
                    return Err(self.failed(process, failure, script, limit));
                }
            }
        }
        process.kill();
        Err(Error::Worker(
            "the worker lost the compiled script twice".into(),
        ))
    }

    /// The error for a failed exchange; the worker is killed or reaped, never reused.
    fn failed(
        &self,
        mut process: Process,
        failure: Failure,
        script: &Script,
        limit: Duration,
    ) -> Error {
        let limits = script.limits;
        match failure {
            Failure::Timeout => {
                process.kill();
                Error::Limit {
                    name: script.name.clone(),
                    file: script.file.clone(),
                    limit: "time".into(),
                    message: format!(
                        "exceeded timeoutMs={} (worker killed after {} ms)",
                        limit.as_millis(),
                        (limit + KILL_GRACE).as_millis()
                    ),
                }
            }
            Failure::Died => {
                let (status, stderr) = process.reap();
                if stderr.contains("memory allocation") || stderr.contains("capacity overflow") {
                    Error::Limit {
                        name: script.name.clone(),
                        file: script.file.clone(),
                        limit: "memory".into(),
                        message: format!(
                            "exceeded the process memory limit (maxHeapBytes={} plus the interpreter allowance); worker replaced",
                            limits.max_heap_bytes
                        ),
                    }
                } else {
                    let last = stderr
                        .lines()
                        .rev()
                        .find(|l| !l.trim().is_empty())
                        .unwrap_or("no message");
                    Error::Script {
                        name: script.name.clone(),
                        message: format!("worker died ({status}): {last}; worker replaced"),
                    }
                }
            }
            Failure::Io(e) => {
                process.kill();
                Error::Worker(format!("talking to the worker failed: {e}"))
            }
        }
    }

    /// An idle live worker, or a new one.
    fn take(&self) -> Result<Process> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(mut process) = idle.pop() {
            // A worker may have died between calls.
            if matches!(process.child.try_wait(), Ok(None)) {
                return Ok(process);
            }
            process.kill();
        }
        drop(idle);
        self.spawn()
    }

    fn give_back(&self, mut process: Process) {
        if process.retiring {
            let _ = process.child.wait();
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(process);
        } else {
            drop(idle);
            process.kill();
        }
    }

    fn spawn(&self) -> Result<Process> {
        let mut child = Command::new(&self.command.program)
            .args(&self.command.args)
            .env_clear()
            // The engine's allocator (jemalloc, `engine/cli/src/main.rs`) keeps freed address
            // space mapped unless told otherwise. A worker's memory limit is set from its
            // address space (`worker.rs`): what the allocator keeps for reuse can raise it by
            // `RECYCLE_GROWTH` at most (a worker grown more is replaced), a large call retires
            // its worker (`LARGE_CALL`), and allocations of 1 MiB or more are unmapped when
            // freed.
            .env("_RJEM_MALLOC_CONF", WORKER_ALLOCATOR)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                Error::Worker(format!(
                    "cannot start {}: {e}",
                    self.command.program.display()
                ))
            })?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            return Err(Error::Worker("worker pipes were not set up".into()));
        };
        // Non-blocking, so that a caller can spin on it before sleeping.
        if let Err(e) = rustix::io::ioctl_fionbio(&stdout, true) {
            let _ = child.kill();
            return Err(Error::Worker(format!(
                "cannot make the worker pipe non-blocking: {e}"
            )));
        }
        let mut process = Process {
            child,
            stdin,
            stdout,
            stderr,
            known: HashSet::new(),
            retiring: false,
        };
        // The worker writes one byte when it is ready to serve; only then does a call's
        // deadline start.
        let mut ready = Vec::new();
        let started = process.read_some(&mut ready, Instant::now() + STARTUP_TIMEOUT);
        if started.is_err() || ready != [protocol::READY] {
            let _ = process.child.kill();
            let (status, stderr) = process.reap();
            return Err(Error::Worker(format!(
                "{} {} did not start ({status}): {}",
                self.command.program.display(),
                self.command.args.join(" "),
                stderr.lines().last().unwrap_or("no message")
            )));
        }
        Ok(process)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let idle = self.idle.get_mut().unwrap_or_else(|p| p.into_inner());
        for mut process in idle.drain(..) {
            process.kill();
        }
    }
}

impl Process {
    fn exchange(
        &mut self,
        body: &[u8],
        deadline: Instant,
    ) -> std::result::Result<Response, Failure> {
        let frame = protocol::frame(body).map_err(Failure::Io)?;
        if let Err(e) = self.stdin.write_all(&frame) {
            return Err(if e.kind() == std::io::ErrorKind::BrokenPipe {
                Failure::Died
            } else {
                Failure::Io(e)
            });
        }
        // Read whatever arrives into one buffer: usually the whole response in one read.
        let mut buf = Vec::with_capacity(READ_CHUNK);
        let mut need = 4;
        while buf.len() < need {
            self.read_some(&mut buf, deadline)?;
            if need == 4 && buf.len() >= 4 {
                let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
                self.retiring = len & protocol::LAST != 0;
                let len = (len & !protocol::LAST) as usize;
                if len > MAX_FRAME {
                    return Err(Failure::Io(std::io::Error::other(format!(
                        "response frame of {len} bytes"
                    ))));
                }
                need = 4 + len;
            }
        }
        serde_json::from_slice(&buf[4..need]).map_err(|e| Failure::Io(std::io::Error::other(e)))
    }

    /// Appends what the worker's stdout has, waiting for it no later than `deadline`: spinning
    /// for [`SPIN`] first, then sleeping in `poll`.
    fn read_some(
        &mut self,
        buf: &mut Vec<u8>,
        deadline: Instant,
    ) -> std::result::Result<(), Failure> {
        let spin_until = Instant::now() + spin();
        let start = buf.len();
        // Zeroed once per read, not per spin: the spin must stay cheap. A typical answer (a few
        // KiB) fits in one read; a larger one takes more reads of this size, not a pipe's
        // 64 KiB zeroed for every call.
        buf.resize(start + READ_CHUNK, 0);
        let result = self.wait_and_read(&mut buf[start..], spin_until, deadline);
        buf.truncate(start + *result.as_ref().unwrap_or(&0));
        result.map(|_| ())
    }

    fn wait_and_read(
        &mut self,
        buf: &mut [u8],
        spin_until: Instant,
        deadline: Instant,
    ) -> std::result::Result<usize, Failure> {
        loop {
            match self.stdout.read(buf) {
                Ok(0) => return Err(Failure::Died),
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(Failure::Io(e)),
            }
            if Instant::now() < spin_until {
                std::hint::spin_loop();
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Failure::Timeout);
            }
            let timeout = Timespec {
                tv_sec: left.as_secs() as i64,
                tv_nsec: i64::from(left.subsec_nanos()),
            };
            let mut fds = [PollFd::new(&self.stdout, PollFlags::IN)];
            match poll(&mut fds, Some(&timeout)) {
                Ok(0) => return Err(Failure::Timeout),
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(Failure::Io(e.into())),
            }
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for a worker that closed its stdout and returns its exit status and stderr.
    fn reap(&mut self) -> (String, String) {
        let _ = self.stdin.flush();
        let status = match self.child.wait() {
            Ok(s) => s.to_string(),
            Err(e) => format!("unknown status: {e}"),
        };
        let mut stderr = String::new();
        let _ = (&mut self.stderr)
            .take(64 * 1024)
            .read_to_string(&mut stderr);
        (status, stderr)
    }
}
