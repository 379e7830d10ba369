//! Field paths built lazily: a chain of segments on the stack, turned into text
//! (`spec.items[2].name`, `metadata.labels["ferry.dev/tenant"]`) only for an explanation or an
//! error, so that translating an object (or writing a transform's output) allocates no path
//! strings.

use std::fmt;

/// A field path: the root, or a key or index below a parent path.
#[derive(Clone, Copy)]
pub enum Path<'a> {
    /// The object itself.
    Root,
    /// `parent.key` (or `parent["key"]` for keys that are not plain words).
    Key(&'a Path<'a>, &'a str),
    /// `parent[index]`.
    Index(&'a Path<'a>, usize),
}

impl<'a> Path<'a> {
    /// The path of `key` below this one.
    pub fn key(&'a self, key: &'a str) -> Path<'a> {
        Path::Key(self, key)
    }

    /// The path of element `index` below this one.
    pub fn index(&'a self, index: usize) -> Path<'a> {
        Path::Index(self, index)
    }

    /// How many keys and indexes lead here from the object (the root's is 0).
    pub fn depth(&self) -> usize {
        let mut depth = 0;
        let mut at = self;
        while let Path::Key(parent, _) | Path::Index(parent, _) = at {
            depth += 1;
            at = parent;
        }
        depth
    }

    /// The parent of this path (the root's parent is the root).
    pub fn parent(&self) -> Path<'a> {
        match self {
            Path::Root => Path::Root,
            Path::Key(p, _) | Path::Index(p, _) => **p,
        }
    }
}

/// Whether `key` can be written after a dot (`spec.name`) rather than quoted (`["a/b"]`).
pub fn is_plain_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Root => Ok(()),
            Path::Key(parent, key) => {
                parent.fmt(f)?;
                match (matches!(parent, Path::Root), is_plain_key(key)) {
                    (true, true) => f.write_str(key),
                    (false, true) => write!(f, ".{key}"),
                    (_, false) => write!(f, "[{key:?}]"),
                }
            }
            Path::Index(parent, i) => {
                parent.fmt(f)?;
                write!(f, "[{i}]")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Path;

    #[test]
    fn formats_like_explain() {
        let root = Path::Root;
        let spec = root.key("spec");
        let items = spec.key("items");
        let first = items.index(2);
        let label = first.key("ferry.dev/tenant");
        assert_eq!(label.to_string(), "spec.items[2][\"ferry.dev/tenant\"]");
        assert_eq!(label.parent().to_string(), "spec.items[2]");
    }
}
