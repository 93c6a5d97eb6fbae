//! The HTTP side: routing and MAAS's dispatch rules. URLs end in `/` (others are
//! redirected with 301, as Django's `APPEND_SLASH`); `op` comes from the query string,
//! the form body or an `/op-<name>/` path suffix; the handler is chosen by whether the
//! caller authenticated (collections with an anonymous handler answer unsigned requests
//! with `Unrecognised signature … op=None` rather than 401); a method the resource never
//! takes is 405; an unknown (method, op) is 400. Outages (`/_fake/outage`) answer 503 with
//! `Retry-After: 10`, or hold the request until the outage ends.
//!
//! All state sits behind one mutex and every handler is synchronous under it, so requests
//! are serialised exactly as a single MAAS region would commit them.

use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Response, header};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::auth::{self, Caller};
use super::forms::Params;
use super::reply::{Millis, Reply, now_millis};
use super::world::{Outage, World};
use super::{control, devices, events, machines, ops, subnets};

/// The fake rack controller's system_id.
pub const RACK_ID: &str = "4y3h7n";

/// The MAAS version the fake claims.
pub const VERSION: &str = "3.7.0~beta1";

struct Shared {
    world: Mutex<World>,
    outage: watch::Sender<Outage>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Serves the fake on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, world: World) -> std::io::Result<()> {
    let (outage, _) = watch::channel(world.outage);
    let shared = Arc::new(Shared { world: Mutex::new(world), outage });
    let app = Router::new().fallback(handle).with_state(shared);
    axum::serve(listener, app).await
}

async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let method = parts.method.as_str().to_owned();
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().unwrap_or_default().to_owned();
    let header_of = |name: header::HeaderName| parts.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let authorization = header_of(header::AUTHORIZATION);
    let content_type = header_of(header::CONTENT_TYPE).unwrap_or_default();
    drop(parts);
    let body = match axum::body::to_bytes(body, 64 << 20).await {
        Ok(b) => b.to_vec(),
        Err(e) => return Reply::text(400, format!("could not read the body: {e}")).into_response(false),
    };

    if let Some(rest) = path.strip_prefix("/_fake") {
        let mut world = shared.lock();
        world.tick(now_millis());
        let reply = control::handle(&mut world, &method, rest, &body, now_millis());
        shared.outage.send_replace(world.outage);
        persist(&mut world);
        return reply.into_response(false);
    }
    if !path.starts_with("/MAAS/") {
        return Reply::text(404, "Not Found").into_response(false);
    }
    shared.lock().requests.push(json!({
        "method": method, "path": path, "query": query, "content_type": content_type,
        "body": String::from_utf8_lossy(&body),
    }));
    let mut outage = shared.outage.subscribe();
    loop {
        let mode = *outage.borrow_and_update();
        match mode {
            Outage::None => break,
            Outage::Unavailable => {
                return Reply::text(503, "Unable to connect to the region: the fake MAAS is in a simulated outage.")
                    .with_header("retry-after", "10")
                    .into_response(true);
            }
            // Accept and say nothing until the outage ends.
            Outage::Hang => {
                if outage.changed().await.is_err() {
                    return Reply::text(503, "shutting down").into_response(true);
                }
            }
        }
    }
    if !path.ends_with('/') {
        let location = if query.is_empty() { format!("{path}/") } else { format!("{path}/?{query}") };
        return Reply::text(301, "").with_header("location", location).into_response(false);
    }
    let mut world = shared.lock();
    let now = now_millis();
    world.tick(now);
    let reply = api(
        &mut world,
        &ApiRequest { method: &method, path: &path, query: &query, content_type: &content_type, body: &body },
        authorization.as_deref(),
        now,
    );
    persist(&mut world);
    reply.into_response(true)
}

fn persist(world: &mut World) {
    if let Err(e) = world.save_if_dirty() {
        eprintln!("fake-maas: could not save the state: {e}");
    }
}

/// The parts of a request the dispatcher reads.
struct ApiRequest<'a> {
    method: &'a str,
    path: &'a str,
    query: &'a str,
    content_type: &'a str,
    body: &'a [u8],
}

