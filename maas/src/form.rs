//! Request parameters the way MAAS parses them: `key=value` pairs, lists as repeated keys,
//! booleans as `true`/`false`, and Django checkbox flags sent only when set.
//!
//! MAAS reads many ops' parameters only from form fields, so bodies are never JSON (facts §1).
//! It has two boolean parsers: formencode's `StringBool` (`false`/`0` are false) and Django's
//! checkbox, for which **`0`, `no` and `off` are true** — only absent, empty or `false` is false.
//! [`Params::flag`] therefore omits a false checkbox altogether, which no parser can misread.
//! The same type serves as a GET query string and a POST/PUT form body. It has no `Debug`: a
//! body may hold a power password.

/// Ordered `key=value` parameters.
#[derive(Clone, Default)]
pub struct Params {
    pairs: Vec<(String, String)>,
}

impl Params {
    /// No parameters.
    pub fn new() -> Params {
        Params::default()
    }

    /// Adds `key=value`.
    pub fn text(&mut self, key: &str, value: impl Into<String>) -> &mut Params {
        self.pairs.push((key.to_owned(), value.into()));
        self
    }

    /// Adds `key=value` when there is a value.
    pub fn opt_text(&mut self, key: &str, value: Option<&str>) -> &mut Params {
        if let Some(v) = value {
            self.text(key, v);
        }
        self
    }

    /// Adds `key=v` once per value (MAAS's list convention).
    pub fn list<S: AsRef<str>>(&mut self, key: &str, values: &[S]) -> &mut Params {
        for v in values {
            self.text(key, v.as_ref());
        }
        self
    }

    /// Adds a `StringBool` parameter as `true`/`false`.
    pub fn boolean(&mut self, key: &str, value: bool) -> &mut Params {
        self.text(key, if value { "true" } else { "false" })
    }

    /// Adds a `StringBool` parameter when the caller chose a value.
    pub fn opt_boolean(&mut self, key: &str, value: Option<bool>) -> &mut Params {
        if let Some(v) = value {
            self.boolean(key, v);
        }
        self
    }

    /// A Django checkbox flag: `key=true` when set, nothing at all when not (facts §0e, §0g).
    pub fn flag(&mut self, key: &str, value: bool) -> &mut Params {
        if value {
            self.text(key, "true");
        }
        self
    }

    /// Whether there are no parameters.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// The parameter names, in order (for logs: never the values).
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.pairs.iter().map(|(k, _)| k.as_str())
    }

    /// `application/x-www-form-urlencoded` text of the parameters.
    pub fn encode(&self) -> String {
        // serde_urlencoded cannot fail on a sequence of string pairs; the fallback keeps this
        // total anyway rather than panicking.
        serde_urlencoded::to_string(&self.pairs).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_repeat_the_key_and_values_are_escaped() {
        let mut p = Params::new();
        p.list("mac_addresses", &["52:54:00:00:00:01", "52:54:00:00:00:02"]).text("hostname", "gpu 01&x=y");
        assert_eq!(
            p.encode(),
            "mac_addresses=52%3A54%3A00%3A00%3A00%3A01&mac_addresses=52%3A54%3A00%3A00%3A00%3A02&hostname=gpu+01%26x%3Dy"
        );
        assert_eq!(p.keys().collect::<Vec<_>>(), ["mac_addresses", "mac_addresses", "hostname"]);
    }

    #[test]
    fn checkbox_flags_are_true_or_absent() {
        let mut p = Params::new();
        p.flag("erase", true).flag("secure_erase", false).flag("force", false);
        assert_eq!(p.encode(), "erase=true");
        let mut none = Params::new();
        none.flag("erase", false);
        assert!(none.is_empty());
        assert_eq!(none.encode(), "");
    }

    #[test]
    fn string_bools_are_words() {
        let mut p = Params::new();
        p.boolean("enable_hw_sync", true).boolean("commission", false).opt_boolean("managed", None).opt_boolean("allow_dns", Some(false));
        assert_eq!(p.encode(), "enable_hw_sync=true&commission=false&allow_dns=false");
    }

    #[test]
    fn optional_text_is_skipped_when_absent() {
        let mut p = Params::new();
        p.opt_text("comment", None).opt_text("distro_series", Some("jammy"));
        assert_eq!(p.encode(), "distro_series=jammy");
    }
}
