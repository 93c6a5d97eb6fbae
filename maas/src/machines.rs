//! The machine collection and machine records: list (with MAAS's filters), read, create,
//! update, delete, accept, and BMC power parameters.
//!
//! MAAS's list is one unpaged array and refuses any parameter it does not know with a 400
//! (facts §0c), so [`MachineFilter`] offers only MAAS's own filters. There is no filter on the
//! BMC address: machine objects do not carry power parameters, so
//! [`MaasClient::find_by_power_address`] lists and then reads the candidates' power parameters
//! (an admin op).

use std::collections::BTreeMap;

use crate::client::{Call, MaasClient, seg};
use crate::error::MaasError;
use crate::form::Params;
use crate::status::NodeStatus;
use crate::types::{Machine, MachineSummary, PowerParameters};

/// Filters of `GET /machines/`; each list is OR-ed within itself, AND-ed with the others.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineFilter {
    /// `id=`: system ids.
    pub id: Vec<String>,
    /// `hostname=`.
    pub hostname: Vec<String>,
    /// `mac_address=` (MAAS refuses a malformed one with a 400).
    pub mac_address: Vec<String>,
    /// `status=`, sent as MAAS's lowercase constants.
    pub status: Vec<NodeStatus>,
    /// `zone=`.
    pub zone: Vec<String>,
    /// `pool=`.
    pub pool: Vec<String>,
    /// `tags=`.
    pub tags: Vec<String>,
    /// `owner=`.
    pub owner: Vec<String>,
    /// `agent_name=`.
    pub agent_name: Option<String>,
    /// Further raw `name=value` constraints, sent as given (MAAS answers 400
    /// `{"<name>": ["No such constraint."]}` for names it does not know).
    pub extra: Vec<(String, String)>,
}

impl MachineFilter {
    /// The query parameters; an unknown status cannot be sent.
    fn params(&self) -> Result<Params, MaasError> {
        let mut p = Params::new();
        p.list("id", &self.id).list("hostname", &self.hostname).list("mac_address", &self.mac_address);
        for status in &self.status {
            let name = status.filter_name().ok_or_else(|| MaasError::InvalidInput {
                what: format!("cannot filter machines on {status}: MAAS names no such status"),
            })?;
            p.text("status", name);
        }
        p.list("zone", &self.zone).list("pool", &self.pool).list("tags", &self.tags).list("owner", &self.owner);
        p.opt_text("agent_name", self.agent_name.as_deref());
        for (k, v) in &self.extra {
            p.text(k, v.as_str());
        }
        Ok(p)
    }
}

/// `POST /machines/`: a machine MAAS is told about (rather than one that PXE-enlisted).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewMachine {
    /// Hostname (MAAS picks one when absent).
    pub hostname: Option<String>,
    /// `arch/subarch`; required by MAAS unless the power type is `ipmi`.
    pub architecture: Option<String>,
    /// MAC addresses, the PXE one first.
    pub mac_addresses: Vec<String>,
    /// Power driver, e.g. `ipmi`.
    pub power_type: String,
    /// BMC parameters, sent as `power_parameters_<name>` fields (the password never logged).
    pub power_parameters: PowerParameters,
    /// Commission right away (MAAS's default for admins is yes).
    pub commission: Option<bool>,
    /// Free text.
    pub description: Option<String>,
    /// DNS domain.
    pub domain: Option<String>,
}

/// `PUT /machines/{id}/`: only the fields set are changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineUpdate {
    /// New hostname.
    pub hostname: Option<String>,
    /// New description.
    pub description: Option<String>,
    /// New domain.
    pub domain: Option<String>,
    /// New architecture.
    pub architecture: Option<String>,
    /// New power driver.
    pub power_type: Option<String>,
    /// New BMC parameters (`power_parameters_<name>`).
    pub power_parameters: Option<PowerParameters>,
    /// New resource pool.
    pub pool: Option<String>,
    /// New zone.
    pub zone: Option<String>,
    /// New minimum HWE kernel.
    pub min_hwe_kernel: Option<String>,
}

