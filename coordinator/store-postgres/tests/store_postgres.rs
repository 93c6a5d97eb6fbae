//! The PostgreSQL backend's connection layer against a real PostgreSQL (Debian's, started in
//! a temporary directory by `drover_devkit::postgres`): migrations applied once when replicas
//! start together, serialization conflicts retried, TLS verified against the given CA, the
//! password kept out of URLs and errors, a pool that outlives a database restart, and the
//! leader lease: one holder, fencing tokens, a lapsed leader's writes refused; wake-ups by
//! NOTIFY across replicas, only on commit, surviving a database restart; a new leader elected
//! within the lease when the leader crashes, at once when it hands over; a replica's cached
//! check-in views dropped by every commit that changes them, whoever makes it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_devkit::postgres::{self as pg, PostgresServer};
use drover_store::StoreError;
use drover_store_postgres::election::{Change, Timing};
use drover_store_postgres::elector::Elector;
use drover_store_postgres::lease::Lease;
use drover_store_postgres::notify::{ListenEvent, Listener, notify};
use drover_store_postgres::{DbResult as _, Password, PgOpenError, PgOptions, PgStore, postgres};

fn server(tls: bool) -> PostgresServer {
    PostgresServer::start(pg::PgOptions { tls, ..Default::default() }).expect("postgres starts")
}

fn options(s: &PostgresServer) -> PgOptions {
    let mut o = PgOptions::new(s.url());
    o.password = Some(Password::new(&std::fs::read_to_string(s.password_file()).expect("password file")));
    o.ca_file = s.ca_file().map(ToOwned::to_owned);
    o
}

#[test]
fn replicas_starting_together_apply_each_migration_once() {
    let s = server(false);
    let opts = options(&s);
    let opened: Vec<_> = (0..4)
        .map(|_| {
            let o = opts.clone();
            std::thread::spawn(move || PgStore::open(&o))
        })
        .collect();
    let stores: Vec<PgStore> = opened.into_iter().map(|t| t.join().expect("thread").expect("opens")).collect();
    let applied = stores[0].applied_migrations().expect("read");
    assert_eq!(applied.iter().map(|(v, _)| *v).collect::<Vec<_>>(), [1, 2, 3], "one row per version: {applied:?}");
    let tables = s.psql("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'").expect("psql");
    assert_eq!(tables.trim(), "29", "SQLite's 27 tables, the leader lease and schema_migrations");
    // Opening again finds nothing to do.
    PgStore::open(&opts).expect("reopens");
    assert_eq!(stores[1].applied_migrations().expect("read").len(), 3);
}

#[test]
fn a_schema_newer_than_this_build_is_refused() {
    let s = server(false);
    PgStore::open(&options(&s)).expect("opens");
    s.psql("INSERT INTO schema_migrations (version, applied_at) VALUES (99, 0)").expect("psql");
    match PgStore::open(&options(&s)) {
        Err(PgOpenError::Store(StoreError::SchemaTooNew { found: 99, supported: 3 })) => {}
        other => panic!("a newer schema was not refused: {other:?}"),
    }
}

#[test]
fn a_password_in_the_url_is_refused_and_never_echoed() {
    let mut o = PgOptions::new("postgres://drover:hunter2-secret@127.0.0.1:1/drover");
    o.connect_timeout = Duration::from_secs(1);
    let err = PgStore::open(&o).expect_err("refused").to_string();
    assert!(err.contains("password_file"), "{err}");
    assert!(!err.contains("hunter2-secret"), "the password reached the error: {err}");
    let debug = format!("{:?}", Password::new("hunter2-secret\n"));
    assert!(!debug.contains("hunter2"), "{debug}");
}

#[test]
fn a_wrong_password_is_refused_without_naming_it() {
    let s = server(false);
    let mut o = options(&s);
    o.password = Some(Password::new("wrong-horse-battery"));
    o.connect_timeout = Duration::from_secs(5);
    let err = PgStore::open(&o).expect_err("refused");
    let text = format!("{err} {err:?}");
    assert!(text.contains("password authentication failed"), "{text}");
    assert!(!text.contains("wrong-horse-battery") && !text.contains(s.password()), "a password reached the error: {text}");
}

