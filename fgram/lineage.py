"""OpenLineage run events for fgram's commands (the ``lineage`` extra:
``openlineage-python``): a START when a job begins, a COMPLETE or FAIL when it ends,
with its inputs (the shards, folders or table it read, with sizes where they are cheap
to know) and outputs (what it wrote, with the result's counts, the run's fingerprint
as the dataset version, and fgram's own facet: the whole result).

fgram reads its inputs inside tasks with pyarrow, so Spark's own OpenLineage listener
sees none of them; these events are the lineage. On with ``--openlineage``, or whenever
the client's own settings are there (``OPENLINEAGE_URL``, ``OPENLINEAGE_CONFIG``, an
``openlineage.yml``, ``OPENLINEAGE__TRANSPORT__...``); the client picks the transport.
The parent run: ``OPENLINEAGE_PARENT_ID`` (``namespace/job/run_id``, what Airflow's
``lineage_parent_id`` macro renders; ``OPENLINEAGE_ROOT_PARENT_ID`` alike), or the
``spark.openlineage.parent*`` settings given with ``--conf``, as Airflow's provider
passes them to a Spark job. The job's namespace is ``OPENLINEAGE_NAMESPACE`` (else
``fgram``), its name ``fgram.<command>.<output name>``. An event that cannot be sent is
one warning; it never fails the run."""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from datetime import datetime, timezone
from typing import Any

from fgram.pipeline.io.failures import first_line

SCHEMA_URL = "https://fgram.dev/schemas/fgram-result-2.json"
SETTINGS = ("OPENLINEAGE_URL", "OPENLINEAGE_CONFIG")


def wanted(flag: bool) -> bool:
    """Whether this run sends events: ``--openlineage``, or the client's settings."""
    if flag:
        return True
    if os.environ.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true":
        return False
    return (
        any(os.environ.get(k) for k in SETTINGS)
        or any(k.startswith("OPENLINEAGE__TRANSPORT") for k in os.environ)
        or os.path.exists("openlineage.yml")
    )


def dataset_name(uri: str) -> tuple[str, str]:
    """(namespace, name) of a path or URI, as OpenLineage names them: ``file`` and the
    absolute path; ``s3://bucket`` and the key; ``hdfs://host:port`` and the path."""
    from fgram.pipeline.io.storage import is_remote

    text = str(uri)
    if not is_remote(text):
        return "file", os.path.abspath(text.removeprefix("file://"))
    scheme, rest = text.split("://", 1)
    authority, _, path = rest.partition("/")
    return f"{scheme}://{authority}", "/" + path.rstrip("/") if path else "/"


def _size(uri: str) -> int | None:
    """Bytes of a local file or folder (None elsewhere: a listing of a store is not cheap)."""
    from fgram.pipeline.io.storage import is_remote

    if is_remote(uri) or not os.path.exists(uri):
        return None
    if os.path.isfile(uri):
        return os.path.getsize(uri)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(uri) for f in files)


def _parent(conf: dict[str, str]) -> Any:
    from openlineage.client.generated.parent_run import (
        Job,
        ParentRunFacet,
        Root,
        RootJob,
        RootRun,
        Run,
    )

    def split(value: str | None) -> tuple[str, str, str] | None:
        parts = (value or "").split("/")
        return (parts[0], "/".join(parts[1:-1]), parts[-1]) if len(parts) >= 3 else None

    parent = split(os.environ.get("OPENLINEAGE_PARENT_ID"))
    keys = ("spark.openlineage.parentJobNamespace", "spark.openlineage.parentJobName")
    if parent is None and all(conf.get(k) for k in (*keys, "spark.openlineage.parentRunId")):
        parent = (conf[keys[0]], conf[keys[1]], conf["spark.openlineage.parentRunId"])
    if parent is None:
        return None
    root = split(os.environ.get("OPENLINEAGE_ROOT_PARENT_ID"))
    return ParentRunFacet(
        run=Run(runId=parent[2]),
        job=Job(namespace=parent[0], name=parent[1]),
        root=Root(run=RootRun(runId=root[2]), job=RootJob(namespace=root[0], name=root[1]))
        if root
        else None,
    )


