//! Globs over label and annotation keys (`reflector.v1.k8s.emberstack.com/*`,
//! `example.com/tier-?`): `*` is any run of characters (`/` included), `?` one character, every
//! other character itself. Nothing else is special: a pattern holding `[`, `]`, `{`, `}`, `!`
//! or `\` is refused, so that no reader takes it for a character class or an alternation that
//! ferry would match literally.

use std::fmt;

/// The characters a key may hold (`prefix/name`: DNS subdomain letters, and `_` in the name).
fn key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')
}

/// A validated glob over keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Glob(String);

impl Glob {
    /// The glob `pattern`, or why it is not one: empty, a character no key holds (other than
    /// `*` and `?`), or more than one `/`.
    pub fn new(pattern: &str) -> Result<Self, String> {
        if pattern.is_empty() {
            return Err("an empty pattern matches nothing; leave it out".into());
        }
        if let Some(c) = pattern
            .chars()
            .find(|&c| !key_char(c) && c != '*' && c != '?')
        {
            return Err(format!(
                "{pattern:?}: {c:?} is not a key character, and only * (any characters) and ? (one character) are special"
            ));
        }
        if pattern.matches('/').count() > 1 {
            return Err(format!(
                "{pattern:?}: a key has at most one / (prefix/name)"
            ));
        }
        Ok(Self(pattern.to_string()))
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The characters before the first `*` or `?`: what every matching key starts with.
    pub fn literal_prefix(&self) -> &str {
        let end = self.0.find(['*', '?']).unwrap_or(self.0.len());
        &self.0[..end]
    }

    /// Whether `key` matches the whole pattern.
    pub fn matches(&self, key: &str) -> bool {
        // The classic two-cursor match: on a mismatch, the last `*` takes one more character.
        // At most (pattern × key) steps, both bounded by the key length limits. Bytes, not
        // chars: the guard matches every annotation of every copy, and allocates nothing
        // unless it refuses. A pattern is ASCII, so only a key holding other characters (which
        // no valid key does) could see `?` take one byte of a longer character.
        let (pattern, key) = (self.0.as_bytes(), key.as_bytes());
        let (mut p, mut k) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while k < key.len() {
            match pattern.get(p) {
                Some(b'*') => {
                    star = Some((p, k));
                    p += 1;
                }
                Some(&c) if c == b'?' || c == key[k] => {
                    p += 1;
                    k += 1;
                }
                _ => match star {
                    Some((sp, sk)) => {
                        p = sp + 1;
                        k = sk + 1;
                        star = Some((sp, sk + 1));
                    }
                    None => return false,
                },
            }
        }
        pattern[p..].iter().all(|&c| c == b'*')
    }
}

impl fmt::Display for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::Glob;

    fn matches(pattern: &str, key: &str) -> bool {
        Glob::new(pattern).expect("a valid glob").matches(key)
    }

    #[test]
    fn stars_and_question_marks() {
        assert!(matches("*", "anything/at-all"));
        assert!(matches(
            "reflector.v1.k8s.emberstack.com/*",
            "reflector.v1.k8s.emberstack.com/reflection-allowed"
        ));
        assert!(!matches(
            "reflector.v1.k8s.emberstack.com/*",
            "kubed.appscode.com/sync"
        ));
        assert!(matches("example.com/tier-?", "example.com/tier-1"));
        assert!(!matches("example.com/tier-?", "example.com/tier-12"));
        assert!(matches("*.example.com/*", "a.b.example.com/x"));
        assert!(!matches("*.example.com/*", "example.com/x"));
        assert!(matches("team", "team"));
        assert!(!matches("team", "teams"));
        assert!(matches("a*b*c", "abbbc"));
        assert!(!matches("a*b*c", "abbbd"));
    }

    #[test]
    fn only_key_characters_and_the_two_wildcards() {
        for bad in ["", "a[bc]", "{a,b}", "!a", "a\\*", "a b", "a/b/c", "a\n"] {
            assert!(Glob::new(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            Glob::new("ferry.dev/*").unwrap().literal_prefix(),
            "ferry.dev/"
        );
    }

    proptest! {
        /// A pattern without wildcards matches exactly itself; `*` alone matches everything.
        #[test]
        fn literals_match_themselves(key in "[a-z0-9./_-]{0,20}", other in "[a-z0-9./_-]{0,20}") {
            prop_assert!(matches("*", &key));
            if let Ok(glob) = Glob::new(&key) {
                prop_assert!(glob.matches(&key));
                prop_assert_eq!(glob.matches(&other), key == other);
            }
        }
    }
}
