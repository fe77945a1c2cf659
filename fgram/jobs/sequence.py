"""Every job that publishes an output runs in one order, as datatrove's executor runs
every pipeline step. A `Job` says what is its own (the checks of its inputs, its plan,
the fingerprint a resume must match, its stages, the manifest); `run` does the rest,
the same way for all:

1. the config checked and its engine chosen, once (`begin`);
2. the job's own checks (its inputs: a missing file is one line before anything starts);
3. the output checked, locked, and checked again under the lock (`held_output`): an
   output another run published while this one waited is never replaced; the places
   the job derives from it (its staging folder, a build's text folder) derived once
   (`Job.places`), and no later step is handed the output again;
4. what the job does first under the lock (`Job.ahead`: a build tokenizes its text);
   the executor made in the background (a JVM's seconds) while the driver plans, and
   runs the first tasks itself meanwhile where the job takes a head start (`HeadStart`);
5. the staging folder claimed (a resume of this very run keeps its work; leftovers of
   another are removed) and marked as this run's (`working_in`, for `fgram clean`);
6. the stages, whose tasks each leave one completion marker (`io.markers`);
7. the output published atomically (`publish.finish`); on a failure, the staging
   folder removed, or kept for --resume with one line saying where;
8. the executor's start waited for, what follows the publish (`Job.published`: a
   refresh's new version made current), the lock released, the progress line ended.

A job differs only by what it declares: its lock (a refresh's: the folder of versions,
which exists; embed's: the table's embeddings), the target of its publish (a refresh's
new version), its publish (embed's: the matrix as the table's part), whether the
executor starts before its plan or after (a refresh that finds nothing changed starts
none), and how a kept run continues (embed: rerun it, its chunks done are skipped).
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Any

from fgram.jobs.engines import chosen_engine, make_executor, runs_here
from fgram.jobs.headstart import HeadStart, Starting
from fgram.jobs.progress import PROGRESS
from fgram.pipeline.errors import RESUMABLE, keeps_work
from fgram.pipeline.io import workdir as wf
from fgram.pipeline.io.locks import held_output, working_in
from fgram.pipeline.io.publish import finish, staging_for
from fgram.pipeline.io.storage import Location


def begin(cfg: Any, spark=None) -> Any:
    """A job's config checked (its own ``validate``) and its engine chosen, once: ``auto``
    resolved (`engines.engine_for`); every later step asks the executor, not the name."""
    cfg.validate()
    return dataclasses.replace(cfg, engine=chosen_engine(cfg, spark))


@dataclass
class Run:
    """One run of a job as its stages see it: the config (its engine chosen), the output
    (checked, its lock held), the staging folder it is built in, whether that folder
    holds a resumed run's work, and the executor starting."""

    cfg: Any
    out: Location
    staging: Location
    resumed: bool
    starting: Starting | None
    spark: Any = None

    @property
    def work(self) -> Location:
        """The run's work folder (its markers and work files; it goes at the publish)."""
        return self.staging.child("_work")

    def executor(self, release=None, processes: int | None = None, tokens: int | None = None):
        """The run's executor: the driver's head start on the one starting (``release``
        called when it hands over), or, for a job without one, the executor itself
        (``processes``: local processes, where not every core's); fitted to a job of
        ``tokens`` input tokens where given (`Executor.fit`)."""
        if self.starting is None:
            cfg = self.cfg
            ex = make_executor(cfg.engine, self.spark, cfg.master, cfg.conf, processes)
        else:
            ex = HeadStart(self.starting, self.cfg.master, release=release)
        if tokens is not None:
            ex.fit(tokens)
        return ex


