"""``abs_<job>_recover``: restore a job from a checkpoint, triggered by hand with a Params form.

Wiring only. ``validate_request`` checks the form against the catalog (reads
only) and pins the checkpoint; ``run_recovery`` calls the command line's
recovery entry (``absreplay recover``, ``rewind`` or ``upgrade``) and fails with
its message when it fails, and emits an event of each sink's asset it committed to
(``sink_assets.publish_sink_commits``). Bad input fails the run without a retry.

A job declared ``consistency="weak"`` gets no recover DAG: it has no consistent
checkpoint to go back to (``coordinator.checkpoints.weak``).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.sdk import DAG, Param, dag, task

from absreplay.airflow import orchestration, recovery_tasks, sink_assets
from coordinator.dataflow.discovery import jobs_for_dags
from coordinator.arguments import BIGINT_MAX
from coordinator.dataflow.jobs import JobDefinition

START = datetime(2025, 1, 1, tzinfo=timezone.utc)

DOC = """
### Recover `{job}` from a checkpoint

Manual only. Fill in the form:

- **checkpoint** — a checkpoint id (a whole number from 1 to 2^63-1), or empty for
  the latest COMPLETED checkpoint. A FAILED, PENDING, SUBSUMED (garbage-collected) or
  unknown checkpoint fails the run with a message that says so; nothing changes.
- **mode** — `full` (every task restarts from the checkpoint) or `partial`
  (only failed tasks and their upstream; records at or below the sinks'
  high-water marks are discarded).
- **rewind** — reprocess every epoch after the checkpoint (e.g. after a bug
  fix): the sinks' later output is replaced, not duplicated. Needs mode `full`.
- **fallback** — if a state file of the checkpoint is missing or corrupt,
  recover from the previous completed checkpoint instead (the recovery row says so).
- **upgrade** — take the job on to its changed declaration (`absreplay plan {job}`
  says what changed): state it can read is carried over, the rest is rebuilt by
  replaying the input from the checkpoint given, or from the start of the input when
  it is empty. Needs mode `full`, rewind and fallback off.

A refused request (a checkpoint that is not COMPLETED, a processing run holding
the job's lease) changes nothing and is a `REFUSED` row in `recoveries` with
its reason and this run's id.

The run calls `absreplay recover {job} --checkpoint N --mode M`,
`absreplay rewind {job} --to N` or `absreplay upgrade {job} --from-checkpoint N` (`--from-start`); the recovery is audited in the catalog
(`absreplay recoveries {job}`, or `SELECT * FROM recoveries`).
Find checkpoint ids with `absreplay checkpoints {job}` or the `snapshot_history` view.

What the recovery commits to a sink (the replays' output, staged output it settles) emits
one event of the sink's asset, through the alias `{alias}`, as `finalize` of
`abs_{job}_epochs` does; a recovery that commits nothing to a sink emits nothing for it.
"""

PARAMS = {
    "checkpoint": Param(
        None,
        type=["null", "integer"],
        minimum=1,
        maximum=BIGINT_MAX,  # the catalog's ids, as the command line and the view bound them
        title="Checkpoint id",
        description="Empty: the latest completed checkpoint.",
    ),
    "mode": Param("full", type="string", enum=list(orchestration.RECOVERY_MODES), title="Mode",
                  description="full: restart every task; partial: only failed tasks and their upstream."),
    "rewind": Param(False, type="boolean", title="Rewind",
                    description="Reprocess every epoch after the checkpoint, replacing the sinks' later output."),
    "fallback": Param(False, type="boolean", title="Fallback",
                      description="If a state file is missing or corrupt, recover from the previous completed checkpoint."),
    "upgrade": Param(False, type="boolean", title="Upgrade",
                     description="Take the changed job on to its declaration, rebuilding from the checkpoint "
                                 "(empty: the start of the input)."),
}


def recover_dag(job: JobDefinition) -> DAG:
    @dag(
        dag_id=f"abs_{job.name}_recover",
        schedule=None,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["absreplay", job.name, "recovery"],
        default_args={"owner": "absreplay", "retries": 1, "retry_delay": timedelta(seconds=10)},
        params=PARAMS,
        doc_md=DOC.format(job=job.name, alias=sink_assets.sink_alias_name(job.name)),
    )
    def recover() -> None:
        @task
        def validate_request(params: dict[str, Any] | None = None, run_id: str | None = None) -> dict[str, Any]:
            assert params is not None
            request = orchestration.run_in_task(
                recovery_tasks.validate_recovery, job.name, params["checkpoint"], params["mode"], params["rewind"],
                params.get("fallback", False), run_id, params.get("upgrade", False),
            )
            print(f"recovery request: {request}")
            return request

        @task(outlets=[sink_assets.sink_alias(job.name)])
        def run_recovery(request: dict[str, Any], outlet_events: Any = None) -> str:
            output, sink_commits = orchestration.run_in_task(recovery_tasks.run_recovery_publishing, request)
            sink_assets.publish_sink_commits(outlet_events, job.name, sink_commits)
            return output

        run_recovery(validate_request())

    return recover()


for _job in jobs_for_dags():
    if _job.consistency != "weak":
        globals()[f"abs_{_job.name}_recover"] = recover_dag(_job)
