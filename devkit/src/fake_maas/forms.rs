//! Request parameters as MAAS reads them: the query string for GET, plus the form body for
//! POST/PUT (`application/x-www-form-urlencoded` or `multipart/form-data`, what the `maas`
//! CLI sends). Lists repeat the key. A JSON body is not a form, so its fields are simply
//! absent, as in MAAS. And the two boolean parsers MAAS mixes: formencode's `StringBool`
//! (strict, 400 on anything else) and Django's checkbox (only absent, empty or `false` are
//! false: `0` is true).

use super::reply::Reply;

/// Parameters in the order they came, keys repeated for lists.
#[derive(Debug, Clone, Default)]
pub struct Params {
    pairs: Vec<(String, String)>,
}

impl Params {
    /// Parses a query string.
    pub fn from_query(query: &str) -> Params {
        Params { pairs: serde_urlencoded::from_str::<Vec<(String, String)>>(query).unwrap_or_default() }
    }

    /// Parses a request body by its content type; anything but the two form encodings
    /// yields nothing.
    pub fn from_body(content_type: &str, body: &[u8]) -> Params {
        let ct = content_type.to_ascii_lowercase();
        if ct.starts_with("application/x-www-form-urlencoded") {
            Params { pairs: serde_urlencoded::from_bytes::<Vec<(String, String)>>(body).unwrap_or_default() }
        } else if ct.starts_with("multipart/form-data") {
            Params { pairs: multipart(content_type, body) }
        } else {
            Params::default()
        }
    }

    /// Appends `other`'s pairs.
    pub fn extend(&mut self, other: Params) {
        self.pairs.extend(other.pairs);
    }

    /// All pairs.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// The first value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The first non-empty value of `key`.
    pub fn non_empty(&self, key: &str) -> Option<&str> {
        self.get(key).filter(|v| !v.is_empty())
    }

    /// Every value of `key`.
    pub fn all(&self, key: &str) -> Vec<&str> {
        self.pairs.iter().filter(|(k, _)| k == key).map(|(_, v)| v.as_str()).collect()
    }

    /// Whether `key` was given.
    pub fn has(&self, key: &str) -> bool {
        self.pairs.iter().any(|(k, _)| k == key)
    }

    /// formencode `StringBool`: `None` when absent; 400 text `Invalid <key>: …` when the
    /// value is not one of the known spellings.
    pub fn string_bool(&self, key: &str) -> Result<Option<bool>, Reply> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => {
                parse_string_bool(v).map(Some).ok_or_else(|| Reply::text(400, format!("Invalid {key}: Value should be 'true' or 'false'")))
            }
        }
    }

    /// A Django checkbox: false only when absent, empty or `false` in any case.
    pub fn checkbox(&self, key: &str) -> bool {
        self.get(key).is_some_and(checkbox_value)
    }

    /// An optional integer; 400 JSON `{key: ["Enter a whole number."]}` otherwise.
    pub fn integer(&self, key: &str) -> Result<Option<i64>, Reply> {
        match self.non_empty(key) {
            None => Ok(None),
            Some(v) => v.trim().parse().map(Some).map_err(|_| Reply::field_error(key, "Enter a whole number.")),
        }
    }
}

/// formencode's `StringBool` spellings, case-insensitive; empty is false.
pub fn parse_string_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "t" | "yes" | "y" | "on" | "1" => Some(true),
        "false" | "f" | "no" | "n" | "off" | "0" | "" => Some(false),
        _ => None,
    }
}

/// Django's `CheckboxInput` on a present value: everything but empty and `false` is true.
pub fn checkbox_value(v: &str) -> bool {
    !(v.is_empty() || v.eq_ignore_ascii_case("false"))
}

/// The text fields of a `multipart/form-data` body (file parts are read as text too,
/// which is how MAAS's handlers see `user_data` uploads).
fn multipart(content_type: &str, body: &[u8]) -> Vec<(String, String)> {
    let Some(boundary) = content_type.split(';').map(str::trim).find_map(|p| p.strip_prefix("boundary=")) else {
        return Vec::new();
    };
    let delimiter = format!("--{}", boundary.trim_matches('"'));
    let text = String::from_utf8_lossy(body);
    let mut out = Vec::new();
    for part in text.split(delimiter.as_str()).skip(1) {
        if part.starts_with("--") {
            break;
        }
        let part = part.strip_prefix("\r\n").unwrap_or(part);
        let Some((head, value)) = part.split_once("\r\n\r\n") else { continue };
        let value = value.strip_suffix("\r\n").unwrap_or(value);
        let name = head.lines().find(|l| l.to_ascii_lowercase().starts_with("content-disposition")).and_then(|l| {
            let at = l.find("name=\"")? + 6;
            let end = l[at..].find('"')?;
            Some(l[at..at + end].to_owned())
        });
        if let Some(name) = name {
            out.push((name, value.to_owned()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_and_urlencoded_body_with_repeats() {
        let mut p = Params::from_query("op=deploy&machines=a&machines=b");
        p.extend(Params::from_body("application/x-www-form-urlencoded", b"user_data=aGk%3D&x=1+2"));
        assert_eq!(p.get("op"), Some("deploy"));
        assert_eq!(p.all("machines"), vec!["a", "b"]);
        assert_eq!(p.get("user_data"), Some("aGk="));
        assert_eq!(p.get("x"), Some("1 2"));
    }

    #[test]
    fn json_bodies_are_not_forms() {
        assert!(Params::from_body("application/json", br#"{"op":"deploy"}"#).pairs().is_empty());
    }

    #[test]
    fn multipart_fields() {
        let body = "--XyZ\r\nContent-Disposition: form-data; name=\"distro_series\"\r\n\r\njammy\r\n--XyZ\r\n\
                    Content-Disposition: form-data; name=\"user_data\"; filename=\"u\"\r\nContent-Type: application/octet-stream\r\n\r\n\
                    line1\r\nline2\r\n--XyZ--\r\n";
        let p = Params::from_body("multipart/form-data; boundary=XyZ", body.as_bytes());
        assert_eq!(p.get("distro_series"), Some("jammy"));
        assert_eq!(p.get("user_data"), Some("line1\r\nline2"));
    }

    #[test]
    fn the_two_boolean_parsers() {
        for (v, b) in [("true", true), ("Yes", true), ("1", true), ("on", true), ("0", false), ("F", false), ("", false)] {
            assert_eq!(parse_string_bool(v), Some(b), "{v}");
        }
        assert_eq!(parse_string_bool("maybe"), None);
        let p = Params::from_query("enable_hw_sync=maybe");
        let r = p.string_bool("enable_hw_sync").unwrap_err();
        assert_eq!(r.status, 400);
        assert!(String::from_utf8(r.body).unwrap().starts_with("Invalid enable_hw_sync: "));
        // Django checkboxes: `0`, `no`, `off` are true; absent, empty, `false` are false.
        let p = Params::from_query("erase=0&quick_erase=no&secure_erase=off&force=FALSE&comment=");
        assert!(p.checkbox("erase") && p.checkbox("quick_erase") && p.checkbox("secure_erase"));
        assert!(!p.checkbox("force") && !p.checkbox("comment") && !p.checkbox("absent"));
    }

    #[test]
    fn integers() {
        let p = Params::from_query("limit=5&bad=x&empty=");
        assert_eq!(p.integer("limit").unwrap(), Some(5));
        assert_eq!(p.integer("empty").unwrap(), None);
        assert_eq!(p.integer("bad").unwrap_err().status, 400);
    }
}
