//! The golden data: locating `golden/`, loading and cross-checking one
//! target's cases, error table and expectations, and the static closed world.

use super::*;

/// The golden data directory and its layout.
#[derive(Debug, Clone)]
pub struct Golden {
    pub root: PathBuf,
}

impl Golden {
    /// `explicit`, else `$CODE_RUNNER_CONFORMANCE_GOLDEN`, else this
    /// workspace's `golden/`, else `./golden`.
    pub fn locate(explicit: Option<PathBuf>) -> Result<Golden, SuiteError> {
        let candidates: Vec<PathBuf> = explicit
            .into_iter()
            .chain(std::env::var_os("CODE_RUNNER_CONFORMANCE_GOLDEN").map(PathBuf::from))
            .chain([
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../golden"),
                PathBuf::from("golden"),
            ])
            .collect();
        for c in &candidates {
            if c.join("cases").is_dir() {
                return Ok(Golden {
                    root: c.canonicalize().unwrap_or_else(|_| c.clone()),
                });
            }
        }
        Err(SuiteError::Golden(format!(
            "no golden directory (with cases/) among {}",
            candidates
                .iter()
                .map(|c| c.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )))
    }

    pub fn cases(&self) -> PathBuf {
        self.root.join("cases")
    }
    pub fn targets(&self) -> PathBuf {
        self.root.join("targets")
    }
    pub(crate) fn errors(&self) -> PathBuf {
        self.root.join("errors")
    }
    pub fn schemas(&self) -> PathBuf {
        self.root.join("schemas")
    }
    pub fn expectations(&self, target: &str) -> PathBuf {
        self.root
            .join("expectations")
            .join(format!("{target}.yaml"))
    }
}

/// Everything loaded for one target.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub(crate) golden: Golden,
    pub(crate) target: Target,
    pub(crate) cases: Vec<Case>,
    pub(crate) table: ErrorTable,
    pub(crate) expectations: Expectations,
}

/// Loads and cross-checks the golden data for `target`.
pub fn load(
    golden: &Golden,
    target: &str,
    expectations: Option<&Path>,
) -> Result<Loaded, SuiteError> {
    let g = |e: String| SuiteError::Golden(e);
    let all = Target::load_all(&golden.targets()).map_err(SuiteError::golden_load)?;
    let target = Target::load(&golden.targets(), target).map_err(SuiteError::golden_load)?;
    let cases =
        case::load_cases(&golden.cases(), SUITE_VERSION).map_err(SuiteError::golden_load)?;
    let known = target::known_features(&all);
    for c in &cases {
        let refinements = c.refinements();
        for r in c.requires.iter().chain(&refinements) {
            let f = target::requirement_feature(r);
            if !known.contains(f) {
                return Err(g(format!(
                    "{}: requires unknown feature `{f}` (no target profile declares it)",
                    c.file.display()
                )));
            }
        }
    }
    let table =
        ErrorTable::load(&golden.errors(), &target.name).map_err(SuiteError::golden_load)?;
    let exp_path = expectations
        .map(Path::to_path_buf)
        .unwrap_or_else(|| golden.expectations(&target.name));
    let expectations = Expectations::load(&exp_path).map_err(SuiteError::golden_load)?;
    Ok(Loaded {
        golden: golden.clone(),
        target,
        cases,
        table,
        expectations,
    })
}

/// Static closed-world findings of a target: its table against the cases
/// whose requirements its profile meets.
pub fn closed_world_static(loaded: &Loaded) -> Vec<Violation> {
    let applicable: Vec<(String, BTreeSet<String>)> = loaded
        .cases
        .iter()
        .filter(|c| loaded.target.unmet(&c.requires).is_none())
        .map(|c| (c.id.clone(), c.expected_codes()))
        .collect();
    errors::closed_world_static(&loaded.table, &applicable)
}
