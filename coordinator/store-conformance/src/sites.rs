//! Conformance checks for MAAS sites: sites with their default profile, compare-and-set
//! updates, unique names, overrides and RoCE assignments scoped to their site, and every
//! change logged (event and audit) in the same transaction as the change.

use drover_proto::time::Time;
use uuid::Uuid;

use super::t;
use crate::store::{
    AuditFilter, ChangeLog, DriftWrite, EventFilter, MaasBinding, MaasObservation, NewAudit, NewEvent, NewJob, NewRoce, PowerOverride,
    Profile, ProfilePolicy, ReconcileChange, SelectorType, Site, SiteConfig, SiteSecrets, SiteStatus, Store, StoreError,
};

/// A change log naming `kind` for site `id`.
pub fn change(kind: &str, id: Uuid, at: Time) -> ChangeLog {
    ChangeLog {
        event: NewEvent {
            at,
            kind: kind.into(),
            host_id: None,
            rollout_id: None,
            job_id: None,
            message: format!("{kind} {id}"),
            data: serde_json::json!({ "siteId": id }),
        },
        audit: NewAudit {
            at,
            actor: "suite".into(),
            role: "admin".into(),
            action: kind.into(),
            target: id.to_string(),
            reason: "suite".into(),
            prior_state: None,
            expected_state: None,
        },
    }
}

/// A valid site named `name` with its default profile.
pub fn site_fixture(name: &str) -> (Site, Profile) {
    let id = Uuid::new_v4();
    let profile_id = Uuid::new_v4();
    let site = Site {
        id,
        name: name.into(),
        status: SiteStatus::Active,
        config: SiteConfig {
            region_code: "eu-1".into(),
            api_base_url: "http://10.0.0.1:5240/MAAS".into(),
            pxe_iface: "ens19".into(),
            pxe_vlan_vid: 46,
            node_pxe_iface: "eno8303".into(),
            deploy_user: "hpcadmin".into(),
            deploy_ssh_iface: "eno8303".into(),
            upstream_dns_servers: vec!["1.1.1.1".into()],
            maas_ca_pem: None,
            required_capabilities: vec![],
        },
        default_profile_id: profile_id,
        secrets: SiteSecrets {
            api_token_path: format!("maas-sites/{id}/api-token"),
            default_power_path: format!("maas-sites/{id}/power/default"),
            deploy_password_path: format!("maas-sites/{id}/deploy-password"),
            api_token_set_at: None,
            default_power_set_at: None,
            deploy_password_set_at: None,
        },
        revision: 1,
        created_at: t(0),
        updated_at: t(0),
    };
    let profile = Profile {
        id: profile_id,
        site_id: id,
        name: "default".into(),
        description: None,
        status: SiteStatus::Active,
        policy: ProfilePolicy::default(),
        revision: 1,
        created_at: t(0),
        updated_at: t(0),
    };
    (site, profile)
}

fn make_site(s: &dyn Store, name: &str) -> Site {
    let (site, profile) = site_fixture(name);
    s.create_site(&site, &profile, &change("maas.site.created", site.id, t(0))).expect("create site")
}

/// A site is created with its default profile, read back by id and name, listed by name, and
/// its creation is logged.
pub fn site_create_get_list_with_default_profile(make: super::Factory<'_>) {
    let s = make();
    let b = make_site(&*s, "b-site");
    let a = make_site(&*s, "a-site");
    assert_eq!(b.revision, 1);
    assert_eq!(s.get_site(b.id).expect("get"), Some(b.clone()));
    assert_eq!(s.get_site_by_name("a-site").expect("by name"), Some(a.clone()));
    assert_eq!(s.get_site(Uuid::new_v4()).expect("unknown"), None);
    assert_eq!(s.list_sites().expect("list").iter().map(|x| x.name.as_str()).collect::<Vec<_>>(), ["a-site", "b-site"]);
    let profiles = s.list_profiles(b.id).expect("profiles");
    assert_eq!(profiles.len(), 1);
    assert_eq!(profiles[0].id, b.default_profile_id);
    assert_eq!(profiles[0].policy, ProfilePolicy::default());
    let events = s.list_events(&EventFilter { kind: Some("maas.site.created".into()), ..Default::default() }).expect("events");
    assert_eq!(events.len(), 2);
    let audit = s.list_audit(&AuditFilter { target: Some(b.id.to_string()), ..Default::default() }).expect("audit");
    assert_eq!(audit.len(), 1);
}

