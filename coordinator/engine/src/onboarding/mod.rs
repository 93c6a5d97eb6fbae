//! MAAS onboarding on the coordinator's job engine (`bare-metal-lifecycle.md` §4): a request
//! becomes a job of kind [`KIND`](crate::maasflow::onboard::KIND) that [`exec`] drives stage
//! by stage against the site's MAAS — decisions in [`crate::maasflow`], MAAS calls and the
//! Drover host in [`perform`], the site, its token and error classes in [`site`].

pub mod exec;
pub mod perform;
pub mod site;
