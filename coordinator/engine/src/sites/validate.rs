//! Validation of what operators send about MAAS sites: every check names the field (in the
//! API's camelCase) and what is wrong with it, so a refusal is a 400 an operator can act on.
//! Values are normalised on the way in (MACs lowercase with colons, addresses canonical,
//! URLs without a trailing slash) so lookups compare like with like.

use std::net::IpAddr;

use crate::store::{ProfilePolicy, SelectorType, SiteConfig};

/// A refused field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// The field, as the API names it.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

fn bad(field: &str, message: impl Into<String>) -> FieldError {
    FieldError { field: field.to_owned(), message: message.into() }
}

/// Names: sites, profiles, region codes — `[A-Za-z0-9._-]{1,64}`, like channel names.
pub fn name(field: &str, v: &str) -> Result<String, FieldError> {
    let v = v.trim();
    if v.is_empty() || v.len() > 64 || !v.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)) {
        return Err(bad(field, format!("{v:?} must be 1-64 characters of A-Z a-z 0-9 . _ -")));
    }
    Ok(v.to_owned())
}

/// A Linux interface name — the same rule the first-boot renderer applies
/// ([`crate::cloudinit::validate::iface`]), so nothing accepted here is refused at deploy.
pub fn iface(field: &str, v: &str) -> Result<String, FieldError> {
    crate::cloudinit::validate::iface(field, v).map_err(from_cloudinit)?;
    Ok(v.to_owned())
}

fn from_cloudinit(e: crate::cloudinit::CloudInitError) -> FieldError {
    FieldError { field: e.field, message: e.message }
}

/// A hostname: RFC 1123 labels, at most 253 characters ([`drover_proto::names::check_hostname`],
/// enrollment's rule); lowercased first.
pub fn hostname(field: &str, v: &str) -> Result<String, FieldError> {
    let v = v.trim().to_ascii_lowercase();
    drover_proto::names::check_hostname(&v).map_err(|_| bad(field, format!("{v:?} is not a hostname")))?;
    Ok(v)
}

/// A MAC address, normalised to lowercase with colons (`-` separators accepted).
pub fn mac(field: &str, v: &str) -> Result<String, FieldError> {
    let parts: Vec<&str> = v.trim().split([':', '-']).collect();
    if parts.len() != 6 || !parts.iter().all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit())) {
        return Err(bad(field, format!("{v:?} is not a MAC address")));
    }
    Ok(parts.join(":").to_ascii_lowercase())
}

/// An IP address, in canonical form.
pub fn ip(field: &str, v: &str) -> Result<String, FieldError> {
    v.trim().parse::<IpAddr>().map(|a| a.to_string()).map_err(|_| bad(field, format!("{v:?} is not an IP address")))
}

/// An IPv4 interface address with prefix, e.g. `172.30.9.61/31` — the renderer's rule
/// ([`crate::cloudinit::validate::ipv4_cidr`]: prefix 1–32, not a network or broadcast
/// address), so an assignment accepted here is one the RoCE unit can apply.
pub fn ipv4_cidr(field: &str, v: &str) -> Result<String, FieldError> {
    let (addr, prefix) = crate::cloudinit::validate::ipv4_cidr(field, v.trim()).map_err(from_cloudinit)?;
    Ok(format!("{addr}/{prefix}"))
}

/// A selector value for its type, normalised.
pub fn selector_value(ty: SelectorType, v: &str) -> Result<String, FieldError> {
    match ty {
        SelectorType::PxeMac => mac("selectorValue", v),
        SelectorType::IpmiIp => ip("selectorValue", v),
        SelectorType::Hostname => hostname("selectorValue", v),
    }
}

