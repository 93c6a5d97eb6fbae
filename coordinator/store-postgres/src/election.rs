//! Who leads among coordinator replicas, decided without I/O. The caller tries the
//! lease ([`super::lease`]) when [`Election::next_attempt`] says, feeds each outcome back with
//! the instant it *sent* the request, and looks at [`Election::on_tick`] between attempts; the
//! election answers what changed. Time is a parameter, so every path is tested without a
//! database or a sleep.
//!
//! The safety rule: a leader stops leading at [`super::lease::leads_until`] of its last
//! successful renewal — counted from when the renewal was sent, less a margin — whether or not
//! it can reach the database; the database lets another replica take over only after the lease
//! lapses on its own clock, later than that. A renewal that fails does not end leadership at
//! once (a blip of the network is not a reason to stop a rollout), but the deadline stands.

use std::time::{Duration, Instant};

use super::lease::leads_until;

/// What one try of the lease came back with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// This replica holds the lease, with this fencing token.
    Held {
        /// The token.
        token: i64,
    },
    /// Another replica holds an unexpired lease.
    Taken,
    /// The database could not be asked (connection lost, timeout).
    Failed,
}

/// A change of role, for the event log and the leadership metric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// This replica now leads, with this token: start the executor, the job engine, the
    /// sweeps and reconcilers, and fence their writes with the token.
    Elected {
        /// The token.
        token: i64,
    },
    /// This replica no longer leads: stop all leader work at once.
    SteppedDown {
        /// The token it led with.
        token: i64,
        /// Why, for the event.
        reason: StepDown,
    },
}

/// Why a leader stepped down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepDown {
    /// Its lease ran out before a renewal succeeded (the database unreachable, or slow).
    Lapsed,
    /// The database says another replica holds the lease.
    TakenOver,
    /// The lease came back with another token: leadership was lost in between.
    TokenChanged,
}

/// How the election paces itself.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// The lease's time to live.
    pub ttl: Duration,
    /// Stop leading this long before the lease could lapse.
    pub margin: Duration,
}

impl Timing {
    /// A leader renews three times per lease, so two renewals can fail before it steps down;
    /// a follower tries twice per lease, so a lapsed lease is taken within half of one.
    fn interval(&self, leading: bool) -> Duration {
        if leading { self.ttl / 3 } else { self.ttl / 2 }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Follower,
    Leader { token: i64, until: Instant },
}

/// One replica's view of the election.
#[derive(Debug, Clone)]
pub struct Election {
    timing: Timing,
    role: Role,
    last_sent: Option<Instant>,
    /// When the lease another replica holds lapses, as last seen: a follower tries then,
    /// not up to half a lease later.
    lapses_at: Option<Instant>,
}

impl Election {
    /// A replica that does not lead yet.
    pub fn new(timing: Timing) -> Election {
        Election { timing, role: Role::Follower, last_sent: None, lapses_at: None }
    }

    /// The token to fence leader writes with, while this replica leads at `now`.
    pub fn leading(&self, now: Instant) -> Option<i64> {
        match self.role {
            Role::Leader { token, until } if now < until => Some(token),
            _ => None,
        }
    }

    /// When to try the lease next: at once the first time, then every
    /// [`Timing::interval`] after the last try was sent.
    pub fn next_attempt(&self) -> Option<Instant> {
        let leading = matches!(self.role, Role::Leader { .. });
        let regular = self.last_sent.map(|sent| sent + self.timing.interval(leading))?;
        Some(match self.lapses_at {
            Some(at) if !leading => regular.min(at),
            _ => regular,
        })
    }

    /// A follower learned that the lease it found taken lapses at `at` (unless renewed):
    /// its next try comes then, if that is sooner than its regular one. A crashed leader is
    /// then replaced about one lease after its last renewal, not up to half a lease later.
    pub fn lease_lapses_at(&mut self, at: Instant) {
        if matches!(self.role, Role::Follower) {
            self.lapses_at = Some(at);
        }
    }

    /// The outcome of a try sent at `sent`, seen at `now`.
    pub fn on_attempt(&mut self, sent: Instant, attempt: Attempt, now: Instant) -> Option<Change> {
        self.last_sent = Some(sent);
        self.lapses_at = None;
        match (self.role, attempt) {
            (Role::Follower, Attempt::Held { token }) => {
                let until = leads_until(sent, self.timing.ttl, self.timing.margin);
                if now >= until {
                    // The answer came too late to act on: the lease may already be gone.
                    return None;
                }
                self.role = Role::Leader { token, until };
                Some(Change::Elected { token })
            }
            (Role::Leader { token, .. }, Attempt::Held { token: renewed }) if renewed == token => {
                self.role = Role::Leader { token, until: leads_until(sent, self.timing.ttl, self.timing.margin) };
                self.on_tick(now)
            }
            (Role::Leader { token, .. }, Attempt::Held { .. }) => {
                self.role = Role::Follower;
                Some(Change::SteppedDown { token, reason: StepDown::TokenChanged })
            }
            (Role::Leader { token, .. }, Attempt::Taken) => {
                self.role = Role::Follower;
                Some(Change::SteppedDown { token, reason: StepDown::TakenOver })
            }
            (Role::Leader { .. }, Attempt::Failed) => self.on_tick(now),
            (Role::Follower, Attempt::Taken | Attempt::Failed) => None,
        }
    }

