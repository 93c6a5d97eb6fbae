//! The swarm split over child processes (`drover-bench fleet --processes N`): one process
//! cannot hold more connections than its open-files limit (20,000 here, not raisable), and one
//! loopback address has one range of ephemeral ports towards the coordinator. Each child,
//! `drover-bench swarm-part PLAN`, runs its share of the agents from its own loopback address
//! (127.0.0.11, .12, …: the whole of 127.0.0.0/8 reaches `lo`) exactly as the in-process
//! [`Swarm`] does, and streams what its agents see back to the parent as JSON lines.
//!
//! The protocol is lines: the parent writes `rollout` (offline hosts drop now) and `stop` on
//! the child's stdin; the child writes [`PartLine`]s on its stdout — `started`, a `receipt`
//! per intent received as it happens, and `done` with its counters once its agents stopped.

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::FleetError;
use super::enroll::{ClientIdentityPem, Enrolled};
use super::scenario::{Http, Role, Scenario, SimHost};
use super::swarm::{Receipt, Shared, Swarm};

/// One child's share of the fleet and how to reach the coordinator.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PartPlan {
    /// Coordinator URLs (replicas), in order.
    pub urls: Vec<String>,
    /// The coordinator's CA, PEM.
    pub ca_pem: String,
    /// `trust.json` the agents verify releases with.
    pub trust_json: String,
    /// The director key, PEM.
    pub director_pem: String,
    /// The address this child's connections come from.
    pub local_address: IpAddr,
    /// Scenario settings the agents need.
    pub long_poll_secs: u64,
    /// `1.1`, `2` or `1.1-hyper`.
    pub http: String,
    /// A slow host's switch time.
    pub slow_secs: u64,
    /// How long an offline host stays away.
    pub rejoin_secs: u64,
    /// Agents this child starts per second.
    pub ramp_per_sec: usize,
    /// Its agents.
    pub agents: Vec<PartAgent>,
}

/// One agent of a part.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PartAgent {
    /// Hostname.
    pub hostname: String,
    /// Host id.
    pub host_id: Uuid,
    /// Its certificate, PEM.
    pub cert_pem: String,
    /// Its key, PEM.
    pub key_pem: String,
    /// Its role.
    pub role: String,
}

/// What a child tells the parent.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
pub enum PartLine {
    /// Every agent of the part was started.
    Started {
        /// How many.
        agents: usize,
    },
    /// An intent one agent received.
    #[serde(rename_all = "camelCase")]
    Receipt {
        /// Host.
        hostname: String,
        /// Its role.
        role: String,
        /// The rollout.
        rollout_id: String,
        /// When, nanoseconds since the Unix epoch (one clock: one machine).
        received_unix_nanos: u64,
        /// Confirmation accepted.
        confirmed: bool,
        /// Body bytes for it.
        bytes: u64,
    },
    /// The part's agents stopped; its counters.
    #[serde(rename_all = "camelCase")]
    Done {
        /// Check-ins answered.
        checkins_answered: u64,
        /// Requests that failed.
        errors: u64,
        /// The last failure.
        last_error: Option<String>,
        /// Refusals by admission.
        refused: Vec<String>,
        /// Offline hosts back.
        rejoined: u64,
        /// Full bundle verifications.
        full_verifications: u64,
    },
}

/// The address the `i`th part's connections come from: 127.0.0.11, .12, …
pub fn part_address(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 11 + (i % 200) as u8))
}

fn role_of(s: &str) -> Role {
    match s {
        "slow" => Role::Slow,
        "failing" => Role::Failing,
        "offline" => Role::Offline,
        _ => Role::Healthy,
    }
}

fn line(out: &mut impl Write, l: &PartLine) {
    // A parent that went away ends the child with its pipe: nothing to report to.
    if let Ok(text) = serde_json::to_string(l) {
        let _ = writeln!(out, "{text}");
        let _ = out.flush();
    }
}

