//! Token buckets per source address for requests without a client certificate.
//!
//! Anyone who can reach the listener can send requests on a connection without a certificate
//! (enrollment needs them), so each source address gets a bucket: `burst` requests at once,
//! refilled at `per_sec`; a request finding its bucket empty is answered 429 with the wait
//! until the next token, before any route runs. Authenticated requests never reach a bucket.
//!
//! The defaults are sized for a fleet's enrollment burst behind one NAT address (every host
//! fetches the bootstrap script, the CA, the trust roots and the agent, then enrolls: five
//! requests a host), not for a single client.
//!
//! No I/O and no clock of its own: the caller passes the instant, so the rules are tested with
//! a hand-moved clock. The table is bounded: past [`MAX_SOURCES`] sources, buckets that have
//! refilled (indistinguishable from a source never seen) are dropped, and if too few have, the
//! quarter touched longest ago: a flood of fresh addresses cannot grow it without bound, nor
//! make each request pay for a pass over it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Sources tracked at once.
pub const MAX_SOURCES: usize = 65_536;

/// One source's bucket.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The buckets of every source seen recently.
#[derive(Debug)]
pub struct SourceBuckets {
    per_sec: f64,
    burst: f64,
    buckets: HashMap<IpAddr, Bucket>,
    limited: u64,
}

impl SourceBuckets {
    /// Buckets of `burst` tokens refilled at `per_sec` a second (both at least 1).
    pub fn new(per_sec: u32, burst: u32) -> SourceBuckets {
        SourceBuckets { per_sec: f64::from(per_sec.max(1)), burst: f64::from(burst.max(1)), buckets: HashMap::new(), limited: 0 }
    }

    /// Takes a token from `ip`'s bucket at `now`; `Err(wait)` when it is empty, with how long
    /// until the next token.
    pub fn take(&mut self, ip: IpAddr, now: Instant) -> Result<(), Duration> {
        self.take_n(ip, 1, now)
    }

    /// Takes `n` tokens (at most the burst: a cost above it could never be paid) from `ip`'s
    /// bucket at `now`, or none; `Err(wait)` when there are fewer, with how long until there
    /// are enough.
    pub fn take_n(&mut self, ip: IpAddr, n: u32, now: Instant) -> Result<(), Duration> {
        let n = f64::from(n.max(1)).min(self.burst);
        if !self.buckets.contains_key(&ip) && self.buckets.len() >= MAX_SOURCES {
            self.shed(now);
        }
        let (per_sec, burst) = (self.per_sec, self.burst);
        let b = self.buckets.entry(ip).or_insert(Bucket { tokens: burst, at: now });
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * per_sec).min(burst);
        b.at = now;
        if b.tokens >= n {
            b.tokens -= n;
            Ok(())
        } else {
            self.limited += 1;
            Err(Duration::from_secs_f64((n - b.tokens) / per_sec))
        }
    }

    /// Requests refused so far.
    pub fn limited(&self) -> u64 {
        self.limited
    }

    /// Sources tracked now.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Whether no source is tracked.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Drops buckets that have refilled by `now`; if that frees too little, the quarter
    /// touched longest ago too. Either way a quarter of the table is free afterwards, so the
    /// O(n) pass runs at most once per `MAX_SOURCES / 4` new sources (amortised O(1)).
    fn shed(&mut self, now: Instant) {
        let (per_sec, burst) = (self.per_sec, self.burst);
        self.buckets.retain(|_, b| b.tokens + now.saturating_duration_since(b.at).as_secs_f64() * per_sec < burst);
        let keep = MAX_SOURCES - MAX_SOURCES / 4;
        if self.buckets.len() > keep {
            // Exactly the `cut` touched longest ago, ties broken by address: sources seen at
            // one instant are not all dropped together.
            let mut ages: Vec<(Instant, IpAddr)> = self.buckets.iter().map(|(ip, b)| (b.at, *ip)).collect();
            let cut = ages.len() - keep;
            ages.select_nth_unstable(cut - 1);
            for (_, ip) in &ages[..cut] {
                self.buckets.remove(ip);
            }
        }
    }
}

/// One budget of bytes a second, shared: what anonymous answers may be sent at, all of them
/// together (the agent binary is tens of MB, and encrypting it at loopback speed would take
/// the cores operators need). `burst` bytes go at once; past them each reservation says how
/// long to wait before sending.
#[derive(Debug)]
pub struct BytePacer {
    per_sec: f64,
    burst: f64,
    tokens: f64,
    at: Option<Instant>,
}

impl BytePacer {
    /// `per_sec` bytes a second after a burst of `burst` bytes (both at least 1).
    pub fn new(per_sec: u64, burst: u64) -> BytePacer {
        BytePacer { per_sec: per_sec.max(1) as f64, burst: burst.max(1) as f64, tokens: burst.max(1) as f64, at: None }
    }