/// The resources, with their path parameters.
#[derive(Debug, PartialEq, Eq)]
enum Resource<'a> {
    Version,
    Machines,
    Machine(&'a str),
    Nodes,
    Node(&'a str),
    BlockDevices(&'a str),
    BlockDevice(&'a str, &'a str),
    Interfaces(&'a str),
    Interface(&'a str, &'a str),
    Subnets,
    Subnet(&'a str),
    Events,
    RackControllers,
    Users,
    /// `/maas/`: server settings.
    Maas,
}

impl Resource<'_> {
    /// The methods the resource takes for something.
    fn methods(&self) -> &'static [&'static str] {
        match self {
            Resource::Version | Resource::Events | Resource::RackControllers | Resource::Users => &["GET"],
            Resource::Maas => &["GET", "POST"],
            Resource::Machines | Resource::Nodes | Resource::Subnets => &["GET", "POST"],
            Resource::BlockDevices(_) | Resource::Interfaces(_) => &["GET", "POST"],
            Resource::BlockDevice(..) | Resource::Interface(..) => &["GET", "POST"],
            Resource::Machine(_) => &["GET", "POST", "PUT", "DELETE"],
            Resource::Node(_) | Resource::Subnet(_) => &["GET", "DELETE"],
        }
    }

    /// Whether unsigned requests reach a handler (else they are challenged with 401).
    fn has_anonymous_handler(&self) -> bool {
        matches!(self, Resource::Version | Resource::Machines | Resource::Nodes)
    }
}

fn parse_resource<'a>(segments: &[&'a str]) -> Option<Resource<'a>> {
    Some(match segments {
        ["version"] => Resource::Version,
        ["machines"] => Resource::Machines,
        ["machines", id] => Resource::Machine(id),
        ["nodes"] => Resource::Nodes,
        ["nodes", id] => Resource::Node(id),
        ["nodes", id, "blockdevices"] => Resource::BlockDevices(id),
        ["nodes", id, "blockdevices", b] => Resource::BlockDevice(id, b),
        ["nodes", id, "interfaces"] => Resource::Interfaces(id),
        ["nodes", id, "interfaces", n] => Resource::Interface(id, n),
        ["subnets"] => Resource::Subnets,
        ["subnets", id] => Resource::Subnet(id),
        ["events"] => Resource::Events,
        ["rackcontrollers"] => Resource::RackControllers,
        ["users"] => Resource::Users,
        ["maas"] => Resource::Maas,
        _ => return None,
    })
}

fn version_json() -> Value {
    json!({
        "capabilities": ["networks-management", "static-ipaddresses", "ipv6-deployment-ubuntu", "devices-management",
                         "storage-deployment-ubuntu", "network-deployment-ubuntu", "bridging-interface-ubuntu",
                         "bridging-automatic-ubuntu", "authenticate-api"],
        "version": VERSION,
        "subversion": "",
    })
}

fn rack_json() -> Value {
    json!({
        "system_id": RACK_ID, "hostname": "maas-rack", "fqdn": "maas-rack.maas", "version": VERSION,
        "node_type": 2, "node_type_name": "Rack controller", "architecture": "amd64/generic", "cpu_count": 8,
        "memory": 16384, "power_state": "unknown", "ip_addresses": ["127.0.0.1"], "interface_set": [],
        "domain": {"name": "maas", "id": 0}, "zone": {"name": "default"}, "tag_names": [],
        "service_set": [{"name": "rackd", "status": "running", "status_info": ""},
                        {"name": "dhcpd", "status": "running", "status_info": ""}],
        "resource_uri": format!("/MAAS/api/2.0/rackcontrollers/{RACK_ID}/"),
    })
}

