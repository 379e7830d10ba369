//! What the demo prints: numbered steps, progress and results (colour and progress only on a
//! terminal, plain lines in a log), and the summary table.

use std::io::Write;
use std::time::Duration;

/// One line of the summary.
pub struct Row {
    pub tenant: &'static str,
    pub object: String,
    pub super_object: String,
    pub outcome: String,
    pub latency: Option<Duration>,
}

/// Whether the output is a terminal: colour and progress only then, plain lines in a log.
pub fn tty() -> bool {
    static TTY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TTY.get_or_init(|| std::io::IsTerminal::is_terminal(&std::io::stdout()))
}

pub fn bold(text: &str) -> String {
    if tty() {
        format!("\x1b[1m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

pub fn step(n: usize, total: usize, title: &str) {
    println!("\n{}", bold(&format!("[{n}/{total}] {title}")));
}

/// Something under way; its `done` line follows on the same line (on a terminal only).
pub fn progress(text: &str) {
    if tty() {
        print!("    {text} … ");
        let _ = std::io::stdout().flush();
    }
}

pub fn done(text: &str) {
    if tty() {
        println!("\x1b[32m✓\x1b[0m {text}");
    } else {
        println!("    ✓ {text}");
    }
}

/// A finished item on its own line.
pub fn item(text: &str) {
    if tty() {
        print!("    ");
    }
    done(text);
}

pub fn ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

/// The summary table of every row.
pub fn summary(rows: &[Row]) {
    println!("\n{}", bold("Summary"));
    println!(
        "  {:<8} {:<32} {:<34} {:<15} {:>8}",
        "tenant", "object", "super", "outcome", "latency"
    );
    for r in rows {
        let latency = r.latency.map(ms).unwrap_or_else(|| "-".into());
        println!(
            "  {:<8} {:<32} {:<34} {:<15} {:>8}",
            r.tenant, r.object, r.super_object, r.outcome, latency
        );
    }
}
