//! The machine state machine as pure functions: given an operation and what MAAS looks at
//! (status, owner, power, the caller), each answers the statuses the machine walks through
//! or MAAS's refusal with its exact status code and text. No HTTP, no clock, no storage:
//! the op handlers apply the answer, and every single step is checked once more against
//! the transition table ([`step`]), so a bug here surfaces as MAAS's own
//! `Invalid transition` 409 rather than a silently impossible machine.

use super::status::{Power, Status};

/// What an operation looks at.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// The machine's system_id (some refusals name it).
    pub system_id: &'a str,
    /// Its status.
    pub status: Status,
    /// Its owner's username.
    pub owner: Option<&'a str>,
    /// Its power state.
    pub power: Power,
    /// Whether its power type can be queried (a `manual` or absent power type cannot).
    pub power_queryable: bool,
    /// How many interfaces it has.
    pub interfaces: usize,
    /// The status it had before it was marked broken.
    pub before_broken: Option<Status>,
    /// Whether it ever passed commissioning (release ends in Ready, else New).
    pub commissioned: bool,
}

/// MAAS's refusal of an operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// 409 text/plain (`NodeStateViolation` and friends).
    Conflict(String),
    /// 400 JSON `{field: [message]}` (a form error; `__all__` when tied to no field).
    Form(&'static str, String),
    /// 400 text/plain.
    BadRequest(String),
    /// 403 text/plain, usually empty.
    Forbidden(String),
}

/// One status change, checked against MAAS's transition table.
pub fn step(from: Status, to: Status) -> Result<(), Refusal> {
    if from.may_become(to) { Ok(()) } else { Err(Refusal::Conflict(format!("Invalid transition: {} -> {}.", from.label(), to.label()))) }
}

/// Where a release ends: Ready, or New for a machine that never passed commissioning.
pub fn released_status(commissioned: bool) -> Status {
    if commissioned { Status::Ready } else { Status::New }
}

/// Whether a status change clears the owner (MAAS clears it on New and Ready).
pub fn clears_owner(to: Status) -> bool {
    matches!(to, Status::New | Status::Ready)
}

/// `op=commission`: New, Failed commissioning, Ready and Broken go to Commissioning. A
/// wrong state is a form error (400 `__all__`), not a 409: it goes through MAAS's form.
pub fn commission(v: &View) -> Result<Status, Refusal> {
    let allowed = matches!(v.status, Status::New | Status::FailedCommissioning | Status::Ready | Status::Broken);
    if !allowed || v.interfaces == 0 {
        return Err(Refusal::Form("__all__", "Commission is not available because of the current state of the node.".into()));
    }
    Ok(Status::Commissioning)
}

/// `op=deploy`: Ready is allocated to the caller first, Allocated deploys as it is.
pub fn deploy(v: &View, caller: &str) -> Result<Vec<Status>, Refusal> {
    match v.status {
        Status::Ready => {
            if v.owner.is_some_and(|o| o != caller) {
                return Err(Refusal::Conflict("Can't allocate a machine belonging to another user.".into()));
            }
            Ok(vec![Status::Allocated, Status::Deploying])
        }
        Status::Allocated => Ok(vec![Status::Deploying]),
        other => Err(Refusal::Conflict(format!("Can't deploy a machine that is in the '{}' state", other.label()))),
    }
}

/// What `op=release` does to one machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleasePlan {
    /// Ready or already Releasing: a successful no-op.
    NoOp,
    /// Releasing, waiting for the power to go off.
    Wait,
    /// Disk erasing (the machine boots to erase its disks).
    Erase,
    /// Releasing, finished at once because the power is already off or cannot be queried.
    AtOnce(Status),
}

/// `op=release` on one machine; `erase` is true when any erase flag was given.
pub fn release(v: &View, erase: bool) -> Result<ReleasePlan, Refusal> {
    if matches!(v.status, Status::Ready | Status::Releasing) {
        return Ok(ReleasePlan::NoOp);
    }
    if !v.status.is_releasable() {
        return Err(Refusal::Conflict(format!("Machine cannot be released in its current state ('{}').", v.status.label())));
    }
    Ok(if erase {
        ReleasePlan::Erase
    } else if v.power == Power::Off || !v.power_queryable {
        ReleasePlan::AtOnce(released_status(v.commissioned))
    } else {
        ReleasePlan::Wait
    })
}

/// `POST /machines/?op=release` on one machine: Ready is skipped (`None`), and unlike the
/// per-machine op, Releasing is refused. The refusal names the machine as the collection's
/// 409 lists it: `<system_id> ('<Label>')`.
pub fn bulk_release(v: &View) -> Result<Option<ReleasePlan>, Refusal> {
    match v.status {
        Status::Ready => Ok(None),
        s if s.is_releasable() => release(v, false).map(Some),
        s => Err(Refusal::Conflict(format!("{} ('{}')", v.system_id, s.label()))),
    }
}

