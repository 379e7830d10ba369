//! A field rule's path: RFC 9535 JSONPath text parsed by jsonpath-rust into the steps a
//! rule may take (names, `[*]` list elements, `.*` object members), or why not; bounded so
//! that no path text can exhaust the parser or the plan.

use jsonpath_rust::parser::model::{
    Comparable, Comparison, Filter, FilterAtom, Literal, Segment, Selector, SingularQuery,
    SingularQuerySegment,
};

use crate::schema::Keyed;

/// The longest path text a rule may have.
const MAX_PATH_CHARS: usize = 1024;
/// The most segments of a path, as schemas are followed this deep.
const MAX_DEPTH: usize = 64;
/// The most fields one rule may mark (unions multiply).
const MAX_PATHS: usize = 64;

/// One step of a compiled path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// A named member.
    Name(String),
    /// Every element of a list (`[*]`).
    Items,
    /// Every member of an object (`.*`).
    Members,
    /// The elements of a list whose field equals a literal (`[?@.name=='namespace']`).
    Keyed(Keyed),
}

/// The paths `path` selects, as steps; why it cannot be a field rule's path.
pub(super) fn steps(text: &str) -> std::result::Result<Vec<Vec<Step>>, String> {
    // Messages quote a long path by its start.
    let path = match text.char_indices().nth(80) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    };
    let path = path.as_str();
    if text.len() > MAX_PATH_CHARS {
        return Err(format!(
            "path: {} characters, at most {MAX_PATH_CHARS} are allowed",
            text.len()
        ));
    }
    let query = jsonpath_rust::parser::parse_json_path(text).map_err(|e| {
        format!(
            "path: {path:?} is not an RFC 9535 JSONPath: {}",
            parse_error(&e.to_string())
        )
    })?;
    // RFC 9535 reads `[*]` and `.*` alike; a rule reads `[*]` as every element of a list and
    // `.*` as every member of an object, as a schema's items and additionalProperties, so
    // that the guard refuses a value of the other shape.
    let dotted = dotted_wildcards(text);
    let mut out = vec![Vec::new()];
    for (index, segment) in query.segments.iter().enumerate() {
        let selectors: Vec<&Selector> = match segment {
            Segment::Selector(s) => vec![s],
            Segment::Selectors(s) => s.iter().collect(),
            Segment::Descendant(_) => {
                return Err(format!(
                    "path {path:?}: `..` selects fields at any depth; a field rule names the fields it marks (use [*] for every element)"
                ))
            }
        };
        let mut next = Vec::new();
        for prefix in &out {
            for selector in &selectors {
                let step = match selector {
                    Selector::Name(name) => Step::Name(name.clone()),
                    Selector::Wildcard if dotted.contains(&index) => Step::Members,
                    Selector::Wildcard => Step::Items,
                    Selector::Index(_) | Selector::Slice(..) => return Err(format!(
                        "path {path:?}: {selector} selects elements by position; a rule marks a field of every object alike (use [*] for every element)"
                    )),
                    Selector::Filter(filter) => match keyed(filter) {
                        Some(k) => Step::Keyed(k),
                        None => return Err(format!(
                            "path {path:?}: a filter may only choose list elements by one field equal to a string ([?@.name=='namespace']); {selector} is not that"
                        )),
                    },
                };
                let mut path = prefix.clone();
                path.push(step);
                next.push(path);
            }
        }
        out = next;
        if out.len() > MAX_PATHS || out.first().is_some_and(|p| p.len() > MAX_DEPTH) {
            return Err(format!(
                "path {path:?}: at most {MAX_DEPTH} segments and {MAX_PATHS} fields (with ['a','b'] unions) per rule"
            ));
        }
    }
    Ok(out)
}

/// The indexes of the segments of `path` (a valid JSONPath) written `.*`.
fn dotted_wildcards(path: &str) -> Vec<usize> {
    let chars: Vec<char> = path.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut segment) = (1, 0);
    while i < chars.len() {
        match chars[i] {
            c if c.is_whitespace() => i += 1,
            '.' => {
                i += 1;
                if chars.get(i) == Some(&'*') {
                    out.push(segment);
                    i += 1;
                } else {
                    while i < chars.len()
                        && !matches!(chars[i], '.' | '[')
                        && !chars[i].is_whitespace()
                    {
                        i += 1;
                    }
                }
                segment += 1;
            }
            '[' => {
                // To the matching bracket, past quoted names.
                let mut depth = 0;
                let mut quote: Option<char> = None;
                while i < chars.len() {
                    let c = chars[i];
                    match quote {
                        Some(_) if c == '\\' => i += 1,
                        Some(q) if c == q => quote = None,
                        Some(_) => {}
                        None if c == '\'' || c == '"' => quote = Some(c),
                        None if c == '[' => depth += 1,
                        None if c == ']' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        None => {}
                    }
                    i += 1;
                }
                i += 1;
                segment += 1;
            }
            _ => i += 1,
        }
    }
    out
}

/// A parser's multi-line error as one line: `at character N: expected X`.
fn parse_error(text: &str) -> String {
    let column = text
        .split_once("-->")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .and_then(|at| at.split_once(':'))
        .map(|(_, column)| column.to_string());
    let expected = text
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("= "))
        .map(str::to_string);
    match (column, expected) {
        (Some(column), Some(expected)) => format!("at character {column}: {expected}"),
        _ => text.split_whitespace().collect::<Vec<_>>().join(" "),
    }
}

/// A compiled path as messages show it (`$.spec.tls[*].secretName`).
pub(super) fn show(path: &[Step]) -> String {
    let mut out = String::from("$");
    for step in path {
        match step {
            Step::Items => out.push_str("[*]"),
            Step::Members => out.push_str(".*"),
            Step::Name(n)
                if !n.is_empty()
                    && n.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
            {
                out.push('.');
                out.push_str(n);
            }
            Step::Name(n) => out.push_str(&format!("[{n:?}]")),
            Step::Keyed(k) => out.push_str(&k.to_string()),
        }
    }
    out
}

/// The one filter a rule may take: a field of the element (`@.name`, one name deep) equal to
/// a string literal, either way round. Any other filter would choose elements by what a
/// tenant writes in ways the guard could not follow.
fn keyed(filter: &Filter) -> Option<Keyed> {
    let Filter::Atom(FilterAtom::Comparison(comparison)) = filter else {
        return None;
    };
    let Comparison::Eq(a, b) = comparison.as_ref() else {
        return None;
    };
    let (query, literal) = match (a, b) {
        (Comparable::SingularQuery(q), Comparable::Literal(Literal::String(v)))
        | (Comparable::Literal(Literal::String(v)), Comparable::SingularQuery(q)) => (q, v),
        _ => return None,
    };
    let SingularQuery::Current(segments) = query else {
        return None;
    };
    match segments.as_slice() {
        [SingularQuerySegment::Name(key)] if !key.is_empty() => Some(Keyed {
            key: key.clone(),
            value: literal.clone(),
        }),
        _ => None,
    }
}
