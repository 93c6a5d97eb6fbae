//! Checks of every value that reaches the rendered user data, and the deploy password's
//! SHA-512 crypt hash.
//!
//! Each check names the field it refused (the [`super::FirstBoot`] path, e.g.
//! `roce[1].interface`). A non-secret value may be quoted back (cut to 80 characters); a
//! secret never is. Every accepted value keeps to an alphabet with no shell metacharacter, no
//! quote, no whitespace and no newline, so it can neither bend the YAML/JSON document nor a
//! script line — and the scripts single-quote it anyway.

use std::net::Ipv4Addr;

use drover_proto::task::Secret;
use sha_crypt::{Sha512Params, sha512_crypt_b64};

use super::CloudInitError;

/// Rounds of SHA-512 crypt for the deploy password (glibc's default is 5,000; more rounds make
/// an offline guess of a leaked user data dearer).
pub const PASSWORD_HASH_ROUNDS: usize = 100_000;

/// The crypt alphabet of salts (`./0-9A-Za-z`).
const CRYPT_ALPHABET: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

pub(crate) fn bad(field: impl Into<String>, message: impl Into<String>) -> CloudInitError {
    CloudInitError { field: field.into(), message: message.into() }
}

fn cut(s: &str) -> String {
    s.chars().take(80).collect()
}

/// A hostname: lowercase RFC 1123 labels (the same rule as enrollment's).
pub fn hostname(field: &str, v: &str) -> Result<(), CloudInitError> {
    drover_proto::names::check_hostname(v)
        .map_err(|_| bad(field, format!("{:?} is not a hostname (lowercase RFC 1123 labels, at most 253 characters)", cut(v))))
}

/// A Linux interface name, narrowed to `[A-Za-z0-9._-]{1,15}`, not starting with `-` or `.`.
pub fn iface(field: &str, v: &str) -> Result<(), CloudInitError> {
    let ok =
        (1..=15).contains(&v.len()) && !v.starts_with(['-', '.']) && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(bad(field, format!("{:?} is not an interface name (1-15 characters of A-Z a-z 0-9 . _ -, not starting with - or .)", cut(v))))
    }
}

/// A POSIX user name (the site's deploy user): `[a-z_][a-z0-9_-]{0,31}`; `root` refused.
pub fn user(field: &str, v: &str) -> Result<(), CloudInitError> {
    let ok = (1..=32).contains(&v.len())
        && v.bytes().next().is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && v.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-".contains(&b));
    if !ok {
        return Err(bad(field, format!("{:?} is not a user name (lowercase letters, digits, _ and -, at most 32)", cut(v))));
    }
    if v == "root" {
        return Err(bad(field, "the deploy user cannot be root"));
    }
    Ok(())
}

/// `https://host[:port]/path` of plain URL characters: the site bundle's reference. No
/// credentials, query or fragment (nothing in it is secret, so it may be shown and recorded).
pub fn https_url(field: &str, v: &str) -> Result<(), CloudInitError> {
    let refuse = |why: &str| Err(bad(field, format!("{:?} must be https://host[:port]/path of plain URL characters: {why}", cut(v))));
    if v.len() > 512 {
        return refuse("too long");
    }
    let Some(rest) = v.strip_prefix("https://") else {
        return refuse("only https is fetched");
    };
    let Some(slash) = rest.find('/') else {
        return refuse("no path");
    };
    let (authority, path) = rest.split_at(slash);
    if let Err(why) = authority_ok(authority) {
        return refuse(why);
    }
    if path.len() < 2 || !path.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._~:@+-".contains(&b)) {
        return refuse("path");
    }
    Ok(())
}

/// `host[:port]`: a DNS name or IPv4 address, or a bracketed IPv6 address.
fn authority_ok(authority: &str) -> Result<(), &'static str> {
    let port = if let Some(inner) = authority.strip_prefix('[') {
        let (h, rest) = inner.split_once(']').ok_or("host")?;
        if h.is_empty() || !h.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.') {
            return Err("host");
        }
        match rest {
            "" => None,
            r => Some(r.strip_prefix(':').ok_or("host")?),
        }
    } else {
        let (h, p) = match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        };
        if h.is_empty() || h.starts_with(['-', '.']) || !h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.') {
            return Err("host (no credentials; letters, digits, - and . only)");
        }
        p
    };
    if let Some(p) = port
        && (p.is_empty()
            || p.len() > 5
            || !p.bytes().all(|b| b.is_ascii_digit())
            || p.parse::<u32>().map_or(true, |n| n == 0 || n > 65_535))
    {
        return Err("port");
    }
    Ok(())
}

