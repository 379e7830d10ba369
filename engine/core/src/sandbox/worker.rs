//! The transform worker: a child process that evaluates Starlark on behalf of the engine.
//!
//! ```text
//!  engine ──frame(Request)──▶ stdin ─▶ serve() ─▶ Starlark (steps, heap, time checked per stmt)
//!  engine ◀─frame(Response)── stdout ◀────────────┘
//!         ◀── exit / killed ──  RLIMIT_AS hit, or the engine's deadline passed
//! ```
//!
//! The checks inside the interpreter give clean errors for the common cases; the process
//! boundary is what makes the limits hold for the rest: a native operation that allocates
//! gigabytes fails against `RLIMIT_AS` and kills only this process, and one that runs too long
//! is killed by the engine when its deadline passes.

use std::cell::Cell;
use std::io::{self, BufReader, BufWriter, Write};
use std::rc::Rc;
use std::time::{Duration, Instant};

use starlark::codemap::FileSpanRef;
use starlark::environment::{FrozenModule, Globals, GlobalsBuilder, LibraryExtension, Module};
use starlark::eval::{BeforeStmtFunc, BeforeStmtFuncDyn, Evaluator};
use starlark::syntax::{AstModule, Dialect};
use starlark::values::dict::DictRef;
use starlark::PrintHandler;

use super::protocol::{read_frame, write_frame, write_last_frame, Hook, Request, Response};
use super::{json, Limits, MAX_OUTPUT_BYTES};

/// Memory the interpreter may use beyond `maxHeapBytes` (its own structures, the converted
/// input and output); the OS limit is `current + maxHeapBytes + this`.
const INTERPRETER_ALLOWANCE: u64 = 64 << 20;

/// A worker whose address space grew this much beyond its start is replaced after the call,
/// and its limit is never set from more than its start plus this: memory its allocator keeps
/// for reuse after earlier calls cannot ratchet the limit up by more.
const RECYCLE_GROWTH: u64 = 64 << 20;

/// A call whose Starlark heap, or whose request, reached this size retires its worker once it
/// has answered: what it freed is given back to the OS with the process, and the worker's
/// allocator keeps freed memory for reuse between ordinary calls (giving it back after every
/// call doubled the cost of a small one).
const LARGE_CALL: u64 = 16 << 20;

/// Compiled transforms a worker keeps.
const MODULE_CACHE: u64 = 256;

/// How often (in statements) the clock and the heap are read.
const CHECK_EVERY: u64 = 32;

/// Builds `ctx` for a call; kept in Starlark so that `ctx` is an ordinary struct.
const PRELUDE: &str = r#"
def make_ctx(tenant, direction, learnt, namespaces):
    prefix = tenant + "-"

    def tenant_namespaces():
        return list(namespaces)

    def super_namespace(namespace):
        if namespace == "":
            return ""
        return ferry_map(tenant, namespace)

    def tenant_namespace(super_namespace):
        if super_namespace in learnt:
            return learnt[super_namespace]
        if super_namespace.startswith(prefix):
            rest = super_namespace[len(prefix):]
            if ferry_map(tenant, rest) == super_namespace:
                return rest
        return None

    return struct(
        tenant = tenant,
        direction = direction,
        super_namespace = super_namespace,
        tenant_namespace = tenant_namespace,
        tenant_namespaces = tenant_namespaces,
    )
"#;

#[starlark::starlark_module]
fn naming_functions(builder: &mut GlobalsBuilder) {
    /// `map(tenant, name)` from the naming rules.
    fn ferry_map(tenant: &str, name: &str) -> starlark::Result<String> {
        Ok(crate::naming::map(tenant, name))
    }
}

/// What transforms may use: the standard library plus data-only extensions. No `load`, no
/// print output, nothing that reads a clock, a file or randomness.
fn script_globals() -> Globals {
    GlobalsBuilder::extended_by(&[
        LibraryExtension::StructType,
        LibraryExtension::Map,
        LibraryExtension::Filter,
        LibraryExtension::Partial,
        LibraryExtension::Json,
        LibraryExtension::Typing,
        LibraryExtension::SetType,
        LibraryExtension::Print,
    ])
    .build()
}

