//! Unit tests of the planner: a fixture that builds snapshots and plays the executor and the
//! agents, and one test per rule. Every plan made here goes through the invariant checker.

mod channels;
mod fixture;
mod lifecycle;
mod rules;
mod safety;
mod stragglers;
