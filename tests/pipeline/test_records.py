"""Records that cross processes or land on disk: typed, versioned, and equal after a JSON
round trip (the way a resumed run, a later refresh or a reader reads them)."""

import json

import pytest
from helpers import manifest, write_bin

from fgram.api import build, refresh
from fgram.jobs.refresh import tasks as rtasks
from fgram.jobs.refresh.store import StoreRecord
from fgram.jobs.table.passes import RangeMerge, UnitCount
from fgram.jobs.table.state import STATE_FORMAT, BuildState
from fgram.pipeline.config.commands import BuildConfig
from fgram.pipeline.records import PassRecord, TableManifest
from fgram.pipeline.tables import versions as vs


def through_json(record):
    """``record`` written as JSON text and read back, as a file holds it."""
    return type(record).from_json(json.loads(json.dumps(record.to_json())))


def a_pass(k: int = 2, **extra) -> PassRecord:
    return PassRecord(
        length=k,
        count_threshold=3,
        threshold=4,
        candidates=100,
        kept=11,
        partitions=2,
        seconds=0.5,
        stages={"count": 0.3, "merge": 0.1, "keep": 0.1},
        **extra,
    )


def test_build_state_survives_json_with_its_integer_keys():
    st = BuildState.fresh(BuildConfig(inputs=["x"], output="y", min_count=3))
    assert (st.next, st.threshold, st.hists, st.prev) == (2, 3, {}, None)
    st.hists = {2: {5: 10, 7: 1}, 3: {5: 2}}
    st.offsets = {2: [0, 4, 11]}
    st.codes = {2: [16, 16], 3: [22, 16]}
    st.passes.append(a_pass(distinct=40, key_bits=[16, 16], lookup="broadcast"))
    st.prev, st.next, st.kept, st.top_token = {"nparts": 2, "broadcast": True}, 3, 11, 4999
    text = json.dumps(st.to_json())  # what state.json holds
    back = BuildState.from_json(json.loads(text))
    assert back == st and back is not st
    assert list(back.hists[2]) == [5, 7] and all(isinstance(k, int) for k in back.codes)
    assert isinstance(back.passes[0], PassRecord) and back.passes[0].lookup == "broadcast"
    assert json.loads(text)["format"] == STATE_FORMAT
    assert BuildState.from_json({**json.loads(text), "format": STATE_FORMAT + 1}) is None


def test_a_pass_record_writes_only_the_fields_its_job_has():
    build = a_pass(distinct=40, key_bits=[16, 16], lookup="join")
    refresh = a_pass(new_units=2, scanned_units=0, compacted=True, task_seconds={"count": 1.0})
    assert "new_units" not in build.to_json() and "lookup" not in refresh.to_json()
    assert "format" not in build.to_json()  # versioned by the manifest that holds it
    for rec in (build, refresh):
        assert through_json(rec) == rec


@pytest.mark.parametrize(
    "record",
    [
        UnitCount(unit=3, documents=2, tokens=50, counted=40, distinct=30, max_token=9),
        RangeMerge(part=1, hist={5: 2, 12: 1}),
        rtasks.UnitCount(
            unit=0,
            run={"keys": "a.npy", "counts": "b.npy", "n": 4},
            documents=1,
            tokens=9,
            counted=7,
            rare=None,
            seconds=0.1,
        ),
        rtasks.UnitScan(unit=2, run=None, at_rare=True, at_anchors=False, seconds=0.2),
        rtasks.RangeTotals(part=0, hist={4: 1}, piece=None, delta=0),
        rtasks.TableUpdate(table=None, old_size=0, added=0, scan_rows=0),
    ],
    ids=lambda r: type(r).__module__.rsplit(".", 1)[-1] + "." + type(r).__name__,
)
def test_task_summaries_survive_json_and_carry_a_format(record):
    back = through_json(record)
    assert back == record and back is not record
    assert record.to_json()["format"] == type(record).FORMAT
    assert type(record).from_json({**record.to_json(), "format": -1}) is None
    if hasattr(record, "hist"):
        assert all(isinstance(c, int) for c in back.hist)


OPTIONS = {"max_len": 4, "min_count": 2, "doc_sep": 0, "engine": "local"}


def test_one_manifest_for_build_and_refresh_and_store_json_round_trip(tmp_path):
    """A build's and a refresh's manifest.json are the same record (`TableManifest`), read
    back equal; so is the refresh's store.json (`StoreRecord`), which a later refresh
    reads to reuse its partial counts."""
    docs = [[1, 2, 3, 1, 2, 3, 4]] * 5 + [[4, 3, 2, 1]] * 3
    a = write_bin(str(tmp_path / "a.bin"), docs, sep=0)
    b = write_bin(str(tmp_path / "b.bin"), [[2, 3, 4, 1, 2, 3]] * 4, sep=0)
    built = build(tmp_path / "t", [a, b], **OPTIONS)
    assert built == manifest(tmp_path / "t")
    refresh(tmp_path / "out", [a], **OPTIONS)
    second = refresh(tmp_path / "out", [a, b], **OPTIONS)
    refreshed = second["manifest"]
    for m in (built, refreshed):
        rec = TableManifest.from_json(m)
        assert rec is not None and all(isinstance(p, PassRecord) for p in rec.passes)
        assert rec.to_json() == m
        assert m["format"] == TableManifest.FORMAT and m["kind"] == "fgram-table"
    # the drift of two builders: the same fields where both have them
    shared = set(built) & set(refreshed)
    assert {"head_start_tasks", "executor_start_seconds", "run_fingerprint"} <= shared
    assert set(built) - shared == {"units", "positions"}
    assert set(refreshed) - shared == {"timing", "refresh"}
    assert refreshed["fgrams"] == built["fgrams"]
    assert refreshed["cutoff_count"] == built["cutoff_count"]
    path = tmp_path / "out" / "versions" / second["version"] / "store.json"
    on_disk = json.loads(path.read_text())
    store = StoreRecord.from_json(on_disk)
    assert store is not None and json.loads(json.dumps(store.to_json())) == on_disk
    assert all(isinstance(k, int) for k in store.levels)
    assert all(isinstance(k, int) for e in store.shards.values() for k in e.partials)
    assert len(store.shards) == 2 and vs.current(str(tmp_path / "out")) == second["version"]
