//! `bench-compare A.json B.json`: the A/B table of two bench summaries
//! (`target/bench-summary-*.json`). Absolute figures drift between machines;
//! the ratio B/A of the same bench, and the calls per operation, do not.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

/// Why two summaries could not be compared.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CompareError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a bench summary: {message}")]
    Parse { path: String, message: String },
}

fn load(path: &Path) -> Result<Value, CompareError> {
    let text = std::fs::read_to_string(path).map_err(|source| CompareError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let v: Value = serde_json::from_str(&text).map_err(|e| CompareError::Parse {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    if !v["benches"].is_object() {
        return Err(CompareError::Parse {
            path: path.display().to_string(),
            message: "no `benches` object".into(),
        });
    }
    Ok(v)
}

/// One row of the comparison.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    pub(crate) bench: String,
    pub(crate) a_median_ms: Option<f64>,
    pub(crate) b_median_ms: Option<f64>,
    pub(crate) a_calls: Option<f64>,
    pub(crate) b_calls: Option<f64>,
}

impl Row {
    /// B over A, the number that survives a change of machine.
    pub(crate) fn ratio(&self) -> Option<f64> {
        match (self.a_median_ms, self.b_median_ms) {
            (Some(a), Some(b)) if a > 0.0 => Some(b / a),
            _ => None,
        }
    }
}

/// Rows for every bench in either summary, sorted by name.
pub(crate) fn compare(a: &Value, b: &Value) -> Vec<Row> {
    let names: BTreeSet<String> = a["benches"]
        .as_object()
        .into_iter()
        .chain(b["benches"].as_object())
        .flat_map(|m| m.keys().cloned())
        .collect();
    names
        .into_iter()
        .map(|n| Row {
            a_median_ms: a["benches"][&n]["median_ms"].as_f64(),
            b_median_ms: b["benches"][&n]["median_ms"].as_f64(),
            a_calls: a["benches"][&n]["calls_per_op"].as_f64(),
            b_calls: b["benches"][&n]["calls_per_op"].as_f64(),
            bench: n,
        })
        .collect()
}

fn cell(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}"))
        .unwrap_or_else(|| "-".into())
}

/// The printable table.
pub(crate) fn render(a: &Value, b: &Value) -> String {
    let mut out = format!(
        "A: {} ({})\nB: {} ({})\n\n{:<55} {:>10} {:>10} {:>7} {:>9}\n",
        a["git_revision"].as_str().unwrap_or("?"),
        a["target"].as_str().unwrap_or("?"),
        b["git_revision"].as_str().unwrap_or("?"),
        b["target"].as_str().unwrap_or("?"),
        "bench",
        "A p50 ms",
        "B p50 ms",
        "B/A",
        "calls A→B"
    );
    for r in compare(a, b) {
        let calls = match (r.a_calls, r.b_calls) {
            (None, None) => String::new(),
            (x, y) => format!("{}→{}", cell(x, 1), cell(y, 1)),
        };
        out.push_str(&format!(
            "{:<55} {:>10} {:>10} {:>7} {:>9}\n",
            r.bench,
            cell(r.a_median_ms, 3),
            cell(r.b_median_ms, 3),
            cell(r.ratio(), 2),
            calls
        ));
    }
    out
}

/// Loads and renders two summary files.
pub(crate) fn run(a: &Path, b: &Path) -> Result<String, CompareError> {
    Ok(render(&load(a)?, &load(b)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rows_cover_both_sides_with_ratios() {
        let a = json!({"benches": {"x": {"median_ms": 2.0, "calls_per_op": 3.0}, "only_a": {"median_ms": 1.0}}});
        let b = json!({"benches": {"x": {"median_ms": 1.0, "calls_per_op": 2.0}, "only_b": {"median_ms": 5.0}}});
        let rows = compare(&a, &b);
        assert_eq!(rows.len(), 3);
        let x = rows.iter().find(|r| r.bench == "x").unwrap();
        assert_eq!(x.ratio(), Some(0.5));
        assert_eq!((x.a_calls, x.b_calls), (Some(3.0), Some(2.0)));
        assert_eq!(
            rows.iter().find(|r| r.bench == "only_b").unwrap().ratio(),
            None
        );
        let table = render(&a, &b);
        assert!(
            table.contains("0.50") && table.contains("3.0→2.0"),
            "{table}"
        );
    }

    #[test]
    fn non_summaries_are_refused() {
        let dir = std::env::temp_dir().join(format!("scr-cmp-{:x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("a.json");
        std::fs::write(&p, "{}").unwrap();
        assert!(matches!(run(&p, &p), Err(CompareError::Parse { .. })));
        assert!(matches!(
            run(&dir.join("missing"), &p),
            Err(CompareError::Read { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