/// Dispatches one API request.
fn api(world: &mut World, r: &ApiRequest<'_>, authorization: Option<&str>, now: Millis) -> Reply {
    if r.path == "/MAAS/api/version/" {
        return if r.method == "GET" { Reply::text(200, "2.0") } else { Reply::text(405, "").with_header("allow", "GET") };
    }
    if r.path.starts_with("/MAAS/api/1.0/") {
        return Reply::text(410, "The 1.0 API is no longer available. Please use API version 2.0.");
    }
    let Some(rest) = r.path.strip_prefix("/MAAS/api/2.0/") else { return Reply::text(404, "Not Found") };
    let mut segments: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    let suffix_op = segments.last().and_then(|s| s.strip_prefix("op-")).map(str::to_owned);
    if suffix_op.is_some() {
        segments.pop();
    }
    let Some(res) = parse_resource(&segments) else { return Reply::text(404, "Not Found") };

    let mut params = Params::from_query(r.query);
    if r.method != "GET" {
        params.extend(Params::from_body(r.content_type, r.body));
    }
    let op = suffix_op.or_else(|| params.get("op").map(str::to_owned));
    let op = op.as_deref();

    let tokens = world.machine_tokens();
    let caller = match auth::authenticate(authorization, &params, &world.keys, &tokens, &mut world.nonces, now) {
        Ok(c) => c,
        Err(reply) => return reply,
    };
    if caller == Caller::Anonymous && !res.has_anonymous_handler() {
        return Reply::text(401, "Forbidden").with_header("www-authenticate", "OAuth realm=\"OAuth\"");
    }
    if !res.methods().contains(&r.method) {
        return Reply::text(405, "").with_header("allow", res.methods().join(", "));
    }
    let unrecognised = || Reply::unrecognised(r.method, op);
    let user = match caller {
        Caller::User(u) => u,
        Caller::Anonymous => return anonymous(world, &res, r.method, op, &params, now),
    };
    let machine = |world: &World, id: &str| world.find(id).ok_or_else(|| Reply::not_found("Machine"));
    let result: Result<Reply, Reply> = (|| {
        Ok(match (&res, r.method, op) {
            (Resource::Version, "GET", _) => Reply::ok(&version_json()),
            (Resource::Machines | Resource::Nodes, "GET", None) => machines::list(world, &params),
            (Resource::Machines, "GET", Some("power_parameters")) => machines::power_parameters(world, &params),
            (Resource::Machines, "GET", Some("is_registered")) => machines::is_registered(world, &params, false),
            (Resource::Machines, "GET", Some("is_action_in_progress")) => machines::is_registered(world, &params, true),
            (Resource::Machines, "POST", None) => machines::create(world, &params, Some(&user), now),
            (Resource::Machines, "POST", Some("accept")) => machines::accept(world, &params, &user, now),
            (Resource::Machines, "POST", Some("release")) => machines::bulk_release(world, &params, &user, now),
            (Resource::Machines, "POST", Some("allocate")) => machines::allocate(world, &params, &user, now),
            (Resource::Machine(id) | Resource::Node(id), "GET", None) => Reply::ok(&world.machine_json(machine(world, id)?)),
            (Resource::Machine(id), "GET", Some(op)) => {
                let i = machine(world, id)?;
                ops::get_op(world, i, op).unwrap_or_else(unrecognised)
            }
            (Resource::Machine(id), "POST", Some(op)) => {
                let i = machine(world, id)?;
                ops::post_op(world, i, op, &params, &user, now).unwrap_or_else(unrecognised)
            }
            (Resource::Machine(id), "PUT", None) => machines::update(world, machine(world, id)?, &params),
            (Resource::Machine(id) | Resource::Node(id), "DELETE", None) => machines::delete(world, machine(world, id)?),
            (Resource::BlockDevices(id), "GET", None) => devices::list_disks(world, machine(world, id)?),
            (Resource::BlockDevice(id, b), "GET", None) => devices::read_disk(world, machine(world, id)?, b),
            (Resource::BlockDevice(id, b), "POST", Some("set_boot_disk")) => devices::set_boot_disk(world, machine(world, id)?, b),
            (Resource::Interfaces(id), "GET", None) => devices::list_interfaces(world, machine(world, id)?),
            (Resource::Interface(id, n), "GET", None) => devices::read_interface(world, machine(world, id)?, n),
            (Resource::Interface(id, n), "POST", Some("link_subnet")) => devices::link_subnet(world, machine(world, id)?, n, &params),
            (Resource::Interface(id, n), "POST", Some("unlink_subnet")) => devices::unlink_subnet(world, machine(world, id)?, n, &params),
            (Resource::Subnets, "GET", None) => subnets::list(world),
            (Resource::Subnets, "POST", None) => subnets::create(world, &params),
            (Resource::Subnet(id), "GET", None) => subnets::read(world, id),
            (Resource::Subnet(id), "DELETE", None) => subnets::delete(world, id),
            (Resource::Events, "GET", Some("query")) => events::query(world, &params),
            (Resource::RackControllers, "GET", None) => Reply::ok(&json!([rack_json()])),
            (Resource::Maas, "POST", Some("set_config")) => super::config::set_config(world, &params),
            (Resource::Maas, "GET", Some("get_config")) => super::config::get_config(world, &params),
            (Resource::Users, "GET", Some("whoami")) => Reply::ok(&json!({
                "username": user, "email": format!("{user}@example.com"), "is_superuser": true, "is_local": true,
                "sshkeys_count": 0, "resource_uri": format!("/MAAS/api/2.0/users/{user}/"),
            })),
            _ => unrecognised(),
        })
    })();
    result.unwrap_or_else(|r| r)
}

