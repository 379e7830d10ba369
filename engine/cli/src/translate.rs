//! `ferry translate`: the offline dry run.

use std::path::PathBuf;

use anyhow::Result;
use clap::ValueEnum;
use ferry_core::offline::{Setting, Side};
use ferry_core::sandbox::{Sandbox, WorkerCommand};
use ferry_core::translate::Translated;
use serde_json::Value;

use crate::{documents, Output, EXIT_REFUSED, WORKER_SUBCOMMAND};

/// Which side the output is for.
#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub enum To {
    /// The object ferry would apply in the super cluster (input: tenant objects).
    #[default]
    Super,
    /// What ferry would write back into the tenant (input: super objects).
    Tenant,
}

/// `ferry translate` arguments.
#[derive(clap::Args)]
pub struct Args {
    /// A policy file, or a directory of them.
    #[arg(long)]
    policy: PathBuf,
    /// The tenant the objects belong to.
    #[arg(long)]
    tenant: String,
    /// The input: YAML or JSON, one or many documents (`-` for stdin).
    #[arg(short = 'f', long = "filename", default_value = "-")]
    file: String,
    /// Which side to translate for.
    #[arg(long, value_enum, default_value_t = To::Super)]
    to: To,
    /// Say which rule changed which field.
    #[arg(long)]
    explain: bool,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Yaml)]
    output: Output,
    /// More of the tenant's namespaces for `ctx.tenant_namespaces()` (the input's own
    /// namespaces are always included), comma-separated.
    #[arg(long, value_delimiter = ',')]
    tenant_namespaces: Vec<String>,
    /// The tenant's DNS domains, beside the policy's `spec.domains` (as SyncConfig's
    /// `tenants[].domains` gives them live), comma-separated.
    #[arg(long = "domain", value_delimiter = ',')]
    domains: Vec<String>,
    /// Other tenants, comma-separated (with `--to tenant`): their super namespaces named in
    /// free text are redacted, as live redacts every super namespace ferry made for someone
    /// else.
    #[arg(long, value_delimiter = ',')]
    other_tenants: Vec<String>,
}

/// The sandbox of this process: transform workers are this binary, re-executed.
pub fn sandbox() -> Result<Sandbox> {
    let program = std::env::current_exe()?;
    Ok(Sandbox::new(WorkerCommand {
        program,
        args: vec![WORKER_SUBCOMMAND.to_string()],
    }))
}

pub fn run(args: Args) -> Result<u8> {
    let policy = match ferry_core::policy::load(&args.policy) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(1);
        }
    };
    let docs = documents::read(&args.file)?;
    let sandbox = sandbox()?;
    let setting = Setting {
        tenant: args.tenant.clone(),
        side: match args.to {
            To::Super => Side::Super,
            To::Tenant => Side::Tenant,
        },
        tenant_namespaces: args.tenant_namespaces.clone(),
        other_tenants: args.other_tenants.clone(),
        domains: args.domains.clone(),
    };
    let (labels, values): (Vec<String>, Vec<Value>) =
        docs.into_iter().map(|d| (d.label, d.value)).unzip();
    let results =
        match ferry_core::offline::translate(&policy, &sandbox, &setting, values, args.explain) {
            Ok(results) => results,
            Err(e) => {
                eprintln!("error: --{e}");
                return Ok(1);
            }
        };
    let mut refused = 0;
    let mut printed: Vec<(Translated, String)> = Vec::new();
    for (result, label) in results.into_iter().zip(labels) {
        match result {
            Ok(t) => printed.push((t, label)),
            Err(refusal) => {
                refused += 1;
                eprintln!(
                    "{}",
                    one_line(&format!("ferry: refused {label}: {refusal}"))
                );
            }
        }
    }
    print(&printed, args.output, args.explain)?;
    Ok(if refused > 0 { EXIT_REFUSED } else { 0 })
}

fn print(results: &[(Translated, String)], output: Output, explain: bool) -> Result<()> {
    match output {
        Output::Yaml => {
            let mut out = String::new();
            for (i, (t, label)) in results.iter().enumerate() {
                if i > 0 {
                    out.push_str("---\n");
                }
                if explain {
                    let head = format!("{label}: {} change(s)", t.changes.len());
                    for line in std::iter::once(head).chain(t.changes.iter().map(|c| c.to_string()))
                    {
                        out.push_str(&format!("# {}\n", one_line(&line)));
                    }
                }
                out.push_str(&documents::to_yaml(&t.object)?);
            }
            print!("{out}");
        }
        Output::Json => {
            if explain {
                for (t, label) in results {
                    eprintln!(
                        "{}",
                        one_line(&format!("{label}: {} change(s)", t.changes.len()))
                    );
                    for change in &t.changes {
                        eprintln!("  {}", one_line(&change.to_string()));
                    }
                }
            }
            let value = match results {
                [(only, _)] => only.object.clone(),
                many => serde_json::json!({
                    "apiVersion": "v1",
                    "kind": "List",
                    "items": many.iter().map(|(t, _)| t.object.clone()).collect::<Vec<Value>>(),
                }),
            };
            println!("{}", serde_json::to_string_pretty(&value)?);
        }
    }
    Ok(())
}

/// `text` on one line: control characters (a newline in an object's name could start a new
/// YAML document in the output, or forge a line on stderr) are shown escaped.
pub fn one_line(text: &str) -> std::borrow::Cow<'_, str> {
    // Control characters, Unicode line and paragraph separators, and the bidirectional
    // controls that can make a viewer show text out of order.
    let unsafe_char = |c: char| {
        c.is_control()
            || matches!(
                c,
                '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{061c}'
            )
            || ('\u{202a}'..='\u{202e}').contains(&c)
            || ('\u{2066}'..='\u{2069}').contains(&c)
    };
    if !text.chars().any(unsafe_char) {
        return text.into();
    }
    text.chars()
        .map(|c| {
            if unsafe_char(c) {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect::<String>()
        .into()
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn control_characters_stay_on_one_line() {
        assert_eq!(one_line("a\n---\nb\r\u{1b}[2J"), "a\\n---\\nb\\r\\u{1b}[2J");
        assert_eq!(one_line("plain é"), "plain é");
        assert_eq!(one_line("a\u{2028}b\u{202e}c"), "a\\u{2028}b\\u{202e}c");
    }
}
