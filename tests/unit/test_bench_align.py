import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from lockstep.bench.align import AlignBenchOptions, run_align_bench
from lockstep.bench.align_table import render_align
from lockstep.bench.baseline import GridAligner, GridOutput
from lockstep.bench.faults import Capture, CaptureKey, FaultSpec, generate
from lockstep.bench.score import Pairing, Truth, pairing_from_window, score
from lockstep.cli.bench import bench
from lockstep.topics.schemas import Modality, ModalityState, Token, Window
from tests.factories import T0, audio, ocr, sensor, video

pytestmark = pytest.mark.unit

FRAME = 33_333
MS = 1000


def _truth(*tokens: Token) -> dict[CaptureKey, Capture]:
    """Ground truth where every token was captured at its own t_us."""
    return {(t.stream_id, t.modality, t.seq): Capture(
        t.t_us, getattr(t, "duration_us", 0), True) for t in tokens}


def _scene(audio_shift_us: int = 0) -> tuple[list[Token], dict[CaptureKey, Capture]]:
    """Three frames; 20 ms audio chunks, 100 Hz sensor and one OCR, phase-shifted.

    The truth is every token at its unshifted time; ``audio_shift_us`` moves the audio's
    reported t_us (a skewed audio clock).
    """
    frames = [video(seq=i, t_us=T0 + i * FRAME) for i in range(3)]
    chunks = [audio(seq=j, t_us=T0 - 10 * MS + j * 20 * MS) for j in range(5)]
    readings = [sensor(seq=k, t_us=T0 - 3 * MS + k * 10 * MS) for k in range(9)]
    sign = [ocr(seq=0, t_us=T0 - 1 * MS)]
    truth = _truth(*frames, *chunks, *readings, *sign)
    sent = [c.model_copy(update={"t_us": c.t_us + audio_shift_us}) for c in chunks]
    return sorted([*frames, *sent, *readings, *sign], key=lambda t: t.t_us), truth


def _run_grid(tokens: list[Token]) -> GridOutput:
    grid, out = GridAligner(), GridOutput()
    for t in tokens:
        out.extend(grid.poll(t.t_us + MS))
        out.extend(grid.add(t, t.t_us + MS))
    out.extend(grid.flush(T0 + 10**6))
    return out


def test_baseline_on_a_perfectly_aligned_scene_scores_no_misaligned_window() -> None:
    tokens, truth = _scene()
    out = _run_grid(tokens)
    result = score([w.pairing() for w in out.windows], Truth(truth))
    assert [w.anchor_seq for w in out.windows] == [0, 1, 2]
    assert result.windows == 3 and result.anchorless == 0
    assert result.misaligned == 0 and result.partial == 0
    assert max(result.errors()) == 0
    assert [w.matched[Modality.AUDIO] for w in out.windows] == [0, 2, 3]  # covering chunks


def test_baseline_with_a_skewed_audio_clock_pairs_the_wrong_chunk() -> None:
    tokens, truth = _scene(audio_shift_us=25 * MS)
    out = _run_grid(tokens)
    result = score([w.pairing() for w in out.windows], Truth(truth))
    # Frame 1 (33 ms) is covered by chunk 2 ([30, 50) ms) but chunk 0 reports [15, 35) ms.
    assert out.windows[1].anchor_seq == 1 and out.windows[1].matched[Modality.AUDIO] == 0
    assert result.misaligned == 2 == result.misaligned_by_modality[Modality.AUDIO]
    assert sorted(result.errors(Modality.AUDIO)) == [20 * MS, 40 * MS]


def test_baseline_grid_starts_at_the_first_frame_and_holds_earlier_tokens() -> None:
    grid = GridAligner()
    assert grid.add(sensor(seq=0, t_us=T0 - 5 * MS), T0).windows == []
    grid.add(video(seq=0, t_us=T0), T0)
    window = grid.flush(T0).windows[0]
    assert window.slot == 0 and window.slot_t_us == T0
    assert window.members == {Modality.SENSOR: (0,), Modality.VIDEO: (0,)}
    assert window.missing == (Modality.AUDIO,) and window.partial


def test_baseline_emits_a_slot_once_event_time_passed_its_hold_and_then_calls_it_late() -> None:
    grid = GridAligner(hold_ms=100)
    grid.add(video(seq=0, t_us=T0), T0)
    assert grid.add(sensor(seq=0, t_us=T0 + 99 * MS), T0).windows == []
    out = grid.add(sensor(seq=1, t_us=T0 + 100 * MS), T0)
    assert [w.slot for w in out.windows] == [0]
    late = grid.add(audio(seq=0, t_us=T0 - 10 * MS), T0)
    assert late.late == [("s", Modality.AUDIO, 0)]


def test_baseline_calls_tokens_of_a_stream_without_frames_late_at_flush() -> None:
    grid = GridAligner()
    grid.add(audio(stream="mute", seq=0, t_us=T0), T0)
    out = grid.flush(T0)
    assert out.windows == [] and out.late == [("mute", Modality.AUDIO, 0)]


