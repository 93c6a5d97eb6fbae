//! Host selectors: which hosts a wave or a disruption budget covers.
//!
//! A selector is a JSON object whose present fields must all hold (`tags` all of, `tagsAny`
//! any of, `hosts`, `channel`, `all`, `not`, `and`). Budgets from different rollouts are the
//! same budget exactly when their *canonical* selectors are equal, so normalisation (sorted,
//! deduplicated lists) lives here and nowhere else.

use serde::{Deserialize, Serialize};

use crate::canonical;

/// A predicate over hosts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Selector {
    /// The host carries every one of these tags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    /// The host carries at least one of these tags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags_any: Option<Vec<String>>,
    /// The host is one of these hostnames.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<String>>,
    /// The host follows this channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// `true`: every host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all: Option<bool>,
    /// The host does not match this selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not: Option<Box<Selector>>,
    /// The host matches every one of these selectors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub and: Option<Vec<Selector>>,
}

/// What a selector is matched against.
pub trait Selectable {
    /// The hostname.
    fn hostname(&self) -> &str;
    /// Whether the host carries `tag`.
    fn has_tag(&self, tag: &str) -> bool;
    /// The host's channel.
    fn channel(&self) -> &str;
}

/// Why a selector says nothing, or says it wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// No field at all.
    #[error("selector is empty (use {{\"all\": true}} to select every host)")]
    Empty,
    /// `all` given as false.
    #[error("selector field \"all\" may only be true")]
    AllFalse,
    /// A list field given empty (it would silently match nothing).
    #[error("selector field {field:?} is an empty list")]
    EmptyList {
        /// The field.
        field: &'static str,
    },
}

impl Selector {
    /// Whether `host` matches.
    pub fn matches<H: Selectable + ?Sized>(&self, host: &H) -> bool {
        self.tags.as_ref().is_none_or(|t| t.iter().all(|t| host.has_tag(t)))
            && self.tags_any.as_ref().is_none_or(|t| t.iter().any(|t| host.has_tag(t)))
            && self.hosts.as_ref().is_none_or(|h| h.iter().any(|h| h == host.hostname()))
            && self.channel.as_ref().is_none_or(|c| c == host.channel())
            && self.all.is_none_or(|a| a)
            && self.not.as_ref().is_none_or(|n| !n.matches(host))
            && self.and.as_ref().is_none_or(|a| a.iter().all(|s| s.matches(host)))
    }

    /// Checks the selector says something: at least one field, `all` only as `true`, no
    /// empty lists (an empty `tagsAny` would silently match nothing).
    pub fn check(&self) -> Result<(), SelectorError> {
        let fields = [
            self.tags.is_some(),
            self.tags_any.is_some(),
            self.hosts.is_some(),
            self.channel.is_some(),
            self.all.is_some(),
            self.not.is_some(),
            self.and.is_some(),
        ];
        if !fields.iter().any(|f| *f) {
            return Err(SelectorError::Empty);
        }
        if self.all == Some(false) {
            return Err(SelectorError::AllFalse);
        }
        for (name, list) in [("tags", &self.tags), ("tagsAny", &self.tags_any), ("hosts", &self.hosts)] {
            if list.as_ref().is_some_and(|l| l.is_empty()) {
                return Err(SelectorError::EmptyList { field: name });
            }
        }
        if self.and.as_ref().is_some_and(|l| l.is_empty()) {
            return Err(SelectorError::EmptyList { field: "and" });
        }
        if let Some(n) = &self.not {
            n.check()?;
        }
        for s in self.and.iter().flatten() {
            s.check()?;
        }
        Ok(())
    }