    /// Reserves `n` bytes at `now`; how long to wait before sending them. Reservations queue
    /// behind each other (the budget may go into debt), so waits grow with the backlog.
    pub fn reserve(&mut self, n: u64, now: Instant) -> Duration {
        let elapsed = self.at.map_or(0.0, |at| now.saturating_duration_since(at).as_secs_f64());
        self.tokens = (self.tokens + elapsed * self.per_sec).min(self.burst) - n as f64;
        self.at = Some(now);
        if self.tokens >= 0.0 { Duration::ZERO } else { Duration::from_secs_f64(-self.tokens / self.per_sec) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u32) -> IpAddr {
        IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + n))
    }

    #[test]
    fn a_source_past_its_burst_is_refused_until_its_bucket_refills() {
        let mut b = SourceBuckets::new(10, 3);
        let t0 = Instant::now();
        for _ in 0..3 {
            b.take(ip(1), t0).expect("within the burst");
        }
        let wait = b.take(ip(1), t0).expect_err("the burst is spent");
        assert!(wait > Duration::ZERO && wait <= Duration::from_millis(100), "{wait:?}");
        assert!(b.take(ip(2), t0).is_ok(), "another source has its own bucket");
        b.take(ip(1), t0 + Duration::from_millis(100)).expect("one token back after 1/per_sec");
        assert!(b.take(ip(1), t0 + Duration::from_millis(100)).is_err());
        // A long quiet spell refills it to the burst, never past it.
        let later = t0 + Duration::from_secs(3600);
        for _ in 0..3 {
            b.take(ip(1), later).expect("refilled");
        }
        assert!(b.take(ip(1), later).is_err(), "capped at the burst");
        assert_eq!(b.limited(), 3);
    }

    #[test]
    fn a_costly_answer_takes_many_tokens_but_never_more_than_the_burst() {
        let mut b = SourceBuckets::new(10, 20);
        let t0 = Instant::now();
        b.take_n(ip(1), 15, t0).expect("15 of 20");
        let wait = b.take_n(ip(1), 15, t0).expect_err("5 left");
        assert_eq!(wait, Duration::from_secs(1), "10 more tokens at 10 a second");
        b.take_n(ip(1), 1_000, t0 + Duration::from_secs(2)).expect("a cost above the burst costs the whole burst, once full");
        assert!(b.take(ip(1), t0 + Duration::from_secs(2)).is_err());
    }

    #[test]
    fn bytes_past_the_burst_wait_their_turn_at_the_rate() {
        let mut p = BytePacer::new(1_000, 500);
        let t0 = Instant::now();
        assert_eq!(p.reserve(500, t0), Duration::ZERO, "the burst goes at once");
        assert_eq!(p.reserve(1_000, t0), Duration::from_secs(1), "then 1,000 bytes wait a second");
        assert_eq!(p.reserve(1_000, t0), Duration::from_secs(2), "and the next behind them");
        assert_eq!(p.reserve(0, t0 + Duration::from_secs(2)), Duration::ZERO, "paid off at the rate");
    }

    #[test]
    fn a_flood_of_fresh_addresses_keeps_the_table_bounded_and_a_recent_spent_source_spent() {
        let mut b = SourceBuckets::new(1, 2);
        let t0 = Instant::now();
        // The flood's addresses first, each touched a moment apart and left refilling.
        for n in 0..(MAX_SOURCES as u32 - 1) {
            let _ = b.take(ip(n), t0 + Duration::from_micros(u64::from(n)));
        }
        // Then the victim spends its burst, most recently of all.
        let victim = ip(10_000_000);
        let late = t0 + Duration::from_millis(100);
        b.take(victim, late).expect("1");
        b.take(victim, late).expect("2");
        // More fresh addresses push the table past its bound: the oldest quarter goes, the
        // victim (touched last, not refilled) stays, and stays spent.
        for n in 0..500u32 {
            let _ = b.take(ip(20_000_000 + n), late);
        }
        assert!(b.len() <= MAX_SOURCES, "{}", b.len());
        assert!(b.len() >= MAX_SOURCES - MAX_SOURCES / 4, "a quarter shed, not the whole table: {}", b.len());
        assert!(b.take(victim, late).is_err(), "its spent bucket survived the shedding");
    }

    #[test]
    fn sources_seen_at_one_instant_are_shed_a_quarter_not_all_at_once() {
        let mut b = SourceBuckets::new(1, 2);
        let t0 = Instant::now();
        for n in 0..(MAX_SOURCES as u32 + 1) {
            let _ = b.take(ip(n), t0);
            let _ = b.take(ip(n), t0);
        }
        assert!(b.len() > MAX_SOURCES / 2, "ties at the cut-off do not empty the table: {}", b.len());
    }
}
