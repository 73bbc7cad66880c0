//! Whether a target's profile fits the worker running under it, checked
//! once before any case: a profile that lays out a guest listener for a
//! worker that publishes no `<prefix>::guest-auth` (or declares tenancy for
//! one without `<prefix>::guest-middleware`) is one diagnosis at the start,
//! the environment is laid out as the worker can use it, and the cases that
//! need the missing piece fail at once with that diagnosis instead of
//! timing out one by one. Also where the environments are started.

use std::collections::BTreeSet;

use crate::standin::stack::ListenerLayout;

use super::case::Case;
use super::env::{Env, EnvError, WorkerCommand};
use super::target::Target;
use super::{Mode, SuiteError};

/// A profile value the worker cannot honour, and what the run does about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Misfit {
    /// The profile feature (`guest_listener`, `guest_tenancy`).
    pub(crate) feature: &'static str,
    pub(crate) diagnosis: String,
}

/// The fit of a profile to its worker.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Fit {
    pub(crate) misfits: Vec<Misfit>,
}

impl Fit {
    /// Compares what the profile declares with the function ids the worker
    /// publishes (`listed`, internal ones included).
    pub(crate) fn check(target: &Target, prefix: &str, listed: &BTreeSet<String>) -> Fit {
        let has = |suffix: &str| listed.contains(&format!("{prefix}::{suffix}"));
        let mut misfits = Vec::new();
        let listener = target.check("guest_listener").is_ok();
        if listener && !has("guest-auth") {
            misfits.push(Misfit {
                feature: "guest_listener",
                diagnosis: format!(
                    "the profile declares `guest_listener`, but the worker publishes no \
                     {prefix}::guest-auth (the guest listener's auth function), so its guests \
                     cannot connect through a guest listener: the engine gets its default \
                     listener instead, and every case that needs the guest listener fails \
                     with this diagnosis. Fix the worker, or set guest_listener: false"
                ),
            });
        } else if listener && target.check("guest_tenancy").is_ok() && !has("guest-middleware") {
            misfits.push(Misfit {
                feature: "guest_tenancy",
                diagnosis: format!(
                    "the profile declares `guest_tenancy`, but the worker publishes no \
                     {prefix}::guest-middleware (the guest listener's middleware), so nothing \
                     enforces tenancy: the guest listener is laid out without it, and every \
                     case that needs tenancy fails with this diagnosis. Fix the worker, or \
                     set guest_tenancy: false"
                ),
            });
        }
        Fit { misfits }
    }

    /// The listener layout this fit allows for a profile that wanted
    /// `wanted`.
    pub(crate) fn layout(&self, wanted: &ListenerLayout, prefix: &str) -> ListenerLayout {
        let misfit = |f: &str| self.misfits.iter().any(|m| m.feature == f);
        match &wanted.guest {
            Some(_) if misfit("guest_listener") => ListenerLayout::open(),
            Some(g) if misfit("guest_tenancy") && g.tenancy => {
                ListenerLayout::guarded(prefix, g.port, false)
            }
            _ => wanted.clone(),
        }
    }

    /// The diagnosis a case fails with, when it needs a misfit feature.
    pub(crate) fn blocks(&self, case: &Case) -> Option<String> {
        self.misfits
            .iter()
            .find(|m| case.requires.iter().any(|r| r == m.feature))
            .map(|m| {
                format!(
                    "not run: {} (diagnosed at the start of the run)",
                    m.diagnosis
                )
            })
    }

    /// The lines printed at the start of a run (none when the profile fits).
    pub(crate) fn render(&self) -> String {
        self.misfits
            .iter()
            .map(|m| format!("profile does not fit the worker: {}\n", m.diagnosis))
            .collect()
    }
}

/// The listener layout a target's profile asks for: a worker that gates
/// its guests gets the layout its operator would run (main listener
/// host-only, guests on an RBAC listener, with its middleware and trigger
/// hook when the profile declares `guest_tenancy`); any other worker gets
/// the engine's default, one listener its guests can reach.
pub(crate) fn wanted_layout(target: &Target, prefix: &str) -> ListenerLayout {
    if target.check("guest_listener").is_ok() {
        let tenancy = target.check("guest_tenancy").is_ok();
        ListenerLayout::guarded(prefix, 0, tenancy)
    } else {
        ListenerLayout::open()
    }
}

/// Whether `mode` can start its environment again in another layout.
pub(crate) fn relayable(mode: &Mode) -> bool {
    matches!(mode, Mode::Hermetic { .. } | Mode::EngineBin { .. })
}

