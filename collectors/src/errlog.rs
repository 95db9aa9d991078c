//! The collectors' log of failures: each failing (subject, reason) — a query, a kubelet, a
//! batch of samples the store refused — is logged when it starts, summarised once per
//! interval while it lasts (how many subjects, how many failed attempts, by reason), and
//! logged when it ends, with how long it lasted and how many attempts failed. Many subjects
//! starting or ending in the same cycle (Prometheus down takes every query with it; a rack
//! of kubelets goes away) make one line between them, not one each.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::CollectError;
use crate::config::SourceKind;

/// At most this many subjects are named one line each when they start or end failing in
/// the same cycle; more make one line between them.
const ONE_LINE_EACH: usize = 3;
/// How long a failure goes on before it is summarised again.
pub(crate) const SUMMARY_INTERVAL: Duration = Duration::from_secs(30);

/// One failing subject.
#[derive(Debug, Clone, Copy)]
struct Failing {
    since: Instant,
    /// Failed attempts since it started.
    failures: u64,
    /// Failed attempts since the last line that counted it.
    held_back: u64,
}

/// What one cycle wrote (for tests).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Lines {
    /// Lines about subjects that started failing.
    pub started: usize,
    /// Lines summarising failures still going on.
    pub still: usize,
    /// Lines about subjects that recovered.
    pub ended: usize,
}