/// A second site with a taken name is a conflict and writes nothing.
pub fn site_name_unique(make: super::Factory<'_>) {
    let s = make();
    make_site(&*s, "dc1");
    let (dup, profile) = site_fixture("dc1");
    let e = s.create_site(&dup, &profile, &change("maas.site.created", dup.id, t(1))).expect_err("duplicate");
    assert!(matches!(e, StoreError::Conflict { .. }), "{e:?}");
    assert_eq!(s.list_sites().expect("list").len(), 1);
    assert!(s.get_profile(profile.id).expect("profile").is_none(), "the refused site's profile was written");
    assert_eq!(s.list_audit(&AuditFilter::default()).expect("audit").len(), 1);
}

/// Updates are compare-and-set on the revision; a stale revision or a taken name writes nothing.
pub fn site_update_compare_and_set(make: super::Factory<'_>) {
    let s = make();
    let site = make_site(&*s, "dc1");
    make_site(&*s, "dc2");
    let mut changed = site.clone();
    changed.status = SiteStatus::Disabled;
    changed.updated_at = t(5);
    let updated = s.update_site(&changed, 1, &change("maas.site.disabled", site.id, t(5))).expect("update");
    assert_eq!((updated.status, updated.revision, updated.updated_at), (SiteStatus::Disabled, 2, t(5)));
    let e = s.update_site(&changed, 1, &change("maas.site.updated", site.id, t(6))).expect_err("stale");
    assert!(matches!(e, StoreError::StaleState { .. }), "{e:?}");
    let mut renamed = updated.clone();
    renamed.name = "dc2".into();
    let e = s.update_site(&renamed, 2, &change("maas.site.updated", site.id, t(6))).expect_err("name taken");
    assert!(matches!(e, StoreError::Conflict { .. }), "{e:?}");
    let mut foreign = updated.clone();
    foreign.default_profile_id = Uuid::new_v4();
    let e = s.update_site(&foreign, 2, &change("maas.site.updated", site.id, t(6))).expect_err("foreign profile");
    assert!(matches!(e, StoreError::Invalid { .. }), "{e:?}");
    assert_eq!(s.get_site(site.id).expect("get"), Some(updated));
    let mut ghost = site.clone();
    ghost.id = Uuid::new_v4();
    assert!(matches!(s.update_site(&ghost, 1, &change("x", ghost.id, t(7))), Err(StoreError::NotFound { .. })));
}

/// Profile names are unique within a site only; profile updates are compare-and-set.
pub fn profile_names_unique_per_site(make: super::Factory<'_>) {
    let s = make();
    let a = make_site(&*s, "a");
    let b = make_site(&*s, "b");
    let mut p = s.list_profiles(a.id).expect("list")[0].clone();
    p.id = Uuid::new_v4();
    p.name = "strict".into();
    s.create_profile(&p, &change("maas.profile.created", a.id, t(1))).expect("create");
    let mut same_name_other_site = p.clone();
    same_name_other_site.id = Uuid::new_v4();
    same_name_other_site.site_id = b.id;
    s.create_profile(&same_name_other_site, &change("maas.profile.created", b.id, t(1))).expect("other site may reuse the name");
    let mut dup = p.clone();
    dup.id = Uuid::new_v4();
    assert!(matches!(s.create_profile(&dup, &change("x", a.id, t(2))), Err(StoreError::Conflict { .. })));
    let mut orphan = p.clone();
    orphan.id = Uuid::new_v4();
    orphan.site_id = Uuid::new_v4();
    assert!(matches!(s.create_profile(&orphan, &change("x", a.id, t(2))), Err(StoreError::NotFound { .. })));
    let mut changed = p.clone();
    changed.policy.batch_max_parallel = 3;
    let updated = s.update_profile(&changed, 1, &change("maas.profile.updated", a.id, t(3))).expect("update");
    assert_eq!((updated.policy.batch_max_parallel, updated.revision), (3, 2));
    assert!(matches!(s.update_profile(&changed, 1, &change("x", a.id, t(4))), Err(StoreError::StaleState { .. })));
    assert_eq!(s.list_profiles(a.id).expect("list").iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["default", "strict"]);
}

