//! Phased shutdown: background tasks grouped by what they must outlive.
//!
//! Stopping runs the phases in order; each phase's stop signal fires, then every task of
//! that phase is awaited before the next phase's signal fires:
//!
//! 1. [`Phase::Intake`]: no new work — the scheduling loop (which finishes the binds in
//!    flight, so every assumed pod ends bound or forgotten), the cluster feed, the HTTP
//!    listeners, the collectors, the analytics refresh, the housekeeping tick;
//! 2. [`Phase::Decisions`]: the decision sink drains what the loop published;
//! 3. [`Phase::Reports`]: what the sink forwarded is acted on (`serve`'s reporter:
//!    conditions, annotations, preemptions in flight), so every event it records is
//!    queued before the writers stop;
//! 4. [`Phase::Writers`]: the writers (events, reservation status) drain;
//! 5. [`Phase::Handover`]: leadership is released, now that nothing of ours is in flight;
//! 6. [`Phase::Store`]: the store's last flush.

use std::future::Future;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A shutdown phase (see the module docs for the order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Everything that takes in or creates work.
    Intake,
    /// The decision sink.
    Decisions,
    /// What acts on the decisions and records their events (the reporter).
    Reports,
    /// Writers of what the decisions caused.
    Writers,
    /// Leadership release.
    Handover,
    /// The store's final flush.
    Store,
}

const ALL: [Phase; 6] = [
    Phase::Intake,
    Phase::Decisions,
    Phase::Reports,
    Phase::Writers,
    Phase::Handover,
    Phase::Store,
];

fn index(p: Phase) -> usize {
    ALL.iter().position(|q| *q == p).unwrap_or(0)
}

/// A future that completes once `rx` shows true (or its sender is gone).
pub async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}

/// Stop signals and the tasks of each phase.
pub struct Phases {
    stops: Vec<(watch::Sender<bool>, watch::Receiver<bool>)>,
    tasks: Vec<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Phases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Phases")
            .field(
                "tasks",
                &self.tasks.iter().map(Vec::len).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Default for Phases {
    fn default() -> Self {
        Phases {
            stops: ALL.iter().map(|_| watch::channel(false)).collect(),
            tasks: ALL.iter().map(|_| Vec::new()).collect(),
        }
    }
}

impl Phases {
    /// The stop signal of `phase`, as a receiver (for tasks that select on it repeatedly).
    pub fn signal(&self, phase: Phase) -> watch::Receiver<bool> {
        self.stops[index(phase)].1.clone()
    }

    /// A future completing when `phase` stops.
    pub fn stopped(&self, phase: Phase) -> impl Future<Output = ()> + Send + 'static {
        stopped(self.signal(phase))
    }

    /// Runs `task` until its phase is awaited at shutdown (it should end on
    /// [`stopped`](Self::stopped) of that phase).
    pub fn spawn(&mut self, phase: Phase, task: impl Future<Output = ()> + Send + 'static) {
        self.tasks[index(phase)].push(tokio::spawn(task));
    }

    /// Adds an already spawned task (e.g. a `spawn_blocking` join) to `phase`.
    pub fn add(&mut self, phase: Phase, task: JoinHandle<()>) {
        self.tasks[index(phase)].push(task);
    }

    /// Stops `phase` and every earlier one that is still running, in order, waiting for
    /// each phase's tasks.
    pub async fn stop_through(&mut self, phase: Phase) {
        self.stop_through_by(phase, None).await;
    }

    /// [`stop_through`](Self::stop_through), but a task still running at `deadline` is
    /// aborted (logged) instead of awaited, so a shutdown with the API server gone ends in
    /// bounded time. The store phase is never cut short: its final flush is local.
    pub async fn stop_through_by(&mut self, phase: Phase, deadline: Option<Instant>) {
        for (i, p) in ALL.iter().enumerate() {
            if !*self.stops[i].0.borrow() {
                let _ = self.stops[i].0.send(true);
            }
            let deadline = deadline.filter(|_| *p != Phase::Store);
            for mut t in std::mem::take(&mut self.tasks[i]) {
                let joined = match deadline {
                    None => Some((&mut t).await),
                    Some(d) => tokio::time::timeout_at(d, &mut t).await.ok(),
                };
                match joined {
                    Some(Err(e)) if e.is_panic() => {
                        tracing::error!(phase = ?p, error = %e, "a background task panicked");
                    }
                    Some(_) => {}
                    None => {
                        tracing::warn!(
                            phase = ?p,
                            "a background task did not finish within the shutdown grace period; aborted"
                        );
                        t.abort();
                    }
                }
            }
            if *p == phase {
                break;
            }
        }
    }

    /// Stops every phase, in order.
    pub async fn stop_all(&mut self) {
        self.stop_through(Phase::Store).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    #[tokio::test]
    async fn phases_stop_in_order_and_each_waits_for_its_tasks() {
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut phases = Phases::default();
        for p in [Phase::Store, Phase::Writers, Phase::Intake] {
            let stop = phases.stopped(p);
            let order = order.clone();
            phases.spawn(p, async move {
                stop.await;
                // A slow task: the next phase must still wait for it.
                tokio::task::yield_now().await;
                order.lock().unwrap().push(p);
            });
        }
        phases.stop_through(Phase::Writers).await;
        assert_eq!(*order.lock().unwrap(), vec![Phase::Intake, Phase::Writers]);
        phases.stop_all().await;
        assert_eq!(
            *order.lock().unwrap(),
            vec![Phase::Intake, Phase::Writers, Phase::Store]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_aborts_what_hangs_but_not_the_store_phase() {
        let done = Arc::new(Mutex::new(Vec::new()));
        let mut phases = Phases::default();
        // A writer that never ends (an API call with the server gone).
        phases.spawn(Phase::Writers, std::future::pending());
        let (stop, d) = (phases.stopped(Phase::Store), done.clone());
        phases.spawn(Phase::Store, async move {
            stop.await;
            // The final flush takes longer than the grace period left: still awaited.
            tokio::time::sleep(Duration::from_secs(30)).await;
            d.lock().unwrap().push("flushed");
        });
        let t0 = Instant::now();
        phases
            .stop_through_by(Phase::Store, Some(t0 + Duration::from_secs(5)))
            .await;
        assert_eq!(*done.lock().unwrap(), vec!["flushed"]);
        assert_eq!(Instant::now() - t0, Duration::from_secs(35));
    }
}