    /// Between tries: a leader whose deadline passed steps down.
    pub fn on_tick(&mut self, now: Instant) -> Option<Change> {
        match self.role {
            Role::Leader { token, until } if now >= until => {
                self.role = Role::Follower;
                Some(Change::SteppedDown { token, reason: StepDown::Lapsed })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(9);

    fn election() -> Election {
        Election::new(Timing { ttl: TTL, margin: Duration::from_secs(1) })
    }

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn a_follower_tries_when_the_lease_it_found_lapses_if_that_is_sooner() {
        let t0 = Instant::now();
        let mut e = election();
        assert_eq!(e.on_attempt(t0, Attempt::Taken, t0), None);
        e.lease_lapses_at(t0 + s(2));
        assert_eq!(e.next_attempt(), Some(t0 + s(2)), "sooner than half a lease");
        assert_eq!(e.on_attempt(t0 + s(2), Attempt::Taken, t0 + s(2)), None);
        assert_eq!(e.next_attempt(), Some(t0 + s(2) + TTL / 2), "a hint counts for one try only");
        e.lease_lapses_at(t0 + s(60));
        assert_eq!(e.next_attempt(), Some(t0 + s(2) + TTL / 2), "never later than the regular try");
        assert_eq!(e.on_attempt(t0 + s(7), Attempt::Held { token: 3 }, t0 + s(7)), Some(Change::Elected { token: 3 }));
        e.lease_lapses_at(t0 + s(8));
        assert_eq!(e.next_attempt(), Some(t0 + s(7) + TTL / 3), "a leader renews on its own pace");
    }

    #[test]
    fn a_follower_tries_at_once_then_twice_per_lease() {
        let t0 = Instant::now();
        let mut e = election();
        assert_eq!(e.next_attempt(), None, "the first try is at once");
        assert_eq!(e.on_attempt(t0, Attempt::Taken, t0), None);
        assert_eq!(e.next_attempt(), Some(t0 + TTL / 2));
        assert_eq!(e.leading(t0), None);
    }

    #[test]
    fn a_leader_renews_three_times_per_lease_and_keeps_its_token() {
        let t0 = Instant::now();
        let mut e = election();
        assert_eq!(e.on_attempt(t0, Attempt::Held { token: 4 }, t0), Some(Change::Elected { token: 4 }));
        assert_eq!(e.next_attempt(), Some(t0 + s(3)));
        assert_eq!(e.on_attempt(t0 + s(3), Attempt::Held { token: 4 }, t0 + s(3)), None, "a renewal changes nothing");
        assert_eq!(e.leading(t0 + s(10)), Some(4), "the deadline moved with the renewal");
        assert_eq!(e.leading(t0 + s(11)), None, "renewal sent at 3 s + ttl 9 s - margin 1 s");
    }

    #[test]
    fn a_leader_that_cannot_renew_steps_down_before_its_lease_can_lapse() {
        let t0 = Instant::now();
        let mut e = election();
        e.on_attempt(t0, Attempt::Held { token: 1 }, t0);
        assert_eq!(e.on_attempt(t0 + s(3), Attempt::Failed, t0 + s(3)), None, "one failed renewal is a blip");
        assert_eq!(e.on_attempt(t0 + s(6), Attempt::Failed, t0 + s(6)), None);
        assert_eq!(e.on_tick(t0 + s(7)), None);
        assert_eq!(e.on_tick(t0 + s(8)), Some(Change::SteppedDown { token: 1, reason: StepDown::Lapsed }));
        assert_eq!(e.leading(t0 + s(8)), None);
        assert_eq!(e.on_tick(t0 + s(9)), None, "stepping down is reported once");
    }

    #[test]
    fn a_renewal_answered_after_the_deadline_does_not_revive_leadership() {
        let t0 = Instant::now();
        let mut e = election();
        // Sent at 0, answered at 8.5 s (a stalled connection): the lease may be gone by now.
        assert_eq!(e.on_attempt(t0, Attempt::Held { token: 2 }, t0 + Duration::from_millis(8500)), None);
        assert_eq!(e.leading(t0 + s(9)), None);
    }

    #[test]
    fn a_leader_told_of_another_holder_or_token_steps_down_at_once() {
        let t0 = Instant::now();
        let mut e = election();
        e.on_attempt(t0, Attempt::Held { token: 5 }, t0);
        assert_eq!(e.on_attempt(t0 + s(3), Attempt::Taken, t0 + s(3)), Some(Change::SteppedDown { token: 5, reason: StepDown::TakenOver }));
        e.on_attempt(t0 + s(4), Attempt::Held { token: 6 }, t0 + s(4));
        assert_eq!(
            e.on_attempt(t0 + s(5), Attempt::Held { token: 7 }, t0 + s(5)),
            Some(Change::SteppedDown { token: 6, reason: StepDown::TokenChanged })
        );
        assert_eq!(e.leading(t0 + s(5)), None);
    }
}