class Job:
    """What a job declares; `run` runs it. Subclasses set the class attributes and
    override the hooks they need; ``stages`` is the job's work, returning its manifest."""

    what = "run"  # in messages: "an unfinished tokenize run's work"
    kept: str | None = None  # what a failure keeps for --resume ("the completed passes");
    # None: a run that cannot resume, whose staging folder always goes
    again = "rerun with --resume"  # how a kept run continues
    unique = False  # a staging folder of its own each run, not one a resume finds
    checksums = True  # the manifest holds each file's size and sha256
    head_start = True  # the executor starts while the driver plans and runs tasks
    plans_first = False  # the executor starts after the plan (which may end the run)
    new_folder = False  # the output is a folder no reader knows yet (`publish.finish`)

    def __init__(self, cfg: Any, spark=None) -> None:
        self.cfg = cfg
        self.spark = spark

    def check(self) -> None:
        """The job's inputs checked, before the output's lock (one line, nothing started)."""

    def output(self) -> Location | None:
        """Where the job publishes (None: it measures and publishes nothing): the output
        the config holds, a `Location` since the config was made."""
        return self.cfg.output

    def lock(self, where: Location) -> contextlib.AbstractContextManager[Location]:
        """The output's lock, held while the job runs (`held_output`: the output checked,
        locked and checked again)."""
        return held_output(where, self.cfg.overwrite, self.cfg.storage, self.resume())

    def resume(self) -> bool:
        return bool(getattr(self.cfg, "resume", False))

    def places(self, out: Location) -> Location:
        """The places the job derives from its output, once, under the output's lock and
        before any other step: where the output is built before it is published (returned;
        `publish.staging_for`), and what else the job keeps (a build's text folder)."""
        return staging_for(out, runs_here(self.cfg), unique=self.unique)

    def ahead(self, staging: Location) -> None:
        """Under the output's lock, before the executor starts (a build's text inputs
        tokenized by a run of their own)."""

    def check_executor(self, ex) -> None:
        """May refuse the executor made (raising) before any task runs."""

    def plan(self) -> dict[str, Any] | None:
        """The job's plan, under the output's lock, the executor starting. A manifest
        returned ends the run there (published already, by this very run)."""
        return None

    def claim(self, staging: Location) -> bool:
        """The staging folder made, or a resumed run's kept; whether it resumes."""
        wf.make_dirs(staging)
        return False

    def stages(self, run: Run) -> dict[str, Any]:
        raise NotImplementedError

    def target(self, out: Location) -> Location:
        """What the stages' staging folder is published as (the output itself)."""
        return out

    def publish(self, run: Run, manifest: dict[str, Any]) -> None:
        """The staging folder published as the target, atomically (`publish.finish`)."""
        target = self.target(run.out)
        finish(run.staging, target, manifest, new_folder=self.new_folder, checksums=self.checksums)

    def failed(self) -> None:
        """After a failure, the staging folder handled (what else the run leaves)."""

    def published(self, manifest: dict[str, Any]) -> None:
        """After the publish of ``manifest``, the lock still held (a folder of the run's
        removed, a refresh's new version made current)."""


def run(job: Job) -> dict[str, Any]:
    """Run ``job`` in the one order (see the module's docstring); its manifest."""
    job.check()
    where = job.output()
    if where is None:
        manifest = _unpublished(job)
    else:
        with job.lock(where) as out:
            manifest = _locked(job, out)
    PROGRESS.end()  # the last stage's line
    return manifest


def _starting(job: Job) -> Starting | None:
    return Starting(job.cfg, job.spark, check=job.check_executor) if job.head_start else None


def _unpublished(job: Job) -> dict[str, Any]:
    """A job that measures and publishes nothing: its plan and stages, no lock."""
    starting = _starting(job)
    try:
        job.plan()
        return job.stages(Run(job.cfg, None, None, False, starting, job.spark))  # type: ignore[arg-type]
    finally:
        if starting is not None:
            starting.wait()


def _locked(job: Job, out: Location) -> dict[str, Any]:
    staging = job.places(out)  # once: no later step derives a place from the output
    job.ahead(staging)
    starting = None if job.plans_first else _starting(job)
    try:
        done = job.plan()
        if done is not None:
            return done
        if job.plans_first:
            starting = _starting(job)
        resumed = job.claim(staging)  # refused: another run's work, left as it is
        try:
            run = Run(job.cfg, out, staging, resumed, starting, job.spark)
            with working_in(run.work):  # this run's (`fgram clean`)
                manifest = job.stages(run)
            job.publish(run, manifest)
        except BaseException as exc:
            said = _failed(job, staging, exc)
            if said is not exc:
                raise said from None
            raise
    finally:
        if starting is not None:
            starting.wait()  # no executor left starting behind an end, or a warm-up job
    job.published(manifest)
    return manifest


def _failed(job: Job, staging: Location, exc: BaseException) -> BaseException:
    """A run stopped by ``exc``: its staging folder removed, or (a resumable job, a
    failure that is not our verdict on the input) kept without what its stopped tasks
    half-wrote, and the line said to continue it. The error to raise: ``exc``, or for a
    store down or a full disk, one of its class saying both."""
    if job.kept is None or not keeps_work(exc):
        staging.remove_tree()
        job.failed()
        return exc
    wf.remove_partial(staging)
    where = staging.uri
    kept = f"{job.kept} are kept in {where}: {job.again}"
    if isinstance(exc, RESUMABLE):  # one line: the cause, then what is kept
        return type(exc)(f"{exc}; {kept} {exc.resume_when}")
    exc.fgram_kept = f"{kept} to continue"  # type: ignore[attr-defined]  # cli.main's line
    return exc
