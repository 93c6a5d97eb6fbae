//! Request bodies decoded as the API describes them: where the type is a struct, the JSON is
//! an object.
//!
//! serde's derived `Deserialize` for a struct also takes the sequence form, filling the fields
//! by position: `POST /v1/racks ["arr-rack","gb200",{},"x"]` created a rack, and a positional
//! array created a MAAS onboarding. Nothing in such a request names what each value is for, so
//! field order silently became part of the contract and a reordered field would take another's
//! value. [`from_slice`] decodes through a thin layer over `serde_json` that refuses an array
//! wherever serde asks for a struct — the body itself and every struct nested in it — and
//! leaves every other decision (types, unknown and missing fields, syntax) to serde_json.
//!
//! How: every `deserialize_*` call, visitor, sequence, map and enum access is wrapped so the
//! layer follows the value all the way down; at `deserialize_struct` the visitor is replaced by
//! one whose `visit_seq` refuses. Internally tagged enums (`#[serde(tag = …)]`, the task and
//! activity catalogs) are recognised by the `expecting` text serde's derive gives them and held
//! to the same rule, since their JSON form is an object too.
//!
//! Limit: serde buffers the content of internally tagged and untagged enums (and of
//! `#[serde(flatten)]` fields) before decoding their fields from that buffer, out of this
//! layer's sight, so a struct reached only through such a buffer is held to serde's own rules.
//! The tagged value itself is still refused as an array; its fields are the only gap.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeOwned, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor};

/// Why a request body was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// A JSON array (or, at a nested struct, any non-object) where the schema has an object.
    #[error("request body{} must be a JSON object (the {shape} shape), not an array", at(path))]
    NotAnObject {
        /// Where, as `serde_path_to_error` spells it (`.` for the body itself).
        path: String,
        /// The shape expected: the type's name.
        shape: String,
    },
    /// Anything else serde_json refused: bad JSON, a wrong type, an unknown or missing field.
    #[error("request body{}: {message}", at(path))]
    Invalid {
        /// Where (`.` for the body itself).
        path: String,
        /// serde_json's message, with its line and column.
        message: String,
    },
}

fn at(path: &str) -> String {
    if path == "." { String::new() } else { format!(" field {path}") }
}

/// Decodes `bytes` as one JSON value of type `T` (and nothing after it), refusing an array
/// wherever `T` has a struct.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, BodyError> {
    let refused = Cell::new(None);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let result = serde_path_to_error::deserialize(Strict { inner: &mut de, refused: &refused });
    let value = result.map_err(|e| {
        let path = e.path().to_string();
        match refused.take() {
            Some(shape) => BodyError::NotAnObject { path, shape },
            None => BodyError::Invalid { path, message: e.into_inner().to_string() },
        }
    })?;
    de.end().map_err(|e| BodyError::Invalid { path: ".".into(), message: e.to_string() })?;
    Ok(value)
}

/// Where the shape of a refused struct is left for [`from_slice`]'s message (the error itself
/// travels through serde as an opaque `serde_json::Error`).
type Refused = Cell<Option<String>>;

/// The text serde's derive gives the visitor of an internally tagged enum.
const INTERNALLY_TAGGED: &str = "internally tagged enum ";

/// A visitor's `expecting`, as text.
struct Expecting<'a, V>(&'a V);

impl<'de, V: Visitor<'de>> fmt::Display for Expecting<'_, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.expecting(f)
    }
}

/// The deserializer layer.
struct Strict<'r, D> {
    inner: D,
    refused: &'r Refused,
}

/// Every visitor handed to the inner deserializer, so the layer reaches nested values.
struct Wrap<'r, V> {
    inner: V,
    refused: &'r Refused,
}

/// The visitor of a struct: a map as serde's would take it, an array refused.
struct Object<'r, V> {
    inner: V,
    shape: Cow<'static, str>,
    refused: &'r Refused,
}

struct Seed<'r, S> {
    inner: S,
    refused: &'r Refused,
}

impl<'r, D> Strict<'r, D> {
    fn wrap<V>(&self, inner: V) -> Wrap<'r, V> {
        Wrap { inner, refused: self.refused }
    }
}