/// Adds `power_parameters_<name>=value` for every parameter.
fn add_power_parameters(p: &mut Params, params: &PowerParameters) {
    for (name, value) in &params.0 {
        p.text(&format!("power_parameters_{name}"), value.as_str());
    }
}

/// `/machines/{id}/`.
pub(crate) fn machine_path(system_id: &str) -> String {
    format!("/machines/{}/", seg(system_id))
}

impl MaasClient {
    /// `GET /machines/`: every machine matching `filter` (MAAS does not page this list).
    pub async fn list_machines(&self, filter: &MachineFilter) -> Result<Vec<Machine>, MaasError> {
        self.json(Call::get("/machines/".to_owned()).query(filter.params()?)).await
    }

    /// `GET /machines/`, each machine reduced to a [`MachineSummary`] (the same call, a
    /// cheaper parse: what a site-wide pass needs).
    pub async fn list_machine_summaries(&self, filter: &MachineFilter) -> Result<Vec<MachineSummary>, MaasError> {
        self.json(Call::get("/machines/".to_owned()).query(filter.params()?)).await
    }

    /// `GET /machines/{id}/`.
    pub async fn read_machine(&self, system_id: &str) -> Result<Machine, MaasError> {
        self.json(Call::get(machine_path(system_id))).await
    }

    /// `POST /machines/` (200 with the machine; admins' machines start Commissioning unless
    /// `commission` is false).
    pub async fn create_machine(&self, new: &NewMachine) -> Result<Machine, MaasError> {
        let mut p = Params::new();
        p.opt_text("hostname", new.hostname.as_deref())
            .opt_text("architecture", new.architecture.as_deref())
            .list("mac_addresses", &new.mac_addresses)
            .text("power_type", new.power_type.as_str());
        add_power_parameters(&mut p, &new.power_parameters);
        p.opt_boolean("commission", new.commission)
            .opt_text("description", new.description.as_deref())
            .opt_text("domain", new.domain.as_deref());
        let call = Call::post("/machines/".to_owned()).form(p).secrets(new.power_parameters.secret_values());
        self.json(call).await
    }

    /// `PUT /machines/{id}/`.
    pub async fn update_machine(&self, system_id: &str, update: &MachineUpdate) -> Result<Machine, MaasError> {
        let mut p = Params::new();
        p.opt_text("hostname", update.hostname.as_deref())
            .opt_text("description", update.description.as_deref())
            .opt_text("domain", update.domain.as_deref())
            .opt_text("architecture", update.architecture.as_deref())
            .opt_text("power_type", update.power_type.as_deref());
        if let Some(params) = &update.power_parameters {
            add_power_parameters(&mut p, params);
        }
        p.opt_text("pool", update.pool.as_deref())
            .opt_text("zone", update.zone.as_deref())
            .opt_text("min_hwe_kernel", update.min_hwe_kernel.as_deref());
        let secrets: Vec<String> =
            update.power_parameters.iter().flat_map(|pp| pp.secret_values().map(str::to_owned).collect::<Vec<_>>()).collect();
        let call = Call::put(machine_path(system_id), p).secrets(secrets.iter().map(String::as_str));
        self.json(call).await
    }

    /// `DELETE /machines/{id}/` (MAAS answers 204).
    pub async fn delete_machine(&self, system_id: &str) -> Result<(), MaasError> {
        self.empty(Call::delete(machine_path(system_id))).await.map(drop)
    }

    /// `POST /machines/?op=accept`: New machines start commissioning; the answer lists the
    /// machines actually moved (Ready or Commissioning ones are skipped silently).
    pub async fn accept(&self, system_ids: &[String]) -> Result<Vec<Machine>, MaasError> {
        let mut p = Params::new();
        p.list("machines", system_ids);
        self.json(Call::post("/machines/".to_owned()).op("accept").form(p)).await
    }