/// One override per (site, selector type, value); listed in selection order; deleting one
/// of another site is `NotFound`.
pub fn overrides_unique_ordered_and_scoped(make: super::Factory<'_>) {
    let s = make();
    let a = make_site(&*s, "a");
    let b = make_site(&*s, "b");
    let o = |site: Uuid, ty: SelectorType, value: &str| {
        let id = Uuid::new_v4();
        PowerOverride {
            id,
            site_id: site,
            selector_type: ty,
            selector_value: value.into(),
            secret_path: format!("maas-sites/{site}/power/overrides/{id}"),
            status: SiteStatus::Active,
            created_at: t(1),
            updated_at: t(1),
        }
    };
    let host = s.create_override(&o(a.id, SelectorType::Hostname, "gpu-1"), &change("x", a.id, t(1))).expect("hostname");
    s.create_override(&o(a.id, SelectorType::PxeMac, "aa:bb:cc:dd:ee:ff"), &change("x", a.id, t(1))).expect("mac");
    s.create_override(&o(a.id, SelectorType::IpmiIp, "10.0.0.9"), &change("x", a.id, t(1))).expect("ipmi");
    s.create_override(&o(b.id, SelectorType::Hostname, "gpu-1"), &change("x", b.id, t(1))).expect("other site");
    let e = s.create_override(&o(a.id, SelectorType::Hostname, "gpu-1"), &change("x", a.id, t(2))).expect_err("duplicate");
    assert!(matches!(e, StoreError::Conflict { .. }), "{e:?}");
    let listed = s.list_overrides(a.id).expect("list");
    assert_eq!(
        listed.iter().map(|o| o.selector_type).collect::<Vec<_>>(),
        [SelectorType::PxeMac, SelectorType::IpmiIp, SelectorType::Hostname]
    );
    assert!(matches!(s.delete_override(b.id, host.id, &change("x", b.id, t(3))), Err(StoreError::NotFound { .. })));
    assert_eq!(s.delete_override(a.id, host.id, &change("x", a.id, t(3))).expect("delete"), host);
    assert_eq!(s.list_overrides(a.id).expect("list").len(), 2);
    assert_eq!(s.list_overrides(b.id).expect("list").len(), 1);
}