/// The child: runs `plan`'s agents until `stop` (or the end of stdin), streaming receipts.
pub async fn run_part(plan: PartPlan) -> Result<(), FleetError> {
    let ca = drover_client::tls::parse_certificates("ca", plan.ca_pem.as_bytes()).map_err(FleetError::client("CA"))?;
    let director =
        drover_proto::keys::verifying_key_from_text(&plan.director_pem).map_err(|e| FleetError::Setup(format!("director key: {e}")))?;
    let ci = drover_proto::trust::TrustRoots::from_json(plan.trust_json.as_bytes()).map_err(|e| FleetError::Setup(e.to_string()))?;
    let anchors = drover_agent::admit::Anchors { ci, director: drover_agent::director::DirectorKeys::pinned(director) };
    let http = Http::parse(&plan.http).ok_or_else(|| FleetError::Setup(format!("http {}", plan.http)))?;
    let scenario = Scenario {
        long_poll_secs: plan.long_poll_secs,
        slow_secs: plan.slow_secs,
        rejoin_secs: plan.rejoin_secs,
        ramp_per_sec: plan.ramp_per_sec,
        http,
        ..Scenario::of(plan.agents.len())
    };
    let mut swarm = Swarm::new(&plan.urls, ca).from_address(plan.local_address);
    let batch = (plan.ramp_per_sec / 10).max(1);
    let mut pace = tokio::time::interval(Duration::from_secs_f64(batch as f64 / plan.ramp_per_sec.max(1) as f64));
    for chunk in plan.agents.chunks(batch) {
        pace.tick().await;
        for a in chunk {
            let enrolled = Enrolled {
                hostname: a.hostname.clone(),
                host_id: a.host_id,
                identity: ClientIdentityPem { cert_pem: a.cert_pem.clone(), key_pem: a.key_pem.clone() },
            };
            let host = SimHost { hostname: a.hostname.clone(), channel: String::new(), wave: 0, role: role_of(&a.role) };
            swarm.start(&enrolled, &host, &anchors, &scenario)?;
        }
    }
    let mut stdout = std::io::stdout();
    line(&mut stdout, &PartLine::Started { agents: swarm.len() });
    // Commands from the parent, read on a thread of their own (stdin blocks).
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for l in std::io::stdin().lock().lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let shared = swarm.shared.clone();
    let mut sent = 0usize;
    let mut every = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            cmd = rx.recv() => match cmd.as_deref() {
                Some("rollout") => swarm.rollout_started(),
                Some("stop") | None => break,
                Some(_) => {}
            },
            _ = every.tick() => sent = stream_receipts(&shared, sent, &mut stdout),
        }
    }
    swarm.stop().await;
    stream_receipts(&shared, sent, &mut stdout);
    line(
        &mut stdout,
        &PartLine::Done {
            checkins_answered: shared.checkins_answered.load(Ordering::Relaxed),
            errors: shared.errors.load(Ordering::Relaxed),
            last_error: shared.last_error.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            refused: shared.refused.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            rejoined: shared.rejoined.load(Ordering::Relaxed),
            full_verifications: shared.cache.full_verifications.load(Ordering::Relaxed),
        },
    );
    Ok(())
}

/// Writes the receipts after the first `sent`; returns how many are written now.
fn stream_receipts(shared: &Shared, sent: usize, out: &mut impl Write) -> usize {
    let receipts = shared.receipts.lock().unwrap_or_else(|e| e.into_inner());
    for r in &receipts[sent..] {
        let nanos = r.received.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        line(
            out,
            &PartLine::Receipt {
                hostname: r.hostname.clone(),
                role: r.role.as_str().to_owned(),
                rollout_id: r.rollout_id.clone(),
                received_unix_nanos: nanos,
                confirmed: r.confirmed,
                bytes: r.bytes,
            },
        );
    }
    receipts.len()
}

/// The parent's side: the children, and what they report gathered in one [`Shared`].
pub struct Parts {
    children: Vec<(Child, ChildStdin, std::thread::JoinHandle<()>)>,
    /// What every part's agents saw.
    pub shared: Arc<Shared>,
    agents: usize,
}

/// Everything the parent hands its children.
pub struct PartSetup<'a> {
    /// `drover-bench` itself.
    pub bench: &'a Path,
    /// Where the plans are written.
    pub dir: &'a Path,
    /// Coordinator URLs.
    pub urls: &'a [String],
    /// CA PEM.
    pub ca_pem: String,
    /// Director PEM.
    pub director_pem: String,
}

