"""What evicted streams leave: kept exactly like a bounded LRU map, in arrays that free memory."""

import subprocess
import sys
import textwrap
from collections import OrderedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockstep.config.settings import AlignSettings
from lockstep.streams.align.aligner import Aligner, AlignOutput
from lockstep.streams.align.marks import Closed, EvictedMarks
from tests.factories import T0, video

pytestmark = pytest.mark.unit

_OPS = st.lists(st.tuples(
    st.sampled_from(["put", "pop", "get", "compact"]),
    st.integers(0, 40),  # stream id
    st.integers(0, 1 << 40),  # end
    st.one_of(st.none(), st.integers(0, 1 << 40))), max_size=300)


@settings(max_examples=150, deadline=None)
@given(ops=_OPS, capacity=st.integers(1, 30), batch=st.integers(1, 12))
def test_marks_behave_like_a_bounded_map_that_forgets_the_oldest_first(
        ops: list[tuple[str, int, int, int | None]], capacity: int, batch: int) -> None:
    marks, model = EvictedMarks(capacity, batch), OrderedDict[str, Closed]()
    for op, i, end, anchor in ops:
        key = f"cam-{i}"
        if op == "put":
            marks.put(key, Closed(end, anchor))
            model[key] = Closed(end, anchor)
            model.move_to_end(key)
            while len(model) > capacity:
                model.popitem(last=False)
        elif op == "pop":
            assert marks.pop(key) == model.pop(key, None)
        elif op == "get":
            assert marks.get(key) == model.get(key)
        else:
            marks.compact()
        assert len(marks) == len(model)
    assert all(marks.get(k) == v for k, v in model.items())


def test_a_returning_stream_whose_only_token_is_late_is_still_evicted_after_its_ttl() -> None:
    al = Aligner(AlignSettings(max_streams=1, stream_ttl_ms=1_000, required=("video",)),
                 "cabin")
    out = AlignOutput()
    out.extend(al.add(video(stream="a", seq=5, t_us=T0), T0 + 1_000))
    out.extend(al.add(video(stream="b", seq=0, t_us=T0), T0 + 2_000))  # evicts "a"
    out.extend(al.add(video(stream="a", seq=5, t_us=T0), T0 + 3_000))  # evicts "b"; late
    assert [(x.stream_id, x.seq) for x in out.late] == [("a", 5)]
    out.extend(al.poll(T0 + 1_010_000))
    assert al.stream_count == 0


_FLOOD = textwrap.dedent("""
    import ctypes, gc, sys
    from lockstep.streams.align.aligner import Aligner
    from lockstep.config.settings import AlignSettings
    from lockstep.topics.schemas import Modality
    from tests.factories import T0, video

    def rss_kb():
        return int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS")).split()[1])

    N = 30_000
    frame = video()
    al = Aligner(AlignSettings(max_streams=5_000, max_evicted_streams=100_000,
                               stream_ttl_ms=5_000, required=("video",)), "cabin")
    al.add(frame.model_copy(update={"stream_id": "warm-up"}), T0 + 1)
    al.flush(T0 + 2); al.poll(T0 + 10_000_000); al.compact(); gc.collect()
    ctypes.CDLL(None).malloc_trim(0)
    start = rss_kb()
    for i in range(N):
        now = T0 + 20_000_000 + i * 50
        al.add(frame.model_copy(update={"stream_id": f"flood-{i}", "t_us": now}), now + 1_000)
        if i % 100 == 0:
            al.poll(now + 1_000)
    peak = rss_kb()
    al.poll(T0 + 60_000_000)  # past every TTL
    al.compact(); gc.collect(); ctypes.CDLL(None).malloc_trim(0)
    after, live, remembered = rss_kb(), al.stream_count, al.evicted_count
    late = al.add(frame.model_copy(update={"stream_id": "flood-7", "t_us": T0 + 20_000_350}),
                  T0 + 61_000_000).late
    print(start, peak, after, live, remembered, len(late))
""")


def test_rss_returns_near_its_start_once_a_flood_of_streams_is_evicted() -> None:
    done = subprocess.run([sys.executable, "-c", _FLOOD], capture_output=True, text=True,
                          timeout=300, check=True)
    start, peak, after, live, remembered, late = map(int, done.stdout.split())
    assert peak > start * 1.3  # the flood did take memory
    assert live == 0 and remembered == 30_001  # every stream evicted, every mark kept
    assert late == 1  # an old frame of a flood stream still goes late: its mark held
    assert after <= start * 1.2, (start, peak, after)