    /// `GET /machines/{id}/?op=power_parameters` (admin): the BMC parameters, password
    /// included (redacted in `Debug`).
    pub async fn power_parameters(&self, system_id: &str) -> Result<PowerParameters, MaasError> {
        self.json(Call::get(machine_path(system_id)).op("power_parameters").secret_answer()).await
    }

    /// `GET /machines/?op=power_parameters&id=…` (admin): the BMC parameters of several
    /// machines in one call, keyed by system id. An empty `system_ids` asks for every machine.
    pub async fn power_parameters_of(&self, system_ids: &[String]) -> Result<BTreeMap<String, PowerParameters>, MaasError> {
        let mut p = Params::new();
        p.list("id", system_ids);
        self.json(Call::get("/machines/".to_owned()).op("power_parameters").query(p).secret_answer()).await
    }

    /// The machines among `candidates` (all machines, for the default filter) whose BMC
    /// `power_address` equals `address` (surrounding spaces and case ignored). MAAS has no such
    /// filter and machine objects carry no power parameters, so this lists, then reads the
    /// candidates' parameters in batches of 100 (ids go in the query string).
    pub async fn find_by_power_address(&self, address: &str, candidates: &MachineFilter) -> Result<Vec<Machine>, MaasError> {
        let want = address.trim();
        let machines = self.list_machines(candidates).await?;
        let mut found = Vec::new();
        for batch in machines.chunks(ID_BATCH) {
            let ids: Vec<String> = batch.iter().map(|m| m.system_id.clone()).collect();
            let params = self.power_parameters_of(&ids).await?;
            // A machine deleted meanwhile is simply absent from the answer.
            found.extend(
                batch
                    .iter()
                    .filter(|m| {
                        params
                            .get(&m.system_id)
                            .and_then(PowerParameters::power_address)
                            .is_some_and(|a| a.trim().eq_ignore_ascii_case(want))
                    })
                    .cloned(),
            );
        }
        Ok(found)
    }
}

/// How many system ids one `power_parameters` query carries (about 1 KB of query string).
const ID_BATCH: usize = 100;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorClass;

    #[test]
    fn filter_sends_maas_names_and_lowercase_statuses() {
        let f = MachineFilter {
            hostname: vec!["gpu-01".into(), "gpu-02".into()],
            status: vec![NodeStatus::Ready, NodeStatus::FailedReleasing],
            mac_address: vec!["52:54:00:00:00:01".into()],
            agent_name: Some("drover".into()),
            ..MachineFilter::default()
        };
        assert_eq!(
            f.params().expect("params").encode(),
            "hostname=gpu-01&hostname=gpu-02&mac_address=52%3A54%3A00%3A00%3A00%3A01&status=ready&status=failed_releasing&agent_name=drover"
        );
        assert!(MachineFilter::default().params().expect("empty").is_empty());
    }

    #[test]
    fn unknown_status_cannot_be_filtered() {
        let f = MachineFilter { status: vec![NodeStatus::Unknown(99)], ..MachineFilter::default() };
        let e = f.params().err().expect("refused");
        assert_eq!(e.class(), ErrorClass::BadRequest);
        assert!(e.to_string().contains("99"), "{e}");
    }

    #[test]
    fn power_parameters_become_prefixed_fields() {
        let mut p = Params::new();
        add_power_parameters(&mut p, &PowerParameters::ipmi("10.0.0.5", "admin", "pw"));
        assert_eq!(p.encode(), "power_parameters_power_address=10.0.0.5&power_parameters_power_pass=pw&power_parameters_power_user=admin");
    }

    #[test]
    fn machine_paths_escape_ids() {
        assert_eq!(machine_path("abc123"), "/machines/abc123/");
        assert_eq!(machine_path("a/b"), "/machines/a%2Fb/");
    }
}
