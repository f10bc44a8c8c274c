"""The typed event catalogue: every event the suite records, with its category, severity, OCSF class
and the controls of NIST SP 800-53 (AU family and friends), PCI DSS v4 requirement 10,
ISO/IEC 27001:2022 Annex A and the FSTEC measures (РСБ) it serves as evidence for.

The catalogue is data: the portal renders it as the coverage matrix auditors ask for.
Model create/update/delete events are added for every audited model when the app registry is ready.
"""

from dataclasses import dataclass, field

STANDARDS = ("NIST SP 800-53", "PCI DSS 4.0", "ISO/IEC 27001:2022", "FSTEC")

# OCSF classes used, with their uid (schema 1.1.0). An event's activity id is one of its class's:
# Datastore Activity (6005) 1 Read, 2 Update, 3 Connect, 4 Query, 5 Write, 6 Create, 7 Delete;
# Entity Management (3004) 1 Create, 2 Read, 3 Update, 4 Delete; 99 Other in every class.
OCSF_CLASSES = {
    1007: "Process Activity",
    3001: "Account Change",
    3002: "Authentication",
    3004: "Entity Management",
    3005: "User Access Management",
    6002: "Application Lifecycle",
    6003: "API Activity",
    6005: "Datastore Activity",
}


@dataclass(frozen=True)
class EventType:
    name: str
    category: str
    severity: str  # informational, low, medium, high, critical
    description: str
    ocsf_class: int
    ocsf_activity: int
    controls: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def action(self) -> str:
        return self.name.rsplit(".", 1)[-1]

    @property
    def ocsf_class_name(self) -> str:
        return OCSF_CLASSES[self.ocsf_class]


def _c(nist=(), pci=(), iso=(), fstec=()):
    return {"NIST SP 800-53": tuple(nist), "PCI DSS 4.0": tuple(pci),
            "ISO/IEC 27001:2022": tuple(iso), "FSTEC": tuple(fstec)}


_AUTH = _c(["AU-2", "AC-7", "IA-2"], ["10.2.1.4", "10.2.1.5"], ["A.8.15", "A.8.5"], ["РСБ.1", "РСБ.3", "ИАФ.1"])
_ACCOUNT = _c(["AU-2", "AC-2", "AC-6(9)"], ["10.2.1.2", "10.2.1.5"], ["A.8.15", "A.5.18"], ["РСБ.1", "РСБ.3", "УПД.1"])
_CHANGE = _c(["AU-2", "AU-12", "CM-3", "CM-5"], ["10.2.1.2", "10.2.1.7"], ["A.8.15", "A.8.32", "A.8.9"], ["РСБ.1", "РСБ.3"])
_ACCESS = _c(["AU-2", "AC-3", "AC-6(9)"], ["10.2.1.1", "10.2.1.4"], ["A.8.15", "A.5.15"], ["РСБ.1", "РСБ.3", "УПД.2"])
_AUDIT_READ = _c(["AU-2", "AU-6", "AU-9(4)"], ["10.2.1.3"], ["A.8.15", "A.8.16"], ["РСБ.5", "РСБ.7", "РСБ.8"])
_AUDIT_PROTECT = _c(["AU-9", "AU-10", "AU-11"], ["10.3.2", "10.3.4", "10.5.1"], ["A.8.15"], ["РСБ.3", "РСБ.7"])
_OPERATION = _c(["AU-2", "AU-12", "CM-3"], ["10.2.1.2", "10.2.1.7"], ["A.8.15", "A.8.32"], ["РСБ.1", "РСБ.3"])

