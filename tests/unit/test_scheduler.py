import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockstep.engines.batching.latency import LatencyModel, LatencyPrior
from lockstep.engines.batching.policy import (
    FifoBatcher,
    SchedulerConfig,
    SingleBatcher,
    share_budget,
    uncertainty,
)
from lockstep.engines.batching.scheduler import DeadlineScheduler, make_policy
from tests.factories import T0, request

pytestmark = pytest.mark.unit

MS = 1000


def _model(fixed_ms: float = 10, per_item_ms: float = 1) -> LatencyModel:
    """A latency model that knows the engine exactly: fixed + per_item * n, halved at level 2."""
    model = LatencyModel(LatencyPrior(), token_fractions=(1.0, 0.5, 0.25), min_samples=1)
    for n in (1, 2, 4, 8, 16):
        full = int((fixed_ms + per_item_ms * n) * MS)
        model.observe(n, full, 0)
        model.observe(n, int(full * 0.75), 1)
        model.observe(n, full // 2, 2)
    return model


def _sched(**cfg: object) -> DeadlineScheduler[int]:
    base: dict[str, object] = dict(max_batch=4, max_queue=64, max_queue_delay_us=500 * MS,
                                   margin_us=1 * MS, priority_lead_us=0)
    base.update(cfg)
    return DeadlineScheduler(SchedulerConfig(**base), _model())  # type: ignore[arg-type]


def test_dispatches_in_earliest_deadline_order_not_arrival_order() -> None:
    s = _sched(max_batch=2)
    for seq, deadline in enumerate((300, 100, 200, 400)):
        s.admit(seq, request(seq, deadline_us=T0 + deadline * MS), T0)
    first = s.poll(T0, free_slots=1).batch
    second = s.poll(T0, free_slots=1).batch
    assert first is not None and second is not None
    assert [p.handle for p in first.members] == [1, 2]
    assert [p.handle for p in second.members] == [0, 3]


def test_equal_deadlines_go_to_the_higher_priority_first() -> None:
    s = _sched(max_batch=1)
    s.admit(0, request(0, priority=0.2, deadline_us=T0 + 100 * MS), T0)
    s.admit(1, request(1, priority=0.9, deadline_us=T0 + 100 * MS), T0)
    batch = s.poll(T0, free_slots=1).batch
    assert batch is not None and batch.members[0].handle == 1


def test_priority_lead_lets_an_urgent_class_overtake_a_slightly_earlier_deadline() -> None:
    s = _sched(max_batch=1, priority_lead_us=20 * MS)
    s.admit(0, request(0, priority=0.0, deadline_us=T0 + 100 * MS), T0)
    s.admit(1, request(1, priority=1.0, deadline_us=T0 + 110 * MS), T0)
    batch = s.poll(T0, free_slots=1).batch
    assert batch is not None and batch.members[0].handle == 1


def test_waits_while_the_most_urgent_request_has_slack() -> None:
    s = _sched()
    s.admit(0, request(0, deadline_us=T0 + 100 * MS), T0)
    decision = s.poll(T0, free_slots=1)
    assert decision.batch is None
    # It must wake before slack runs out: deadline - latency(2) - margin = 100 - 12 - 1 ms.
    assert decision.wake_us == T0 + 87 * MS


def test_dispatches_when_the_slack_falls_below_expected_latency_plus_margin() -> None:
    s = _sched()
    s.admit(0, request(0, deadline_us=T0 + 100 * MS), T0)
    assert s.poll(T0 + 86 * MS, free_slots=1).batch is None
    batch = s.poll(T0 + 87 * MS, free_slots=1).batch
    assert batch is not None and batch.level == 0 and len(batch.items) == 1


def test_dispatches_a_full_batch_at_once() -> None:
    s = _sched(max_batch=3)
    for i in range(3):
        s.admit(i, request(i, deadline_us=T0 + 500 * MS), T0)
    batch = s.poll(T0, free_slots=1).batch
    assert batch is not None and len(batch.items) == 3


def test_dispatches_after_the_max_queue_delay_even_with_slack() -> None:
    s = _sched(max_queue_delay_us=20 * MS)
    s.admit(0, request(0, deadline_us=T0 + 10_000 * MS), T0)
    assert s.poll(T0 + 19 * MS, free_slots=1).batch is None
    assert s.poll(T0 + 20 * MS, free_slots=1).batch is not None


def test_holds_batches_while_the_engine_is_busy() -> None:
    s = _sched(max_batch=1)
    s.admit(0, request(0, deadline_us=T0 + 500 * MS), T0)
    assert s.poll(T0, free_slots=0).batch is None
    assert s.depth == 1


def test_sheds_a_request_that_cannot_finish_even_alone_and_degraded() -> None:
    s = _sched()
    # Alone at the most degraded level the engine needs (10 + 1) / 2 = 5.5 ms.
    s.admit(0, request(0, deadline_us=T0 + 5 * MS), T0)
    s.admit(1, request(1, deadline_us=T0 + 500 * MS), T0)
    decision = s.poll(T0, free_slots=1)
    assert [p.handle for p in decision.expired] == [0]
    assert s.depth == 1


def test_shedding_can_be_turned_off() -> None:
    s = _sched(shed=False)
    s.admit(0, request(0, deadline_us=T0 + 1 * MS), T0)
    decision = s.poll(T0, free_slots=1)
    assert decision.expired == []
    assert decision.batch is not None and decision.batch.members[0].handle == 0


def test_degrades_when_full_service_would_miss_deadlines_that_degraded_service_meets() -> None:
    s = _sched(max_batch=4)
    # Four requests due in 10 ms: full service of 4 takes 14 ms + 1 margin, level 1 takes
    # 10.5 ms + 1, level 2 takes 7 ms + 1: only level 2 serves all four in time.
    for i in range(4):
        s.admit(i, request(i, deadline_us=T0 + 10 * MS), T0)
    batch = s.poll(T0, free_slots=1).batch
    assert batch is not None
    assert batch.level == 2 and len(batch.items) == 4
    assert all(item.reduce_vision and item.level == 2 for item in batch.items)


def test_does_not_degrade_when_full_service_meets_every_deadline() -> None:
    s = _sched(max_batch=4)
    for i in range(4):
        s.admit(i, request(i, deadline_us=T0 + 100 * MS), T0)
    batch = s.poll(T0, free_slots=1).batch
    assert batch is not None and batch.level == 0
    assert all(item.max_new_tokens == 32 and not item.reduce_vision for item in batch.items)


def test_degraded_budget_goes_to_the_uncertain_requests_and_at_least_one_token_each() -> None:
    s = _sched(max_batch=3, full_tokens=40)
    confidences = (0.99, 0.6, 0.5)
    for i, c in enumerate(confidences):
        s.admit(i, request(i, deadline_us=T0 + 8 * MS, confidence={"gate": c}), T0)
    batch = s.poll(T0, free_slots=1).batch
    assert batch is not None and batch.level == 2
    tokens = {p.handle: item.max_new_tokens for p, item in zip(batch.members, batch.items,
                                                                 strict=True)}
    assert tokens[0] >= 1
    assert tokens[0] < tokens[1] <= tokens[2] <= 10  # level 2 caps at 40 * 0.25


def test_leaves_out_a_request_that_would_make_the_batch_late_for_it() -> None:
    s = _sched(max_batch=4, degrade=False)
    s.admit(0, request(0, deadline_us=T0 + 12 * MS), T0)  # fits alone (11 + 1 ms)
    for i in range(1, 4):
        s.admit(i, request(i, deadline_us=T0 + 200 * MS), T0)
    batch = s.poll(T0, free_slots=1).batch
    assert batch is not None and [p.handle for p in batch.members] == [0]
    nxt = s.poll(T0 + 11 * MS, free_slots=1)
    assert nxt.batch is None and s.depth == 3  # the rest wait for company or slack


def test_fifo_keeps_arrival_order_and_dispatches_on_its_fixed_delay() -> None:
    f: FifoBatcher[int] = FifoBatcher(SchedulerConfig(max_batch=4, max_queue_delay_us=5 * MS))
    f.admit(0, request(0, deadline_us=T0 + 900 * MS), T0)
    f.admit(1, request(1, deadline_us=T0 + 1 * MS), T0 + MS)
    assert f.poll(T0 + 4 * MS, free_slots=1).batch is None
    decision = f.poll(T0 + 5 * MS, free_slots=1)
    assert decision.expired == []  # FIFO never sheds: the late one is served late
    assert decision.batch is not None and [p.handle for p in decision.batch.members] == [0, 1]


def test_batch1_serves_one_at_a_time_in_arrival_order() -> None:
    b: SingleBatcher[int] = SingleBatcher(SchedulerConfig(max_batch=8))
    for i in range(3):
        b.admit(i, request(i, deadline_us=T0 + (3 - i) * MS), T0)
    handles: list[int] = []
    while (batch := b.poll(T0, free_slots=1).batch) is not None:
        handles.extend(p.handle for p in batch.members)
    assert handles == [0, 1, 2]


def test_the_queue_reports_full_at_its_bound() -> None:
    s = _sched(max_queue=2)
    s.admit(0, request(0), T0)
    assert not s.full
    s.admit(1, request(1), T0)
    assert s.full and s.depth == 2


def test_unknown_policy_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown batching policy 'lifo'"):
        make_policy("lifo", SchedulerConfig())


def test_uncertainty_peaks_at_low_confidence_and_vanishes_at_certainty() -> None:
    assert uncertainty(request(confidence={"gate": 1.0})) == 0.0
    sure, unsure = (uncertainty(request(confidence={"gate": c})) for c in (0.95, 0.5))
    assert 0.0 < sure < unsure == pytest.approx(0.5)


def test_share_budget_is_proportional_capped_and_never_zero() -> None:
    assert share_budget([0.0, 1.0, 3.0], total=40, cap=25) == [1, 10, 25]
    assert share_budget([0.0, 0.0], total=10, cap=8) == [5, 5]


def test_latency_model_learns_p95_per_size_and_interpolates_between_sizes() -> None:
    m = LatencyModel(LatencyPrior(fixed_us=1, per_item_us=1), min_samples=3)
    for v in (10, 10, 10, 10, 10, 10, 10, 10, 10, 30):
        m.observe(2, v * MS)
    for _ in range(5):
        m.observe(8, 40 * MS)
    assert m.expected_us(2) == pytest.approx(21 * MS, rel=0.01)  # P95, not the mean (12)
    assert m.expected_us(5) == pytest.approx((21 + 40) / 2 * MS, rel=0.01)
    assert m.expected_us(1) == m.expected_us(2)  # monotone: never faster than what was seen
    assert m.expected_us(16) > m.expected_us(8)


def test_latency_model_scales_an_unobserved_level_from_full_service() -> None:
    m = LatencyModel(LatencyPrior(fixed_share=0.4), token_fractions=(1.0, 0.5), min_samples=1)
    m.observe(4, 20 * MS)
    assert m.expected_us(4, level=1) == int(20 * MS * (0.4 + 0.6 * 0.5))


def test_latency_model_uses_the_prior_until_it_has_samples() -> None:
    m = LatencyModel(LatencyPrior(fixed_us=5 * MS, per_item_us=MS))
    assert m.expected_us(4) == 9 * MS
    m.observe(4, 30 * MS)
    assert m.expected_us(4) == 9 * MS  # one sample is not a distribution yet


def test_the_batch_that_strands_fewest_requests_wins_over_the_biggest() -> None:
    s = _sched(max_batch=8, degrade=False, max_queue_delay_us=0)
    # Two requests due in 13 ms fit only in a batch of at most 2 (12 ms + 1 ms margin);
    # six loose ones could fill a batch of 6 (16 ms) but would strand the two.
    for i in range(2):
        s.admit(i, request(i, deadline_us=T0 + 13 * MS), T0)
    for i in range(2, 8):
        s.admit(i, request(i, deadline_us=T0 + 300 * MS), T0)
    batch = s.poll(T0, free_slots=1).batch
    assert batch is not None and sorted(p.handle for p in batch.members) == [0, 1]


def test_goes_at_once_when_no_company_is_expected_before_the_batch_is_due() -> None:
    sparse = _sched(max_queue_delay_us=10 * MS)
    dense = _sched(max_batch=16, max_queue_delay_us=10 * MS)
    for i in range(10):  # one request every 100 ms, each served alone
        sparse.admit(i, request(i, deadline_us=T0 + (i * 100 + 500) * MS), T0 + i * 100 * MS)
        batch = sparse.poll(T0 + i * 100 * MS, free_slots=1).batch
        assert (batch is not None) == (i >= 8)  # once the rate is known, no pointless wait
        while sparse.poll(T0 + i * 100 * MS + 20 * MS, free_slots=1).batch is not None:
            pass
    for i in range(10):  # one every millisecond: company is coming, wait for it
        dense.admit(i, request(i, deadline_us=T0 + 500 * MS), T0 + i * MS)
    assert dense.poll(T0 + 9 * MS, free_slots=1).batch is None
    assert dense.poll(T0 + 10 * MS, free_slots=1).batch is not None  # max delay reached


def test_goes_at_once_when_the_engine_keeps_up_without_batching() -> None:
    def arrivals(s: DeadlineScheduler[int]) -> DeadlineScheduler[int]:
        for i in range(10):  # one every 5 ms, plenty of slack, max delay 10 ms
            s.admit(i, request(i, deadline_us=T0 + 500 * MS), T0 + i * 5 * MS)
            if i < 9:
                while s.poll(T0 + i * 5 * MS + 4 * MS, free_slots=1).batch is not None:
                    pass
        return s

    cfg = SchedulerConfig(max_batch=16, max_queue=64, max_queue_delay_us=10 * MS,
                          margin_us=1 * MS, priority_lead_us=0)
    # 1 ms a request alone, arrivals every 5 ms: the engine is idle 80 % of the time.
    cheap = arrivals(DeadlineScheduler(cfg, _model(fixed_ms=0.8, per_item_ms=0.2)))
    batch = cheap.poll(T0 + 45 * MS, free_slots=1).batch
    assert batch is not None and len(batch.items) == 1
    # 11 ms alone: serving singles would overrun the engine, so company is worth waiting for.
    costly = arrivals(DeadlineScheduler(cfg, _model(fixed_ms=10, per_item_ms=1)))
    assert costly.poll(T0 + 45 * MS, free_slots=1).batch is None


def test_reads_the_arrival_rate_over_time_when_requests_come_in_bursts() -> None:
    # A consumer's fetch admits a burst at once, then nothing until the next fetch: 30
    # requests every 60 ms, served in 6 ms as one batch (the engine idle 90 % of the time).
    cfg = SchedulerConfig(max_batch=64, max_queue=256, max_queue_delay_us=10 * MS,
                          margin_us=1 * MS, priority_lead_us=0)
    s = DeadlineScheduler(cfg, _model(fixed_ms=3, per_item_ms=0.1))
    for burst in range(4):
        at = T0 + burst * 60 * MS
        for i in range(30):
            s.admit(burst * 30 + i, request(burst * 30 + i, deadline_us=at + 500 * MS), at)
        batch = s.poll(at, free_slots=1).batch
        if burst:  # the first bursts tell the rate
            # Waiting for company that comes 60 ms later only adds latency.
            assert batch is not None and len(batch.items) == 30, burst
        else:
            while batch is not None:
                batch = s.poll(at, free_slots=1).batch
            assert s.poll(at + 11 * MS, free_slots=1).batch is not None
    assert 1_900 <= s.mean_gap_us(T0 + 240 * MS) <= 2_100  # 2 ms: 30 per 60 ms


def _choose_one_by_one(s: DeadlineScheduler[int], now_us: int) -> tuple[int, list[int]]:
    """The batch choice as its docstring states it, candidate by candidate (the reference)."""
    cfg, queue = s.config, s._queue
    after = s._alone_us() + cfg.margin_us
    best: tuple[float, float] | None = None
    choice: tuple[int, list[int]] = (0, [])
    for level in cfg.levels:
        for n in range(1, min(len(queue), cfg.max_batch) + 1):
            finish = now_us + s.latency.expected_us(n, level) + cfg.margin_us
            took = [i for i, p in enumerate(queue) if p.request.deadline_us >= finish][:n]
            done = now_us + s.latency.expected_us(max(len(took), 1), level)
            lost = sum(1.0 + p.request.priority for i, p in enumerate(queue)
                       if i not in took and p.request.deadline_us < done + after)
            key = (-lost, sum(1.0 + queue[i].request.priority for i in took))
            if best is None or key > best:
                best, choice = key, (level, took)
    return choice[0], [queue[i].handle for i in choice[1]]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 4)), min_size=1, max_size=40),
       st.integers(1, 16), st.booleans())
