//! The worker's layering, checked on its own sources: which module may know
//! what (ARCHITECTURE.md, "Invariants"), and the size and doc of each module
//! ("Code map").

use std::path::{Path, PathBuf};

fn sources() -> Vec<(String, String)> {
    sources_under("src")
}

/// Every `.rs` file below `dir` (relative to the workspace root), with its
/// path relative to `dir`.
fn sources_under(dir: &str) -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).expect("the source tree is readable") {
            let p = e.expect("a directory entry").path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files = Vec::new();
    walk(&root, &mut files);
    assert!(files.len() > 10, "found the sources under {dir}");
    files
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            (rel, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// Quoted literals of `text` that satisfy `is_match`.
fn literals(text: &str, is_match: impl Fn(&str) -> bool) -> Vec<String> {
    text.split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| is_match(s))
        .map(str::to_string)
        .collect()
}

fn is_s_code(s: &str) -> bool {
    s.len() == 4 && s.starts_with('S') && s[1..].bytes().all(|b| b.is_ascii_digit())
}

fn is_daemon_fn(s: &str) -> bool {
    s.strip_prefix("sandbox::").is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b':' || b == b'_')
    })
}

#[test]
fn only_sandbox_interprets_daemon_s_codes() {
    for (file, text) in sources() {
        if file == "sandbox.rs" {
            assert!(
                !literals(&text, is_s_code).is_empty(),
                "sandbox.rs decides S-codes"
            );
            continue;
        }
        assert_eq!(
            literals(&text, is_s_code),
            Vec::<String>::new(),
            "{file} reads an S-code"
        );
        assert!(!text.contains("s_code()"), "{file} reads an S-code");
    }
}

#[test]
fn only_sandbox_names_daemon_functions() {
    for (file, text) in sources() {
        // guest_access (and its tests) lists them only to forbid them to
        // guests.
        if file == "sandbox.rs" || file == "guest_access.rs" || file.starts_with("guest_access/") {
            continue;
        }
        assert_eq!(
            literals(&text, is_daemon_fn),
            Vec::<String>::new(),
            "{file} names a sandbox::* function"
        );
    }
}

#[test]
fn only_wire_knows_the_engine_bookkeeping_fields() {
    for (file, text) in sources() {
        if file == "wire.rs" {
            continue;
        }
        assert!(
            !text.contains("_caller_worker_id"),
            "{file} handles the raw request JSON"
        );
    }
}

/// What a module does with JSON, read from its syntax tree: parameters
/// typed `Value` or `Map` (JSON taken in), `json!` (JSON built), and
/// `from_value`/`from_str`/`from_slice` (JSON decoded).
#[derive(Default)]
struct JsonUse {
    found: Vec<String>,
}

impl<'ast> syn::visit::Visit<'ast> for JsonUse {
    fn visit_signature(&mut self, sig: &'ast syn::Signature) {
        for input in &sig.inputs {
            if let syn::FnArg::Typed(arg) = input {
                let mut types = TypeNames::default();
                syn::visit::visit_type(&mut types, &arg.ty);
                if types.0.iter().any(|t| t == "Value" || t == "Map") {
                    self.found.push(format!("fn {} takes JSON", sig.ident));
                }
            }
        }
        syn::visit::visit_signature(self, sig);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        if m.path.segments.last().is_some_and(|s| s.ident == "json") {
            self.found.push("json! builds JSON".into());
        }
        syn::visit::visit_macro(self, m);
    }

    fn visit_expr_path(&mut self, p: &'ast syn::ExprPath) {
        let segs: Vec<String> = p
            .path
            .segments
            .iter()
            .map(|s| s.ident.to_string())
            .collect();
        let decodes = ["from_value", "from_str", "from_slice"];
        if segs.first().is_some_and(|s| s == "serde_json")
            && segs.last().is_some_and(|s| decodes.contains(&s.as_str()))
        {
            self.found.push(format!("{} decodes JSON", segs.join("::")));
        }
        syn::visit::visit_expr_path(self, p);
    }
}

#[derive(Default)]
struct TypeNames(Vec<String>);

impl<'ast> syn::visit::Visit<'ast> for TypeNames {
    fn visit_path_segment(&mut self, s: &'ast syn::PathSegment) {
        self.0.push(s.ident.to_string());
        syn::visit::visit_path_segment(self, s);
    }
}

fn json_use(text: &str) -> Vec<String> {
    let file = syn::parse_file(text).expect("the worker's sources parse");
    let mut v = JsonUse::default();
    syn::visit::visit_file(&mut v, &file);
    v.found
}

/// Only the edge (`functions/`, `wire`) knows JSON requests: the manager
/// takes typed input, builds no JSON and decodes none. Checked on the
/// parsed sources, so no spelling hides a use.
#[test]
fn the_manager_never_sees_json_requests() {
    let mut checked = 0;
    for (file, text) in sources() {
        if file.starts_with("runtime/") {
            checked += 1;
            assert_eq!(json_use(&text), Vec::<String>::new(), "{file}");
        }
    }
    assert!(checked >= 10, "read the runtime's modules");
}

#[test]
fn the_json_check_sees_every_kind_of_use() {
    let uses = json_use(
        "fn a(p: serde_json::Value) {}\n\
         fn b(m: &Map<String, Value>) {}\n\
         fn c() { let _ = serde_json::json!({}); let _: T = serde_json::from_value(v); }",
    );
    assert_eq!(uses.len(), 4, "{uses:?}");
    assert!(json_use("fn d(x: u32) -> Value { todo!() }").is_empty());
}

/// Each module of the worker and of the conformance crate opens with its
/// job and stays under 600 lines (their tests/ directories are exempt).
#[rstest::rstest]
#[case::worker("src")]
#[case::conformance("conformance/src")]
fn every_module_states_its_job_and_stays_under_600_lines(#[case] dir: &str) {
    for (file, text) in sources_under(dir) {
        assert!(
            text.starts_with("//! "),
            "{dir}/{file} opens with its one-line job"
        );
        let lines = text.lines().count();
        assert!(lines <= 600, "{dir}/{file} has {lines} lines");
    }
}

/// The console UI keeps the same rule: each source opens with a comment
/// stating its job and stays under 600 lines (tests included).
#[rstest::rstest]
#[case::sources("ui/src")]
#[case::styles("ui/src/styles")]
#[case::host_stand_in("ui/harness/host")]
#[case::browser_tests("ui/browser")]
#[case::unit_tests("ui/test")]
fn every_ui_module_states_its_job_and_stays_under_600_lines(#[case] dir: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut seen = 0;
    for e in std::fs::read_dir(&root).expect("the UI tree is readable") {
        let p = e.expect("a directory entry").path();
        let ext = p.extension().and_then(|x| x.to_str()).unwrap_or_default();
        if !["ts", "css"].contains(&ext) || p.to_string_lossy().ends_with(".d.ts") {
            continue;
        }
        seen += 1;
        let text = std::fs::read_to_string(&p).unwrap();
        let name = p.strip_prefix(&root).unwrap().display().to_string();
        // Vitest reads an environment pragma on the first line.
        let body = match text.strip_prefix("// @vitest-environment") {
            Some(rest) => rest.split_once('\n').map_or("", |(_, b)| b),
            None => &text,
        };
        assert!(
            body.starts_with("/*"),
            "{dir}/{name} opens with a comment stating its job"
        );
        let lines = text.lines().count();
        assert!(lines <= 600, "{dir}/{name} has {lines} lines");
    }
    assert!(seen > 0, "found the sources under {dir}");
}
