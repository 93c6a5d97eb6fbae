//! `GET /v1/openapi.json` (anonymous): an OpenAPI 3.1 description of the whole API, built from
//! the route table ([`super::openapi_routes::ROUTES`]) — each route's method, path, who may
//! call it (the `mutualTLS` scheme, with the role it needs), its query parameters and whether
//! it takes a JSON body — and the API's error shape, which every 4xx and 5xx answer has.
//!
//! Success bodies are described by their content type only, for now; the error shape is
//! exact, so a client (or schemathesis) can hold every refusal to it.

use std::sync::OnceLock;

use axum::body::Bytes;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone (enrollment, health, the bootstrap downloads).
    Anonymous,
    /// An enrolled host's certificate.
    Host,
    /// An operator certificate, viewer or admin.
    Viewer,
    /// An admin operator certificate.
    Admin,
    /// A publisher (CI) or admin certificate.
    Publisher,
}

impl Access {
    fn describe(self) -> &'static str {
        match self {
            Access::Anonymous => "anonymous: no client certificate",
            Access::Host => "an enrolled host's client certificate",
            Access::Viewer => "an operator client certificate (viewer or admin)",
            Access::Admin => "an admin operator client certificate",
            Access::Publisher => "a publisher (CI) or admin client certificate",
        }
    }
}

/// A query parameter's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    /// Text.
    Str,
    /// An integer.
    Int,
    /// `true` or `false`.
    Bool,
}

/// One route as the description gives it.
#[derive(Debug, Clone, Copy)]
pub struct RouteDoc {
    /// `GET`, `POST`, …
    pub method: &'static str,
    /// The path template (`/v1/hosts/{id}`).
    pub path: &'static str,
    /// Who may call it.
    pub access: Access,
    /// The handler (`module::function`), the operation's id.
    pub handler: &'static str,
    /// Whether it takes a JSON body.
    pub body: bool,
    /// Its query parameters, all optional.
    pub query: &'static [(&'static str, Ty)],
    /// One line.
    pub summary: &'static str,
}

/// The content type of a route's successful answer.
fn success_content(path: &str) -> Value {
    match path {
        "/metrics" | "/healthz" => json!({ "text/plain": { "schema": { "type": "string" } } }),
        "/v1/bootstrap.sh" => json!({ "text/x-shellscript": { "schema": { "type": "string" } } }),
        "/v1/ca.crt" => json!({ "application/x-pem-file": { "schema": { "type": "string" } } }),
        "/v1/agent/binary" => json!({ "application/octet-stream": { "schema": { "type": "string", "contentEncoding": "binary" } } }),
        "/v1/agent/package.deb" => {
            json!({ "application/vnd.debian.binary-package": { "schema": { "type": "string", "contentEncoding": "binary" } } })
        }
        "/v1/events/stream" => json!({ "text/event-stream": { "schema": { "type": "string" } } }),
        _ => json!({ "application/json": { "schema": {} } }),
    }
}

/// A path parameter's schema: the ids of hosts, jobs, tasks, tokens and maintenance requests
/// are UUIDs (anything else is a 400 before a look-up); the rest are names.
fn path_schema(path: &str, name: &str) -> Value {
    let uuid =
        name == "id" && ["/v1/hosts/", "/v1/jobs/", "/v1/tasks/", "/v1/tokens/", "/v1/maintenance/"].iter().any(|p| path.starts_with(p));
    if uuid { json!({ "type": "string", "format": "uuid" }) } else { json!({ "type": "string" }) }
}

/// The description, from [`super::openapi_routes::ROUTES`].
pub fn document() -> Value {
    let mut paths: Map<String, Value> = Map::new();
    for r in super::openapi_routes::ROUTES {
        let mut parameters: Vec<Value> = r
            .path
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .map(|name| json!({ "name": name, "in": "path", "required": true, "schema": path_schema(r.path, name) }))
            .collect();
        for (name, ty) in r.query {
            let schema = match ty {
                Ty::Str if matches!(*name, "host" | "job" | "hostId" | "batch") => json!({ "type": "string", "format": "uuid" }),
                Ty::Str => json!({ "type": "string" }),
                Ty::Int => json!({ "type": "integer" }),
                Ty::Bool => json!({ "type": "boolean" }),
            };
            parameters.push(json!({ "name": name, "in": "query", "required": false, "schema": schema }));
        }
        let mut op = json!({
            "operationId": r.handler.replace("::", "_"),
            "summary": r.summary,
            "description": format!("Caller: {}.", r.access.describe()),
            "parameters": parameters,
            "responses": {
                "2XX": { "description": "Done.", "content": success_content(r.path) },
                "4XX": { "$ref": "#/components/responses/Error" },
                "5XX": { "$ref": "#/components/responses/Error" }
            },
        });
        op["security"] = match r.access {
            Access::Anonymous => json!([]),
            _ => json!([{ "clientCertificate": [] }]),
        };
        if r.body {
            op["requestBody"] = json!({ "required": false, "content": { "application/json": { "schema": { "type": "object" } } } });
        }
        let entry = paths.entry(r.path.to_owned()).or_insert_with(|| json!({}));
        entry[r.method.to_ascii_lowercase()] = op;
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Drover coordinator API",
            "version": drover_proto::version::VERSION,
            "description": "Every route of the coordinator, over TLS 1.3. Bodies are JSON with camelCase keys; every refusal has the error shape below.",
        },
        "paths": paths,
        "components": {
            "securitySchemes": {
                "clientCertificate": { "type": "mutualTLS", "description": "A client certificate from the coordinator's CA: a host's, or an operator's whose role the route needs." }
            },
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {
                        "error": {
                            "type": "object",
                            "required": ["code", "message"],
                            "properties": { "code": { "type": "string" }, "message": { "type": "string" } }
                        }
                    }
                }
            },
            "responses": {
                "Error": {
                    "description": "Refused, with what is wrong.",
                    "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } }
                }
            }
        }
    })
}

/// `GET /v1/openapi.json` (anonymous): built once per process (it is the same for every
/// caller, and an anonymous route should cost nothing to ask for again).
pub async fn openapi() -> Response {
    static BODY: OnceLock<Bytes> = OnceLock::new();
    let body = BODY.get_or_init(|| Bytes::from(document().to_string())).clone();
    ([(CONTENT_TYPE, "application/json")], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_has_one_operation_with_its_path_parameters() {
        let doc = document();
        let paths = doc["paths"].as_object().expect("paths");
        let ops: usize = paths.values().map(|p| p.as_object().map_or(0, Map::len)).sum();
        assert_eq!(ops, super::super::openapi_routes::ROUTES.len(), "one operation per route, none twice");
        let host = &doc["paths"]["/v1/hosts/{id}"]["get"];
        assert_eq!(host["parameters"][0]["name"], "id");
        assert_eq!(host["parameters"][0]["in"], "path");
        let list = &doc["paths"]["/v1/hosts"]["get"];
        assert!(list["parameters"].as_array().expect("params").iter().any(|p| p["name"] == "limit" && p["schema"]["type"] == "integer"));
        assert_eq!(doc["paths"]["/healthz"]["get"]["security"], json!([]));
        let ids: std::collections::BTreeSet<&str> =
            paths.values().flat_map(|p| p.as_object().expect("ops").values().map(|o| o["operationId"].as_str().expect("id"))).collect();
        assert_eq!(ids.len(), ops, "operation ids are unique");
    }
}