/// MAAS's base URL: http or https, a host, no credentials (they would end up in logs), no
/// query or fragment; returned without a trailing slash.
pub fn maas_url(field: &str, v: &str) -> Result<String, FieldError> {
    let url = reqwest::Url::parse(v.trim()).map_err(|e| bad(field, format!("not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad(field, format!("scheme {:?} is not http or https", url.scheme())));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad(field, "the URL has no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad(field, "the URL must not carry credentials (write them with the credentials route)"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad(field, "the URL must not have a query or fragment"));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

fn token(field: &str, v: &str, extra: &[u8]) -> Result<String, FieldError> {
    if v.is_empty() || v.len() > 128 || !v.bytes().all(|b| b.is_ascii_alphanumeric() || extra.contains(&b)) {
        return Err(bad(field, format!("{v:?} must be 1-128 characters of A-Z a-z 0-9 {}", String::from_utf8_lossy(extra))));
    }
    Ok(v.to_owned())
}

/// A POSIX user name.
pub fn user(field: &str, v: &str) -> Result<String, FieldError> {
    let ok = !v.is_empty()
        && v.len() <= 32
        && v.bytes().next().is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && v.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-".contains(&b));
    if !ok {
        return Err(bad(field, format!("{v:?} is not a user name (lowercase letters, digits, _ and -, at most 32)")));
    }
    Ok(v.to_owned())
}

/// PEM CA certificates: at least one, every block parseable.
pub fn ca_pem(field: &str, v: &str) -> Result<String, FieldError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let certs = CertificateDer::pem_slice_iter(v.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(field, format!("malformed PEM: {e}")))?;
    if certs.is_empty() {
        return Err(bad(field, "no PEM certificate found"));
    }
    Ok(v.to_owned())
}

/// A whole site configuration, normalised.
pub fn site_config(c: &SiteConfig) -> Result<SiteConfig, FieldError> {
    if c.upstream_dns_servers.len() > 8 {
        return Err(bad("upstreamDnsServers", "at most 8 resolvers"));
    }
    if c.required_capabilities.len() > 32 {
        return Err(bad("requiredCapabilities", "at most 32 capabilities"));
    }
    if c.pxe_vlan_vid > 4094 {
        return Err(bad("pxeVlanVid", format!("{} is not a VLAN id (0-4094)", c.pxe_vlan_vid)));
    }
    Ok(SiteConfig {
        region_code: name("regionCode", &c.region_code)?,
        api_base_url: maas_url("apiBaseUrl", &c.api_base_url)?,
        pxe_iface: iface("pxeIface", &c.pxe_iface)?,
        pxe_vlan_vid: c.pxe_vlan_vid,
        node_pxe_iface: iface("nodePxeIface", &c.node_pxe_iface)?,
        deploy_user: user("deployUser", &c.deploy_user)?,
        deploy_ssh_iface: iface("deploySshIface", &c.deploy_ssh_iface)?,
        upstream_dns_servers: c
            .upstream_dns_servers
            .iter()
            .enumerate()
            .map(|(i, s)| ip(&format!("upstreamDnsServers[{i}]"), s))
            .collect::<Result<_, _>>()?,
        maas_ca_pem: c.maas_ca_pem.as_deref().map(|p| ca_pem("maasCaPem", p)).transpose()?,
        required_capabilities: c
            .required_capabilities
            .iter()
            .enumerate()
            .map(|(i, s)| token(&format!("requiredCapabilities[{i}]"), s, b"-_."))
            .collect::<Result<_, _>>()?,
    })
}

/// A whole profile policy: names well formed, counts and timeouts in range.
pub fn policy(p: &ProfilePolicy) -> Result<ProfilePolicy, FieldError> {
    let mut out = p.clone();
    out.distro_series = token("distroSeries", &p.distro_series, b"/._-")?;
    out.architecture = token("architecture", &p.architecture, b"/._-")?;
    out.pxe_iface = p.pxe_iface.as_deref().map(|v| iface("pxeIface", v)).transpose()?;
    out.node_pxe_iface = p.node_pxe_iface.as_deref().map(|v| iface("nodePxeIface", v)).transpose()?;
    if p.pxe_vlan_vid.is_some_and(|v| v > 4094) {
        return Err(bad("pxeVlanVid", "not a VLAN id (0-4094)"));
    }
    out.site_bootstrap_bundle_ref =
        p.site_bootstrap_bundle_ref.as_deref().map(|v| token("siteBootstrapBundleRef", v, b"/._:@-")).transpose()?;
    if p.boot_disk_pattern.trim().is_empty() || p.boot_disk_pattern.len() > 64 || p.boot_disk_pattern.chars().any(char::is_control) {
        return Err(bad("bootDiskPattern", "must be 1-64 printable characters"));
    }
    let ranges: [(&str, u64, u64, u64); 9] = [
        ("hardwareSyncIntervalSecs", p.hardware_sync_interval_secs, 60, 86_400),
        ("enrollmentTokenTtlSecs", p.enrollment_token_ttl_secs, 300, 7 * 86_400),
        ("batchMaxParallel", u64::from(p.batch_max_parallel), 1, 1000),
        ("discoveryTimeoutSecs", p.discovery_timeout_secs, 10, 86_400),
        ("commissionTimeoutSecs", p.commission_timeout_secs, 60, 86_400),
        ("deployTimeoutSecs", p.deploy_timeout_secs, 60, 86_400),
        ("hwSyncSeedTimeoutSecs", p.hw_sync_seed_timeout_secs, 10, 86_400),
        ("hwSyncHealthTimeoutSecs", p.hw_sync_health_timeout_secs, 10, 86_400),
        ("enrollmentTimeoutSecs", p.enrollment_timeout_secs, 10, 86_400),
    ];
    for (field, v, lo, hi) in ranges {
        if !(lo..=hi).contains(&v) {
            return Err(bad(field, format!("{v} is out of range ({lo}-{hi})")));
        }
    }
    if p.max_deploy_retry_attempts > 5 {
        return Err(bad("maxDeployRetryAttempts", format!("{} is out of range (0-5)", p.max_deploy_retry_attempts)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_normalised() {
        assert_eq!(mac("m", "AA-BB-cc-dd-EE-ff").expect("mac"), "aa:bb:cc:dd:ee:ff");
        assert_eq!(hostname("h", " C07U31 ").expect("host"), "c07u31");
        assert_eq!(ipv4_cidr("c", "172.30.9.61/31").expect("cidr"), "172.30.9.61/31");
        assert_eq!(maas_url("u", "http://10.0.0.1:5240/MAAS/").expect("url"), "http://10.0.0.1:5240/MAAS");
        assert_eq!(ip("i", "::0001").expect("ip"), "::1");
    }

    #[test]
    fn bad_values_name_the_field() {
        for (e, field) in [
            (ipv4_cidr("items[2].ipv4Cidr", "172.30.9.61").expect_err("no prefix"), "items[2].ipv4Cidr"),
            (ipv4_cidr("c", "172.30.9.61/33").expect_err("prefix"), "c"),
            (ipv4_cidr("c", "172.300.9.61/31").expect_err("octet"), "c"),
            (ipv4_cidr("c", "fe80::1/64").expect_err("v6"), "c"),
            (mac("m", "aa:bb:cc:dd:ee").expect_err("short"), "m"),
            (hostname("h", "-bad").expect_err("dash"), "h"),
            (iface("i", "eth0/1").expect_err("slash"), "i"),
            (maas_url("u", "http://admin:pw@maas/MAAS").expect_err("creds"), "u"),
            (maas_url("u", "ftp://maas/MAAS").expect_err("scheme"), "u"),
            (name("n", "has space").expect_err("space"), "n"),
            (ca_pem("p", "not pem").expect_err("pem"), "p"),
        ] {
            assert_eq!(e.field, field, "{e}");
        }
        let e = maas_url("u", "http://admin:hunter2@maas/MAAS").expect_err("creds");
        assert!(!e.to_string().contains("hunter2"), "a refused URL echoed its password: {e}");
    }

    #[test]
    fn policy_ranges_are_enforced() {
        let mut p = ProfilePolicy::default();
        assert_eq!(policy(&p).expect("defaults are valid"), p);
        p.batch_max_parallel = 0;
        assert_eq!(policy(&p).expect_err("zero").field, "batchMaxParallel");
        p = ProfilePolicy { hardware_sync_interval_secs: 5, ..ProfilePolicy::default() };
        assert_eq!(policy(&p).expect_err("tiny").field, "hardwareSyncIntervalSecs");
    }
}