/// MAAS's base URL, by the rule `node.hw_sync_reseed` applies on the host
/// (`http(s)://host[:port][/path]` of plain URL characters): what the agent would refuse is
/// refused here, before it is baked into a deployment.
pub fn maas_url(field: &str, v: &str) -> Result<(), CloudInitError> {
    let refuse = |why: &str| Err(bad(field, format!("{:?} must be http(s)://host[:port][/path]: {why}", cut(v))));
    if v.len() > 512 {
        return refuse("too long");
    }
    let Some(rest) = v.strip_prefix("https://").or_else(|| v.strip_prefix("http://")) else {
        return refuse("scheme");
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    if let Err(why) = authority_ok(authority) {
        return refuse(why);
    }
    if !path.bytes().all(|b| b.is_ascii_alphanumeric() || b"/-._~%".contains(&b)) {
        return refuse("path");
    }
    Ok(())
}

/// MAAS's system id shape, `[a-z0-9]{1,32}` (the agent's rule).
pub fn system_id(field: &str, v: &str) -> Result<(), CloudInitError> {
    if v.is_empty() || v.len() > 32 || !v.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()) {
        return Err(bad(field, format!("{:?} is not a MAAS system id ([a-z0-9]{{1,32}})", cut(v))));
    }
    Ok(())
}

/// A MAAS OAuth value: 1–256 printable ASCII characters without spaces (the agent's rule).
/// The message never shows the value.
pub fn token_secret(field: &str, v: &Secret) -> Result<(), CloudInitError> {
    let v = v.expose();
    if v.is_empty() || v.len() > 256 || !v.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad(field, "must be 1 to 256 printable ASCII characters without spaces (value not shown)"));
    }
    Ok(())
}

/// The agent bootstrap command: one line of printable ASCII, at most 4 KiB. It is the
/// coordinator's own `drover_proto::enroll::bootstrap_command`, whose parts keep to closed
/// alphabets; this check keeps the line from breaking the script it is put in. The message
/// never shows the value (it holds the enrollment token).
pub fn bootstrap_command(field: &str, v: &Secret) -> Result<(), CloudInitError> {
    let v = v.expose();
    if v.trim().is_empty() || v.len() > 4096 || !v.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(bad(field, "must be one line of 1 to 4096 printable ASCII characters (value not shown)"));
    }
    Ok(())
}

/// 64 lowercase hex digits.
pub fn sha256_hex(field: &str, v: &str) -> Result<(), CloudInitError> {
    if drover_proto::names::is_sha256_hex(v) {
        Ok(())
    } else {
        Err(bad(field, format!("{:?} is not a sha256 (64 lowercase hex digits)", cut(v))))
    }
}

/// A whole disk named by a stable id: `/dev/disk/by-id/<name>` with `<name>` of
/// `[A-Za-z0-9._:+-]`, not a partition (`…-partN`).
pub fn disk_id(field: &str, v: &str) -> Result<(), CloudInitError> {
    let Some(name) = v.strip_prefix("/dev/disk/by-id/") else {
        return Err(bad(
            field,
            format!("{:?} must be a stable /dev/disk/by-id/ path (never sdX or nvmeXnY names, which move between boots)", cut(v)),
        ));
    };
    let ok = (1..=200).contains(&name.len())
        && !name.starts_with(['.', '-'])
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._:+-".contains(&b));
    if !ok {
        return Err(bad(field, format!("{:?}: the id must be 1-200 characters of A-Z a-z 0-9 . _ : + -", cut(v))));
    }
    if let Some((_, n)) = name.rsplit_once("-part")
        && !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(bad(field, format!("{:?} is a partition; name the whole disk", cut(v))));
    }
    Ok(())
}

/// An IPv4 interface address `a.b.c.d/p` (prefix 1–32); for prefixes up to 30, neither the
/// network nor the broadcast address. Returns the address and the prefix.
pub fn ipv4_cidr(field: &str, v: &str) -> Result<(Ipv4Addr, u8), CloudInitError> {
    let refuse = |why: &str| Err(bad(field, format!("{:?} is not an IPv4 interface address (a.b.c.d/prefix): {why}", cut(v))));
    let Some((addr, prefix)) = v.split_once('/') else {
        return refuse("no prefix");
    };
    // `Ipv4Addr`'s parser takes only the strict dotted-quad form (no leading zeros).
    let Ok(addr) = addr.parse::<Ipv4Addr>() else {
        return refuse("address");
    };
    let Some(prefix) = prefix.parse::<u8>().ok().filter(|p| (1..=32).contains(p) && !prefix.starts_with('0')) else {
        return refuse("the prefix must be 1-32");
    };
    if prefix <= 30 {
        let host_bits = u32::from(addr) & !mask(prefix);
        if host_bits == 0 || host_bits == !mask(prefix) {
            return refuse("the network or broadcast address of its subnet");
        }
    }
    Ok((addr, prefix))
}