impl Parts {
    /// Writes a plan per part (hosts dealt round robin) and starts the children; each ramps
    /// its share up at its share of the rate.
    pub fn start(setup: &PartSetup<'_>, scenario: &Scenario, hosts: &[SimHost], enrolled: &[Enrolled]) -> Result<Parts, FleetError> {
        let n = scenario.processes.max(1);
        let mut plans: Vec<PartPlan> = (0..n)
            .map(|i| PartPlan {
                urls: setup.urls.to_vec(),
                ca_pem: setup.ca_pem.clone(),
                trust_json: String::from_utf8_lossy(&crate::ci_trust_json()).into_owned(),
                director_pem: setup.director_pem.clone(),
                local_address: part_address(i),
                long_poll_secs: scenario.long_poll_secs,
                http: scenario.http.as_str().to_owned(),
                slow_secs: scenario.slow_secs,
                rejoin_secs: scenario.rejoin_secs,
                ramp_per_sec: (scenario.ramp_per_sec / n).max(1),
                agents: Vec::new(),
            })
            .collect();
        for (k, (h, e)) in hosts.iter().zip(enrolled).enumerate() {
            plans[k % n].agents.push(PartAgent {
                hostname: e.hostname.clone(),
                host_id: e.host_id,
                cert_pem: e.identity.cert_pem.clone(),
                key_pem: e.identity.key_pem.clone(),
                role: h.role.as_str().to_owned(),
            });
        }
        let shared = Arc::new(Shared::default());
        let mut children = Vec::new();
        for (i, plan) in plans.iter().enumerate() {
            let path: PathBuf = setup.dir.join(format!("part-{i}.json"));
            let bytes = serde_json::to_vec(plan).map_err(|e| FleetError::Setup(e.to_string()))?;
            std::fs::write(&path, bytes).map_err(|source| FleetError::Io { path: path.display().to_string(), source })?;
            let mut child = Command::new(setup.bench)
                .arg("swarm-part")
                .arg(&path)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|source| FleetError::Io { path: setup.bench.display().to_string(), source })?;
            let stdin = child.stdin.take().ok_or_else(|| FleetError::Setup("child stdin".into()))?;
            let stdout = child.stdout.take().ok_or_else(|| FleetError::Setup("child stdout".into()))?;
            let into = shared.clone();
            let reader = std::thread::spawn(move || gather(BufReader::new(stdout), &into));
            children.push((child, stdin, reader));
        }
        Ok(Parts { children, shared, agents: hosts.len() })
    }

    /// Agents started (in all parts).
    pub fn len(&self) -> usize {
        self.agents
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.agents == 0
    }

    /// The rollout has started: every part's offline hosts drop now.
    pub fn rollout_started(&mut self) {
        for (_, stdin, _) in &mut self.children {
            let _ = writeln!(stdin, "rollout");
            let _ = stdin.flush();
        }
    }

    /// Stops every part and waits for its last report.
    pub fn stop(self) {
        for (mut child, mut stdin, reader) in self.children {
            let _ = writeln!(stdin, "stop");
            drop(stdin);
            let _ = reader.join();
            let _ = child.wait();
        }
    }
}

/// Reads one child's lines into `shared` until it ends.
fn gather(out: impl BufRead, shared: &Shared) {
    for l in out.lines() {
        let Ok(l) = l else { break };
        match serde_json::from_str::<PartLine>(&l) {
            Ok(PartLine::Started { .. }) => {}
            Ok(PartLine::Receipt { hostname, role, rollout_id, received_unix_nanos, confirmed, bytes }) => {
                let received = SystemTime::UNIX_EPOCH + Duration::from_nanos(received_unix_nanos);
                let r = Receipt { hostname, role: role_of(&role), rollout_id, received, confirmed, bytes };
                shared.receipts.lock().unwrap_or_else(|e| e.into_inner()).push(r);
            }
            Ok(PartLine::Done { checkins_answered, errors, last_error, refused, rejoined, full_verifications }) => {
                shared.checkins_answered.fetch_add(checkins_answered, Ordering::Relaxed);
                shared.errors.fetch_add(errors, Ordering::Relaxed);
                if last_error.is_some() {
                    *shared.last_error.lock().unwrap_or_else(|e| e.into_inner()) = last_error;
                }
                shared.refused.lock().unwrap_or_else(|e| e.into_inner()).extend(refused);
                shared.rejoined.fetch_add(rejoined, Ordering::Relaxed);
                shared.cache.full_verifications.fetch_add(full_verifications, Ordering::Relaxed);
            }
            Err(e) => {
                shared.errors.fetch_add(1, Ordering::Relaxed);
                *shared.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!("a part wrote {l:?}: {e}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receipt_line_round_trips_and_lands_in_the_shared_record() {
        let shared = Shared::default();
        let lines = [
            PartLine::Started { agents: 2 },
            PartLine::Receipt {
                hostname: "sim-00001".into(),
                role: "slow".into(),
                rollout_id: "ch-1@abc".into(),
                received_unix_nanos: 1_800_000_000_123_456_789,
                confirmed: true,
                bytes: 3100,
            },
            PartLine::Done { checkins_answered: 7, errors: 0, last_error: None, refused: vec![], rejoined: 1, full_verifications: 3 },
        ];
        let text: String = lines.iter().map(|l| serde_json::to_string(l).expect("json") + "\n").collect();
        gather(BufReader::new(text.as_bytes()), &shared);
        let receipts = shared.receipts.lock().expect("lock");
        assert_eq!(receipts.len(), 1);
        assert_eq!((receipts[0].role, receipts[0].bytes, receipts[0].confirmed), (Role::Slow, 3100, true));
        assert_eq!(receipts[0].received.duration_since(UNIX_EPOCH).expect("after").as_nanos(), 1_800_000_000_123_456_789);
        assert_eq!(shared.checkins_answered.load(Ordering::Relaxed), 7);
        assert_eq!(shared.cache.full_verifications.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn parts_come_from_distinct_loopback_addresses() {
        let a: Vec<IpAddr> = (0..4).map(part_address).collect();
        assert!(a.iter().all(|ip| ip.is_loopback()));
        assert_eq!(a.iter().collect::<std::collections::BTreeSet<_>>().len(), 4);
    }
}
