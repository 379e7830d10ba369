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

use super::protocol::{self, Hook, Request, Response, MAX_FRAME};
use super::{Error, Result, Script};

/// Time a worker gets beyond `timeoutMs` before it is killed. The interpreter stops itself at
/// `timeoutMs` between statements; this covers a native operation that cannot be interrupted.
pub const KILL_GRACE: Duration = Duration::from_millis(250);

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
}

/// The wire form of a request, borrowing from the caller.
#[derive(Serialize)]
struct RequestRef<'a> {
    digest: &'a str,
    file: &'a str,
    source: &'a str,
    hook: Hook,
    object: &'a serde_json::Value,
    tenant: &'a str,
    learnt: &'a std::collections::BTreeMap<String, String>,
    limits: super::Limits,
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

    /// Sends one request and waits for its response until the deadline.
    pub(super) fn call(&self, request: &Request, script: &Script) -> Result<Response> {
        let deadline = Instant::now() + Duration::from_millis(request.limits.timeout_ms) + KILL_GRACE;
        let mut process = self.take()?;
        let encode = |with_source: bool| {
            let wire = RequestRef {
                digest: &request.digest,
                file: &request.file,
                source: if with_source { &request.source } else { "" },
                hook: request.hook,
                object: &request.object,
                tenant: &request.tenant,
                learnt: &request.learnt,
                limits: request.limits,
            };
            serde_json::to_vec(&wire).map_err(|e| Error::Worker(e.to_string()))
        };
        let body = encode(!process.known.contains(&request.digest))?;
        let mut exchanged = process.exchange(&body, deadline);
        if matches!(exchanged, Ok(Response::NeedSource)) {
            exchanged = process.exchange(&encode(true)?, deadline);
        }
        match exchanged {
            Ok(Response::NeedSource) => {
                process.kill();
                Err(Error::Worker("the worker asked for the script twice".into()))
            }
            Ok(response) => {
                process.known.insert(request.digest.clone());
                self.give_back(process);
                Ok(response)
            }
            Err(Failure::Timeout) => {
                process.kill();
                Err(Error::Limit {
                    name: script.name.clone(),
                    file: script.file.clone(),
                    limit: "time".into(),
                    message: format!(
                        "exceeded timeoutMs={} (worker killed after {} ms)",
                        request.limits.timeout_ms,
                        request.limits.timeout_ms + KILL_GRACE.as_millis() as u64
                    ),
                })
            }
            Err(Failure::Died) => {
                let (status, stderr) = process.reap();
                if stderr.contains("memory allocation") || stderr.contains("capacity overflow") {
                    Err(Error::Limit {
                        name: script.name.clone(),
                        file: script.file.clone(),
                        limit: "memory".into(),
                        message: format!(
                            "exceeded the process memory limit (maxHeapBytes={} plus the interpreter allowance); worker replaced",
                            request.limits.max_heap_bytes
                        ),
                    })
                } else {
                    let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message");
                    Err(Error::Script {
                        name: script.name.clone(),
                        message: format!("worker died ({status}): {last}; worker replaced"),
                    })
                }
            }
            Err(Failure::Io(e)) => {
                process.kill();
                Err(Error::Worker(format!("talking to the worker failed: {e}")))
            }
        }
    }

    /// An idle live worker, or a new one.
    fn take(&self) -> Result<Process> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(mut process) = idle.pop() {
            // A worker may exit between calls (it recycles itself when it has grown).
            if matches!(process.child.try_wait(), Ok(None)) {
                return Ok(process);
            }
            process.kill();
        }
        drop(idle);
        self.spawn()
    }

    fn give_back(&self, process: Process) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(process);
        } else {
            drop(idle);
            let mut process = process;
            process.kill();
        }
    }

    fn spawn(&self) -> Result<Process> {
        let mut child = Command::new(&self.command.program)
            .args(&self.command.args)
            .env_clear()
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
        Ok(Process {
            child,
            stdin,
            stdout,
            stderr,
            known: HashSet::new(),
        })
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
    fn exchange(&mut self, body: &[u8], deadline: Instant) -> std::result::Result<Response, Failure> {
        if let Err(e) = protocol::write_frame(&mut self.stdin, body) {
            return Err(if e.kind() == std::io::ErrorKind::BrokenPipe {
                Failure::Died
            } else {
                Failure::Io(e)
            });
        }
        let mut len = [0u8; 4];
        self.read_until(&mut len, deadline)?;
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_FRAME {
            return Err(Failure::Io(std::io::Error::other(format!(
                "response frame of {len} bytes"
            ))));
        }
        let mut frame = vec![0u8; len];
        self.read_until(&mut frame, deadline)?;
        serde_json::from_slice(&frame).map_err(|e| Failure::Io(std::io::Error::other(e)))
    }

    /// Fills `buf` from the worker's stdout, waiting no later than `deadline`.
    fn read_until(&mut self, buf: &mut [u8], deadline: Instant) -> std::result::Result<(), Failure> {
        let mut filled = 0;
        while filled < buf.len() {
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
            match self.stdout.read(&mut buf[filled..]) {
                Ok(0) => return Err(Failure::Died),
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Failure::Io(e)),
            }
        }
        Ok(())
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
        let _ = (&mut self.stderr).take(64 * 1024).read_to_string(&mut stderr);
        (status, stderr)
    }
}
