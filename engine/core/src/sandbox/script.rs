//! Checks of a transform script done when the policy loads, before any worker sees it:
//! it parses, it loads nothing, and it defines the hooks its kinds need.

use starlark::syntax::{AstModule, Dialect};

use super::Hook;

/// What a script defines at its top level.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Hooks {
    /// `def to_super(obj, ctx)` is present.
    pub to_super: bool,
    /// `def to_tenant(obj, ctx)` is present.
    pub to_tenant: bool,
}

impl Hooks {
    /// Whether `hook` is defined.
    pub fn has(&self, hook: Hook) -> bool {
        match hook {
            Hook::ToSuper => self.to_super,
            Hook::ToTenant => self.to_tenant,
        }
    }
}

/// `file:line:column` of where a span starts.
pub fn span_start(span: &starlark::codemap::FileSpan) -> String {
    let begin = span.resolve_span().begin;
    format!(
        "{}:{}:{}",
        span.filename(),
        begin.line + 1,
        begin.column + 1
    )
}

/// Parses `source` and reports the hooks it defines, or the first problem as
/// `file:line:column: message`.
pub fn inspect(file: &str, source: &str) -> Result<Hooks, String> {
    let ast = AstModule::parse(file, source.to_string(), &Dialect::Extended).map_err(|e| {
        let text = e.without_diagnostic().to_string();
        let first = text
            .lines()
            .next()
            .unwrap_or("syntax error")
            .trim()
            .to_string();
        match e.span() {
            Some(span) => format!("{}: {first}", span_start(span)),
            None => format!("{file}: {first}"),
        }
    })?;
    if let Some(load) = ast.loads().first() {
        return Err(format!(
            "{}: load() is not allowed in transforms (they must be self-contained)",
            span_start(&load.span)
        ));
    }
    let defines = |name: &str| {
        let prefix = format!("def {name}(");
        source.lines().any(|line| line.starts_with(&prefix))
    };
    Ok(Hooks {
        to_super: defines("to_super"),
        to_tenant: defines("to_tenant"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_hooks() {
        let hooks = inspect("t.star", "def to_super(obj, ctx):\n    return obj\n").unwrap();
        assert!(hooks.to_super && !hooks.to_tenant);
    }

    #[test]
    fn rejects_load_with_location() {
        let err = inspect("t.star", "load('x.star', 'y')\n").unwrap_err();
        assert!(err.starts_with("t.star:1:"), "{err}");
        assert!(err.contains("load() is not allowed"), "{err}");
    }

    #[test]
    fn reports_syntax_errors_with_location() {
        let err = inspect("t.star", "def to_super(obj, ctx)\n    return obj\n").unwrap_err();
        assert!(err.starts_with("t.star:1:"), "{err}");
    }
}