def _pairing(anchor: int | None, **matched: int) -> Pairing:
    return Pairing("s", anchor, {Modality(m): s for m, s in matched.items()}, partial=False)


def _point_truth() -> Truth:
    tokens = [video(seq=0, t_us=T0), audio(seq=0, t_us=T0 - 15 * MS),
              audio(seq=1, t_us=T0 + 5 * MS), *[sensor(seq=k, t_us=T0 - 12 * MS + k * 10 * MS)
                                               for k in range(4)],
              ocr(seq=0, t_us=T0 - 400 * MS), ocr(seq=1, t_us=T0 + 100 * MS)]
    return Truth(_truth(*tokens))


def test_scorer_accepts_the_ideal_token_of_each_modality() -> None:
    # audio chunk 0 covers [-15, +5) ms, sensor 1 is at -2 ms, OCR 0 at -400 ms
    result = score([_pairing(0, audio=0, sensor=1, ocr=0)], _point_truth())
    assert result.misaligned == 0 and result.errors() == [0, 0, 0]


def test_scorer_accepts_the_sensor_reading_at_or_before_the_anchor_but_not_earlier() -> None:
    truth = _point_truth()  # readings at -12, -2, +8, +18 ms: nearest -2 (seq 1)
    assert score([_pairing(0, sensor=1)], truth).misaligned == 0
    assert score([_pairing(0, sensor=0)], truth).misaligned == 1
    assert score([_pairing(0, sensor=2)], truth).misaligned == 1


def test_scorer_calls_an_ocr_captured_after_the_anchor_misaligned() -> None:
    result = score([_pairing(0, ocr=1)], _point_truth())
    assert result.misaligned_by_modality[Modality.OCR] == 1
    assert result.error_ms(50) == 500.0


def test_scorer_judges_audio_in_a_gap_against_the_matching_tolerance() -> None:
    captures = dict(_point_truth().captures)
    captures[("s", Modality.AUDIO, 0)] = replace(captures[("s", Modality.AUDIO, 0)],
                                                 delivered=False)
    truth = Truth(captures)  # the anchor falls in a gap; chunk 1 starts 5 ms after it
    within = score([_pairing(0, audio=1)], truth, tolerance_us=15 * MS)
    assert within.misaligned == 0 and within.misaligned_strict == 1
    assert within.errors(Modality.AUDIO) == [5 * MS]  # distance to the chunk's interval
    assert score([_pairing(0, audio=1)], truth, tolerance_us=2 * MS).misaligned == 1


def test_scorer_counts_windows_without_anchor_apart_from_the_rate() -> None:
    result = score([_pairing(None, audio=1), _pairing(0, audio=1)], _point_truth())
    assert (result.windows, result.anchorless, result.anchored) == (2, 1, 1)
    assert result.rate(result.misaligned) == 1.0


def _window(states: dict[Modality, ModalityState], **content: object) -> Window:
    return Window(stream_id="s", window_seq=0, t_start_us=T0 - 50 * MS, t_end_us=T0 + 50 * MS,
                  anchor_t_us=T0, slo_class="cabin", modalities=states, missing=[],
                  members={}, video=video(seq=0, t_us=T0), **content)  # type: ignore[arg-type]


def test_window_pairing_uses_matched_seq_and_skips_absent_modalities() -> None:
    states = {Modality.VIDEO: ModalityState(present=True),
              Modality.AUDIO: ModalityState(present=True, matched_seq=7),
              Modality.SENSOR: ModalityState(present=False, matched_seq=3)}
    pairing = pairing_from_window(_window(states))
    assert pairing.anchor_seq == 0 and pairing.matched == {Modality.AUDIO: 7}
    assert pairing.inferred == 0


def test_window_pairing_reads_the_match_off_the_tokens_without_matched_seq() -> None:
    states = {Modality.AUDIO: ModalityState(present=True),
              Modality.OCR: ModalityState(present=True)}
    window = _window(states, audio=[audio(seq=4, t_us=T0 - 30 * MS),
                                    audio(seq=5, t_us=T0 - 10 * MS)],
                     ocr=[ocr(seq=1, t_us=T0 - 40 * MS), ocr(seq=2, t_us=T0 + 10 * MS)])
    pairing = pairing_from_window(window)
    assert pairing.matched == {Modality.AUDIO: 5, Modality.OCR: 1}
    assert pairing.inferred == 2


def test_baseline_pairs_audio_and_sensor_of_a_fault_free_feed_exactly() -> None:
    feed = generate(FaultSpec.none(), 2, 3, seed=3)
    grid, windows = GridAligner(), []
    for arrival, token in feed.feed:
        windows += grid.add(token, arrival).windows
    windows += grid.flush(feed.feed[-1][0]).windows
    result = score([w.pairing() for w in windows], Truth(feed.truth))
    # A stream's first frame may come before its first chunk; a chunk paired with it is wrong.
    assert result.misaligned_by_modality[Modality.AUDIO] <= 2
    assert result.misaligned_by_modality[Modality.SENSOR] == 0