/// The failures of one source, across its cycles.
#[derive(Debug)]
pub(crate) struct ErrorLog {
    interval: Duration,
    active: HashMap<(String, &'static str), Failing>,
    last_summary: Option<Instant>,
}

impl Default for ErrorLog {
    fn default() -> Self {
        ErrorLog {
            interval: SUMMARY_INTERVAL,
            active: HashMap::new(),
            last_summary: None,
        }
    }
}

impl ErrorLog {
    /// Takes one cycle's errors (empty: every subject worked) at `now`.
    pub(crate) fn cycle(
        &mut self,
        source: SourceKind,
        errors: &[(String, CollectError)],
        now: Instant,
    ) -> Lines {
        let mut lines = Lines::default();
        let mut seen: HashMap<(String, &'static str), &CollectError> = HashMap::new();
        for (subject, e) in errors {
            seen.entry((subject.clone(), e.reason())).or_insert(e);
        }
        let mut started: Vec<(&(String, &'static str), &CollectError)> = Vec::new();
        for (key, e) in &seen {
            match self.active.get_mut(key) {
                Some(f) => {
                    f.failures += 1;
                    f.held_back += 1;
                    tracing::debug!(%source, subject = %key.0, reason = key.1, error = %e, "collection still failing");
                }
                None => {
                    started.push((key, e));
                    self.active.insert(
                        key.clone(),
                        Failing {
                            since: now,
                            failures: 1,
                            held_back: 0,
                        },
                    );
                }
            }
        }
        lines.started = log_started(source, &mut started);
        let mut ended: Vec<((String, &'static str), Failing)> = Vec::new();
        self.active.retain(|key, f| {
            let still = seen.contains_key(key);
            if !still {
                ended.push((key.clone(), *f));
            }
            still
        });
        lines.ended = log_ended(source, &mut ended, now);
        if self.active.is_empty() {
            self.last_summary = None;
        } else if lines.started > 0 && self.last_summary.is_none() {
            self.last_summary = Some(now);
        } else if self
            .last_summary
            .is_none_or(|t| now.saturating_duration_since(t) >= self.interval)
        {
            self.last_summary = Some(now);
            lines.still = self.log_still(source, now);
        }
        lines
    }

    /// One line for everything still failing: subjects, attempts since the last line, by
    /// reason, and the oldest failure's age.
    fn log_still(&mut self, source: SourceKind, now: Instant) -> usize {
        let mut by_reason: BTreeMap<&'static str, (usize, u64)> = BTreeMap::new();
        let mut oldest = now;
        let mut held_back = 0;
        for ((_, reason), f) in self.active.iter_mut() {
            let e = by_reason.entry(reason).or_default();
            e.0 += 1;
            e.1 += f.held_back;
            held_back += f.held_back;
            f.held_back = 0;
            oldest = oldest.min(f.since);
        }
        let reasons = by_reason
            .iter()
            .map(|(r, (n, k))| format!("{r}: {n} subjects, {k} attempts"))
            .collect::<Vec<_>>()
            .join("; ");
        let for_s = now.saturating_duration_since(oldest).as_secs();
        tracing::warn!(
            %source,
            subjects = self.active.len(),
            held_back,
            for_s,
            "{source}: still failing: {} subjects, for up to {for_s}s, {held_back} failed attempts since the last line ({reasons})",
            self.active.len()
        );
        1
    }
}

fn log_started(
    source: SourceKind,
    started: &mut [(&(String, &'static str), &CollectError)],
) -> usize {
    started.sort_by(|a, b| a.0.cmp(b.0));
    if started.len() <= ONE_LINE_EACH {
        for ((subject, reason), e) in started.iter() {
            tracing::warn!(%source, %subject, reason, error = %e, "collection failed; retrying every cycle, summarised every {}s while it lasts", SUMMARY_INTERVAL.as_secs());
        }
        return started.len();
    }
    let ((first, reason), e) = started[0];
    tracing::warn!(
        %source,
        subjects = started.len(),
        %first,
        reason,
        error = %e,
        "{source}: {} subjects started failing (first: {first}); retrying every cycle, summarised every {}s while it lasts",
        started.len(),
        SUMMARY_INTERVAL.as_secs()
    );
    1
}

fn log_ended(
    source: SourceKind,
    ended: &mut [((String, &'static str), Failing)],
    now: Instant,
) -> usize {
    ended.sort_by(|a, b| a.0.cmp(&b.0));
    if ended.len() <= ONE_LINE_EACH {
        for ((subject, reason), f) in ended.iter() {
            let for_s = now.saturating_duration_since(f.since).as_secs();
            tracing::info!(
                %source,
                %subject,
                reason,
                failures = f.failures,
                for_s,
                "{source}: {subject} collecting again after {for_s}s, {} failed attempts",
                f.failures
            );
        }
        return ended.len();
    }
    let failures: u64 = ended.iter().map(|(_, f)| f.failures).sum();
    let for_s = ended
        .iter()
        .map(|(_, f)| now.saturating_duration_since(f.since).as_secs())
        .max()
        .unwrap_or(0);
    tracing::info!(
        %source,
        subjects = ended.len(),
        failures,
        for_s,
        "{source}: {} subjects collecting again after up to {for_s}s, {failures} failed attempts",
        ended.len()
    );
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(subject: &str) -> (String, CollectError) {
        (
            subject.to_string(),
            CollectError::Connect {
                url: format!("http://{subject}"),
                message: "refused".into(),
            },
        )
    }

    #[test]
    fn many_subjects_failing_together_make_one_line_each_way() {
        let mut log = ErrorLog::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let all: Vec<_> = (0..500).map(|i| refused(&format!("node-{i}"))).collect();
        let l = log.cycle(SourceKind::Kubelet, &all, t0);
        assert_eq!(
            l,
            Lines {
                started: 1,
                still: 0,
                ended: 0
            }
        );
        // Every 15 s for two minutes: one summary per 30 s.
        let mut still = 0;
        for k in 1..=8 {
            let l = log.cycle(SourceKind::Kubelet, &all, at(15 * k));
            assert_eq!(l.started + l.ended, 0);
            still += l.still;
        }
        assert_eq!(still, 4);
        let l = log.cycle(SourceKind::Kubelet, &[], at(135));
        assert_eq!(
            l,
            Lines {
                started: 0,
                still: 0,
                ended: 1
            }
        );
        assert!(log.active.is_empty());
        // Quiet afterwards.
        assert_eq!(
            log.cycle(SourceKind::Kubelet, &[], at(150)),
            Lines::default()
        );
    }

    #[test]
    fn a_few_subjects_are_named_one_line_each() {
        let mut log = ErrorLog::default();
        let t0 = Instant::now();
        let two = vec![refused("q1"), refused("q2")];
        assert_eq!(log.cycle(SourceKind::Prometheus, &two, t0).started, 2);
        let one = vec![refused("q1")];
        let l = log.cycle(SourceKind::Prometheus, &one, t0 + Duration::from_secs(15));
        assert_eq!(l.ended, 1);
        assert_eq!(log.active.len(), 1);
        assert_eq!(log.active.values().next().unwrap().failures, 2);
    }
}
