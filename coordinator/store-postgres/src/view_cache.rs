//! Each replica's cache of check-in views: a routine check-in on PostgreSQL answered without
//! a database round trip.
//!
//! On SQLite a check-in reads its view ([`Store::checkin_view`](drover_store::Store::checkin_view))
//! from a file already in memory; on PostgreSQL the same reads are network round trips and the
//! server's work: seven times the CPU of the whole SQLite check-in even as one prepared
//! statement ([`super::view_read`]; 24 to 31 times as four statements, as benchmarked).
//! Yet almost every check-in of a settled fleet reads exactly what the host's previous
//! check-in read. So each replica keeps the last view it read per host, and the
//! database says when one goes stale:
//!
//! - **Invalidation by the database.** Triggers (`schema/0003_view_notify.sql`) on every table
//!   a view reads send the changed row's host id on [`CHANNEL`], delivered with the commit —
//!   whichever replica, tool or person wrote it. The replica's one listening connection (the
//!   same one that carries wake-ups, see the engine's `peers`) drops that host's entry. A check-in's
//!   own last-seen fields are not watched: they are written in batches, and a cached host's
//!   last-seen fields may be older than the database's (nothing on the check-in path reads
//!   them; the offline sweep reads the database).
//! - **Wake-ups come after invalidations.** PostgreSQL delivers notifications in commit order
//!   on one connection, and a wake-up is sent after the write it announces committed, so a
//!   long-poll woken for new work finds that host's entry already gone.
//! - **A replica's own writes.** Their invalidations come back through the database too, a
//!   millisecond later. So every write sends a marker ([`ViewCache::begin_write`]) after its
//!   changes, and the cache is not consulted while any of this replica's writes is in flight
//!   or committed and unheard: a request that follows a write on the same replica never reads
//!   past it. Writes that change no column a view reads (the batches of last-seen fields and
//!   health reports, `PgStore::write_outside_views`) have nothing to wait for and send none.
//! - **A read racing an invalidation.** A view read from the database is kept only if no
//!   invalidation that could concern its host arrived while it was read ([`Ticket`]).
//! - **Trust only while demonstrably listening.** The replica sends itself a heartbeat on
//!   [`CHANNEL`] every [`HEARTBEAT_EVERY`]; the cache is consulted only while one was heard
//!   within [`TRUST_FOR`], and is emptied on every (re)connection of the listener. A listener
//!   that silently lost its connection stops being trusted within [`TRUST_FOR`]; a committed
//!   write's marker unheard for that long empties the cache.
//!
//! What it costs: a write on another replica reaches this replica's cached views after the
//! notification's delivery (under a millisecond here) rather than at once — the same as a
//! check-in that arrived that much earlier. Nothing here decides anything; a miss reads the
//! database as before.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use drover_proto::time::Time;
use uuid::Uuid;

use drover_store::records::{CheckinView, Host, IntentRecord};

/// The channel the triggers and markers use.
pub const CHANNEL: &str = "drover_view";

/// How often a replica sends itself a heartbeat on [`CHANNEL`].
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);

/// How long after the last heartbeat heard the cache is still trusted, and how long a write's
/// marker may stay unheard before the cache is emptied.
pub const TRUST_FOR: Duration = Duration::from_secs(3);

/// The most hosts cached: past it, further hosts are read from the database each time.
pub const MAX_ENTRIES: usize = 250_000;

/// Invalidation counters, one per stripe of host ids: a read is kept only if its stripe's
/// counter did not move (a shared stripe only makes that more cautious).
const STRIPES: usize = 4096;

/// A check-in view as the database holds it, before `now` is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedView {
    /// The host.
    pub host: Option<Host>,
    /// Its current intent.
    pub intent: Option<IntentRecord>,
    /// From when (unix seconds) it has a task to lease: `i64::MIN` for a queued task, else
    /// the earliest lapsing lease; `None` without either.
    pub leasable_from: Option<i64>,
    /// Its last report.
    pub report: Option<drover_store::plans::HostReport>,
}

impl CachedView {
    /// The view at `now`.
    pub fn at(self, now: Time) -> CheckinView {
        CheckinView {
            host: self.host,
            intent: self.intent,
            leasable: self.leasable_from.is_some_and(|from| from <= now.unix()),
            report: self.report,
        }
    }
}