/// Where an in-flight status goes when it completes successfully.
pub fn completes_to(v: &View) -> Option<Status> {
    Some(match v.status {
        Status::Commissioning | Status::Testing => Status::Ready,
        Status::Deploying => Status::Deployed,
        Status::Releasing | Status::DiskErasing => released_status(v.commissioned),
        Status::EnteringRescueMode => Status::RescueMode,
        Status::ExitingRescueMode => v.before_broken.unwrap_or(Status::Ready),
        _ => return None,
    })
}

/// `op=abort`.
pub fn abort(v: &View) -> Result<Status, Refusal> {
    match v.status {
        Status::Commissioning => Ok(Status::New),
        Status::Deploying => Ok(Status::Allocated),
        Status::DiskErasing => Ok(Status::FailedDiskErasing),
        Status::Testing => Ok(Status::Ready),
        other => Err(Refusal::Conflict(format!("Cannot abort in current state: node {} is in state {}.", v.system_id, other.label()))),
    }
}

/// `POST /machines/?op=accept` on one machine: `Some(Commissioning)` when it moves,
/// `None` when it is skipped silently.
pub fn accept(v: &View) -> Result<Option<Status>, Refusal> {
    match v.status {
        Status::New => Ok(Some(Status::Commissioning)),
        Status::Ready | Status::Commissioning => Ok(None),
        other => Err(Refusal::Conflict(format!("Cannot accept node enlistment: node {} is in state {}.", v.system_id, other.label()))),
    }
}

/// `op=power_on`: refused on an unowned machine; on an Allocated one it starts a deployment.
pub fn power_on(v: &View) -> Result<Option<Status>, Refusal> {
    if v.owner.is_none() {
        return Err(Refusal::Conflict("Can't start node: it hasn't been allocated.".into()));
    }
    Ok((v.status == Status::Allocated).then_some(Status::Deploying))
}

/// `op=mark_broken`: only the owner may, even an admin may not (so unowned machines cannot
/// be marked broken through the API).
pub fn mark_broken(v: &View, caller: &str) -> Result<Status, Refusal> {
    if v.owner != Some(caller) {
        return Err(Refusal::Forbidden(String::new()));
    }
    Ok(Status::Broken)
}

/// `op=mark_fixed`: Broken goes back to Ready, or to Deployed when it broke while deployed.
pub fn mark_fixed(v: &View) -> Result<Status, Refusal> {
    if v.status != Status::Broken {
        return Err(Refusal::Conflict("Can't mark a non-broken node as 'Ready'.".into()));
    }
    Ok(if v.before_broken == Some(Status::Deployed) { Status::Deployed } else { Status::Ready })
}

/// `op=set_storage_layout`: Ready only.
pub fn set_storage_layout(v: &View) -> Result<(), Refusal> {
    if v.status == Status::Ready {
        Ok(())
    } else {
        Err(Refusal::Conflict("Cannot change the storage layout on a machine that is not Ready.".into()))
    }
}

/// `op=set_boot_disk` on a block device: Ready only.
pub fn set_boot_disk(v: &View) -> Result<(), Refusal> {
    if v.status == Status::Ready {
        Ok(())
    } else {
        Err(Refusal::Conflict("Cannot set as boot disk because the machine is not Ready.".into()))
    }
}