/// A RoCE upsert creates, updates and leaves alone by (site, hostname, interface); lists by
/// host; deletes only within its site; an unknown site writes nothing.
pub fn roce_upsert_keys_and_scoping(make: super::Factory<'_>) {
    let s = make();
    let a = make_site(&*s, "a");
    let b = make_site(&*s, "b");
    let row = |h: &str, i: &str, c: &str| NewRoce { hostname: h.into(), interface: i.into(), ipv4_cidr: c.into() };
    let first = [
        row("c07u31", "enp28s0np0", "172.30.9.61/31"),
        row("c07u31", "enp29s0np0", "172.29.1.219/31"),
        row("c07u33", "enp28s0np0", "172.30.9.65/31"),
    ];
    let r = s.upsert_roce(a.id, &first, t(1), &change("maas.roce.upserted", a.id, t(1))).expect("upsert");
    assert_eq!((r.created, r.updated, r.unchanged), (3, 0, 0));
    let second = [row("c07u31", "enp28s0np0", "172.30.9.61/31"), row("c07u31", "enp29s0np0", "172.29.1.221/31")];
    let r = s.upsert_roce(a.id, &second, t(2), &change("maas.roce.upserted", a.id, t(2))).expect("upsert again");
    assert_eq!((r.created, r.updated, r.unchanged), (0, 1, 1));
    let host = s.list_roce(a.id, Some("c07u31")).expect("by host");
    assert_eq!(host.iter().map(|x| x.ipv4_cidr.as_str()).collect::<Vec<_>>(), ["172.30.9.61/31", "172.29.1.221/31"]);
    assert_eq!(s.list_roce(a.id, None).expect("all").len(), 3);
    assert!(s.list_roce(b.id, None).expect("other site").is_empty());
    assert!(matches!(s.delete_roce(b.id, host[0].id, &change("x", b.id, t(3))), Err(StoreError::NotFound { .. })));
    s.delete_roce(a.id, host[0].id, &change("x", a.id, t(3))).expect("delete");
    assert_eq!(s.list_roce(a.id, None).expect("all").len(), 2);
    let ghost = Uuid::new_v4();
    assert!(matches!(s.upsert_roce(ghost, &first, t(4), &change("x", ghost, t(4))), Err(StoreError::NotFound { .. })));
    assert!(s.list_roce(ghost, None).expect("none").is_empty());
}

fn binding(host: Uuid, site: Uuid, system_id: &str) -> MaasBinding {
    MaasBinding::new(host, site, system_id, Some("10.9.0.7".into()), None, t(1))
}

/// One binding per host and one host per machine of a site; binding again is a no-op; an
/// unknown host or site is `NotFound`; deleting needs a binding.
pub fn maas_binding_is_one_to_one(make: super::Factory<'_>) {
    let s = make();
    let site = make_site(&*s, "dc1");
    let a = super::host(&*s, "gpu-a");
    let b = super::host(&*s, "gpu-b");
    let stored = s.put_maas_binding(&binding(a.id, site.id, "abc123"), &change("maas.binding.created", site.id, t(1))).expect("bind");
    assert_eq!((stored.system_id.as_str(), stored.observed.clone()), ("abc123", None));
    assert_eq!(s.put_maas_binding(&binding(a.id, site.id, "abc123"), &change("x", site.id, t(2))).expect("again"), stored);
    let e = s.put_maas_binding(&binding(a.id, site.id, "def456"), &change("x", site.id, t(2))).expect_err("host bound elsewhere");
    assert!(matches!(e, StoreError::Conflict { .. }), "{e:?}");
    let e = s.put_maas_binding(&binding(b.id, site.id, "abc123"), &change("x", site.id, t(2))).expect_err("machine taken");
    assert!(matches!(e, StoreError::Conflict { .. }), "{e:?}");
    let e = s.put_maas_binding(&binding(Uuid::new_v4(), site.id, "zzz999"), &change("x", site.id, t(2))).expect_err("no host");
    assert!(matches!(e, StoreError::NotFound { .. }), "{e:?}");
    let e = s.put_maas_binding(&binding(b.id, Uuid::new_v4(), "zzz999"), &change("x", site.id, t(2))).expect_err("no site");
    assert!(matches!(e, StoreError::NotFound { .. }), "{e:?}");
    assert_eq!(s.get_maas_binding_by_machine(site.id, "abc123").expect("by machine").map(|b| b.host_id), Some(a.id));
    assert_eq!(s.list_maas_bindings(Some(site.id)).expect("list").len(), 1);
    assert!(s.list_maas_bindings(Some(Uuid::new_v4())).expect("other site").is_empty());
    assert_eq!(s.delete_maas_binding(a.id, &change("maas.binding.deleted", site.id, t(3))).expect("delete").host_id, a.id);
    assert!(s.get_maas_binding(a.id).expect("get").is_none());
    assert!(matches!(s.delete_maas_binding(a.id, &change("x", site.id, t(4))), Err(StoreError::NotFound { .. })));
    // The machine is free again.
    s.put_maas_binding(&binding(b.id, site.id, "abc123"), &change("x", site.id, t(5))).expect("rebind");
}