/// A limit that stopped evaluation.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
struct LimitHit {
    message: String,
}

/// Counts statements and checks the clock and heap every few of them.
struct Guard {
    steps: u64,
    max_steps: u64,
    max_heap: u64,
    deadline: Instant,
    timeout_ms: u64,
    hit: Rc<Cell<Option<&'static str>>>,
}

impl Guard {
    fn fail(&self, limit: &'static str, message: String) -> starlark::Result<()> {
        self.hit.set(Some(limit));
        Err(starlark::Error::new_other(LimitHit { message }))
    }
}

impl<'e> BeforeStmtFuncDyn<'e> for Guard {
    fn call<'v>(
        &mut self,
        _span: FileSpanRef,
        _continued: bool,
        eval: &mut Evaluator<'v, '_, 'e>,
    ) -> starlark::Result<()> {
        self.steps += 1;
        if self.steps > self.max_steps {
            return self.fail(
                "steps",
                format!("exceeded maxSteps={} statements", self.max_steps),
            );
        }
        if self.steps % CHECK_EVERY == 0 {
            let heap = eval.heap().allocated_bytes() as u64;
            if heap > self.max_heap {
                return self.fail(
                    "heap",
                    format!(
                        "exceeded maxHeapBytes={} (heap holds {heap} bytes)",
                        self.max_heap
                    ),
                );
            }
            if Instant::now() > self.deadline {
                return self.fail("time", format!("exceeded timeoutMs={}", self.timeout_ms));
            }
        }
        Ok(())
    }
}

struct PrintNothing;

impl PrintHandler for PrintNothing {
    fn println(&self, _text: &str) -> starlark::Result<()> {
        Ok(())
    }
}

/// Reads a non-blocking stdin: spins for [`super::pool::spin`] (requests of a busy engine come
/// faster than a sleep and wake-up, unless the process has one CPU), then sleeps in `poll`
/// until data arrives.
struct SpinRead<R> {
    inner: R,
}

impl<R: io::Read + std::os::fd::AsFd> io::Read for SpinRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let spin_until = Instant::now() + super::pool::spin();
        loop {
            match self.inner.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => return other,
            }
            if Instant::now() < spin_until {
                std::hint::spin_loop();
                continue;
            }
            let mut fds = [rustix::event::PollFd::new(
                &self.inner,
                rustix::event::PollFlags::IN,
            )];
            match rustix::event::poll(&mut fds, None) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// The worker's state between calls.
struct Worker {
    globals: Globals,
    prelude: FrozenModule,
    /// Frozen modules by the sha256 of their source.
    modules: moka::sync::Cache<String, FrozenModule>,
    start_vm: u64,
    limit_set_for: Option<u64>,
    calls_since_limit: u32,
    /// The Starlark heap the last call used (its end is its peak: no collection runs in a call).
    last_heap: Cell<u64>,
}

/// Serves requests on stdin until it closes. Called by `ferry __sandbox-worker`.
pub fn serve() -> io::Result<()> {
    let stdin = io::stdin();
    rustix::io::ioctl_fionbio(&stdin, true)?;
    let mut input = BufReader::new(SpinRead {
        inner: stdin.lock(),
    });
    let mut output = BufWriter::new(io::stdout().lock());
    let mut worker = Worker::new()?;
    output.write_all(&[super::protocol::READY])?;
    output.flush()?;
    while let Some(frame) = read_frame(&mut input)? {
        let reply = match serde_json::from_slice::<Request>(&frame) {
            Ok(request) => {
                worker.limit_memory(&request.limits);
                worker.call(&request)
            }
            Err(e) => Err(Response::Failed {
                limit: None,
                message: format!("malformed request: {e}"),
            }),
        };
        let body = match reply {
            Ok(object) => object,
            Err(response) => serde_json::to_vec(&response).map_err(io::Error::other)?,
        };
        let large = worker.last_heap.take().max(frame.len() as u64) >= LARGE_CALL;
        if large
            || worker.calls_since_limit == 0
                && vm_size().is_some_and(|vm| vm > worker.start_vm + RECYCLE_GROWTH)
        {
            // The last answer says so; the engine starts a fresh worker on its next call.
            return write_last_frame(&mut output, &body);
        }
        write_frame(&mut output, &body)?;
    }
    Ok(())
}

