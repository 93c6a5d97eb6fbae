//! The decision core of MAAS workflows (`bare-metal-lifecycle.md` §4): pure functions the
//! onboarding, reimage and decommission jobs decide with, so every rule is unit-tested
//! without MAAS, a store or a clock.
//!
//! - [`taxonomy`]: the failure classes of §4.7 with their default handling and recommended
//!   operator action; the onboarding stages of §4.3 with their compensation (§4.6), re-entry
//!   rules (§4.10) and time limits (§4.14).
//! - [`drift`]: the verdict of §6.4 / §7.3 / §9.1 on a host and its machine (the reconciler's
//!   decision, pure).
//! - [`reconcile`]: one reconciler pass over a site as a plan: store changes in batches,
//!   repair jobs, a report; once per drift, healing by itself, nothing when nothing changed.
//! - [`discovery`]: which MAAS machine an onboarding claims (§4.16), failing closed.
//! - [`inspect`]: the boot disk by the profile's pattern, and datasource-class deploy
//!   failures told apart from the rest.
//! - [`onboard`]: the onboarding's request and read model, failure handling by class and
//!   stage, time limits, domain events.
//! - [`stages`]: each onboarding stage's next step from what MAAS shows now.
//! - [`recovery`]: the operator actions on an onboarding.

pub mod discovery;
pub mod drift;
pub mod inspect;
pub mod onboard;
pub mod reconcile;
pub mod recovery;
pub mod stages;
pub mod taxonomy;