def test_the_batch_choice_is_the_reference_candidate_by_candidate(
        queue: list[tuple[int, int]], max_batch: int, degrade: bool) -> None:
    s = _sched(max_batch=max_batch, degrade=degrade)
    for i, (deadline_ms, quarters) in enumerate(queue):  # priorities exact in binary
        s.admit(i, request(i, deadline_us=T0 + deadline_ms * MS, priority=quarters / 4), T0)
    level, members = s._choose(T0)
    assert (level, [p.handle for p in members]) == _choose_one_by_one(s, T0)


def test_company_is_not_awaited_past_the_queue_stage_budget_counted_from_route() -> None:
    # Slack of 100 ms and a 500-ms max delay would hold the request for ~87 ms; its queue
    # stage began at route's receipt, 4 ms before it got here, with a 12-ms budget and a
    # 1-ms margin: it goes 7 ms after admission at the latest.
    s = _sched(queue_budget_us=12 * MS)
    s.admit(0, request(0, deadline_us=T0 + 100 * MS, routed_us=T0 - 4 * MS), T0)
    decision = s.poll(T0, free_slots=1)
    assert decision.batch is None and decision.wake_us == T0 + 7 * MS
    assert s.poll(T0 + 7 * MS - 1, free_slots=1).batch is None
    assert s.poll(T0 + 7 * MS, free_slots=1).batch is not None
    # Without the budget (a trace with no route) the slack alone decides, as before.
    plain = _sched()
    plain.admit(0, request(0, deadline_us=T0 + 100 * MS, routed_us=T0 - 4 * MS), T0)
    assert plain.poll(T0, free_slots=1).wake_us == T0 + 87 * MS


@pytest.mark.parametrize("policy", ["lockstep", "fifo", "batch1"])
def test_withdraw_takes_the_selected_requests_out_and_keeps_the_others_in_order(
        policy: str) -> None:
    q = make_policy(policy, SchedulerConfig(max_batch=8, max_queue_delay_us=0, shed=False))
    for i in range(6):
        q.admit(i, request(i, deadline_us=T0 + (10 + i) * MS), T0)
    taken = q.withdraw(lambda handle: handle % 2 == 1)
    assert [p.handle for p in taken] == [1, 3, 5] and q.depth == 3
    served: list[int] = []
    while (batch := q.poll(T0, free_slots=1).batch) is not None:
        served.extend(p.handle for p in batch.members)
    assert served == [0, 2, 4]