impl Worker {
    fn new() -> io::Result<Self> {
        let mut prelude_globals = GlobalsBuilder::extended_by(&[LibraryExtension::StructType]);
        naming_functions(&mut prelude_globals);
        let prelude_globals = prelude_globals.build();
        let prelude = Module::with_temp_heap(|module| -> io::Result<FrozenModule> {
            let ast = AstModule::parse("prelude.star", PRELUDE.to_string(), &Dialect::Extended)
                .map_err(|e| io::Error::other(e.to_string()))?;
            let mut eval = Evaluator::new(&module);
            eval.eval_module(ast, &prelude_globals)
                .map_err(|e| io::Error::other(e.to_string()))?;
            drop(eval);
            module
                .freeze()
                .map_err(|e| io::Error::other(format!("{e:?}")))
        })?;
        Ok(Self {
            globals: script_globals(),
            prelude,
            modules: moka::sync::Cache::new(MODULE_CACHE),
            start_vm: vm_size().unwrap_or(0),
            limit_set_for: None,
            calls_since_limit: 0,
            last_heap: Cell::default(),
        })
    }

    /// Sets the soft `RLIMIT_AS` relative to the current address space. Re-measured when the
    /// limit changes and every 64 calls, since reading `/proc` on every call costs more than
    /// the call itself.
    fn limit_memory(&mut self, limits: &Limits) {
        self.calls_since_limit += 1;
        if self.limit_set_for == Some(limits.max_heap_bytes) && self.calls_since_limit < 64 {
            return;
        }
        self.calls_since_limit = 0;
        self.limit_set_for = Some(limits.max_heap_bytes);
        if let Some(vm) = vm_size() {
            let base = vm.min(self.start_vm + RECYCLE_GROWTH);
            set_address_space_limit(base + limits.max_heap_bytes + INTERPRETER_ALLOWANCE);
        }
    }

    /// The response body: `{"ok": <object>}` as bytes written straight from the Starlark heap,
    /// or another response.
    fn call(&mut self, request: &Request) -> Result<Vec<u8>, Response> {
        let hit = Rc::new(Cell::new(None));
        let guard = || Guard {
            steps: 0,
            max_steps: request.limits.max_steps,
            max_heap: request.limits.max_heap_bytes,
            deadline: Instant::now() + Duration::from_millis(request.limits.timeout_ms),
            timeout_ms: request.limits.timeout_ms,
            hit: hit.clone(),
        };
        let failed = |message: String| {
            Err(Response::Failed {
                limit: hit.get().map(str::to_string),
                message,
            })
        };
        let module = match self.modules.get(&request.digest) {
            Some(module) => module,
            // Evicted, or never sent: the engine resends the script.
            None if request.source.is_empty() => return Err(Response::NeedSource),
            None => match compile(&request.file, &request.source, &self.globals, guard()) {
                Ok(module) => {
                    self.modules.insert(request.digest.clone(), module.clone());
                    module
                }
                Err(message) => return failed(message),
            },
        };
        if request.compile_only {
            return Err(Response::Compiled);
        }
        let function = match module.get_option(request.hook.function()) {
            Ok(Some(f)) => f,
            Ok(None) => return Err(Response::Missing),
            Err(e) => return failed(e.to_string()),
        };
        let make_ctx = match self.prelude.get("make_ctx") {
            Ok(f) => f,
            Err(e) => return failed(e.to_string()),
        };
        Module::with_temp_heap(|env| {
            let mut eval = Evaluator::new(&env);
            eval.set_print_handler(&PrintNothing);
            eval.before_stmt_for_dap(BeforeStmtFunc::from_dyn(Box::new(guard())));
            let heap = env.heap();
            let learnt: serde_json::Map<String, serde_json::Value> = request
                .learnt
                .iter()
                .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                .collect();
            // Accessing through the heap keeps the frozen heaps alive as long as this one.
            let make_ctx = env.heap().access_owned_frozen_value(&make_ctx);
            let function = env.heap().access_owned_frozen_value(&function);
            let ctx = eval.eval_function(
                make_ctx,
                &[
                    heap.alloc(request.tenant.as_str()),
                    heap.alloc(request.hook.direction()),
                    heap.alloc(learnt),
                    heap.alloc(request.namespaces.clone()),
                ],
                &[],
            );
            let ctx = match ctx {
                Ok(c) => c,
                Err(e) => return failed(describe(&e)),
            };
            let obj = match json::to_starlark(heap, request.object.get()) {
                Ok(obj) => obj,
                Err(e) => {
                    return failed(format!("the object cannot be given to the transform: {e}"))
                }
            };
            let result = match eval.eval_function(function, &[obj, ctx], &[]) {
                Ok(out) => output(out, request.hook),
                Err(e) => failed(describe(&e)),
            };
            self.last_heap.set(heap.allocated_bytes() as u64);
            result
        })
    }
}