    /// The normal form: lists sorted and deduplicated, recursively.
    pub fn normalized(&self) -> Selector {
        let norm = |l: &Option<Vec<String>>| {
            l.as_ref().map(|l| {
                let mut l = l.clone();
                l.sort();
                l.dedup();
                l
            })
        };
        Selector {
            tags: norm(&self.tags),
            tags_any: norm(&self.tags_any),
            hosts: norm(&self.hosts),
            channel: self.channel.clone(),
            all: self.all,
            not: self.not.as_ref().map(|n| Box::new(n.normalized())),
            and: self.and.as_ref().map(|a| {
                // `and` is commutative: order its members by their own canonical text.
                // Normalise each member once and take its text from that (normalising twice
                // per level would double the work with every level of nesting).
                let mut members: Vec<(String, Selector)> = a
                    .iter()
                    .map(|s| {
                        let n = s.normalized();
                        (canonical_text(&n), n)
                    })
                    .collect();
                members.sort_by(|x, y| x.0.cmp(&y.0));
                members.dedup_by(|x, y| x.0 == y.0);
                members.into_iter().map(|(_, s)| s).collect()
            }),
        }
    }

    /// The canonical text budgets are matched by across rollouts: JCS of the normal form.
    pub fn canonical(&self) -> String {
        canonical_text(&self.normalized())
    }
}

/// JCS text of a selector already in normal form.
fn canonical_text(normalized: &Selector) -> String {
    // A selector holds only strings, booleans and nested selectors, which always have a
    // canonical form; the fallback is unreachable but keeps this infallible.
    canonical::to_vec_of(normalized).ok().and_then(|b| String::from_utf8(b).ok()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct H(&'static str, &'static [&'static str], &'static str);
    impl Selectable for H {
        fn hostname(&self) -> &str {
            self.0
        }
        fn has_tag(&self, tag: &str) -> bool {
            self.1.contains(&tag)
        }
        fn channel(&self) -> &str {
            self.2
        }
    }

    fn sel(json: &str) -> Selector {
        serde_json::from_str(json).expect("selector")
    }

    #[test]
    fn fields_combine_as_and() {
        let h = H("gpu-1", &["gpu", "rack-a"], "stable");
        assert!(sel(r#"{"tags":["gpu","rack-a"],"channel":"stable"}"#).matches(&h));
        assert!(!sel(r#"{"tags":["gpu","rack-b"]}"#).matches(&h));
        assert!(sel(r#"{"tagsAny":["rack-b","rack-a"]}"#).matches(&h));
        assert!(sel(r#"{"not":{"hosts":["gpu-2"]}}"#).matches(&h));
        assert!(!sel(r#"{"and":[{"all":true},{"channel":"edge"}]}"#).matches(&h));
    }

    #[test]
    fn canonical_form_ignores_order_and_duplicates() {
        assert_eq!(sel(r#"{"tags":["b","a","a"]}"#).canonical(), sel(r#"{"tags":["a","b"]}"#).canonical());
        assert_ne!(sel(r#"{"tags":["a"]}"#).canonical(), sel(r#"{"tagsAny":["a"]}"#).canonical());
        assert_eq!(
            sel(r#"{"and":[{"channel":"x"},{"tags":["b","a"]}]}"#).canonical(),
            sel(r#"{"and":[{"tags":["a","b"]},{"channel":"x"}]}"#).canonical()
        );
    }

    #[test]
    fn deeply_nested_and_normalises_in_linear_time() {
        // Each level used to normalise its members twice: 2^depth work. 48 levels would
        // take days that way; linear, it takes microseconds.
        let mut s = sel(r#"{"tags":["b","a"]}"#);
        for _ in 0..48 {
            s = Selector { and: Some(vec![s, sel(r#"{"all":true}"#)]), ..Selector::default() };
        }
        // Wait for the result with a bound, so a regression fails instead of hanging.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(s.canonical()));
        let text = rx.recv_timeout(std::time::Duration::from_secs(30)).expect("normalisation did not finish: not linear in depth");
        assert!(text.contains(r#"["a","b"]"#));
    }

    #[test]
    fn empty_selectors_are_refused() {
        assert!(sel("{}").check().is_err());
        assert!(sel(r#"{"all":false}"#).check().is_err());
        assert!(sel(r#"{"tagsAny":[]}"#).check().is_err());
        assert!(sel(r#"{"not":{}}"#).check().is_err());
        assert!(serde_json::from_str::<Selector>(r#"{"tag":["x"]}"#).is_err(), "unknown field");
    }
}