/// Taken before a database read: whether an invalidation arrived during the read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    epoch: u64,
    stripe: u64,
}

/// The cache of one replica.
#[derive(Debug)]
pub struct ViewCache {
    me: Uuid,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// A listener feeds this cache (set on its first connection); until then nothing is kept
    /// and writes send no markers.
    live: bool,
    entries: HashMap<Uuid, CachedView>,
    /// Moves when everything is dropped.
    epoch: u64,
    stripes: Vec<u64>,
    /// This replica's writes whose markers are not heard yet, by marker, with when each
    /// committed (`None` while in flight).
    awaiting: BTreeMap<u64, Option<Instant>>,
    next_marker: u64,
    /// When this replica's last heartbeat (or marker) came back.
    heard_at: Option<Instant>,
}

impl Default for ViewCache {
    fn default() -> Self {
        ViewCache::new(Uuid::new_v4())
    }
}

impl ViewCache {
    /// An empty cache for the replica `me` (its markers carry the id), not live yet.
    pub fn new(me: Uuid) -> ViewCache {
        ViewCache {
            me,
            inner: Mutex::new(Inner {
                live: false,
                entries: HashMap::new(),
                epoch: 0,
                stripes: vec![0; STRIPES],
                awaiting: BTreeMap::new(),
                // 0 is the heartbeat's.
                next_marker: 1,
                heard_at: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The cached view of `host`, if there is one and the cache is trusted at `now`.
    pub fn lookup(&self, host: Uuid, now: Instant) -> Option<CachedView> {
        let mut inner = self.lock();
        if !inner.trusted(now) {
            return None;
        }
        inner.entries.get(&host).cloned()
    }

    /// Taken before reading `host`'s view from the database, for [`ViewCache::fill`].
    pub fn ticket(&self, host: Uuid) -> Ticket {
        let inner = self.lock();
        Ticket { epoch: inner.epoch, stripe: inner.stripes[stripe(host)] }
    }

    /// Keeps `view`, read from the database after `ticket` was taken, unless something that
    /// could change it was heard since, or the cache is not trusted at `now`, or is full.
    pub fn fill(&self, host: Uuid, ticket: Ticket, view: CachedView, now: Instant) {
        let mut inner = self.lock();
        let unchanged = ticket == Ticket { epoch: inner.epoch, stripe: inner.stripes[stripe(host)] };
        if unchanged && inner.trusted(now) && (inner.entries.len() < MAX_ENTRIES || inner.entries.contains_key(&host)) {
            inner.entries.insert(host, view);
        }
    }

    /// A write of this replica begins: the payload to send on [`CHANNEL`] as its last
    /// statement, and the marker to pass to [`ViewCache::write_done`]; `None` while the cache
    /// is not live. Until the marker is heard the cache is not consulted.
    pub fn begin_write(&self) -> Option<(u64, String)> {
        let mut inner = self.lock();
        if !inner.live {
            return None;
        }
        let marker = inner.next_marker;
        inner.next_marker += 1;
        inner.awaiting.insert(marker, None);
        Some((marker, format!("m {} {marker}", self.me)))
    }

    /// The write that took `marker` ended at `now`: committed (its marker is on its way, and
    /// must arrive within [`TRUST_FOR`]) or not (nothing of it will be heard).
    pub fn write_done(&self, marker: u64, committed: bool, now: Instant) {
        let mut inner = self.lock();
        if committed {
            // Unless already heard (or dropped by a reconnection).
            if let Some(at) = inner.awaiting.get_mut(&marker) {
                *at = Some(now);
            }
        } else {
            inner.awaiting.remove(&marker);
        }
    }

    /// The heartbeat's payload.
    pub fn heartbeat(&self) -> String {
        format!("m {} 0", self.me)
    }

    /// The listener (re)connected at `now`: whatever was sent meanwhile is lost, so drop
    /// everything, and trust nothing until a heartbeat comes back.
    pub fn connected(&self) {
        let mut inner = self.lock();
        inner.live = true;
        inner.drop_all();
        inner.awaiting.clear();
        inner.heard_at = None;
    }

    /// A notification on [`CHANNEL`] arrived at `now`.
    pub fn heard(&self, payload: &str, now: Instant) {
        let mut inner = self.lock();
        if let Ok(host) = Uuid::parse_str(payload) {
            inner.entries.remove(&host);
            inner.stripes[stripe(host)] += 1;
            return;
        }
        let mut parts = payload.split(' ');
        match (parts.next(), parts.next().map(Uuid::parse_str), parts.next().map(str::parse::<u64>), parts.next()) {
            (Some("m"), Some(Ok(from)), Some(Ok(marker)), None) => {
                if from == self.me {
                    inner.awaiting.remove(&marker);
                    inner.heard_at = Some(now);
                }
            }
            // Not ours to read: assume the worst of it.
            _ => inner.drop_all(),
        }
    }

    /// How many hosts are cached.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether no host is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Inner {
    /// Whether cached views may be served at `now`; a marker unheard for too long empties the
    /// cache (its invalidations may be lost with it).
    fn trusted(&mut self, now: Instant) -> bool {
        if !self.live {
            return false;
        }
        if !self.awaiting.is_empty() {
            // A write still in flight is waited for however long it takes; a committed one's
            // marker that never came means its invalidations may be lost too.
            if self.awaiting.values().flatten().any(|at| now.saturating_duration_since(*at) > TRUST_FOR) {
                self.awaiting.clear();
                self.drop_all();
            }
            return false;
        }
        self.heard_at.is_some_and(|at| now.saturating_duration_since(at) <= TRUST_FOR)
    }

    fn drop_all(&mut self) {
        self.entries.clear();
        self.epoch += 1;
    }
}

fn stripe(host: Uuid) -> usize {
    (host.as_u128() % STRIPES as u128) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(hostname: &str) -> CachedView {
        let host = Host {
            id: Uuid::nil(),
            hostname: hostname.into(),
            state: drover_proto::states::HostLifecycle::Active,
            schedulable: true,
            created_at: Time::from_unix(1).unwrap(),
            updated_at: Time::from_unix(1).unwrap(),
            last_checkin: None,
        };
        CachedView { host: Some(host), intent: None, leasable_from: None, report: None }
    }

    /// A live cache that heard its heartbeat at `t0`.
    fn live(me: Uuid, t0: Instant) -> ViewCache {
        let cache = ViewCache::new(me);
        cache.connected();
        cache.heard(&cache.heartbeat(), t0);
        cache
    }

    fn filled(cache: &ViewCache, host: Uuid, name: &str, at: Instant) {
        let ticket = cache.ticket(host);
        cache.fill(host, ticket, view(name), at);
    }

    #[test]
    fn a_cache_no_listener_feeds_keeps_nothing_and_marks_no_write() {
        let cache = ViewCache::default();
        let (h, t0) = (Uuid::new_v4(), Instant::now());
        filled(&cache, h, "a", t0);
        assert_eq!(cache.lookup(h, t0), None);
        assert!(cache.is_empty());
        assert_eq!(cache.begin_write(), None);
    }

    #[test]
    fn a_view_is_served_until_its_host_is_invalidated() {
        let t0 = Instant::now();
        let cache = live(Uuid::new_v4(), t0);
        let (h, other) = (Uuid::new_v4(), Uuid::new_v4());
        filled(&cache, h, "a", t0);
        filled(&cache, other, "b", t0);
        assert_eq!(cache.lookup(h, t0).and_then(|v| v.host).map(|h| h.hostname), Some("a".into()));
        cache.heard(&h.to_string(), t0);
        assert_eq!(cache.lookup(h, t0), None, "the changed host is read again");
        assert!(cache.lookup(other, t0).is_some(), "others stay");
    }

    #[test]
    fn a_read_racing_an_invalidation_is_not_kept() {
        let t0 = Instant::now();
        let cache = live(Uuid::new_v4(), t0);
        let h = Uuid::new_v4();
        let ticket = cache.ticket(h);
        // The row changed (and was notified) while the old value was being read.
        cache.heard(&h.to_string(), t0);
        cache.fill(h, ticket, view("stale"), t0);
        assert_eq!(cache.lookup(h, t0), None);
        // A reconnection in the middle of a read does the same.
        let ticket = cache.ticket(h);
        cache.connected();
        cache.heard(&cache.heartbeat(), t0);
        cache.fill(h, ticket, view("stale"), t0);
        assert_eq!(cache.lookup(h, t0), None);
    }

    #[test]
    fn own_write_bypasses_the_cache_until_its_marker_is_heard() {
        let me = Uuid::new_v4();
        let t0 = Instant::now();
        let cache = live(me, t0);
        let h = Uuid::new_v4();
        filled(&cache, h, "a", t0);
        let (marker, payload) = cache.begin_write().expect("live");
        assert_eq!(cache.lookup(h, t0), None, "a request during this replica's write must not read past it");
        cache.write_done(marker, true, t0);
        assert_eq!(cache.lookup(h, t0), None, "a request after this replica's write must not read past it");
        // Another replica's marker says nothing of ours.
        cache.heard(&format!("m {} {marker}", Uuid::new_v4()), t0);
        assert_eq!(cache.lookup(h, t0), None);
        cache.heard(&payload, t0);
        assert!(cache.lookup(h, t0).is_some());
        // A write that rolled back is not waited for.
        let (marker, _) = cache.begin_write().expect("live");
        cache.write_done(marker, false, t0);
        assert!(cache.lookup(h, t0).is_some());
        // A marker heard before its write returned (the commit's answer is slower than the
        // notification) is not waited for again.
        let (marker, payload) = cache.begin_write().expect("live");
        cache.heard(&payload, t0);
        cache.write_done(marker, true, t0);
        assert!(cache.lookup(h, t0).is_some());
    }

    #[test]
    fn a_marker_never_heard_empties_the_cache() {
        let t0 = Instant::now();
        let cache = live(Uuid::new_v4(), t0);
        let h = Uuid::new_v4();
        filled(&cache, h, "a", t0);
        let (marker, _lost) = cache.begin_write().expect("live");
        // However long a write takes, it is waited for.
        let later = t0 + TRUST_FOR * 10;
        cache.heard(&cache.heartbeat(), later);
        assert_eq!(cache.lookup(h, later), None);
        assert_eq!(cache.len(), 1, "a slow write empties nothing");
        cache.write_done(marker, true, later);
        let later = later + TRUST_FOR + Duration::from_millis(1);
        assert_eq!(cache.lookup(h, later), None);
        assert!(cache.is_empty(), "its invalidations may be lost with it");
        cache.heard(&cache.heartbeat(), later);
        assert_eq!(cache.lookup(h, later), None);
    }

    #[test]
    fn silent_listener_stops_the_cache_being_trusted() {
        let t0 = Instant::now();
        let cache = live(Uuid::new_v4(), t0);
        let h = Uuid::new_v4();
        filled(&cache, h, "a", t0);
        assert!(cache.lookup(h, t0 + TRUST_FOR).is_some());
        // No heartbeat came back: the listener may have lost its connection without knowing.
        let late = t0 + TRUST_FOR + Duration::from_millis(1);
        assert_eq!(cache.lookup(h, late), None);
        filled(&cache, h, "b", late);
        cache.heard(&cache.heartbeat(), late);
        assert_eq!(cache.lookup(h, late).and_then(|v| v.host).map(|h| h.hostname), Some("a".into()), "nothing filled while untrusted");
    }

    #[test]
    fn reconnection_drops_everything_and_waits_for_a_heartbeat() {
        let t0 = Instant::now();
        let cache = live(Uuid::new_v4(), t0);
        let h = Uuid::new_v4();
        filled(&cache, h, "a", t0);
        cache.connected();
        assert!(cache.is_empty());
        filled(&cache, h, "a", t0);
        assert_eq!(cache.lookup(h, t0), None, "not trusted before a heartbeat comes back");
        cache.heard(&cache.heartbeat(), t0);
        filled(&cache, h, "a", t0);
        assert!(cache.lookup(h, t0).is_some());
    }

    #[test]
    fn an_unreadable_notification_drops_everything() {
        let t0 = Instant::now();
        let cache = live(Uuid::new_v4(), t0);
        let h = Uuid::new_v4();
        filled(&cache, h, "a", t0);
        cache.heard("something else", t0);
        assert!(cache.is_empty());
    }

    #[test]
    fn leasable_is_decided_at_the_time_asked() {
        let at = |s| Time::from_unix(s).unwrap();
        let queued = CachedView { leasable_from: Some(i64::MIN), ..view("a") };
        assert!(queued.at(at(1)).leasable);
        let lapsing = CachedView { leasable_from: Some(100), ..view("a") };
        assert!(!lapsing.clone().at(at(99)).leasable);
        assert!(lapsing.at(at(100)).leasable);
        assert!(!view("a").at(at(1)).leasable);
    }
}