/// Observations never move backwards in time; a drift keeps its first detection time until
/// resolved, and resolving with none open changes nothing.
pub fn maas_binding_observations_and_drift(make: super::Factory<'_>) {
    let s = make();
    let site = make_site(&*s, "dc1");
    let a = super::host(&*s, "gpu-a");
    s.put_maas_binding(&binding(a.id, site.id, "abc123"), &change("x", site.id, t(1))).expect("bind");
    let seen = |status: &str, at: i64| MaasObservation {
        status: status.into(),
        power_state: "on".into(),
        ips: vec!["10.0.0.5".into()],
        at: t(at),
    };
    let b = s.observe_maas_binding(a.id, &seen("Deployed", 10)).expect("observe");
    assert_eq!(b.observed, Some(seen("Deployed", 10)));
    let b = s.observe_maas_binding(a.id, &seen("Ready", 5)).expect("older");
    assert_eq!(b.observed, Some(seen("Deployed", 10)), "an older observation rolled state back");
    let unbound = super::host(&*s, "gpu-b");
    assert!(matches!(s.observe_maas_binding(unbound.id, &seen("Ready", 11)), Err(StoreError::NotFound { .. })));

    let details = serde_json::json!({ "rule": "ready_while_active", "maasStatus": "Ready" });
    let b = s.set_maas_drift(a.id, Some(&details), t(20)).expect("drift");
    assert_eq!((b.drift.clone(), b.drift_detected_at), (Some(details.clone()), Some(t(20))));
    let b = s.set_maas_drift(a.id, Some(&details), t(30)).expect("still drifting");
    assert_eq!(b.drift_detected_at, Some(t(20)), "the first detection time is kept");
    let b = s.set_maas_drift(a.id, None, t(40)).expect("resolve");
    assert_eq!((b.drift, b.drift_resolved_at), (None, Some(t(40))));
    let b = s.set_maas_drift(a.id, None, t(50)).expect("nothing open");
    assert_eq!(b.drift_resolved_at, Some(t(40)));
}

