//! Source positions of YAML nodes, so that errors found after deserialization (a duplicate
//! kind, a missing transform file) can still say `file:line:column`.
//!
//! serde_yaml reports positions only for its own errors; this walks the YAML event stream once
//! and records where every node starts, keyed by its path (`spec.resources[1].kind`).

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

/// A place in a source file: path, 1-based line and column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The file.
    pub file: PathBuf,
    /// 1-based line; 0 when unknown.
    pub line: usize,
    /// 1-based column; 0 when unknown.
    pub column: usize,
}

impl Location {
    /// A location that names only the file.
    pub fn file(file: &Path) -> Self {
        Self {
            file: file.to_path_buf(),
            line: 0,
            column: 0,
        }
    }
}

impl Location {
    /// Where a serde_yaml error happened in `file`, whose text started `line_offset` lines
    /// into the file.
    pub fn of_yaml_error(file: &Path, e: &serde_yaml::Error, line_offset: usize) -> Self {
        let (line, column) = e
            .location()
            .map(|l| (l.line(), l.column()))
            .unwrap_or((0, 0));
        Self {
            file: file.to_path_buf(),
            line: if line == 0 { 0 } else { line + line_offset },
            column,
        }
    }
}

/// A serde_yaml error's message without its trailing " at line L column C" (ferry prints the
/// location first instead).
pub fn yaml_message(e: &serde_yaml::Error) -> String {
    let message = e.to_string();
    match message.find(" at line ") {
        Some(cut) => message[..cut].to_string(),
        None => message,
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.file.display())
        } else {
            write!(f, "{}:{}:{}", self.file.display(), self.line, self.column)
        }
    }
}

/// Deepest flow nesting (`[`, `{`) a document may have: what serde_yaml accepts. A YAML
/// parser finds out only after scanning the rest of the text for each level, which costs time
/// quadratic in the text; this linear pre-scan refuses such a text first.
const MAX_FLOW_DEPTH: usize = 128;

/// Where flow collections nest deeper than [`MAX_FLOW_DEPTH`], if they do (quoted scalars and
/// comments are skipped).
fn too_deep(file: &Path, text: &str, line_offset: usize) -> Option<(Location, String)> {
    let (mut depth, mut line, mut column) = (0usize, 1usize, 0usize);
    let mut quote: Option<char> = None;
    let mut comment = false;
    let mut prev = ' ';
    for c in text.chars() {
        column += 1;
        if c == '\n' {
            (line, column, comment) = (line + 1, 0, false);
            prev = c;
            continue;
        }
        match (quote, c) {
            _ if comment => {}
            (Some('"'), '\\') if prev == '\\' => {
                prev = ' ';
                continue;
            }
            (Some(q), c) if c == q && !(q == '"' && prev == '\\') => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '#') if prev.is_whitespace() => comment = true,
            (None, '[' | '{') => {
                depth += 1;
                if depth > MAX_FLOW_DEPTH {
                    let at = Location {
                        file: file.to_path_buf(),
                        line: line + line_offset,
                        column,
                    };
                    return Some((at, format!("nested deeper than {MAX_FLOW_DEPTH} levels")));
                }
            }
            (None, ']' | '}') => depth = depth.saturating_sub(1),
            _ => {}
        }
        prev = c;
    }
    None
}

/// Where each node of one YAML document starts.
#[derive(Debug, Default)]
pub struct Positions {
    file: PathBuf,
    nodes: HashMap<String, (usize, usize)>,
    duplicate: Option<(String, (usize, usize))>,
}

/// The first mapping key that appears twice in the first YAML document of `text` (whose text
/// starts `line_offset` lines into `file`), as an error message with its location: YAML says
/// keys are unique, and a last-wins reading would silently lose the first value (kubectl's
/// strict decoding refuses them too).
pub fn duplicate_key(file: &Path, text: &str, line_offset: usize) -> Option<(Location, String)> {
    if let Some(found) = too_deep(file, text, line_offset) {
        return Some(found);
    }
    let mut positions = Positions::index(file, text);
    positions.shift_lines(line_offset);
    positions.duplicate_error()
}

impl Positions {
    /// Indexes the first document of `text`. A text that does not parse gives an empty index
    /// (serde_yaml then reports the syntax error with its own position).
    pub fn index(file: &Path, text: &str) -> Self {
        let mut walker = Walker::default();
        let mut parser = Parser::new_from_str(text);
        let _ = parser.load(&mut walker, false);
        Self {
            file: file.to_path_buf(),
            nodes: walker.nodes,
            duplicate: walker.duplicate,
        }
    }

    /// Where the first duplicate mapping key of the document is, and the error message.
    pub fn duplicate_error(&self) -> Option<(Location, String)> {
        let (path, (line, column)) = self.duplicate.as_ref()?;
        let at = Location {
            file: self.file.clone(),
            line: *line,
            column: *column,
        };
        let message = if path == "<<" || path.ends_with(".<<") {
            format!("merge key {path}: YAML 1.1 merge keys are not supported (kubectl would merge, ferry would not); write the fields out")
        } else {
            format!("duplicate key {path} (each key may appear once)")
        };
        Some((at, message))
    }

    /// Moves every position down by `lines`, for a document that starts further into its file.
    pub fn shift_lines(&mut self, lines: usize) {
        for pos in self.nodes.values_mut() {
            pos.0 += lines;
        }
        if let Some((_, pos)) = self.duplicate.as_mut() {
            pos.0 += lines;
        }
    }

