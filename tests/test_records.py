"""Records that cross processes or land on disk: typed, versioned, and equal after a JSON
round trip (the way a resumed run reads them)."""

import json

from fgram.jobs.build.state import STATE_FORMAT, BuildState
from fgram.pipeline.config import BuildConfig


def test_build_state_survives_json_with_its_integer_keys():
    st = BuildState.fresh(BuildConfig(inputs=["x"], output="y", min_count=3))
    assert (st.next, st.threshold, st.hists, st.prev) == (2, 3, {}, None)
    st.hists = {2: {5: 10, 7: 1}, 3: {5: 2}}
    st.offsets = {2: [0, 4, 11]}
    st.codes = {2: [16, 16], 3: [22, 16]}
    st.passes.append({"length": 2, "kept": 11})
    st.prev, st.next, st.kept, st.top_token = {"nparts": 2, "broadcast": True}, 3, 11, 4999
    text = json.dumps(st.to_json())  # what state.json holds
    back = BuildState.from_json(json.loads(text))
    assert back == st and back is not st
    assert list(back.hists[2]) == [5, 7] and all(isinstance(k, int) for k in back.codes)
    assert json.loads(text)["format"] == STATE_FORMAT
    assert BuildState.from_json({**json.loads(text), "format": STATE_FORMAT + 1}) is None