/// What a started environment is: the environment, the worker command its
/// private environments use, and whether those can exist at all.
pub(crate) type Started = (Env, Option<WorkerCommand>, Result<(), String>);

/// Starts the environment `mode` asks for, laid out as `layout` says.
pub(crate) async fn start_env(
    mode: &Mode,
    default_cmd: Option<&WorkerCommand>,
    functions: &[String],
    layout: &ListenerLayout,
) -> Result<Started, SuiteError> {
    let command = |given: &Option<WorkerCommand>| {
        given
            .clone()
            .or_else(|| default_cmd.cloned())
            .ok_or_else(|| SuiteError::Environment(EnvError::Failed("no worker command".into())))
    };
    Ok(match mode {
        Mode::EngineBin { bin, worker_cmd } => {
            let cmd = command(worker_cmd)?;
            let env = Env::engine_bin(bin, &cmd, functions.to_vec(), layout.guest.as_ref()).await?;
            (env, Some(cmd), Ok(()))
        }
        Mode::Hermetic { worker_cmd } => {
            let cmd = command(worker_cmd)?;
            let env = Env::hermetic(&cmd, functions.to_vec(), layout.clone()).await?;
            (env, Some(cmd), Ok(()))
        }
        Mode::Live { url } => (
            Env::live(url, functions.to_vec()).await?,
            None,
            Err("needs a private environment (its own engine, daemon and worker process); live mode cannot provide one".to_string()),
        ),
        Mode::EngineImage {
            image,
            port,
            worker_cmd,
        } => {
            let cmd = command(worker_cmd)?;
            (
                Env::engine_image(image, *port, &cmd, functions.to_vec()).await?,
                None,
                Err("needs a private environment; those run on the stand-in engine (use --hermetic)".to_string()),
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(profile: &str) -> Target {
        serde_yaml::from_str(&format!(
            "name: t\nprefix: p\nfunctions: [run]\nprofile:\n{profile}"
        ))
        .expect("a target")
    }

    fn listed(ids: &[&str]) -> BTreeSet<String> {
        ids.iter().map(|s| format!("p::{s}")).collect()
    }

    fn case(requires: &str) -> Case {
        let mut c: Case = serde_yaml::from_str(&format!(
            "id: c\nsince: 0.1.0\nlevel: recommended\nrequires: [{requires}]\nsteps: [{{trigger: run}}]\n"
        ))
        .expect("a case");
        c.file = "c.yaml".into();
        c
    }

    #[test]
    fn a_guest_listener_without_guest_auth_is_one_diagnosis() {
        let t = target("  guest_listener: {value: true}\n  guest_tenancy: {value: true}\n");
        let fit = Fit::check(&t, "p", &listed(&["run", "teardown"]));
        assert_eq!(fit.misfits.len(), 1, "{fit:?}");
        assert!(fit.render().contains("p::guest-auth"), "{}", fit.render());
        let blocked = fit.blocks(&case("node, guest_listener")).expect("blocked");
        assert!(blocked.contains("p::guest-auth"), "{blocked}");
        assert_eq!(fit.blocks(&case("node")), None);
        let wanted = wanted_layout(&t, "p");
        assert!(wanted.guest.is_some());
        assert!(fit.layout(&wanted, "p").guest.is_none(), "laid out open");
    }

    #[test]
    fn tenancy_without_guest_middleware_keeps_the_listener_without_it() {
        let t = target("  guest_listener: {value: true}\n  guest_tenancy: {value: true}\n");
        let fit = Fit::check(&t, "p", &listed(&["run", "guest-auth", "guest-register"]));
        assert_eq!(fit.misfits.len(), 1, "{fit:?}");
        assert!(fit.render().contains("p::guest-middleware"));
        assert!(fit.blocks(&case("guest_listener")).is_none());
        assert!(fit.blocks(&case("guest_listener, guest_tenancy")).is_some());
        let layout = fit.layout(&wanted_layout(&t, "p"), "p");
        assert!(layout.guest.is_some_and(|g| !g.tenancy));
    }

    #[test]
    fn a_fitting_profile_changes_nothing() {
        let t = target("  guest_listener: {value: true}\n  guest_tenancy: {value: true}\n");
        let fit = Fit::check(&t, "p", &listed(&["guest-auth", "guest-middleware"]));
        assert_eq!(fit, Fit::default());
        assert_eq!(fit.render(), "");
        let open = target("  guest_listener: {value: false}\n");
        assert_eq!(Fit::check(&open, "p", &listed(&[])), Fit::default());
    }
}