    /// The location of the node at `path`, or of its nearest indexed ancestor.
    pub fn at(&self, path: &str) -> Location {
        let mut probe = path;
        loop {
            if let Some(&(line, column)) = self.nodes.get(probe) {
                return Location {
                    file: self.file.clone(),
                    line,
                    column,
                };
            }
            match probe.rfind(['.', '[']) {
                Some(cut) => probe = &probe[..cut],
                None => return Location::file(&self.file),
            }
        }
    }
}

/// One open collection while walking.
enum Frame {
    Map {
        path: String,
        key: Option<String>,
        seen: std::collections::HashSet<String>,
    },
    Seq {
        path: String,
        next: usize,
    },
}

#[derive(Default)]
struct Walker {
    stack: Vec<Frame>,
    nodes: HashMap<String, (usize, usize)>,
    depth_docs: usize,
    duplicate: Option<(String, (usize, usize))>,
}

impl Walker {
    /// The path of the node that starts now, and advances the parent's cursor. `None` when the
    /// node is a mapping key.
    fn next_path(&mut self) -> Option<String> {
        match self.stack.last_mut() {
            None => Some(String::new()),
            Some(Frame::Seq { path, next }) => {
                let p = format!("{path}[{next}]");
                *next += 1;
                Some(p)
            }
            Some(Frame::Map { path, key, .. }) => key.take().map(|k| {
                if path.is_empty() {
                    k
                } else {
                    format!("{path}.{k}")
                }
            }),
        }
    }
}

impl MarkedEventReceiver for Walker {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        if self.depth_docs > 1 {
            return;
        }
        let pos = (mark.line(), mark.col() + 1);
        match ev {
            Event::DocumentStart => self.depth_docs += 1,
            Event::Scalar(value, ..) => {
                let is_key = matches!(self.stack.last(), Some(Frame::Map { key: None, .. }));
                if is_key {
                    if let Some(Frame::Map { path, key, seen }) = self.stack.last_mut() {
                        let full = if path.is_empty() {
                            value.clone()
                        } else {
                            format!("{path}.{value}")
                        };
                        if (!seen.insert(value.clone()) || value == "<<")
                            && self.duplicate.is_none()
                        {
                            self.duplicate = Some((full.clone(), pos));
                        }
                        // A key's own position is where an "unknown field" points.
                        self.nodes.entry(full).or_insert(pos);
                        *key = Some(value);
                    }
                } else if let Some(p) = self.next_path() {
                    self.nodes.insert(p, pos);
                }
            }
            Event::Alias(_) => {
                let _ = self.next_path();
            }
            Event::MappingStart(..) => {
                let path = self.next_path().unwrap_or_default();
                self.nodes.entry(path.clone()).or_insert(pos);
                self.stack.push(Frame::Map {
                    path,
                    key: None,
                    seen: Default::default(),
                });
            }
            Event::SequenceStart(..) => {
                let path = self.next_path().unwrap_or_default();
                self.nodes.entry(path.clone()).or_insert(pos);
                self.stack.push(Frame::Seq { path, next: 0 });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
            }
            _ => {}
        }
    }
}

/// The largest file ferry reads as a policy, schema, transform or test file.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// The bytes of a regular file of at most [`MAX_FILE_BYTES`]: a FIFO, a device or a
/// directory (which would block or never end) is refused with a message saying so.
pub fn read_file(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(std::io::Error::other(
            "not a regular file (a pipe, a device or a directory is never read)",
        ));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {} MiB",
            MAX_FILE_BYTES >> 20
        )));
    }
    Ok(bytes)
}

/// The text of a regular file ([`read_file`]), which must be UTF-8.
pub fn read_text(path: &Path) -> std::io::Result<String> {
    String::from_utf8(read_file(path)?).map_err(|_| std::io::Error::other("not UTF-8 text"))
}

/// The entries of `dir` in name order, hidden ones (`.git`) left out: how ferry walks the
/// trees of policies and test cases.
pub fn visible_entries(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            !p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('.'))
        })
        .collect();
    entries.sort();
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_point_at_their_lines() {
        let text = "spec:\n  resources:\n  - kind: A\n    apiVersion: v1\n  - kind: B\n";
        let pos = Positions::index(Path::new("p.yaml"), text);
        assert_eq!(pos.at("spec.resources[1].kind").to_string(), "p.yaml:5:11");
        assert_eq!(pos.at("spec.resources[0].apiVersion").line, 4);
        // An unindexed child falls back to its parent.
        assert_eq!(pos.at("spec.resources[1].schema").line, 5);
        assert_eq!(pos.at("nope").to_string(), "p.yaml");
    }

    #[test]
    fn duplicate_keys_are_found_with_their_place() {
        let text = "spec:\n  dataFrom: [a]\n  target: {name: x}\n  dataFrom: [b]\n";
        let (at, err) = duplicate_key(Path::new("es.yaml"), text, 10).unwrap();
        assert_eq!(at.to_string(), "es.yaml:14:3");
        assert_eq!(
            err,
            "duplicate key spec.dataFrom (each key may appear once)"
        );
        assert_eq!(
            duplicate_key(Path::new("ok.yaml"), "a: {b: 1}\nc: {b: 2}\n", 0),
            None
        );
        let deep = format!("a: \"[[[\"\nb: {}", "[".repeat(200));
        let (at, err) = duplicate_key(Path::new("d.yaml"), &deep, 0).unwrap();
        assert_eq!(
            (at.line, at.column, err.as_str()),
            (2, 132, "nested deeper than 128 levels")
        );
    }
}
