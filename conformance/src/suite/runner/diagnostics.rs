//! How a failure shows what came back: responses and errors, long text cut
//! in the middle.

use super::*;

/// Longest stretch of one field a failure report shows.
pub(super) const SHOWN_CHARS: usize = 600;

/// `text` cut to about `max` characters: its head and its tail around a
/// note of what was left out (the end of a traceback is where the news is).
pub fn truncate_middle(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max {
        return text.to_string();
    }
    let head: String = text.chars().take(max * 2 / 3).collect();
    let tail: String = text.chars().skip(n - max / 3).collect();
    format!(
        "{head}…[{} chars omitted]…{tail}",
        n - head.chars().count() - tail.chars().count()
    )
}

/// What a failing step got back, for reports: a run-shaped response field by
/// field (stdout, stderr, exit_code, success), anything else as JSON.
pub fn got_response(v: &Value) -> String {
    let Some(m) = v.as_object().filter(|m| {
        m.contains_key("stdout") || m.contains_key("stderr") || m.contains_key("exit_code")
    }) else {
        return format!("got: {}", truncate_middle(&v.to_string(), SHOWN_CHARS));
    };
    let mut lines = Vec::new();
    let scalars: Vec<String> = m
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "stdout" | "stderr"))
        .map(|(k, x)| format!("{k}={}", truncate_middle(&x.to_string(), 120)))
        .collect();
    lines.push(format!("got: {}", scalars.join(" ")));
    for stream in ["stdout", "stderr"] {
        if let Some(x) = m.get(stream) {
            let text = x
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| x.to_string());
            lines.push(format!(
                "{stream}: {:?}",
                truncate_middle(&text, SHOWN_CHARS)
            ));
        }
    }
    lines.join("\n")
}

/// An error a failing step got: the code, the envelope it travelled in, and
/// the message.
pub fn got_error(prefix: &str, code: &str, message: &str) -> String {
    let envelope = match classify(prefix, code, message) {
        Observed::Target { envelope, .. } => format!(" ({} envelope)", envelope.as_str()),
        Observed::Engine(_) => " (engine error)".to_string(),
        Observed::Unclassified { .. } => String::new(),
    };
    format!(
        "{code}{envelope}: {}",
        truncate_middle(message, SHOWN_CHARS)
    )
}