/// The anonymous handlers of `/machines/` and `/nodes/` (and the version).
fn anonymous(world: &mut World, res: &Resource<'_>, method: &str, op: Option<&str>, params: &Params, now: Millis) -> Reply {
    match (res, method, op) {
        (Resource::Version, "GET", _) => Reply::ok(&version_json()),
        (Resource::Machines, "GET", Some("is_registered")) => machines::is_registered(world, params, false),
        (Resource::Machines, "GET", Some("is_action_in_progress")) => machines::is_registered(world, params, true),
        (Resource::Machines, "POST", None) => machines::create(world, params, None, now),
        (Resource::Machines, "POST", Some("accept")) => Reply::text(401, "You must be logged in to accept machines."),
        _ => Reply::unrecognised(method, op),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_and_methods() {
        assert_eq!(parse_resource(&["machines", "abc"]), Some(Resource::Machine("abc")));
        assert_eq!(parse_resource(&["nodes", "abc", "blockdevices", "7"]), Some(Resource::BlockDevice("abc", "7")));
        assert_eq!(parse_resource(&["nope"]), None);
        assert!(!Resource::Machines.methods().contains(&"PUT"));
        assert!(!Resource::Events.methods().contains(&"POST"));
        assert!(Resource::Machines.has_anonymous_handler() && !Resource::Events.has_anonymous_handler());
    }

    #[test]
    fn dispatch_rules_without_http() {
        let mut w = World::for_tests();
        let call = |w: &mut World, method: &str, path: &str, query: &str| {
            let r = ApiRequest { method, path, query, content_type: "", body: b"" };
            api(w, &r, None, now_millis())
        };
        let r = call(&mut w, "GET", "/MAAS/api/2.0/machines/", "");
        assert_eq!((r.status, r.body.as_slice()), (400, b"Unrecognised signature: method=GET op=None".as_slice()));
        assert_eq!(call(&mut w, "GET", "/MAAS/api/2.0/events/", "op=query").status, 401);
        assert_eq!(call(&mut w, "PUT", "/MAAS/api/2.0/machines/", "").status, 405);
        assert_eq!(call(&mut w, "GET", "/MAAS/api/2.0/version/", "").status, 200);
        assert_eq!(call(&mut w, "GET", "/MAAS/api/version/", "").body, b"2.0");
        assert_eq!(call(&mut w, "GET", "/MAAS/api/1.0/machines/", "").status, 410);
        let r = call(&mut w, "POST", "/MAAS/api/2.0/machines/", "op=accept");
        assert_eq!((r.status, r.body.as_slice()), (401, b"You must be logged in to accept machines.".as_slice()));
    }
}
