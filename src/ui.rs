//! The console UI (ui/), embedded: `cards.js` registers one function-trigger
//! renderer per operation with the console, `page.js` the runtimes page (both
//! ES modules whose default export is the console's `setup(host)`), and
//! `cards.css` styles them. build.rs builds them from ui/src into OUT_DIR;
//! nothing is installed or served separately.
//!
//! [`asset`] is what `sandbox-code-runner::ui-content` answers with: the
//! `console:script` trigger asks for [`SCRIPT_PATH`], `console:style` for
//! [`STYLE_PATH`].

/// The script asset: an ES module whose default `setup(host)` registers the
/// run / register_function / teardown / list_runtimes renderers (see
/// ui/README.md, "Registration").
pub const SCRIPT_PATH: &str = "sandbox-code-runner/cards.js";
/// The stylesheet asset: every rule scoped under
/// `[data-iii-ui="sandbox-code-runner"]`.
pub const STYLE_PATH: &str = "sandbox-code-runner/cards.css";

/// The runtimes page: an ES module whose default export is the console's
/// `setup(host)`; it registers a page fed by `list_runtimes`.
pub const PAGE_PATH: &str = "sandbox-code-runner/page.js";

pub(crate) const SCRIPT_CONTENT_TYPE: &str = "text/javascript; charset=utf-8";
pub(crate) const STYLE_CONTENT_TYPE: &str = "text/css; charset=utf-8";

const CARDS_JS: &str = include_str!(concat!(env!("OUT_DIR"), "/ui-cards.js"));
const CARDS_CSS: &str = include_str!(concat!(env!("OUT_DIR"), "/ui-cards.css"));
const PAGE_JS: &str = include_str!(concat!(env!("OUT_DIR"), "/ui-page.js"));

/// The asset at `path` as `(content, content_type)`, or `None`.
///
/// Accepts the full paths ([`SCRIPT_PATH`], [`STYLE_PATH`]) and the bare file
/// names, with or without a leading `/`; nothing else resolves.
pub fn asset(path: &str) -> Option<(&'static str, &'static str)> {
    let path = path.strip_prefix('/').unwrap_or(path);
    let name = path.strip_prefix("sandbox-code-runner/").unwrap_or(path);
    match name {
        "cards.js" => Some((CARDS_JS, SCRIPT_CONTENT_TYPE)),
        "cards.css" => Some((CARDS_CSS, STYLE_CONTENT_TYPE)),
        "page.js" => Some((PAGE_JS, SCRIPT_CONTENT_TYPE)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_assets_resolve_by_path_and_name() {
        for (path, ty) in [
            (SCRIPT_PATH, SCRIPT_CONTENT_TYPE),
            (STYLE_PATH, STYLE_CONTENT_TYPE),
            ("cards.js", SCRIPT_CONTENT_TYPE),
            ("/cards.css", STYLE_CONTENT_TYPE),
            ("/sandbox-code-runner/cards.js", SCRIPT_CONTENT_TYPE),
            (PAGE_PATH, SCRIPT_CONTENT_TYPE),
        ] {
            let (content, content_type) = asset(path).unwrap_or_else(|| panic!("{path}"));
            assert_eq!(content_type, ty, "{path}");
            assert!(content.len() > 1_000, "{path} is too small to be the cards");
        }
    }

    #[test]
    fn nothing_else_resolves() {
        for path in [
            "",
            "/",
            "cards.map",
            "../cards.js",
            "sandbox-code-runner/../cards.js",
            "other/cards.js",
            "sandbox-code-runner/cards.js/",
            "CARDS.JS",
            "sandbox-code-runner//cards.js",
            "cards.js\0",
        ] {
            assert!(asset(path).is_none(), "{path:?} resolved");
        }
    }

    #[test]
    fn the_script_is_a_module_registering_one_renderer_per_operation() {
        let (js, _) = asset(SCRIPT_PATH).unwrap();
        assert!(
            js.contains("as default}"),
            "an ES module with setup(host) as default"
        );
        assert!(js.contains("/cards.js#"), "the renderer ids");
        for f in ["run", "register_function", "teardown", "list_runtimes"] {
            assert!(js.contains(f), "{f}");
        }
        for gone in ["__iiiConsoleUi", "SandboxCodeRunnerUI"] {
            assert!(!js.contains(gone), "the old global protocol: {gone}");
        }
    }

    #[test]
    fn the_page_is_a_module_fed_by_list_runtimes() {
        let (js, ty) = asset(PAGE_PATH).unwrap();
        assert_eq!(ty, SCRIPT_CONTENT_TYPE);
        assert!(js.contains("sandbox-code-runner::list_runtimes"));
        assert!(js.contains("sandbox-code-runner::teardown"));
        assert!(
            js.contains("export"),
            "an ES module with setup(host) as default"
        );
    }

    #[test]
    fn the_stylesheet_is_scoped_and_honours_reduced_motion() {
        let (css, _) = asset(STYLE_PATH).unwrap();
        assert!(css.contains("prefers-reduced-motion"));
        // Every selector starts with the scope, but keyframe steps.
        let body = css.split_once("*/").map(|(_, b)| b).unwrap_or(css);
        let mut rules = 0;
        for block in body.split('}') {
            let Some((head, _)) = block.rsplit_once('{') else {
                continue;
            };
            let selector = head.rsplit('{').next().unwrap_or(head).trim();
            let keyframe_step = selector == "from" || selector == "to" || selector.ends_with('%');
            let scoped = selector
                .split(',')
                .all(|s| s.trim().starts_with("[data-iii-ui=sandbox-code-runner]"));
            assert!(scoped || keyframe_step, "unscoped rule: {selector}");
            rules += 1;
        }
        assert!(rules > 50, "only {rules} rules");
    }

    #[test]
    fn no_asset_carries_a_full_runtime_id() {
        for path in [SCRIPT_PATH, STYLE_PATH, PAGE_PATH] {
            let (content, _) = asset(path).unwrap();
            assert_eq!(
                crate::error::redact_runtime_ids(content),
                content,
                "{path} embeds a runtime id"
            );
        }
    }
}
