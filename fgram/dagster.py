"""Dagster Pipes (the ``dagster`` extra: ``dagster-pipes``): a command launched by a
Dagster asset through Pipes (its ``DAGSTER_PIPES_CONTEXT`` in the environment) reports
the asset's materialization when its job ends: the run's fingerprint as the
``data_version`` (equal work, equal version: an unchanged refresh reports the version
Dagster already has) and the result's counts, output, version ids and seconds as
metadata. A failed run closes the Pipes session with the error, so the Dagster step
fails with fgram's one line. Nothing happens outside Pipes.

The asset is the one in the step's scope; with several, the one named by the extra
``fgram_asset_key`` (``PipesSubprocessClient.run(..., extras={"fgram_asset_key": ...})``)."""

from __future__ import annotations

import os
import sys
from typing import Any

CONTEXT = "DAGSTER_PIPES_CONTEXT"


def _metadata(result: dict[str, Any]) -> dict[str, Any]:
    counts = result.get("counts") or {}
    meta: dict[str, Any] = {
        k: v for k, v in counts.items() if isinstance(v, (int, float, str, bool))
    }
    meta["status"] = result["status"]
    meta["command"] = result.get("command")
    if result.get("output"):
        meta["output"] = {"raw_value": result["output"], "type": "path"}
    for key in ("version_id", "previous_version_id", "fingerprint"):
        if result.get(key):
            meta[key] = result[key]
    total = (result.get("seconds") or {}).get("total")
    if total is not None:
        meta["seconds"] = total
    return meta


class Pipes:
    """This run's Pipes session: opened when the job starts, closed at its end."""

    def __init__(self) -> None:
        from dagster_pipes import open_dagster_pipes

        self.context = open_dagster_pipes()  # opened: its "opened" message is written

    def end(self, result: dict[str, Any]) -> None:
        if result["status"] == "failed":
            error = result.get("error") or {}
            from dagster_pipes import PipesException

            exc: PipesException = {  # Dagster's step fails with it
                "name": error.get("class") or "FgramRunFailed",
                "message": f"{error.get('class')}: {error.get('message')}",
                "stack": [],
                "cause": None,
                "context": None,
            }
            self.context.close(exc)
            return
        keys = self.context.asset_keys if self.context.is_asset_step else []
        key = None
        if len(keys) > 1:
            key = self.context.extras.get("fgram_asset_key")
        if keys and (len(keys) == 1 or key):
            self.context.report_asset_materialization(
                metadata=_metadata(result), data_version=result.get("fingerprint"), asset_key=key
            )
        else:
            self.context.log.warning("fgram: no single asset in scope: nothing reported")
        self.context.close()


def begin() -> Pipes | None:
    """The run's Pipes session under Dagster, else None (outside Pipes; or, under Pipes
    without ``dagster-pipes`` installed, one warning)."""
    if not os.environ.get(CONTEXT):
        return None
    try:
        import dagster_pipes  # noqa: F401
    except ImportError:
        sys.stderr.write(
            "fgram: warning: run by Dagster Pipes, but dagster-pipes is not installed "
            "(pip install 'fgram[dagster]'): no materialization reported\n"
        )
        return None
    return Pipes()