_BASE = [
    EventType("auth.login.success", "authentication", "informational", "A user logged in.", 3002, 1, _AUTH),
    EventType("auth.login.failure", "authentication", "medium", "A login attempt failed (attempted username kept).", 3002, 1, _AUTH),
    EventType("auth.logout", "authentication", "informational", "A user logged out or the session expired.", 3002, 2, _AUTH),
    EventType("auth.lockout", "authentication", "high", "A username was locked after repeated failed logins.", 3002, 1, _AUTH),
    EventType("auth.token.create", "authentication", "medium", "An API token was issued.", 3002, 1, _AUTH),
    EventType("auth.token.revoke", "authentication", "medium", "An API token was revoked (by its owner or an Administrator).", 3002, 99, _AUTH),
    EventType("accounts.password.change", "account", "medium", "A password was changed or set.", 3001, 3, _ACCOUNT),
    EventType("accounts.role.change", "account", "high", "A user's role was changed.", 3005, 1, _ACCOUNT),
    EventType("admin.action", "configuration", "medium", "An object was added, changed or deleted through Django's admin site.", 3004, 99, _CHANGE),
    EventType("access.denied", "access", "medium", "A request was refused (401 or 403).", 6003, 99, _ACCESS),
    EventType("access.anonymous.denied", "access", "medium", "Anonymous requests from one source address were "
              "refused in one minute (401 or 403): one record with their count per source and minute.", 6003, 99, _ACCESS),
    EventType("api.request", "access", "informational", "A state-changing web or API request completed.", 6003, 99, _ACCESS),
    EventType("cli.command", "operation", "low", "A management command ran.", 1007, 1, _OPERATION),
    EventType("appliance.install", "configuration", "high", "The appliance was installed as services of its host "
              "(systemd units, environment file, TLS certificate): `appliance install --production`.", 3004, 1, _CHANGE),
    EventType("task.run", "operation", "low", "A background task ran.", 1007, 1, _OPERATION),
    EventType("inventory.site.import", "configuration", "medium", "A site definition was imported.", 3004, 3, _CHANGE),
    EventType("inventory.node.transition", "configuration", "low", "A node changed provisioning state.", 3004, 3, _CHANGE),
    # Credentials: a BMC login created, changed (secret, user, CA, the endpoints it may be sent to) or deleted;
    # the record shows what changed, a secret only as "[REDACTED] (changed)".
    EventType("inventory.credential.create", "configuration", "high", "A credential (BMC login) was created.", 3004, 1, _ACCESS),
    EventType("inventory.credential.update", "configuration", "high", "A credential was changed: its secret, user, CA or the endpoints it is bound to.", 3004, 3, _ACCESS),
    EventType("inventory.credential.delete", "configuration", "high", "A credential was deleted.", 3004, 4, _ACCESS),
    EventType("provisioning.run.start", "provisioning", "medium", "A provisioning run started.", 6002, 3, _OPERATION),
    EventType("provisioning.run.end", "provisioning", "medium", "A provisioning run ended.", 6002, 4, _OPERATION),
    EventType("provisioning.run.cancel", "provisioning", "medium", "A provisioning run was cancelled.", 6002, 4, _OPERATION),
    EventType("provisioning.stage.end", "provisioning", "low", "A stage of a run ended.", 6002, 4, _OPERATION),
    EventType("provisioning.bios.change", "provisioning", "high", "A BIOS attribute was changed on a node's BMC.", 3004, 3, _CHANGE),
    EventType("provisioning.bmc.reset", "provisioning", "high", "A server was restarted over its BMC to apply staged "
              "BIOS values (inside the site's maintenance window).", 3004, 3, _CHANGE),
    EventType("provisioning.acceptance.export", "provisioning", "low", "An acceptance report was exported.", 6005, 1, _AUDIT_READ),
    EventType("provisioning.secret.create", "provisioning", "high", "A cluster secret (the Slurm munge key) was generated.", 3004, 1, _CHANGE),
    EventType("repository.build", "provisioning", "medium", "The package repository the nodes install from was built.", 3004, 1, _CHANGE),
    EventType("repository.verify", "provisioning", "low", "The package repository was checked against its manifest.", 6005, 1, _AUDIT_READ),
    EventType("simulation.appliance.prepare", "simulation", "low", "Simulated nodes were prepared (sysroots, state, tools).", 3004, 1, _OPERATION),
    EventType("simulation.bmc.start", "simulation", "low", "A simulated node's BMC emulator was started.", 1007, 1, _OPERATION),
    EventType("simulation.bmc.stop", "simulation", "low", "A simulated node's BMC emulator was stopped.", 1007, 2, _OPERATION),
    EventType("simulation.ssh.start", "simulation", "low", "A simulated node's SSH server was started.", 1007, 1, _OPERATION),
    EventType("simulation.ssh.stop", "simulation", "low", "A simulated node's SSH server was stopped.", 1007, 2, _OPERATION),
    EventType("simulation.ssh.key", "simulation", "medium", "The appliance's SSH key pair was generated.", 3004, 1, _CHANGE),
    EventType("simulation.account.create", "simulation", "medium", "The simulation's service account was created.", 3001, 1, _CHANGE),
    EventType("simulation.account.remove", "simulation", "medium", "The simulation's service account was removed.", 3001, 6, _CHANGE),
    EventType("simulation.repository.start", "simulation", "low", "The simulated package repository server was started.", 1007, 1, _OPERATION),
    EventType("simulation.repository.stop", "simulation", "low", "The simulated package repository server was stopped.", 1007, 2, _OPERATION),
    EventType("simulation.portal.start", "simulation", "low", "The demo appliance's portal (with its worker and beat) was started.", 1007, 1, _OPERATION),
    EventType("simulation.portal.stop", "simulation", "low", "The demo appliance's portal (with its worker and beat) was stopped.", 1007, 2, _OPERATION),
    EventType("simulation.fault.inject", "simulation", "medium", "A fault was injected into a simulated node.", 3004, 3, _CHANGE),
    EventType("simulation.fault.clear", "simulation", "medium", "Injected faults were cleared from a simulated node.", 3004, 3, _CHANGE),
    EventType("simulation.slurm.start", "simulation", "low", "The simulated appliance's Slurm daemons were started.", 1007, 1, _OPERATION),
    EventType("simulation.slurm.stop", "simulation", "low", "The simulated appliance's Slurm daemons were stopped.", 1007, 2, _OPERATION),
    EventType("simulation.slurm.restart", "simulation", "low", "The simulated appliance's Slurm daemons were restarted: the workloads stage changed their files.", 1007, 1, _OPERATION),
    EventType("simulation.workload.start", "simulation", "low", "The simulated workload model was started.", 1007, 1, _OPERATION),
    EventType("simulation.workload.stop", "simulation", "low", "The simulated workload model was stopped.", 1007, 2, _OPERATION),
    EventType("simulation.demo.story", "simulation", "low", "The demo's story was told: its models registered, promoted and deployed, its pools' lending policies set (each step recorded by its own event).", 1007, 1, _OPERATION),
    EventType("simulation.collector.start", "simulation", "low", "A simulated node's telemetry collector was started.", 1007, 1, _OPERATION),
    EventType("simulation.collector.stop", "simulation", "low", "A simulated node's telemetry collector was stopped.", 1007, 2, _OPERATION),
    # Telemetry: rollups and events are measurements and are not recorded one by one; what is recorded is
    # who may write them (tokens), what was refused, what was deleted by age and who acknowledged an alert.
    EventType("telemetry.collector.register", "telemetry", "medium", "A node's telemetry collector was registered and its ingest token issued.", 3004, 1, _ACCESS),
    EventType("telemetry.collector.revoke", "telemetry", "high", "A node's ingest token was revoked: its collector can no longer write.", 3004, 4, _ACCESS),
    EventType("telemetry.ingest.refused", "telemetry", "medium", "A telemetry write was refused (unknown token, or a line of another node): "
              "at most one record per node (or source address) and minute.", 6003, 99, _ACCESS),
    EventType("telemetry.ingest.unverified_job", "telemetry", "medium", "A node's telemetry named jobs no scheduler puts on it: "
              "its rows were kept without them (job unverified): at most one record per node and minute.", 6003, 99, _ACCESS),
    EventType("telemetry.rollup.prune", "telemetry", "low", "Telemetry rollups and hardware events older than the retention were deleted (counts kept).", 6005, 7, _OPERATION),
    EventType("telemetry.alert.acknowledge", "telemetry", "low", "A hardware alert (XID, ECC, link down, throttling) was acknowledged.", 3004, 3, _OPERATION),
    # Analytics findings (recommendations): a refresh that opened or resolved some, and what a person decided.
    EventType("analytics.attribution.rebuild", "analytics", "low", "The attributed GPU-hours were rebuilt from an hour on at a person's request (rows deleted and minutes attributed again, counts kept).", 3004, 99, _OPERATION),
    EventType("analytics.findings.refresh", "analytics", "low", "Findings were refreshed from the attributed GPU-hours: some were opened, updated or resolved (counts kept).", 3004, 99, _OPERATION),
    EventType("analytics.finding.accept", "analytics", "medium", "A finding (recommendation) was accepted; a pool-idle finding's lending plan was proposed.", 3004, 3, _CHANGE),
    EventType("analytics.finding.dismiss", "analytics", "low", "A finding (recommendation) was dismissed, with the reason.", 3004, 3, _CHANGE),
    # Lending plans: each step a plan takes (or is refused) is one record; the policies are audited models.
    EventType("lending.plan.propose", "lending", "medium", "A plan to lend nodes from one pool to another was proposed.", 3004, 1, _CHANGE),
    EventType("lending.plan.approve", "lending", "high", "A lending plan was approved (by an Administrator or by its pool's policy).", 3004, 3, _CHANGE),
    EventType("lending.plan.reject", "lending", "medium", "A lending plan was rejected, with the reason.", 3004, 3, _CHANGE),
    EventType("lending.plan.drain", "lending", "high", "A lending plan drained its nodes in Slurm (or says why it had nothing to drain).", 3004, 3, _OPERATION),
    EventType("lending.plan.requeue", "lending", "high", "A lending plan's drain deadline passed: the jobs still on its nodes were requeued.", 3004, 3, _OPERATION),
    EventType("lending.plan.move", "lending", "high", "A lending plan moved its nodes to another pool (lent or given back).", 3004, 3, _CHANGE),
    EventType("lending.plan.workloads", "lending", "medium", "A lending plan reran the workloads stage on its nodes (or says why not).", 3004, 3, _OPERATION),
    EventType("lending.plan.redeploy", "lending", "medium", "The model deployments a lending plan stopped on its nodes were deployed again on the inference pool's other GPUs (or it says which did not fit).", 3004, 3, _OPERATION),
    EventType("lending.plan.activate", "lending", "medium", "A lending plan's nodes serve the borrowing pool.", 3004, 3, _OPERATION),
    EventType("lending.plan.reclaim_request", "lending", "medium", "The lending pool asked for its nodes back before the window's end.", 3004, 3, _OPERATION),
    EventType("lending.plan.reclaim", "lending", "high", "A lending plan's nodes are being reclaimed (window over or asked).", 3004, 3, _OPERATION),
    EventType("lending.plan.resume", "lending", "high", "A lending plan's nodes were resumed in Slurm (in the borrowing pool, or back in the lending one).", 3004, 3, _OPERATION),
    EventType("lending.plan.return", "lending", "medium", "A lending plan's nodes are back in their pool: the plan ended returned.", 3004, 3, _OPERATION),
    EventType("lending.plan.rollback", "lending", "high", "A lending plan was rolled back: nodes back in their pool, resumed in Slurm.", 3004, 3, _CHANGE),
    # Partition plans (MIG and time-slicing): made, applied through the partitioning stage, rolled back.
    EventType("partitioning.plan.create", "partitioning", "low", "A partition plan (MIG and time-slicing layout) was planned and saved.", 3004, 1, _CHANGE),
    EventType("partitioning.plan.apply", "partitioning", "high", "A partition plan was applied: the partitioning stage started on the nodes whose GPUs change (or it was refused, with the reason).", 3004, 3, _CHANGE),
    EventType("partitioning.plan.rollback", "partitioning", "high", "The previous partition plan's layout was planned again and applied.", 3004, 3, _CHANGE),
    EventType("partitioning.plan.state", "partitioning", "medium", "A partition plan followed its run: applied, failed, or superseded by the next one.", 3004, 3, _OPERATION),
    # The model lifecycle: registry, integrity, four-eyes promotions, deployments, the MLflow-compatible API.
    EventType("lifecycle.model.register", "lifecycle", "low", "A model was registered (name, owner, license, intended use, risk class).", 3004, 1, _CHANGE),
    EventType("lifecycle.model.update", "lifecycle", "low", "A registered model's description, tags, license, intended use or risk class changed.", 3004, 3, _CHANGE),
    EventType("lifecycle.model.delete", "lifecycle", "medium", "A registered model without versions was deleted (or the deletion was refused).", 3004, 4, _CHANGE),
    EventType("lifecycle.version.register", "lifecycle", "medium", "A model version was registered: its files hashed, its lineage (training job, datasets, code, parent) recorded.", 3004, 1, _CHANGE),
    EventType("lifecycle.version.update", "lifecycle", "low", "A model version's description or tags changed.", 3004, 3, _CHANGE),
    EventType("lifecycle.version.sign", "lifecycle", "medium", "A model version's manifest of file hashes was signed with the appliance's model-signing key.", 3004, 3, _CHANGE),
    EventType("lifecycle.version.verify", "lifecycle", "low", "A model version's files were checked against their hashes and signature (quick or full), with the result.", 3004, 3, _OPERATION),
    EventType("lifecycle.version.tampered", "lifecycle", "critical", "A model version's files no longer match what was registered and signed (changed, missing or added files, or a bad signature): its deployment is blocked.", 3004, 3, _OPERATION),
    EventType("lifecycle.version.tamper_clear", "lifecycle", "high", "An Administrator lifted a model version's tampered verdict, with the reason, after a full verification passed: it may be deployed again.", 3004, 3, _CHANGE),
    EventType("lifecycle.version.training", "lifecycle", "low", "A model version registered while its training job ran got the job's end: its final state, end time and GPU-hours, as Slurm and analytics report them once it ended.", 3004, 3, _OPERATION),
    EventType("lifecycle.version.transition", "lifecycle", "medium", "A model version moved to another stage (or the transition was refused, with the reason).", 3004, 3, _CHANGE),
    EventType("lifecycle.alias.set", "lifecycle", "medium", "An alias of a model (a serving slot) was pointed at a version.", 3004, 3, _CHANGE),
    EventType("lifecycle.alias.remove", "lifecycle", "medium", "An alias of a model was removed (or the removal was refused, with the reason).", 3004, 4, _CHANGE),
    EventType("lifecycle.evaluation.add", "lifecycle", "low", "An evaluation (datasets and metrics) was attached to a model version.", 3004, 1, _CHANGE),
    EventType("lifecycle.request.create", "lifecycle", "medium", "A transition that needs approval (to production) was requested, with its evidence.", 3004, 1, _CHANGE),
    EventType("lifecycle.request.approve", "lifecycle", "high", "A second person approved a requested transition (four-eyes), which was carried out (or the approval was refused, with the reason).", 3004, 3, _CHANGE),
    EventType("lifecycle.request.reject", "lifecycle", "medium", "A requested transition was rejected, with the reason.", 3004, 3, _CHANGE),
    EventType("lifecycle.request.cancel", "lifecycle", "low", "A requested transition was withdrawn by the person who asked.", 3004, 3, _CHANGE),
    EventType("lifecycle.request.expire", "lifecycle", "low", "A requested transition expired without a decision.", 3004, 3, _OPERATION),
    EventType("lifecycle.deployment.create", "lifecycle", "high", "A model version was deployed as an inference service (or the deployment was refused or blocked, with the reason).", 3004, 1, _CHANGE),
    EventType("lifecycle.deployment.state", "lifecycle", "medium", "A deployment's rollout reached a state: healthy, failed, replaced, stopped.", 3004, 3, _OPERATION),
    EventType("lifecycle.deployment.rollback", "lifecycle", "high", "A deployment was rolled back to the previous production version.", 3004, 3, _CHANGE),
    EventType("lifecycle.deployment.stop", "lifecycle", "medium", "An inference service of a model was stopped.", 3004, 4, _CHANGE),
    EventType("lifecycle.card.export", "lifecycle", "low", "A model card was exported.", 3004, 1, _AUDIT_READ),
    EventType("lifecycle.mlflow.import", "lifecycle", "high", "Models and versions were imported from an MLflow registry (its REST API or an export).", 3004, 1, _CHANGE),
    # Traces from elsewhere: an import (file, format, column mapping, rows) and its replacement by name.
    EventType("traces.trace.import", "traces", "low", "A utilization trace from another system was imported (file, format, column mapping, rows).", 3004, 1, _CHANGE),
    EventType("traces.trace.replace", "traces", "medium", "An imported trace was replaced by a new import under its name (the old rows deleted).", 3004, 3, _CHANGE),
    EventType("audit.view", "audit", "low", "The audit log was viewed.", 6005, 1, _AUDIT_READ),
    EventType("audit.search", "audit", "low", "The audit log was searched.", 6005, 4, _AUDIT_READ),
    EventType("audit.export", "audit", "medium", "The audit log was exported.", 6005, 1, _AUDIT_READ),
    EventType("audit.verify", "audit", "low", "The audit log or a record was verified.", 6005, 1, _AUDIT_PROTECT),
    EventType("audit.checkpoint", "audit", "informational", "A signed checkpoint was made.", 6005, 6, _AUDIT_PROTECT),
    EventType("audit.key.rotate", "audit", "critical", "The audit signing key was replaced (the handover signed by both keys).", 6005, 2, _AUDIT_PROTECT),
    EventType("audit.triggers.install", "audit", "critical", "The audit log's database triggers were put back (after a check found one missing or disabled).", 6005, 6, _AUDIT_PROTECT),
    EventType("audit.dbroles.grant", "audit", "high", "The database runtime role was given exactly the grants the portal and workers need (no UPDATE, DELETE or ownership of the audit tables).", 6005, 2, _AUDIT_PROTECT),
    EventType("audit.retention.floor", "audit", "high", "The retention floor (days records are kept at least) was changed.", 6005, 2, _AUDIT_PROTECT),
    EventType("audit.retention.request", "audit", "high", "Archiving of old records was requested.", 6005, 6, _AUDIT_PROTECT),
    EventType("audit.retention.approve", "audit", "high", "Archiving of old records was approved.", 6005, 2, _AUDIT_PROTECT),
    EventType("audit.retention.archive", "audit", "critical", "Old records were removed, leaving a signed tombstone.", 6005, 7, _AUDIT_PROTECT),
]

CATALOGUE: dict[str, EventType] = {e.name: e for e in _BASE}

MODEL_ACTIONS = {"create": (1, "low"), "update": (3, "low"), "delete": (4, "medium")}


def register_model(app_label: str, model_name: str, verbose_name: str) -> None:
    """Add the create/update/delete events of one audited model."""
    for action, (activity, severity) in MODEL_ACTIONS.items():
        name = f"{app_label}.{model_name}.{action}"
        CATALOGUE.setdefault(name, EventType(
            name, "configuration", severity, f"A {verbose_name} was {action}d.", 3004, activity, _CHANGE))


def get(name: str) -> EventType:
    try:
        return CATALOGUE[name]
    except KeyError:
        raise KeyError(f"audit event {name!r} is not in the catalogue (appliance/audit/catalogue.py)") from None
