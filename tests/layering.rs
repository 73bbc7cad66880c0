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
    assert!(files.len() > 3, "found the sources under {dir}");
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

/// String literals of a parsed source's code (in macros too: their
/// tokens), not of its attributes.
#[derive(Default)]
struct StrLiterals(Vec<String>);

impl<'ast> syn::visit::Visit<'ast> for StrLiterals {
    /// Doc comments may name a code; only code may read one.
    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {}

    fn visit_lit_str(&mut self, l: &'ast syn::LitStr) {
        self.0.push(l.value());
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        for t in m.tokens.clone() {
            collect_token_strs(t, &mut self.0);
        }
        syn::visit::visit_macro(self, m);
    }
}

fn collect_token_strs(t: proc_macro2::TokenTree, out: &mut Vec<String>) {
    match t {
        proc_macro2::TokenTree::Literal(l) => {
            if let Ok(syn::Lit::Str(s)) = syn::parse_str::<syn::Lit>(&l.to_string()) {
                out.push(s.value());
            }
        }
        proc_macro2::TokenTree::Group(g) => {
            for t in g.stream() {
                collect_token_strs(t, out);
            }
        }
        _ => {}
    }
}

/// S-codes named in `text`'s string literals, read from its syntax tree
/// (so raw strings, escapes and macro arguments count too).
fn s_codes(text: &str) -> Vec<String> {
    let file = syn::parse_file(text).expect("the worker's sources parse");
    let mut v = StrLiterals::default();
    syn::visit::visit_file(&mut v, &file);
    v.0.into_iter()
        .flat_map(|s| {
            s.split(|c: char| !c.is_ascii_alphanumeric())
                .filter(|w| is_s_code(w))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn only_sandbox_interprets_daemon_s_codes() {
    for (file, text) in sources() {
        if file == "sandbox.rs" {
            assert!(!s_codes(&text).is_empty(), "sandbox.rs decides S-codes");
            continue;
        }
        // Its tests check how it decides them.
        if file.starts_with("sandbox/") {
            continue;
        }
        assert_eq!(
            s_codes(&text),
            Vec::<String>::new(),
            "{file} reads an S-code"
        );
        assert!(!text.contains("s_code()"), "{file} reads an S-code");
    }
    assert_eq!(
        s_codes("/// S200\nfn f() { g(r#\"x S300\"#); format!(\"{} S004\", \"S1\"); }"),
        vec!["S300".to_string(), "S004".to_string()],
        "raw strings and macro arguments count; docs and S1 do not"
    );
}

#[test]
fn only_sandbox_names_daemon_functions() {
    for (file, text) in sources() {
        // guest_access (and its tests) lists them only to forbid them to
        // guests.
        if file == "sandbox.rs"
            || file.starts_with("sandbox/")
            || file == "guest_access.rs"
            || file.starts_with("guest_access/")
        {
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

/// Every module that takes, builds or decodes JSON, whole crate, by the
/// same syntax check: the edges `ARCHITECTURE.md` names and no other.
#[test]
fn only_the_edges_know_json() {
    let edges = [
        "functions/",
        "wire.rs",
        // Transports: the engine's and the daemon's wire formats.
        "bus.rs",
        "sandbox.rs",
        "sandbox/",
        "error.rs",
        // Answers to the engine's hook calls on the guest listener, and
        // the configuration worker's values: edges of their own.
        "guest_access.rs",
        "guest_access/",
        "settings.rs",
        "events.rs",
        // The frames guest code writes and the relay's requests, and the
        // operator's JSON views.
        "guest.rs",
        "prestart.rs",
        "prestart/",
        "run_result.rs",
        "python_sdk.rs",
        "stats.rs",
        "ui.rs",
        // The frames a streamed run's caller reads.
        "stream/",
    ];
    let mut found = Vec::new();
    for (file, text) in sources() {
        if edges
            .iter()
            .any(|e| file == *e || (e.ends_with('/') && file.starts_with(e)))
        {
            continue;
        }
        let uses = json_use(&text);
        if !uses.is_empty() {
            found.push(format!("{file}: {uses:?}"));
        }
    }
    assert_eq!(found, Vec::<String>::new());
}

/// Method calls on a field named `sandbox` or `api` (the sandbox client),
/// and every mention of the `SandboxApi` trait.
#[derive(Default)]
struct SandboxClientUse(Vec<String>);

impl<'ast> syn::visit::Visit<'ast> for SandboxClientUse {
    fn visit_expr_method_call(&mut self, c: &'ast syn::ExprMethodCall) {
        if let syn::Expr::Field(f) = &*c.receiver {
            if let syn::Member::Named(name) = &f.member {
                if name == "sandbox" || name == "api" {
                    self.0.push(format!("{name}.{}()", c.method));
                }
            }
        }
        syn::visit::visit_expr_method_call(self, c);
    }

    fn visit_path_segment(&mut self, s: &'ast syn::PathSegment) {
        if s.ident == "SandboxApi" {
            self.0.push("SandboxApi".into());
        }
        syn::visit::visit_path_segment(self, s);
    }
}

fn sandbox_client_use(text: &str) -> Vec<String> {
    let file = syn::parse_file(text).expect("the worker's sources parse");
    let mut v = SandboxClientUse::default();
    syn::visit::visit_file(&mut v, &file);
    v.0
}

/// Every `sandbox::*` call goes through the one door (`runtime/daemon`),
/// which charges it: no other module holds the client or calls it.
/// `sandbox.rs` defines it; `main.rs` builds it and `runtime/mod.rs` hands
/// it to the door.
#[test]
fn only_the_daemon_door_calls_the_sandbox_client() {
    for (file, text) in sources() {
        let uses = sandbox_client_use(&text);
        match file.as_str() {
            "sandbox.rs" | "main.rs" => {}
            "runtime/daemon.rs" => assert!(!uses.is_empty(), "the door calls the client"),
            "runtime/mod.rs" => assert_eq!(uses, vec!["SandboxApi".to_string()], "{file}"),
            _ => assert_eq!(
                uses,
                Vec::<String>::new(),
                "{file} calls the sandbox client"
            ),
        }
    }
    assert_eq!(
        sandbox_client_use("fn f(m: &M) { m.sandbox.stop(id); me.api.exec(a, b); }").len(),
        2
    );
}

/// Constants whose doc's first sentence speaks of the daemon and whose
/// value is a number written out.
#[derive(Default)]
struct DaemonNumbers(Vec<String>);

impl<'ast> syn::visit::Visit<'ast> for DaemonNumbers {
    fn visit_item_const(&mut self, c: &'ast syn::ItemConst) {
        let doc: String = c
            .attrs
            .iter()
            .filter(|a| a.path().is_ident("doc"))
            .map(|a| quote_tokens(&a.meta))
            .collect();
        let mut lits = IntLiterals(0);
        syn::visit::visit_expr(&mut lits, &c.expr);
        let first = doc.split(". ").next().unwrap_or_default().to_lowercase();
        if first.contains("daemon") && lits.0 > 0 {
            self.0.push(c.ident.to_string());
        }
        syn::visit::visit_item_const(self, c);
    }
}

struct IntLiterals(usize);

impl<'ast> syn::visit::Visit<'ast> for IntLiterals {
    fn visit_lit_int(&mut self, _: &'ast syn::LitInt) {
        self.0 += 1;
    }
}

fn quote_tokens(meta: &syn::Meta) -> String {
    match meta {
        syn::Meta::NameValue(nv) => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => s.value(),
            _ => String::new(),
        },
        _ => String::new(),
    }
}

fn daemon_numbers(text: &str) -> Vec<String> {
    let file = syn::parse_file(text).expect("the worker's sources parse");
    let mut v = DaemonNumbers::default();
    syn::visit::visit_file(&mut v, &file);
    v.0
}

/// The daemon's numbers (its stream cut, exec ceiling, execs per sandbox)
/// are stated once, in `daemon_limits`, with where each came from; every
/// other module derives from that table.
#[test]
fn the_daemons_numbers_live_in_one_table() {
    for (file, text) in sources() {
        if file == "daemon_limits.rs" {
            continue;
        }
        assert_eq!(
            daemon_numbers(&text),
            Vec::<String>::new(),
            "{file} states a daemon number of its own"
        );
    }
    assert_eq!(
        daemon_numbers(
            "/// The daemon's cut.\nconst CUT: usize = 1 << 20;\n/// Ours.\nconst N: u8 = 2;"
        ),
        vec!["CUT".to_string()]
    );
}

/// `WorkerProcess` (and its `WorkerCommand`) is the one way the tests and
/// benches start the worker binary, whether to serve or to print.
#[test]
fn the_worker_binary_is_started_only_through_worker_process() {
    for dir in ["tests", "benches"] {
        for (file, text) in sources_under(dir) {
            if file == "layering.rs" {
                continue;
            }
            let compact: String = text.split_whitespace().collect();
            assert!(
                !compact.contains("Command::new(env!(\"CARGO_BIN_EXE_sandbox-code-runner\")"),
                "{dir}/{file} spawns the worker itself"
            );
        }
    }
}

/// The sibling modules `text` (a file directly under `src/runtime/`) names
/// through `super::`: `super::x`, `super::x::Y` and `super::{x, y::Z}`,
/// only those that are modules of `siblings`.
fn runtime_imports(text: &str, siblings: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("super::") {
        rest = &rest[at + "super::".len()..];
        let names: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            group[..end].split(',').collect()
        } else {
            vec![rest]
        };
        for n in names {
            let name: String = n
                .trim()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if siblings.contains(&name) && !found.contains(&name) {
                found.push(name);
            }
        }
    }
    found
}

/// `src/runtime`'s modules import one another without a cycle: each
/// operation's file depends on the pieces below it, never the other way
/// round (issue 42; `inventory`↔`records` and `lineage`↔`teardown` were).
#[test]
fn runtime_modules_import_without_cycles() {
    let files: Vec<(String, String)> = sources_under("src/runtime")
        .into_iter()
        .filter(|(p, _)| !p.contains('/') && p != "mod.rs")
        .collect();
    let names: Vec<String> = files
        .iter()
        .map(|(p, _)| p.trim_end_matches(".rs").to_string())
        .collect();
    let edges: Vec<(String, Vec<String>)> = files
        .iter()
        .map(|(p, text)| {
            let me = p.trim_end_matches(".rs").to_string();
            // A file's own `tests` module reaches its parent through super.
            let code = text.split("#[cfg(test)]").next().unwrap_or(text);
            let to = runtime_imports(code, &names)
                .into_iter()
                .filter(|n| *n != me)
                .collect();
            (me, to)
        })
        .collect();
    assert!(
        edges.iter().any(|(_, to)| !to.is_empty()),
        "the imports were read: {edges:?}"
    );
    // Depth-first search for a back edge.
    fn visit<'a>(
        n: &'a str,
        edges: &'a [(String, Vec<String>)],
        path: &mut Vec<&'a str>,
        done: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| *p == n) {
            let mut cycle: Vec<String> = path[at..].iter().map(|s| s.to_string()).collect();
            cycle.push(n.to_string());
            return Some(cycle);
        }
        if done.contains(&n) {
            return None;
        }
        path.push(n);
        let to = edges
            .iter()
            .find(|(f, _)| f == n)
            .map(|(_, t)| t.as_slice())
            .unwrap_or(&[]);
        for t in to {
            if let Some(c) = visit(t, edges, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.push(n);
        None
    }
    let mut done = Vec::new();
    for (n, _) in &edges {
        let mut path = Vec::new();
        if let Some(cycle) = visit(n, &edges, &mut path, &mut done) {
            panic!("src/runtime imports in a cycle: {}", cycle.join(" → "));
        }
    }
}

#[test]
fn the_import_reader_sees_every_form() {
    let siblings: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
    let text = "use super::a::X;\nuse super::{b, c::Y, lock, Manager};\nlet z = super::d::f();";
    assert_eq!(runtime_imports(text, &siblings), ["a", "b", "c", "d"]);
}

/// Whether a source names `Manager` outside its `#[cfg(test)]` items.
fn names_the_manager(text: &str) -> bool {
    #[derive(Default)]
    struct Seen(bool);
    impl<'ast> syn::visit::Visit<'ast> for Seen {
        fn visit_ident(&mut self, i: &'ast proc_macro2::Ident) {
            self.0 |= i == "Manager";
        }
        fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
            let for_tests = m.attrs.iter().any(|a| {
                a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test")
            });
            if !for_tests {
                syn::visit::visit_item_mod(self, m);
            }
        }
    }
    let file = syn::parse_file(text).expect("the worker's sources parse");
    let mut seen = Seen::default();
    syn::visit::visit_file(&mut seen, &file);
    seen.0
}

/// The runtime's pieces take narrow views, never the whole `Manager`: the
/// VM table and its door, the records, a runtime's slots and session, the
/// exec a call becomes (`ready`: whether interpreters pre-start), the SDK's
/// planting (`python_sdk::Planting`: the archive cache, the install budget,
/// who hears of an archive), and the error mapping. Only the operations
/// that compose them (ARCHITECTURE.md's code map) hold the manager.
#[rstest::rstest]
fn a_piece_of_the_runtime_never_sees_the_manager(
    #[values(
        "records.rs",
        "vms.rs",
        "lease.rs",
        "daemon.rs",
        "slots.rs",
        "meta.rs",
        "session.rs",
        "ready.rs",
        "sdk.rs",
        "python_sdk.rs",
        "errors.rs",
        "failure.rs"
    )]
    piece: &str,
) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/runtime")
        .join(piece);
    let text = std::fs::read_to_string(&path).expect("the piece exists");
    assert!(
        !names_the_manager(&text),
        "src/runtime/{piece} takes a narrow view, not the Manager"
    );
}

#[test]
fn the_manager_reader_sees_a_use_a_type_and_a_path() {
    assert!(names_the_manager("use super::Manager;"));
    assert!(names_the_manager("fn f(m: &Manager) {}"));
    assert!(names_the_manager(
        "fn f() { let _ = super::Manager::new(); }"
    ));
    assert!(!names_the_manager("fn f(m: &Vms) {}"));
    assert!(!names_the_manager(
        "#[cfg(test)]\nmod tests { use super::super::Manager; }"
    ));
}
