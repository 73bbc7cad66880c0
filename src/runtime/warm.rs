//! Warm-pool orchestration: handing tenants a warm VM when one is ready,
//! refilling the pool in the background (charged to `pool`), and draining
//! it under capacity pressure.

use std::time::Duration;

use super::{lock, Manager};
use crate::error::redact_uuids;
use crate::ids::Lang;
use crate::sandbox::{charged, ExecParams, SandboxError};

/// How often the warm pool is topped up without traffic.
const POOL_MAINTENANCE: Duration = Duration::from_secs(2);

impl Manager {
    /// A VM for one tenant: a warm one if the pool has it, else a fresh one.
    /// Capacity pressure drains the pool before the caller sees `capacity`.
    /// The flag says whether it came from the pool.
    pub(super) async fn acquire_vm(&self, lang: Lang) -> Result<(String, bool), SandboxError> {
        let taken = self.pool.take(lang);
        self.refill(lang);
        if let Some(id) = taken {
            lock(&self.state).transient.insert(id.clone());
            return Ok((id, true));
        }
        match self.create_vm(lang).await {
            Err(e) if e.is_capacity() => {
                if self.drain_pool().await == 0 {
                    return Err(e);
                }
                self.create_vm(lang).await.map(|id| (id, false))
            }
            other => other.map(|id| (id, false)),
        }
    }

    /// Tops the pool of `lang` up in the background.
    fn refill(&self, lang: Lang) {
        let missing = self.pool.reserve(lang);
        let Some(me) = self.me.upgrade() else { return };
        for _ in 0..missing {
            let me = me.clone();
            let totals = self.stats.pool.clone();
            tokio::spawn(charged(totals, async move {
                let warmed = me.warm_one(lang).await;
                if let Some(back) = me.pool.arrive(lang, warmed) {
                    me.stop_vm(&back).await;
                }
            }));
        }
    }

    /// Boots one pooled VM: create, then one cheap exec that pays the boot.
    async fn warm_one(&self, lang: Lang) -> Option<String> {
        let id = match self.create_unrecorded(lang).await {
            Ok(id) => id,
            Err(e) => {
                tracing::debug!(error = %redact_uuids(&e.to_string()), "warm pool: create failed");
                return None;
            }
        };
        let warm = ExecParams {
            argv: vec!["true".into()],
            timeout_ms: 60_000,
            ..ExecParams::default()
        };
        match self.exec(&id, warm).await {
            Ok(_) => Some(id),
            Err(e) => {
                tracing::debug!(error = %redact_uuids(&e.to_string()), "warm pool: warm-up exec failed");
                lock(&self.state).transient.insert(id.clone());
                self.stop_vm(&id).await;
                None
            }
        }
    }

    /// Stops every ready pooled VM; returns how many.
    async fn drain_pool(&self) -> usize {
        let ids = self.pool.drain();
        let n = ids.len();
        lock(&self.state).transient.extend(ids.iter().cloned());
        futures_util::future::join_all(ids.iter().map(|id| self.stop_vm(id))).await;
        n
    }

    /// Fills the pool at boot, and keeps it topped up: a refill that failed
    /// (capacity, a daemon not yet there) is retried by this loop, and a
    /// pool with no traffic still recovers.
    pub fn start_pool(&self) {
        if self.config.warm_pool == 0 {
            return;
        }
        self.refill(Lang::Node);
        self.refill(Lang::Python);
        let me = self.me.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(POOL_MAINTENANCE);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(m) = me.upgrade() else { return };
                if m.pool.is_closed() {
                    return;
                }
                m.refill(Lang::Node);
                m.refill(Lang::Python);
            }
        });
    }
}