class Lineage:
    """One run's events (`start`, then `end`)."""

    def __init__(self, command: str, inputs: list[str], output: str | None, conf: dict):
        from openlineage.client import OpenLineageClient

        self.client = OpenLineageClient()
        self.command, self.output = command, output
        self.run_id = str(uuid.uuid4())
        self.namespace = os.environ.get("OPENLINEAGE_NAMESPACE") or "fgram"
        where = os.path.basename(str(output).rstrip("/")) if output else "run"
        self.job_name = f"fgram.{command}.{where}"
        self.broken = False
        self.parent = _parent(conf)
        self.read = [(uri, _size(uri)) for uri in inputs]  # walked once, for every event

    def _event(self, state: str, outputs: list[Any], facets: dict[str, Any]) -> Any:
        from openlineage.client.event_v2 import InputDataset, Job, Run, RunEvent, RunState
        from openlineage.client.generated.input_statistics_input_dataset import (
            InputStatisticsInputDatasetFacet,
        )
        from openlineage.client.generated.processing_engine_run import ProcessingEngineRunFacet

        from fgram.version import __version__

        inputs = []
        for uri, size in self.read:
            ns, name = dataset_name(uri)
            stats: dict[str, Any] = {}
            if size is not None:
                stats["inputStatistics"] = InputStatisticsInputDatasetFacet(size=size)
            inputs.append(InputDataset(ns, name, inputFacets=stats))
        run_facets = {
            "processing_engine": ProcessingEngineRunFacet(
                version=__version__, name="fgram", openlineageAdapterVersion=__version__
            ),
            **facets,
        }
        if self.parent is not None:
            run_facets["parent"] = self.parent
        return RunEvent(
            eventType=getattr(RunState, state),
            eventTime=datetime.now(timezone.utc).isoformat(),
            run=Run(runId=self.run_id, facets=run_facets),
            job=Job(namespace=self.namespace, name=self.job_name),
            producer="https://github.com/fgram/fgram",
            inputs=inputs,
            outputs=outputs,
        )

    def _send(self, event: Any) -> None:
        """Emit ``event``; after one that could not be sent, none: one warning a run, and
        the job not held up again by a receiver that is down."""
        if self.broken:
            return
        try:
            self.client.emit(event)
        except Exception as exc:  # noqa: BLE001 - lineage never fails the run
            self.broken = True
            sys.stderr.write(
                f"fgram: warning: OpenLineage events of this run are not sent ({first_line(exc)})\n"
            )

    def start(self) -> Lineage:
        self._send(self._event("START", self._outputs(None), {}))
        return self

    def _outputs(self, result: dict[str, Any] | None) -> list[Any]:
        from openlineage.client.event_v2 import OutputDataset
        from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet
        from openlineage.client.generated.output_statistics_output_dataset import (
            OutputStatisticsOutputDatasetFacet,
        )

        where = (result or {}).get("output") or self.output
        if not where:
            return []
        ns, name = dataset_name(where)
        facets: dict[str, Any] = {}
        out_facets: dict[str, Any] = {}
        if result and result.get("status") != "failed":
            counts = result.get("counts") or {}
            rows = counts.get("fgrams", counts.get("rows", counts.get("tokens")))
            out_facets["outputStatistics"] = OutputStatisticsOutputDatasetFacet(
                rowCount=rows, size=_size(where)
            )
            if result.get("fingerprint"):
                facets["version"] = DatasetVersionDatasetFacet(datasetVersion=result["fingerprint"])
            facets["fgram"] = _fgram_facet(result)
        return [OutputDataset(ns, name, facets=facets, outputFacets=out_facets)]

    def end(self, result: dict[str, Any]) -> None:
        from openlineage.client.generated.error_message_run import ErrorMessageRunFacet

        if result["status"] == "failed":
            error = result["error"] or {}
            facets = {
                "errorMessage": ErrorMessageRunFacet(
                    message=f"{error.get('class')}: {error.get('message')}",
                    programmingLanguage="python",
                )
            }
            self._send(self._event("FAIL", self._outputs(result), facets))
        else:
            self._send(self._event("COMPLETE", self._outputs(result), {}))
        with contextlib.suppress(Exception):  # noqa: BLE001 - sent or warned already
            self.client.close(timeout=10.0)


def _fgram_facet(result: dict[str, Any]) -> Any:
    import attr  # the OpenLineage client's own dependency: only with the lineage extra
    from openlineage.client.generated.base import DatasetFacet

    @attr.define
    class FgramResultDatasetFacet(DatasetFacet):
        status: str
        counts: dict[str, Any]
        seconds: dict[str, Any]
        fingerprint: str | None
        version_id: str | None

        @staticmethod
        def _get_schema() -> str:
            return SCHEMA_URL

    return FgramResultDatasetFacet(
        status=result["status"],
        counts=result.get("counts") or {},
        seconds=result.get("seconds") or {},
        fingerprint=result.get("fingerprint"),
        version_id=result.get("version_id"),
    )


def begin(command: str, inputs: list[str], output: str | None, conf: dict, flag: bool) -> Any:
    """A started `Lineage`, or None (not wanted; or wanted by the settings alone and the
    client not installed: one warning). ``--openlineage`` without the client is an error."""
    if not wanted(flag):
        return None
    try:
        import openlineage.client  # noqa: F401
    except ImportError:
        if flag:
            from fgram.pipeline.errors import ConfigError

            raise ConfigError(
                "--openlineage needs the OpenLineage client: pip install 'fgram[lineage]'"
            ) from None
        sys.stderr.write(
            "fgram: warning: OpenLineage settings are set but the client is not installed "
            "(pip install 'fgram[lineage]'): no lineage events\n"
        )
        return None
    return Lineage(command, inputs, output, conf).start()