/// The netmask of a prefix length (1–32).
pub fn mask(prefix: u8) -> u32 {
    u32::MAX << (32 - u32::from(prefix.clamp(1, 32)))
}

/// A crypt salt: 1–16 characters of `./0-9A-Za-z`.
pub fn salt(field: &str, v: &str) -> Result<(), CloudInitError> {
    if (1..=16).contains(&v.len()) && v.bytes().all(|b| CRYPT_ALPHABET.contains(&b)) {
        Ok(())
    } else {
        Err(bad(field, format!("{:?} is not a crypt salt (1-16 characters of ./0-9A-Za-z; draw 16 with salt_from_bytes)", cut(v))))
    }
}

/// A 16-character crypt salt from 12 random bytes (6 bits per character): the caller draws the
/// bytes (the renderer takes no randomness of its own).
pub fn salt_from_bytes(bytes: &[u8; 12]) -> String {
    let mut bits: u128 = 0;
    for &b in bytes {
        bits = (bits << 8) | u128::from(b);
    }
    (0..16).rev().map(|i| char::from(CRYPT_ALPHABET[((bits >> (6 * i)) & 0x3f) as usize])).collect()
}

/// The deploy password as a SHA-512 crypt string, `$6$rounds=N$<salt>$<hash>`, which
/// cloud-init's `users[].passwd` takes as is. The password must be 1–1024 bytes without NUL
/// (crypt(3) stops at a NUL); the error never shows it.
pub fn hash_password(field: &str, password: &Secret, salt_value: &str) -> Result<Secret, CloudInitError> {
    let pw = password.expose();
    if pw.is_empty() || pw.len() > 1024 || pw.contains('\0') {
        return Err(bad(field, "must be 1 to 1024 bytes without NUL (value not shown)"));
    }
    salt("deploy_user.salt", salt_value)?;
    let params = Sha512Params::new(PASSWORD_HASH_ROUNDS).map_err(|_| bad(field, "unsupported hash rounds"))?;
    let hash = sha512_crypt_b64(pw.as_bytes(), salt_value.as_bytes(), &params).map_err(|_| bad(field, "cannot hash the password"))?;
    Ok(Secret::new(format!("$6$rounds={PASSWORD_HASH_ROUNDS}${salt_value}${hash}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha512_crypt_matches_the_reference_vector() {
        // Ulrich Drepper's SHA-crypt specification, SHA-512 test 2 ("Hello world!",
        // rounds=10000, salt "saltstringsaltst").
        let params = Sha512Params::new(10_000).expect("rounds");
        let hash = sha512_crypt_b64(b"Hello world!", b"saltstringsaltst", &params).expect("hash");
        assert_eq!(hash, "OW1/O6BYHV6BcXZu8QVeXbDWra3Oeqh0sbHbbMCVNSnCM/UrjmM0Dp8vOuZeHBy/YTBmSK6H9qs/y3RnOaw5v.");
        let ours = hash_password("p", &Secret::new("Hello world!"), "saltstringsaltst").expect("hash");
        assert!(ours.expose().starts_with("$6$rounds=100000$saltstringsaltst$"), "{}", ours.expose());
        assert_eq!(ours.expose().rsplit('$').next().map(str::len), Some(86));
    }

    #[test]
    fn password_and_salt_rules() {
        assert_eq!(hash_password("deploy_user.password", &Secret::new(""), "abc").expect_err("empty").field, "deploy_user.password");
        let e = hash_password("deploy_user.password", &Secret::new("a\0b-sekrit"), "abc").expect_err("nul");
        assert!(!e.to_string().contains("sekrit"), "{e}");
        assert_eq!(hash_password("p", &Secret::new("pw"), "a$b").expect_err("salt").field, "deploy_user.salt");
        assert_eq!(hash_password("p", &Secret::new("pw"), "abcdefghijklmnopq").expect_err("long salt").field, "deploy_user.salt");
        let s = salt_from_bytes(&[0xff; 12]);
        assert_eq!(s, "zzzzzzzzzzzzzzzz");
        assert_eq!(salt_from_bytes(&[0; 12]), "................");
        let s = salt_from_bytes(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        assert!(salt("s", &s).is_ok() && s.len() == 16, "{s}");
    }

    #[test]
    fn names_and_interfaces() {
        assert!(hostname("h", "gpu-07.rack3").is_ok());
        for h in ["", "GPU", "a;b", "a b", "a$(id)", "-a", "a..b", "a\nb"] {
            assert_eq!(hostname("hostname", h).expect_err(h).field, "hostname");
        }
        for i in ["enp62s0np0", "eth0.100", "ib_0", "bond-1"] {
            assert!(iface("i", i).is_ok(), "{i}");
        }
        for i in ["", "eth0;reboot", "a b", "a'b", "$(x)", "-x", ".x", "a/b", "a:b", "abcdefghijklmnop", "a`b`", "a|b"] {
            assert!(iface("i", i).is_err(), "{i}");
        }
        assert!(user("u", "hpcadmin").is_ok());
        for u in ["root", "Admin", "a;b", "", "1a"] {
            assert!(user("u", u).is_err(), "{u}");
        }
    }

    #[test]
    fn urls() {
        for u in ["https://infra.example/bundles/site-a@v3.sh", "https://10.0.0.5:8443/b/boot.sh", "https://[fd00::1]/x"] {
            assert!(https_url("u", u).is_ok(), "{u}");
        }
        for u in [
            "http://infra.example/b.sh",
            "https://infra.example",
            "https://infra.example/",
            "https://user:pw@infra.example/b.sh",
            "https://infra.example/b.sh?x=1",
            "https://infra.example/b.sh#f",
            "https://infra.example/$(id)",
            "https://infra.example/a;b",
            "https://infra.example/a'b",
            "https://infra.example/a b",
            "https://infra.example:99999/b",
            "site-a/bootstrap:v3",
            "file:///etc/passwd",
        ] {
            assert_eq!(https_url("site_bundle.url", u).expect_err(u).field, "site_bundle.url");
        }
        for u in ["http://10.0.0.2:5240/MAAS", "https://maas.example", "http://[fd00::2]:5240/MAAS"] {
            assert!(maas_url("m", u).is_ok(), "{u}");
        }
        for u in ["ftp://m", "http://m/MAAS'", "http://u@m/", "http://m/a b", "http://m:0/"] {
            assert!(maas_url("m", u).is_err(), "{u}");
        }
    }

    #[test]
    fn disks_and_addresses() {
        assert!(disk_id("d", "/dev/disk/by-id/nvme-SAMSUNG_MZQL23T8HCLS-00A07_S64HNE0T123456").is_ok());
        assert!(disk_id("d", "/dev/disk/by-id/wwn-0x5000c500a1b2c3d4").is_ok());
        for d in [
            "/dev/sda",
            "/dev/nvme0n1",
            "/dev/disk/by-id/",
            "/dev/disk/by-id/../sda",
            "/dev/disk/by-id/wwn-0x5-part1",
            "/dev/disk/by-id/a;b",
            "/dev/disk/by-id/a b",
        ] {
            assert!(disk_id("d", d).is_err(), "{d}");
        }
        assert_eq!(ipv4_cidr("c", "172.30.9.61/31").expect("cidr"), (Ipv4Addr::new(172, 30, 9, 61), 31));
        assert_eq!(ipv4_cidr("c", "172.30.9.61/32").expect("cidr").1, 32);
        assert!(ipv4_cidr("c", "10.0.0.1/24").is_ok());
        for c in [
            "10.0.0.0/24",
            "10.0.0.255/24",
            "10.0.0.1",
            "10.0.0.1/33",
            "10.0.0.1/0",
            "10.0.0.1/024",
            "010.0.0.1/24",
            "fe80::1/64",
            "10.0.0.1/24;x",
        ] {
            assert!(ipv4_cidr("c", c).is_err(), "{c}");
        }
        assert_eq!(mask(31), 0xffff_fffe);
        assert_eq!(mask(32), u32::MAX);
    }

    #[test]
    fn secrets_are_never_echoed() {
        let e = token_secret("hw_sync.token_secret", &Secret::new("has space-sekrit")).expect_err("space");
        assert!(!e.to_string().contains("sekrit"));
        let e = bootstrap_command("agent_bootstrap", &Secret::new("curl x\ntoken-sekrit")).expect_err("newline");
        assert!(!e.to_string().contains("sekrit") && e.field == "agent_bootstrap");
    }
}
