//! The frames exchanged with a transform worker over its stdin and stdout.
//!
//! Each frame is a 4-byte little-endian length followed by that many bytes of JSON. Requests
//! carry the script itself (workers cache compiled modules by digest), so a replaced worker
//! needs no warm-up protocol.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

use super::Limits;

/// The byte a worker writes once, when it is ready to serve.
pub const READY: u8 = b'R';

/// Largest frame either side accepts; bigger means a bug or an attack.
pub const MAX_FRAME: usize = 64 << 20;

/// Which hook of a transform to call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hook {
    /// `to_super(obj, ctx)`: down, required for toSuper kinds.
    ToSuper,
    /// `to_tenant(obj, ctx)`: up, optional.
    ToTenant,
}

impl Hook {
    /// The Starlark function name.
    pub fn function(self) -> &'static str {
        match self {
            Hook::ToSuper => "to_super",
            Hook::ToTenant => "to_tenant",
        }
    }

    /// The value of `ctx.direction`.
    pub fn direction(self) -> &'static str {
        match self {
            Hook::ToSuper => "toSuper",
            Hook::ToTenant => "toTenant",
        }
    }
}

/// One call of a transform.
#[derive(Debug, Serialize, Deserialize)]
pub struct Request {
    /// sha256 of `source`, the cache key of the compiled module.
    pub digest: String,
    /// File name, for error messages.
    pub file: String,
    /// The script (empty once the worker has it).
    pub source: String,
    /// Only compile the script (answered with [`Response::Compiled`]).
    #[serde(default)]
    pub compile_only: bool,
    /// The hook to call.
    pub hook: Hook,
    /// The object passed as `obj`, as JSON text (parsed straight onto the Starlark heap).
    pub object: Box<serde_json::value::RawValue>,
    /// `ctx.tenant`.
    pub tenant: String,
    /// Hashed super namespace -> tenant namespace pairs known to the caller.
    #[serde(default)]
    pub learnt: std::collections::BTreeMap<String, String>,
    /// `ctx.tenant_namespaces()`.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// The limits of this call.
    pub limits: Limits,
}

/// What a worker answers.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Response {
    /// The returned object.
    Ok(serde_json::Value),
    /// The hook is not defined (allowed for `to_tenant`).
    Missing,
    /// The request left the source out, and this worker has not compiled that digest.
    NeedSource,
    /// The script compiled (the answer to a compile-only request).
    Compiled,
    /// The call failed; `limit` names the limit hit, if any.
    Failed {
        /// `steps`, `heap`, `time`, `output`, or absent for a script error.
        limit: Option<String>,
        /// What happened, with the script's own location where known.
        message: String,
    },
}

/// A response frame whose length carries this bit is the worker's last: it exits once it is
/// sent, and the engine does not take the worker again. (No frame reaches it: `MAX_FRAME`.)
pub const LAST: u32 = 1 << 31;

/// Writes one frame.
pub fn write_frame(out: &mut impl Write, body: &[u8]) -> io::Result<()> {
    out.write_all(&frame(body)?)?;
    out.flush()
}

/// Writes the worker's last response ([`LAST`]).
pub fn write_last_frame(out: &mut impl Write, body: &[u8]) -> io::Result<()> {
    let mut frame = frame(body)?;
    let len = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]) | LAST;
    frame[..4].copy_from_slice(&len.to_le_bytes());
    out.write_all(&frame)?;
    out.flush()
}

/// A frame as one buffer, so that it crosses the pipe in one write (one wake-up of the reader).
pub fn frame(body: &[u8]) -> io::Result<Vec<u8>> {
    let len = u32::try_from(body.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame too large"))?;
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(body);
    Ok(out)
}

/// Reads one frame; `Ok(None)` at a clean end of stream.
pub fn read_frame(input: &mut impl Read) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match input.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes exceeds {MAX_FRAME}"),
        ));
    }
    let mut body = vec![0u8; len];
    input.read_exact(&mut body)?;
    Ok(Some(body))
}