#[test]
fn tls_to_postgres_verifies_the_server_against_the_given_ca() {
    let s = server(true);
    let store = PgStore::open(&options(&s)).expect("opens over TLS");
    let mut c = store.conn().expect("conn");
    let ssl: bool = c.query_one("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[]).expect("query").get(0);
    assert!(ssl, "the connection is TLS");

    // A server whose certificate another CA signed is refused, as a man in the middle would be.
    let other = server(true);
    let mut o = options(&s);
    o.ca_file = other.ca_file().map(ToOwned::to_owned);
    o.connect_timeout = Duration::from_secs(5);
    let err = PgStore::open(&o).expect_err("a certificate from another CA is refused");
    assert!(format!("{err:?}").to_lowercase().contains("certificate"), "{err:?}");

    // Without a CA the client does not offer TLS, and this server takes nothing else.
    let mut plain = options(&s);
    plain.ca_file = None;
    plain.connect_timeout = Duration::from_secs(5);
    assert!(PgStore::open(&plain).is_err(), "plain TCP to a TLS-only server");
}

#[test]
fn concurrent_read_modify_writes_are_serialized_by_retrying() {
    let s = server(false);
    let store = Arc::new(PgStore::open(&options(&s)).expect("opens"));
    store.write(|tx| tx.batch_execute("CREATE TABLE counter (n BIGINT NOT NULL); INSERT INTO counter VALUES (0)").db()).expect("setup");
    let (threads, each) = (4, 25);
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let store = store.clone();
            std::thread::spawn(move || {
                for _ in 0..each {
                    // Read, then write what was read plus one: two transactions doing this at
                    // once would lose an increment if either committed on a stale read.
                    store
                        .write(|tx| {
                            let n: i64 = tx.query_one("SELECT n FROM counter", &[]).db()?.get(0);
                            tx.execute("UPDATE counter SET n = $1", &[&(n + 1)]).db()?;
                            Ok(())
                        })
                        .expect("write (retried on conflicts)");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    let n: i64 = store.read(|tx| Ok(tx.query_one("SELECT n FROM counter", &[]).db()?.get(0))).expect("read");
    assert_eq!(n, threads * each, "no increment lost");
}

#[test]
fn the_pool_reconnects_after_postgres_restarts_or_is_killed() {
    let mut s = server(false);
    let store = PgStore::open(&options(&s)).expect("opens");
    let one = |store: &PgStore| store.read(|tx| Ok(tx.query_one("SELECT 1::BIGINT", &[]).db()?.get::<_, i64>(0)));
    assert_eq!(one(&store).expect("read"), 1);
    s.restart().expect("restart");
    assert_eq!(one(&store).expect("read after a restart, without reopening the store"), 1);
    s.kill().expect("kill");
    assert!(one(&store).is_err(), "no database, no answer");
    s.start_again().expect("start again");
    assert_eq!(one(&store).expect("read after a crash and start"), 1);
}

/// Waits (bounded) until the database's clock is past `lease`'s expiry.
fn until_lapsed(store: &PgStore, lease: &Lease) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while store.database_now_ms().expect("db clock") <= lease.expires_at_ms {
        assert!(Instant::now() < deadline, "the lease never lapsed");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn one_replica_leads_and_a_lapsed_leaders_writes_are_fenced_off() {
    let s = server(false);
    let (a, b) = (PgStore::open(&options(&s)).expect("a"), PgStore::open(&options(&s)).expect("b"));
    a.write(|tx| tx.batch_execute("CREATE TABLE work (by TEXT NOT NULL, token BIGINT NOT NULL)").db()).expect("setup");
    let ttl = Duration::from_millis(800);
    let la = a.acquire_lease("executor", "replica-a", ttl).expect("acquire").expect("a leads");
    assert_eq!(la.token, 1);
    assert_eq!(b.acquire_lease("executor", "replica-b", ttl).expect("acquire"), None, "b waits while a's lease runs");
    let renewed = a.acquire_lease("executor", "replica-a", ttl).expect("renew").expect("a renews");
    assert_eq!(renewed.token, 1, "a renewal keeps the token");
    let record = |by: &'static str, token: i64| {
        move |tx: &mut postgres::Transaction<'_>| -> Result<(), StoreError> {
            tx.execute("INSERT INTO work VALUES ($1, $2)", &[&by, &token]).db()?;
            Ok(())
        }
    };
    a.fenced_write(&renewed, record("a", 1)).expect("the leader writes");

    // a stalls past its lease (no renewal); b takes over with a higher token.
    until_lapsed(&a, &renewed);
    let lb = b.acquire_lease("executor", "replica-b", ttl).expect("acquire").expect("b takes over");
    assert_eq!(lb.token, 2, "a change of holder raises the token");
    // a wakes up and acts on its old lease: refused, nothing written.
    match a.fenced_write(&renewed, record("a", 1)) {
        Err(StoreError::NotLeader { lease, token: 1 }) => assert_eq!(lease, "executor"),
        other => panic!("a lapsed leader's write went through: {other:?}"),
    }
    b.fenced_write(&lb, record("b", 2)).expect("the new leader writes");
    let rows = s.psql("SELECT by || ':' || token FROM work ORDER BY by").expect("psql");
    assert_eq!(rows.split_whitespace().collect::<Vec<_>>(), ["a:1", "b:2"], "only leaders' writes: {rows}");
    assert_eq!(a.acquire_lease("executor", "replica-a", ttl).expect("acquire"), None, "a cannot take it back while b's runs");

    // b shuts down and gives the lease up: a takes over at once, with a higher token still.
    assert!(b.release_lease(&lb).expect("release"));
    assert!(!b.release_lease(&lb).expect("release again"), "released once");
    let again = a.acquire_lease("executor", "replica-a", ttl).expect("acquire").expect("a leads again");
    assert_eq!(again.token, 3);
    assert_eq!(a.current_lease("executor").expect("read").map(|l| l.holder), Some("replica-a".to_owned()));
}

#[test]
fn a_takeover_waits_for_the_old_leaders_transaction_in_flight() {
    let s = server(false);
    let (a, b) = (Arc::new(PgStore::open(&options(&s)).expect("a")), PgStore::open(&options(&s)).expect("b"));
    let ttl = Duration::from_millis(500);
    let la = a.acquire_lease("executor", "replica-a", ttl).expect("acquire").expect("a leads");
    let (in_tx, inside) = std::sync::mpsc::channel();
    let (go, proceed) = std::sync::mpsc::channel::<()>();
    let (lease, store) = (la.clone(), a.clone());
    // a's fenced transaction passes its check, then stalls past the lease before committing.
    let old = std::thread::spawn(move || {
        let proceed = std::sync::Mutex::new(proceed);
        store.fenced_write(&lease, |_tx| {
            in_tx.send(()).ok();
            proceed.lock().expect("lock").recv_timeout(Duration::from_secs(30)).ok();
            Ok(Instant::now())
        })
    });
    inside.recv_timeout(Duration::from_secs(30)).expect("a is inside its transaction");
    until_lapsed(&b, &la);
    let taker = std::thread::spawn(move || {
        let out = b.acquire_lease("executor", "replica-b", Duration::from_secs(5));
        (out, Instant::now())
    });
    // The takeover cannot commit while a's transaction holds the lease row.
    let waited = Instant::now();
    while !taker.is_finished() && waited.elapsed() < Duration::from_millis(300) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!taker.is_finished(), "b took over while a's fenced transaction was in flight");
    go.send(()).expect("release a");
    let committed = old.join().expect("a's thread").expect("a's transaction began before the takeover and commits");
    let (took, at) = taker.join().expect("b's thread");
    assert_eq!(took.expect("acquire").map(|l| l.token), Some(2));
    assert!(at >= committed, "the takeover completed only after a's last write");
}

#[test]
fn a_commit_on_one_replica_wakes_a_listener_on_another_and_a_rollback_does_not() {
    let mut s = server(false);
    let a = PgStore::open(&options(&s)).expect("replica a");
    let (tx, rx) = std::sync::mpsc::channel();
    let listener = Listener::start(&options(&s), &["drover_wake"], move |e| {
        let _ = tx.send((e, Instant::now()));
    })
    .expect("replica b listens");
    let (first, _) = rx.recv_timeout(Duration::from_secs(30)).expect("connected");
    assert_eq!(first, ListenEvent::Connected);
    let next = || rx.recv_timeout(Duration::from_secs(30)).expect("an event within 30 s");

    // A write that rolls back sends nothing; the committed one after it arrives, and fast.
    let refused = a.write(|tx| {
        notify(tx, "drover_wake", "rolled-back")?;
        Err::<(), _>(StoreError::NotLeader { lease: "executor".into(), token: 1 })
    });
    assert!(refused.is_err());
    let sent = Instant::now();
    a.write(|tx| notify(tx, "drover_wake", "host-7")).expect("commit");
    let (e, at) = next();
    assert_eq!(e, ListenEvent::Notified { channel: "drover_wake".into(), payload: "host-7".into() }, "the rolled-back one never came");
    let latency = at.duration_since(sent);
    assert!(latency < Duration::from_secs(5), "{latency:?}");
    eprintln!("commit on replica a → listener on replica b: {latency:?}");

    // PostgreSQL restarts under the listener: it reconnects and says so (wake everyone),
    // then delivers again.
    s.restart().expect("restart");
    let (e, _) = next();
    assert_eq!(e, ListenEvent::Connected, "a reconnection is reported");
    a.write(|tx| notify(tx, "drover_wake", "after-restart")).expect("commit after restart");
    assert_eq!(next().0, ListenEvent::Notified { channel: "drover_wake".into(), payload: "after-restart".into() });
    drop(listener);

    // Channels are plain identifiers, refused otherwise before anything is sent.
    let bad = a.write(|tx| notify(tx, "wake; DROP TABLE hosts", "x"));
    assert!(matches!(bad, Err(StoreError::Invalid { .. })), "{bad:?}");
}

#[test]
fn a_new_leader_is_elected_within_the_lease_when_the_leader_dies_and_at_once_when_it_hands_over() {
    let s = server(false);
    let timing = Timing { ttl: Duration::from_millis(1200), margin: Duration::from_millis(200) };
    let (tx, rx) = std::sync::mpsc::channel::<(&'static str, Change)>();
    let elector = |who: &'static str| {
        let tx = tx.clone();
        Elector::start(PgStore::open(&options(&s)).expect("replica"), "executor", who, timing, move |c| {
            let _ = tx.send((who, c));
        })
        .expect("elector starts")
    };
    let elected = |rx: &std::sync::mpsc::Receiver<(&'static str, Change)>| loop {
        match rx.recv_timeout(Duration::from_secs(30)).expect("a leader within 30 s") {
            (who, Change::Elected { token }) => break (who, token),
            (_, Change::SteppedDown { .. }) => continue,
        }
    };
    let a = elector("replica-a");
    assert_eq!(elected(&rx), ("replica-a", 1));
    assert_eq!(a.leading().map(|l| l.token), Some(1));
    let b = elector("replica-b");
    let store = PgStore::open(&options(&s)).expect("reader");
    assert_eq!(store.current_lease("executor").expect("read").map(|l| l.holder), Some("replica-a".to_owned()));
    assert!(b.leading().is_none());

    // replica-a crashes (no release): replica-b leads once the lease lapses, with a new token.
    let died = Instant::now();
    a.abandon();
    assert_eq!(elected(&rx), ("replica-b", 2));
    let took = died.elapsed();
    eprintln!("takeover after a leader's crash: {took:?} (lease {:?})", timing.ttl);
    assert!(took < timing.ttl * 2 + Duration::from_secs(1), "{took:?}");

    // replica-b shuts down and hands over: replica-a (restarted) leads at its next try.
    let a = elector("replica-a");
    let handed = Instant::now();
    drop(b);
    assert_eq!(elected(&rx), ("replica-a", 3));
    let took = handed.elapsed();
    eprintln!("takeover after a leader's shutdown: {took:?}");
    assert!(took < timing.ttl + Duration::from_secs(1), "a hand-over does not wait for the lease to lapse: {took:?}");
    assert!(a.leading().is_some());
}

/// The backend conformance suite, unchanged, on PostgreSQL: each check on a fresh database of
/// one server.
#[test]
fn the_whole_conformance_suite_passes_on_postgres() {
    let s = server(false);
    let n = std::sync::atomic::AtomicU32::new(0);
    let make = || -> Box<dyn drover_store::Store> {
        let db = format!("check{}", n.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        s.psql(&format!("CREATE DATABASE {db} OWNER drover")).expect("create database");
        let mut o = options(&s);
        o.url = format!("postgres://drover@127.0.0.1:{}/{db}", s.port());
        o.pool_size = 4;
        Box::new(PgStore::open(&o).expect("open"))
    };
    drover_store_conformance::run_all(&make);
}

/// Sixteen enrollments at once through one replica (what `drover-bench fleet` does): each
/// spends its token, moves its host to `enrolling` and records a certificate made while the
/// transaction is open; every one succeeds, none refused as a conflict.
#[test]
fn sixteen_concurrent_enrollments_through_one_replica_all_succeed() {
    use drover_store::{CertKind, EnrollmentToken, NewCert, NewHost, Store as _, hash_token};
    let s = server(false);
    let store = PgStore::open(&options(&s)).expect("open");
    let now = drover_proto::time::Time::from_unix(1_800_000_000).expect("time");
    let later = drover_proto::time::Time::from_unix(1_800_003_600).expect("time");
    let mut hosts = Vec::new();
    for i in 0..160 {
        let token = format!("token-{i}");
        let new = NewHost {
            hostname: format!("gpu-{i:03}"),
            created_at: now,
            token: Some(EnrollmentToken { token_hash: hash_token(&token), expires_at: later }),
        };
        hosts.push((store.create_host(&new).expect("host").id, token));
    }
    let workers: Vec<_> = hosts
        .chunks(10)
        .map(|chunk| {
            let (store, chunk) = (store.clone(), chunk.to_vec());
            std::thread::spawn(move || {
                for (id, token) in chunk {
                    let mut issue = |h: &drover_store::Host| {
                        // The CA's signature takes a while, inside the transaction.
                        std::thread::sleep(Duration::from_millis(1));
                        let serial = h.id.simple().to_string();
                        let kind = CertKind::Host;
                        Ok(NewCert { serial, kind, host_id: Some(h.id), subject: h.hostname.clone(), not_before: now, not_after: later }
                            .into())
                    };
                    store.enroll_host(&hash_token(&token), id, now, &mut issue)?;
                }
                Ok::<_, StoreError>(())
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker").expect("every enrollment succeeds");
    }
    let enrolling = store.list_hosts(&Default::default()).expect("hosts").iter().filter(|h| h.state.as_str() == "enrolling").count();
    assert_eq!(enrolling, 160);
}

/// Replica `a`'s view cache fed as `serve` feeds it (`crate::peers`): a listener on the view
/// channel and a heartbeat every 100 ms. Dropping it stops both.
struct Fed {
    _listener: Listener,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for Fed {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

fn feed(s: &PostgresServer, a: &PgStore) -> Fed {
    use drover_store_postgres::view_cache::CHANNEL;
    let views = a.view_cache().clone();
    let listener = Listener::start(&options(s), &[CHANNEL], move |e| match e {
        ListenEvent::Connected => views.connected(),
        ListenEvent::Notified { payload, .. } => views.heard(&payload, Instant::now()),
    })
    .expect("listens");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (flag, store) = (stop.clone(), a.clone());
    std::thread::spawn(move || {
        let beat = store.view_cache().heartbeat();
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            if let Ok(mut c) = store.conn() {
                let _ = c.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &beat]);
            }
            // Pacing a heartbeat, not waiting for a condition.
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    Fed { _listener: listener, stop }
}

/// Polls `cond` every millisecond until it holds; how long that took, or a panic after 10 s.
fn within(what: &str, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(10), "{what}: not within 10 s");
        std::thread::sleep(Duration::from_millis(1));
    }
    start.elapsed()
}

#[test]
fn cached_check_in_views_follow_every_commit_whoever_makes_it() {
    use drover_store::{Checkin, NewEvent, NewHost, NewIntent, NewTask, Store};
    use drover_store_conformance::t;
    let s = server(false);
    let (a, b) = (PgStore::open(&options(&s)).expect("replica a"), PgStore::open(&options(&s)).expect("replica b"));
    let h = b.create_host(&NewHost { hostname: "gpu-01".into(), created_at: t(0), token: None }).expect("host").id;
    // Nothing is cached until a listener feeds the cache and its heartbeat comes back.
    a.checkin_view(h, t(1)).expect("view");
    assert_eq!(a.checkin_view_cached(h, t(1)), None, "a cache no listener feeds is never consulted");
    let _fed = feed(&s, &a);
    within("the cache is trusted and filled", || {
        a.checkin_view(h, t(1)).expect("view");
        a.checkin_view_cached(h, t(1)).is_some()
    });
    assert_eq!(a.checkin_view_cached(h, t(1)), Some(a.checkin_view(h, t(1)).expect("view")));

    // Another replica commits an intent for the host: a's copy is dropped, and the next read
    // finds the intent.
    let intent = NewIntent {
        intent_id: uuid::Uuid::new_v4(),
        host_id: h,
        rollout_id: drover_proto::names::RolloutId::parse("prod@c1").expect("id"),
        envelope: b"{}".to_vec(),
        confirm_deadline: None,
        created_at: t(2),
    };
    b.put_intent(&intent).expect("intent on b");
    let took = within("b's intent reaches a's cache", || a.checkin_view_cached(h, t(3)).is_none_or(|v| v.intent.is_some()));
    eprintln!("commit on replica b → a's cached view dropped: {took:?}");
    within("a refills", || {
        a.checkin_view(h, t(3)).expect("view");
        a.checkin_view_cached(h, t(3)).is_some()
    });
    assert_eq!(a.checkin_view_cached(h, t(3)).and_then(|v| v.intent).map(|i| i.intent.intent_id), Some(intent.intent_id));

    // a's own write: a request right after it never reads the copy from before it.
    let task = NewTask { task_id: uuid::Uuid::new_v4(), host_id: h, job_id: None, envelope: b"{}".to_vec(), created_at: t(4) };
    a.enqueue_task(&task).expect("task on a");
    assert!(a.checkin_view_cached(h, t(4)).is_none_or(|v| v.leasable), "a stale view was served after this replica's own write");
    within("a refills", || {
        a.checkin_view(h, t(4)).expect("view");
        a.checkin_view_cached(h, t(4)).is_some()
    });
    assert!(a.checkin_view_cached(h, t(4)).is_some_and(|v| v.leasable));
    // Leased: leasable again only once the lease lapses, with no write in between.
    assert_eq!(a.lease_tasks(h, t(5), 300, 4).expect("lease").len(), 1);
    within("a refills", || {
        a.checkin_view(h, t(5)).expect("view");
        a.checkin_view_cached(h, t(5)).is_some()
    });
    assert!(!a.checkin_view_cached(h, t(6)).expect("cached").leasable);
    assert!(a.checkin_view_cached(h, t(5 + 300)).expect("cached").leasable, "a lapsed lease is leasable again");

    // A routine check-in's fields do not drop the copy: after b records one, a later write
    // of a's is heard, and the copy is still there.
    let checkin = Checkin { at: t(7), agent_version: "0.1.0".into(), boot_id: "boot-1".into(), current_generation: None };
    b.record_checkins(&[(h, checkin)]).expect("check-in on b");
    let event = NewEvent {
        at: t(8),
        kind: "test.marker".into(),
        host_id: None,
        rollout_id: None,
        job_id: None,
        message: "after the check-in".into(),
        data: serde_json::Value::Null,
    };
    a.append_event(&event).expect("event on a");
    within("a's copy outlives a routine check-in", || a.checkin_view_cached(h, t(8)).is_some());
    // Nor do a's own batches of check-ins and health reports keep a's requests from it: no
    // view column changes, so there is nothing to wait for.
    let checkin = Checkin { at: t(9), agent_version: "0.1.0".into(), boot_id: "boot-2".into(), current_generation: None };
    a.record_checkins(&[(h, checkin)]).expect("check-in on a");
    let health = drover_store::HostHealth { host_id: h, reported_at: t(9), report: "{}".into() };
    a.record_host_health(&[health]).expect("health on a");
    assert!(a.checkin_view_cached(h, t(9)).is_some(), "a's batched check-ins sent its requests to the database");

    // A change made by hand in SQL drops it too: the triggers are the database's.
    s.psql(&format!("UPDATE hosts SET schedulable = 0 WHERE id = '{h}'")).expect("psql");
    within("a person's SQL reaches a's cache", || a.checkin_view_cached(h, t(9)).is_none_or(|v| v.host.is_some_and(|h| !h.schedulable)));
}