/// A reconciler pass reads a site's bound hosts with their unfinished jobs in one snapshot,
/// and writes a batch in one transaction: a change whose host moved since the snapshot is
/// skipped whole; a quarantine moves `active` → `quarantined` and clears `schedulable`; an
/// operator's resolution closes the drift and keeps it as acknowledged until it heals.
pub fn maas_reconcile_batches_and_resolution(make: super::Factory<'_>) {
    use drover_proto::states::HostLifecycle as L;
    let s = make();
    let site = make_site(&*s, "dc1");
    let a = super::drive(&*s, &super::host(&*s, "gpu-a"), &[L::Enrolling, L::Active]);
    let b = super::drive(&*s, &super::host(&*s, "gpu-b"), &[L::Enrolling, L::Active]);
    let gone = super::drive(&*s, &super::host(&*s, "gpu-gone"), &[L::Enrolling, L::Active]);
    for (h, id) in [(&a, "aaa111"), (&b, "bbb222"), (&gone, "ccc333")] {
        s.put_maas_binding(&binding(h.id, site.id, id), &change("x", site.id, t(1))).expect("bind");
    }
    super::drive(&*s, &gone, &super::TO_DELETED[2..]);
    let job = NewJob {
        job_id: Uuid::new_v4(),
        kind: "maas_reimage".into(),
        host_id: Some(b.id),
        input: serde_json::json!({}),
        created_at: t(2),
        request_id: None,
    };
    s.create_job(&job).expect("job");
    // A MAAS half held by its parent names its host only in its input.
    let child = NewJob {
        job_id: Uuid::new_v4(),
        kind: "maas_decommission".into(),
        host_id: None,
        input: serde_json::json!({"hostId": a.id.to_string()}),
        created_at: t(2),
        request_id: None,
    };
    s.create_job(&child).expect("child job");
    let snap = s.maas_reconcile_snapshot(site.id).expect("snapshot");
    let mut seen: Vec<(String, L, Vec<String>)> = snap.iter().map(|r| (r.hostname.clone(), r.state, r.jobs.clone())).collect();
    seen.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(
        seen,
        vec![
            ("gpu-a".into(), L::Active, vec!["maas_decommission".to_owned()]),
            ("gpu-b".into(), L::Active, vec!["maas_reimage".to_owned()])
        ]
    );
    assert!(s.maas_reconcile_snapshot(Uuid::new_v4()).expect("other site").is_empty());

    let alert = |host: Uuid| NewEvent {
        at: t(3),
        kind: "maas.drift.detected".into(),
        host_id: Some(host),
        rollout_id: None,
        job_id: None,
        message: "released outside workflow".into(),
        data: serde_json::json!({"severity": "critical"}),
    };
    let seen_ready = MaasObservation { status: "Ready".into(), power_state: "off".into(), ips: vec![], at: t(3) };
    let batch = vec![
        ReconcileChange {
            host_id: a.id,
            expected_state: L::Active,
            observation: Some(seen_ready.clone()),
            drift: DriftWrite::Open(serde_json::json!({"rule": "released_outside_workflow"})),
            quarantine: Some("drift: released outside workflow".into()),
            events: vec![alert(a.id)],
            job: None,
        },
        // Planned on a stale lifecycle: nothing of it is written.
        ReconcileChange {
            host_id: b.id,
            expected_state: L::Offline,
            observation: Some(seen_ready.clone()),
            drift: DriftWrite::Open(serde_json::json!({"rule": "x"})),
            quarantine: None,
            events: vec![alert(b.id)],
            job: None,
        },
    ];
    let before = super::all_events(&*s).len();
    let done = s.apply_maas_reconcile(&batch, t(3)).expect("apply");
    assert_eq!((done.applied, done.skipped.clone()), (1, vec![b.id]));
    let ha = s.get_host(a.id).expect("get").expect("a");
    assert_eq!((ha.state, ha.schedulable), (L::Quarantined, false));
    let ba = s.get_maas_binding(a.id).expect("get").expect("bound");
    assert_eq!((ba.observed.map(|o| o.status), ba.drift_detected_at), (Some("Ready".to_owned()), Some(t(3))));
    let bb = s.get_maas_binding(b.id).expect("get").expect("bound");
    assert_eq!((bb.observed, bb.drift), (None, None), "a skipped change writes nothing");
    let kinds: Vec<String> = super::all_events(&*s)[before..].iter().map(|e| e.event.kind.clone()).collect();
    assert_eq!(kinds, ["host.transition", "host.schedulable", "maas.drift.detected"]);

    let resolved = s.resolve_maas_drift(a.id, t(4), &change("maas.drift.resolved", site.id, t(4))).expect("resolve");
    assert_eq!((resolved.drift.is_none(), resolved.drift_resolved_at), (true, Some(t(4))));
    assert_eq!(resolved.acknowledged, Some(serde_json::json!({"rule": "released_outside_workflow"})));
    let e = s.resolve_maas_drift(a.id, t(5), &change("x", site.id, t(5))).expect_err("nothing open");
    assert!(matches!(e, StoreError::Conflict { .. }), "{e:?}");
    assert!(matches!(s.resolve_maas_drift(gone.id, t(5), &change("x", site.id, t(5))), Err(StoreError::Conflict { .. })));
    assert!(matches!(s.resolve_maas_drift(Uuid::new_v4(), t(5), &change("x", site.id, t(5))), Err(StoreError::NotFound { .. })));

    let heal = ReconcileChange {
        host_id: a.id,
        expected_state: L::Quarantined,
        observation: None,
        drift: DriftWrite::Heal,
        quarantine: None,
        events: vec![],
        job: None,
    };
    assert_eq!(s.apply_maas_reconcile(&[heal], t(6)).expect("heal").applied, 1);
    assert_eq!(s.get_maas_binding(a.id).expect("get").expect("bound").acknowledged, None, "healed: a recurrence is new");
}