def test_lockstep_pairs_a_fault_free_feed_without_misalignment() -> None:
    report = run_align_bench(AlignBenchOptions(streams=2, seconds=5, seed=3, repeats=1,
                                               timing_runs=1, faults=FaultSpec.none()))
    assert report["misaligned_by_modality"]["lockstep"]["audio"]["max"] < 0.01
    assert report["misaligned_by_modality"]["lockstep"]["sensor"]["max"] < 0.01


def test_lockstep_misaligns_under_one_percent_of_windows_where_the_baseline_is_far_worse(
) -> None:
    # The configuration: 4 streams x 20 s, seed 7, the default fault spectrum.
    report = run_align_bench(AlignBenchOptions(repeats=1, timing_runs=1))
    assert report["misaligned_rate"]["lockstep"]["max"] <= 0.01
    assert report["misaligned_rate"]["baseline"]["min"] >= 0.5
    assert report["ledger"]["lockstep"]["unaccounted"] == 0
    assert report["ratios"]["misaligned_baseline_over_lockstep"]["min"] > 50


def test_bench_report_scores_both_aligners_on_the_same_feed() -> None:
    report = run_align_bench(AlignBenchOptions(streams=1, seconds=2, seed=5, repeats=1))
    for side in ("lockstep", "baseline"):
        assert report["windows"][side]["median"] > 0
        assert 0.0 <= report["misaligned_rate"][side]["median"] <= 1.0
        assert 0.0 <= report["partial_rate"][side]["median"] <= 1.0
        assert report["ledger"][side]["unaccounted"] == 0
        assert report["tokens_per_s"][side]["median"] > 0
        assert report["tokens_per_reference_unit"][side]["median"] > 0
        errors = report["alignment_error_ms"][side]
        assert errors["p50"] is None or 0 <= errors["p50"]["median"] <= errors["p99"]["median"]
    assert report["faults"]["drop_rate"] == 0.15 and report["seed"] == 5
    assert report["tokens"]["delivered"]["median"] < report["tokens"]["captured"]["median"]
    json.dumps(report)


def test_repetitions_take_consecutive_seeds_and_report_each_figure_with_its_spread() -> None:
    report = run_align_bench(AlignBenchOptions(streams=1, seconds=2, seed=5, repeats=3,
                                               timing_runs=2))
    assert report["seeds"] == [5, 6, 7] and report["timing_runs"] == 2
    assert [rep["seed"] for rep in report["repetitions"]] == [5, 6, 7]
    for figure in ("misaligned_rate", "tokens_per_cpu_s", "windows"):
        s = report[figure]["lockstep"]
        assert s["n"] == 3 and s["min"] <= s["median"] <= s["max"]
    # The baseline is the cheaper operator: the ratio is taken within each repetition.
    speed = report["ratios"]["throughput_lockstep_over_baseline"]
    assert speed["n"] == 3 and speed["max"] < 1.0
    assert report["machine"]["reference_units_per_cpu_s"]["n"] == 3 * 3


def test_bench_report_is_the_same_for_the_same_seed_apart_from_timings() -> None:
    options = AlignBenchOptions(streams=1, seconds=2, seed=9, repeats=1, timing_runs=1)
    first, again = run_align_bench(options), run_align_bench(options)
    timed = ("tokens_per_s", "tokens_per_cpu_s", "tokens_per_reference_unit",
             "operator_seconds", "cpu_share", "machine", "repetitions", "ratios")
    for key in timed:
        del first[key], again[key]
    assert first == again


def test_human_output_has_the_table_and_the_ratio_lines() -> None:
    text = render_align(run_align_bench(AlignBenchOptions(streams=1, seconds=1, repeats=1)))
    assert "misaligned: lockstep" in text and "vs baseline" in text
    assert "tokens/s" in text and "error p99" in text and "machine:" in text
    assert "tokens/ref. unit" in text


def test_bench_align_command_prints_json_with_the_documented_keys() -> None:
    result = CliRunner().invoke(bench, ["align", "--json", "--seconds", "1", "--streams", "1",
                                        "--seed", "3", "--drop-rate", "0.1", "--jitter-ms", "4",
                                        "--repeats", "1", "--timing-runs", "1"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["faults"]["drop_rate"] == 0.1 and report["faults"]["jitter_ms"] == 4.0
    assert report["seed"] == 3 and report["streams"] == 1
    for key in ("misaligned_rate", "partial_rate", "windows", "tokens_per_s",
                "tokens_per_cpu_s", "tokens_per_reference_unit"):
        assert set(report[key]) == {"lockstep", "baseline"}
    assert set(report["alignment_error_ms"]["lockstep"]) >= {"p50", "p99"}
    assert {"cores", "cpu_model", "load_before", "steal_share"} <= set(report["machine"])


def test_bench_align_command_rejects_a_drop_rate_out_of_range() -> None:
    result = CliRunner().invoke(bench, ["align", "--drop-rate", "0.95"])
    assert result.exit_code == 2 and "drop-rate" in result.output
