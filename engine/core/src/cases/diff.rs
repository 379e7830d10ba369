//! A line diff for case failures: expected lines `-`, found lines `+`, two lines of context.

/// The unified-style diff of `expected` and `found`, each line indented by two spaces.
pub fn lines(expected: &str, found: &str) -> String {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = found.lines().collect();
    let ops = script(&a, &b);
    let keep = |i: usize| {
        let lo = i.saturating_sub(2);
        let hi = (i + 3).min(ops.len());
        ops[lo..hi].iter().any(|op| !matches!(op, Op::Same(_)))
    };
    let mut out = String::new();
    let mut skipped = false;
    for (i, op) in ops.iter().enumerate() {
        if !keep(i) {
            skipped = true;
            continue;
        }
        if skipped {
            out.push_str("  …\n");
            skipped = false;
        }
        match op {
            Op::Same(line) => out.push_str(&format!("    {line}\n")),
            Op::Gone(line) => out.push_str(&format!("  - {line}\n")),
            Op::New(line) => out.push_str(&format!("  + {line}\n")),
        }
    }
    if skipped {
        out.push_str("  …\n");
    }
    if a.is_empty() && b.is_empty() {
        out.push_str("  (both empty)\n");
    } else if a.is_empty() {
        out.insert_str(0, "  (expected nothing)\n");
    } else if b.is_empty() {
        out.push_str("  (found nothing)\n");
    }
    out
}

enum Op<'a> {
    Same(&'a str),
    Gone(&'a str),
    New(&'a str),
}

/// The edit script from `a` to `b` by longest common subsequence (cases are small).
fn script<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<Op<'a>> {
    let (n, m) = (a.len(), b.len());
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut ops = Vec::new();
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            ops.push(Op::Same(a[i]));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
            ops.push(Op::Gone(a[i]));
            i += 1;
        } else {
            ops.push(Op::New(b[j]));
            j += 1;
        }
    }
    ops
}

#[cfg(test)]
mod tests {
    #[test]
    fn shows_changed_lines_with_context() {
        let d = super::lines("a\nb\nc\nd\ne\nf\ng\n", "a\nb\nc\nD\ne\nf\ng\n");
        assert_eq!(d, "  …\n    b\n    c\n  - d\n  + D\n    e\n    f\n  …\n");
    }
}