/// Parses and evaluates a script's top level, under the same limits as a call.
fn compile(
    file: &str,
    source: &str,
    globals: &Globals,
    guard: Guard,
) -> Result<FrozenModule, String> {
    let ast =
        AstModule::parse(file, source.to_string(), &Dialect::Extended).map_err(|e| describe(&e))?;
    if let Some(load) = ast.loads().first() {
        return Err(format!(
            "{}: load() is not allowed in transforms",
            super::script::span_start(&load.span)
        ));
    }
    Module::with_temp_heap(|module| {
        let mut eval = Evaluator::new(&module);
        eval.set_print_handler(&PrintNothing);
        // Registering the guard before compiling is what makes the compiler emit the
        // per-statement hook into every function body of the module.
        eval.before_stmt_for_dap(BeforeStmtFunc::from_dyn(Box::new(guard)));
        eval.eval_module(ast, globals).map_err(|e| describe(&e))?;
        drop(eval);
        module.freeze().map_err(|e| format!("{e:?}"))
    })
}

/// A starlark error as one line: message and location, without the source excerpt.
fn describe(e: &starlark::Error) -> String {
    let message = e.without_diagnostic().to_string();
    let message = message
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_string();
    match e.span() {
        Some(span) => format!("{}: {message}", super::script::span_start(span)),
        None => message,
    }
}

/// The response body for a returned value: `{"ok": <json>}`, or why it cannot be one.
fn output(out: starlark::values::Value, hook: Hook) -> Result<Vec<u8>, Response> {
    let failed = |limit: Option<&str>, message: String| {
        Err(Response::Failed {
            limit: limit.map(str::to_string),
            message,
        })
    };
    if DictRef::from_value(out).is_none() {
        return failed(
            None,
            format!(
                "{} must return an object (a dict), got {}",
                hook.function(),
                out.get_type()
            ),
        );
    }
    let mut body = b"{\"ok\":".to_vec();
    if let Err(e) = json::write_json(out, &mut body) {
        let limit = e.contains("nested deeper").then_some("output");
        return failed(
            limit,
            format!(
                "{} returned data that is not a Kubernetes object: {e}",
                hook.function()
            ),
        );
    }
    body.push(b'}');
    let size = body.len() - 7;
    if size > MAX_OUTPUT_BYTES {
        return failed(
            Some("output"),
            format!("output is {size} bytes of JSON, more than the {MAX_OUTPUT_BYTES} a Kubernetes object may hold"),
        );
    }
    Ok(body)
}

/// The process's virtual memory size in bytes, from `/proc/self/statm`.
fn vm_size() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().next()?.parse().ok()?;
    Some(pages * rustix::param::page_size() as u64)
}

/// Lowers the soft address-space limit; the hard limit stays so that it can be raised again.
fn set_address_space_limit(bytes: u64) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let current = getrlimit(Resource::As);
    let soft = match current.maximum {
        Some(max) => bytes.min(max),
        None => bytes,
    };
    // Failing to lower a limit leaves the engine's deadline and the interpreter's own
    // checks in force; there is nobody to report to here but the next response.
    let _ = setrlimit(
        Resource::As,
        Rlimit {
            current: Some(soft),
            maximum: current.maximum,
        },
    );
}