/// `op=link_subnet` / `op=unlink_subnet` (`verb` is `link` or `unlink`).
pub fn edit_links(v: &View, verb: &str) -> Result<(), Refusal> {
    match v.status {
        Status::New | Status::Ready | Status::FailedTesting | Status::Allocated | Status::Broken => Ok(()),
        _ => Err(Refusal::Conflict(format!("Cannot {verb} subnet interface because the machine is not New, Ready, Allocated, or Broken."))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Status::*;

    fn view(status: Status) -> View<'static> {
        View {
            system_id: "abc123",
            status,
            owner: None,
            power: Power::On,
            power_queryable: true,
            interfaces: 1,
            before_broken: None,
            commissioned: true,
        }
    }

    fn owned(status: Status, owner: &'static str) -> View<'static> {
        View { owner: Some(owner), ..view(status) }
    }

    #[test]
    fn illegal_steps_are_maas_409() {
        assert_eq!(step(Ready, Deploying), Err(Refusal::Conflict("Invalid transition: Ready -> Deploying.".into())));
        assert_eq!(step(Ready, Allocated), Ok(()));
        assert_eq!(step(Allocated, Deploying), Ok(()));
    }

    #[test]
    fn commission_states() {
        for s in [New, FailedCommissioning, Ready, Broken] {
            assert_eq!(commission(&view(s)), Ok(Commissioning));
        }
        let refusal = Refusal::Form("__all__", "Commission is not available because of the current state of the node.".into());
        for s in [Deployed, Deploying, Allocated, Commissioning, Releasing] {
            assert_eq!(commission(&view(s)), Err(refusal.clone()), "{s:?}");
        }
        assert_eq!(commission(&View { interfaces: 0, ..view(New) }), Err(refusal));
    }

    #[test]
    fn deploy_walks_through_allocated() {
        assert_eq!(deploy(&view(Ready), "u"), Ok(vec![Allocated, Deploying]));
        assert_eq!(deploy(&owned(Allocated, "other"), "u"), Ok(vec![Deploying]));
        assert_eq!(deploy(&view(New), "u"), Err(Refusal::Conflict("Can't deploy a machine that is in the 'New' state".into())));
        assert_eq!(
            deploy(&view(FailedDeployment), "u"),
            Err(Refusal::Conflict("Can't deploy a machine that is in the 'Failed deployment' state".into()))
        );
        assert!(matches!(deploy(&owned(Ready, "other"), "u"), Err(Refusal::Conflict(t)) if t.contains("another user")));
        // Every step of the plan is legal.
        let mut at = Ready;
        for s in deploy(&view(Ready), "u").unwrap() {
            step(at, s).unwrap();
            at = s;
        }
    }

    #[test]
    fn release_plans() {
        assert_eq!(release(&view(Ready), false), Ok(ReleasePlan::NoOp));
        assert_eq!(release(&view(Releasing), true), Ok(ReleasePlan::NoOp));
        assert_eq!(release(&view(Deployed), false), Ok(ReleasePlan::Wait));
        assert_eq!(release(&view(Deployed), true), Ok(ReleasePlan::Erase));
        assert_eq!(release(&View { power: Power::Off, ..view(Deployed) }, false), Ok(ReleasePlan::AtOnce(Ready)));
        assert_eq!(release(&View { power_queryable: false, commissioned: false, ..view(Allocated) }, false), Ok(ReleasePlan::AtOnce(New)));
        for s in [New, Commissioning, FailedCommissioning, DiskErasing, Testing] {
            assert_eq!(
                release(&view(s), false),
                Err(Refusal::Conflict(format!("Machine cannot be released in its current state ('{}').", s.label())))
            );
        }
        for code in 0..23u8 {
            let s = Status::from_code(code).unwrap();
            if s.is_releasable() {
                assert!(step(s, Releasing).is_ok() && step(s, DiskErasing).is_ok(), "{s:?}");
            }
        }
        assert_eq!(bulk_release(&view(Ready)), Ok(None));
        assert_eq!(bulk_release(&view(Releasing)), Err(Refusal::Conflict("abc123 ('Releasing')".into())));
        assert_eq!(bulk_release(&view(Deployed)), Ok(Some(ReleasePlan::Wait)));
    }

    #[test]
    fn completion_failure_and_abort() {
        assert_eq!(completes_to(&view(Commissioning)), Some(Ready));
        assert_eq!(completes_to(&view(Deploying)), Some(Deployed));
        assert_eq!(completes_to(&view(Releasing)), Some(Ready));
        assert_eq!(completes_to(&View { commissioned: false, ..view(DiskErasing) }), Some(New));
        assert_eq!(completes_to(&view(Deployed)), None);
        for s in [Commissioning, Deploying, Releasing, DiskErasing] {
            step(s, completes_to(&view(s)).unwrap()).unwrap();
            step(s, s.failed().unwrap()).unwrap();
        }
        assert_eq!(abort(&view(Commissioning)), Ok(New));
        assert_eq!(abort(&view(Deploying)), Ok(Allocated));
        assert_eq!(abort(&view(DiskErasing)), Ok(FailedDiskErasing));
        assert_eq!(abort(&view(Ready)), Err(Refusal::Conflict("Cannot abort in current state: node abc123 is in state Ready.".into())));
    }

    #[test]
    fn accept_power_broken_fixed() {
        assert_eq!(accept(&view(New)), Ok(Some(Commissioning)));
        assert_eq!(accept(&view(Ready)), Ok(None));
        assert!(accept(&view(Deployed)).is_err());
        assert_eq!(power_on(&view(Ready)), Err(Refusal::Conflict("Can't start node: it hasn't been allocated.".into())));
        assert_eq!(power_on(&owned(Allocated, "u")), Ok(Some(Deploying)));
        assert_eq!(power_on(&owned(Deployed, "u")), Ok(None));
        assert_eq!(mark_broken(&view(Ready), "admin"), Err(Refusal::Forbidden(String::new())));
        assert_eq!(mark_broken(&owned(Deployed, "u"), "u"), Ok(Broken));
        assert_eq!(mark_fixed(&View { before_broken: Some(Deployed), ..view(Broken) }), Ok(Deployed));
        assert_eq!(mark_fixed(&view(Broken)), Ok(Ready));
        assert_eq!(mark_fixed(&view(Ready)), Err(Refusal::Conflict("Can't mark a non-broken node as 'Ready'.".into())));
        assert!(clears_owner(New) && clears_owner(Ready) && !clears_owner(Deployed));
    }

    #[test]
    fn ready_only_edits() {
        assert_eq!(set_storage_layout(&view(Ready)), Ok(()));
        assert!(set_storage_layout(&view(Deployed)).is_err());
        assert_eq!(set_boot_disk(&view(Ready)), Ok(()));
        assert_eq!(set_boot_disk(&view(New)), Err(Refusal::Conflict("Cannot set as boot disk because the machine is not Ready.".into())));
        assert_eq!(edit_links(&view(Allocated), "link"), Ok(()));
        assert!(matches!(edit_links(&view(Deployed), "unlink"), Err(Refusal::Conflict(t)) if t.starts_with("Cannot unlink subnet")));
    }
}