macro_rules! forward_deserialize {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            let v = self.wrap(visitor);
            self.inner.$method(v)
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Strict<'_, D> {
    type Error = D::Error;

    forward_deserialize! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_i128
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128 deserialize_f32
        deserialize_f64 deserialize_char deserialize_str deserialize_string deserialize_bytes
        deserialize_byte_buf deserialize_option deserialize_unit deserialize_seq deserialize_map
        deserialize_identifier deserialize_ignored_any
    }

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        // An internally tagged enum asks for "any" value and would take `["tag", …]`; its JSON
        // form is an object, so it is held to the struct rule under its own name.
        let expecting = Expecting(&visitor).to_string();
        if let Some(name) = expecting.strip_prefix(INTERNALLY_TAGGED) {
            let shape = Cow::Owned(name.to_owned());
            return self.inner.deserialize_any(Object { inner: visitor, shape, refused: self.refused });
        }
        let v = self.wrap(visitor);
        self.inner.deserialize_any(v)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let refused = self.refused;
        self.inner.deserialize_struct(name, fields, Object { inner: visitor, shape: Cow::Borrowed(name), refused })
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(self, name: &'static str, visitor: V) -> Result<V::Value, D::Error> {
        let v = self.wrap(visitor);
        self.inner.deserialize_unit_struct(name, v)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, name: &'static str, visitor: V) -> Result<V::Value, D::Error> {
        let v = self.wrap(visitor);
        self.inner.deserialize_newtype_struct(name, v)
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, D::Error> {
        let v = self.wrap(visitor);
        self.inner.deserialize_tuple(len, v)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(self, name: &'static str, len: usize, visitor: V) -> Result<V::Value, D::Error> {
        let v = self.wrap(visitor);
        self.inner.deserialize_tuple_struct(name, len, v)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let v = self.wrap(visitor);
        self.inner.deserialize_enum(name, variants, v)
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

macro_rules! forward_visit {
    ($($method:ident: $ty:ty)*) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<Self::Value, E> {
            self.inner.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    forward_visit! {
        visit_bool: bool visit_i8: i8 visit_i16: i16 visit_i32: i32 visit_i64: i64 visit_i128: i128
        visit_u8: u8 visit_u16: u16 visit_u32: u32 visit_u64: u64 visit_u128: u128 visit_f32: f32
        visit_f64: f64 visit_char: char visit_str: &str visit_borrowed_str: &'de str visit_string: String
        visit_bytes: &[u8] visit_borrowed_bytes: &'de [u8] visit_byte_buf: Vec<u8>
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.inner.visit_some(Strict { inner: d, refused: self.refused })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.inner.visit_newtype_struct(Strict { inner: d, refused: self.refused })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_seq(Wrap { inner: seq, refused: self.refused })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_map(Wrap { inner: map, refused: self.refused })
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_enum(Wrap { inner: data, refused: self.refused })
    }
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Object<'_, V> {
    type Value = V::Value;

    /// What serde_json's refusal of a string, number, boolean or null here says was expected.
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a JSON object (the {} shape)", self.shape)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_map(Wrap { inner: map, refused: self.refused })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
        // Refused before any element is read: whatever the array holds, and however many.
        self.refused.set(Some(self.shape.clone().into_owned()));
        Err(de::Error::custom(format_args!("must be a JSON object (the {} shape), not an array", self.shape)))
    }
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<'_, S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.inner.deserialize(Strict { inner: d, refused: self.refused })
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Wrap<'_, A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, A::Error> {
        self.inner.next_element_seed(Seed { inner: seed, refused: self.refused })
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Wrap<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, A::Error> {
        self.inner.next_key_seed(Seed { inner: seed, refused: self.refused })
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        self.inner.next_value_seed(Seed { inner: seed, refused: self.refused })
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'r, 'de, A: EnumAccess<'de>> EnumAccess<'de> for Wrap<'r, A> {
    type Error = A::Error;
    type Variant = Wrap<'r, A::Variant>;

    fn variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<(T::Value, Self::Variant), A::Error> {
        let (value, variant) = self.inner.variant_seed(Seed { inner: seed, refused: self.refused })?;
        Ok((value, Wrap { inner: variant, refused: self.refused }))
    }
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Wrap<'_, A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.inner.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        self.inner.newtype_variant_seed(Seed { inner: seed, refused: self.refused })
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.inner.tuple_variant(len, Wrap { inner: visitor, refused: self.refused })
    }

    fn struct_variant<V: Visitor<'de>>(self, fields: &'static [&'static str], visitor: V) -> Result<V::Value, A::Error> {
        // A struct variant has no name of its own here; its visitor's text names it.
        let shape = Cow::Owned(Expecting(&visitor).to_string());
        self.inner.struct_variant(fields, Object { inner: visitor, shape, refused: self.refused })
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct NewRack {
        name: String,
        hardware_type: String,
        #[serde(default)]
        labels: std::collections::BTreeMap<String, String>,
        reason: Option<String>,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Credentials {
        user: String,
        pass: String,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Outer {
        credentials: Option<Credentials>,
        #[serde(default)]
        nodes: Vec<Credentials>,
        #[serde(default)]
        task: Option<Task>,
        #[serde(default)]
        mode: Option<Mode>,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    enum Task {
        Cleanup { scope: String },
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Mode {
        Soft,
        Full { erase: bool },
    }

    fn refused<T: DeserializeOwned + fmt::Debug>(json: &str) -> BodyError {
        from_slice::<T>(json.as_bytes()).expect_err(json)
    }

    #[test]
    fn a_positional_array_is_refused_where_the_body_is_a_struct_whatever_its_arity() {
        let e = refused::<NewRack>(r#"["arr-rack","gb200",{},"x"]"#);
        assert_eq!(e, BodyError::NotAnObject { path: ".".into(), shape: "NewRack".into() });
        assert_eq!(e.to_string(), "request body must be a JSON object (the NewRack shape), not an array");
        for arity in 0..8 {
            let array = serde_json::to_string(&vec!["x"; arity]).expect("json");
            assert!(matches!(refused::<NewRack>(&array), BodyError::NotAnObject { .. }), "{array}");
        }
        // The same request as an object is what it always was.
        let ok: NewRack = from_slice(br#"{"name":"c07","hardwareType":"gb200","reason":"x"}"#).expect("object");
        assert_eq!((ok.name.as_str(), ok.hardware_type.as_str(), ok.reason.as_deref()), ("c07", "gb200", Some("x")));
    }

    #[test]
    fn a_positional_array_is_refused_in_a_nested_struct_and_the_refusal_names_the_field() {
        let e = refused::<Outer>(r#"{"credentials":["admin","secret"]}"#);
        assert_eq!(e.to_string(), "request body field credentials must be a JSON object (the Credentials shape), not an array");
        let e = refused::<Outer>(r#"{"nodes":[{"user":"a","pass":"b"},["c","d"]]}"#);
        assert_eq!(e, BodyError::NotAnObject { path: "nodes[1]".into(), shape: "Credentials".into() });
        let e = refused::<Outer>(r#"{"task":["cleanup","local"]}"#);
        assert_eq!(e, BodyError::NotAnObject { path: "task".into(), shape: "Task".into() });
        let e = refused::<Outer>(r#"{"mode":{"full":[true]}}"#);
        assert_eq!(e.to_string(), "request body field mode.full must be a JSON object (the struct variant Mode::Full shape), not an array");
        let ok: Outer = from_slice(
            br#"{"credentials":null,"nodes":[{"user":"a","pass":"b"}],"task":{"type":"cleanup","scope":"local"},"mode":{"full":{"erase":true}}}"#,
        )
        .expect("objects");
        assert_eq!(ok.nodes, vec![Credentials { user: "a".into(), pass: "b".into() }]);
        assert_eq!((ok.task, ok.mode), (Some(Task::Cleanup { scope: "local".into() }), Some(Mode::Full { erase: true })));
        assert_eq!(from_slice::<Outer>(br#"{"credentials":null,"mode":"soft"}"#).expect("unit variant").mode, Some(Mode::Soft));
    }

    #[test]
    fn a_body_that_really_is_an_array_still_decodes() {
        let rows: Vec<Credentials> = from_slice(br#"[{"user":"a","pass":"b"}]"#).expect("an array of objects");
        assert_eq!(rows.len(), 1);
        let e = refused::<Vec<Credentials>>(r#"[["a","b"]]"#);
        assert_eq!(e, BodyError::NotAnObject { path: "[0]".into(), shape: "Credentials".into() });
        let pair: (String, u8) = from_slice(br#"["a",1]"#).expect("a tuple is an array");
        assert_eq!(pair, ("a".to_owned(), 1));
    }

    #[test]
    fn other_refusals_are_serde_jsons_naming_the_shape_or_the_field() {
        let e = refused::<NewRack>(r#""c07""#).to_string();
        assert!(e.starts_with("request body: invalid type: string \"c07\", expected a JSON object (the NewRack shape)"), "{e}");
        let e = refused::<NewRack>(r#"{"name":"c07"}"#).to_string();
        assert!(e.contains("missing field `hardwareType`"), "{e}");
        let e = refused::<NewRack>(r#"{"name":"c07","hardwareType":"x","colour":"red"}"#).to_string();
        assert!(e.contains("unknown field `colour`"), "{e}");
        let e = refused::<Outer>(r#"{"credentials":{"user":"a","pass":7}}"#).to_string();
        assert!(e.starts_with("request body field credentials.pass: invalid type"), "{e}");
        let e = refused::<NewRack>(r#"{"name":"c07","hardwareType":"x"} {}"#).to_string();
        assert!(e.contains("trailing characters"), "{e}");
        assert!(refused::<NewRack>("").to_string().contains("EOF"));
    }
}
