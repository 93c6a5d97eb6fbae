//! The small executor every task shares: run planned steps in order, stop at the first
//! error, report each later step as skipped ("not run"), and fold the step results into the
//! task's outcome.

use drover_proto::report::{StepOutcome, StepResult, TaskOutcome};
use serde_json::Value;

/// What one step did.
#[derive(Debug, Clone, PartialEq)]
pub struct Done {
    /// Ok, error, or skipped (nothing to do).
    pub outcome: StepOutcome,
    /// One line for humans.
    pub message: String,
    /// Structured detail (bytes freed, residues found, …).
    pub data: Value,
}

impl Done {
    /// The step did its work.
    pub fn ok(message: impl Into<String>) -> Self {
        Done { outcome: StepOutcome::Ok, message: message.into(), data: Value::Null }
    }

    /// The step found nothing to do (an idempotent re-run).
    pub fn skipped(message: impl Into<String>) -> Self {
        Done { outcome: StepOutcome::Skipped, message: message.into(), data: Value::Null }
    }

    /// The step failed; the task stops here.
    pub fn error(message: impl Into<String>) -> Self {
        Done { outcome: StepOutcome::Error, message: message.into(), data: Value::Null }
    }

    /// The same, with structured detail.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = data;
        self
    }
}

/// A planned step: its name in the result, and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step<A> {
    /// The name reported (`query-gpus`, `reset 0000:3b:00.0`, …).
    pub name: String,
    /// The action, interpreted by the task's executor.
    pub action: A,
}

impl<A> Step<A> {
    /// A step.
    pub fn new(name: impl Into<String>, action: A) -> Self {
        Step { name: name.into(), action }
    }
}

/// Runs `plan` in order with `run`; after the first error every remaining step is reported
/// skipped with "not run: step … failed", so a result always lists the whole plan.
pub fn execute<A>(plan: &[Step<A>], mut run: impl FnMut(&A) -> Done) -> Vec<StepResult> {
    let mut out = Vec::with_capacity(plan.len());
    let mut failed: Option<&str> = None;
    for step in plan {
        let done = match failed {
            Some(f) => Done::skipped(format!("not run: step {f} failed")),
            None => run(&step.action),
        };
        if failed.is_none() && done.outcome == StepOutcome::Error {
            failed = Some(step.name.as_str());
        }
        out.push(StepResult { name: step.name.clone(), outcome: done.outcome, message: done.message, data: done.data });
    }
    out
}

/// The task's outcome from its steps: failed if any step failed.
pub fn outcome(steps: &[StepResult]) -> TaskOutcome {
    if steps.iter().any(|s| s.outcome == StepOutcome::Error) { TaskOutcome::Failed } else { TaskOutcome::Succeeded }
}

/// A one-step result for a task that could not even be planned (its facts could not be read).
pub fn not_planned(name: &str, message: impl Into<String>) -> Vec<StepResult> {
    vec![StepResult { name: name.to_owned(), outcome: StepOutcome::Error, message: message.into(), data: Value::Null }]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_error_stops_the_plan_and_later_steps_are_reported_not_run() {
        let plan = vec![Step::new("a", 1), Step::new("b", 2), Step::new("c", 3)];
        let mut ran = Vec::new();
        let steps = execute(&plan, |n| {
            ran.push(*n);
            if *n == 2 { Done::error("boom") } else { Done::ok("fine") }
        });
        assert_eq!(ran, vec![1, 2], "nothing runs after a failure");
        let outcomes: Vec<StepOutcome> = steps.iter().map(|s| s.outcome).collect();
        assert_eq!(outcomes, vec![StepOutcome::Ok, StepOutcome::Error, StepOutcome::Skipped]);
        assert_eq!(steps[2].message, "not run: step b failed");
        assert_eq!(outcome(&steps), TaskOutcome::Failed);
    }

    #[test]
    fn skipped_steps_do_not_fail_a_task() {
        let plan = vec![Step::new("a", ()), Step::new("b", ())];
        let steps = execute(&plan, |_| Done::skipped("nothing to do"));
        assert_eq!(outcome(&steps), TaskOutcome::Succeeded);
    }
}
