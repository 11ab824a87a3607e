"""Text for ``lockstep publish SOURCE``: the progress line and the summary (no I/O here)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from lockstep.media.publishing import StreamProgress
from lockstep.producer.delivery import DeliveryStats

_ORDER = ("video", "audio", "ocr", "sensor")
_BAR = 20


def progress_line(progress: Sequence[StreamProgress], elapsed_s: float,
                  bytes_sent: int) -> str:
    """One line: a bar over the declared media time (when known) and the rates."""
    tokens = sum(sum(p.sent.values()) for p in progress)
    declared = [p.declared_s for p in progress]
    media = sum(p.media_s for p in progress)
    if all(d for d in declared):
        share = min(1.0, media / max(1e-9, sum(d or 0.0 for d in declared)))
        filled = round(share * _BAR)
        bar = f"[{'#' * filled}{'.' * (_BAR - filled)}] {share:4.0%} "
    else:
        bar = f"media {media:7.1f} s "
    elapsed = max(elapsed_s, 1e-9)
    done = sum(p.done for p in progress)
    return (f"{bar}{tokens} tokens  {tokens / elapsed:,.0f} tok/s  "
            f"{bytes_sent / elapsed / 1e6:.2f} MB/s  {done}/{len(progress)} streams done")


def summary(progress: Sequence[StreamProgress], stats: DeliveryStats, undelivered: int,
            seconds: float, publish_ms: tuple[float, float] | None,
            perception: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """What was sent, per stream and in all, as a JSON-ready mapping.

    Args:
        progress: Every stream's progress.
        stats: The publisher's delivery statistics.
        undelivered: Tokens still in flight when publishing ended.
        seconds: Wall time of the run.
        publish_ms: Capture → acknowledgement P50 and P99, when measured.
        perception: Per recogniser that ran: runs, tokens, skipped work and lag
            (:meth:`~lockstep.media.perception.PerceptionMetrics.summary`).
    """
    total: Counter[str] = Counter()
    for p in progress:
        total.update(p.sent)
    tokens = sum(total.values())
    elapsed = max(seconds, 1e-9)
    return {
        "ok": all(p.complete for p in progress) and not sum(stats.failed.values())
        and not undelivered,
        "streams": {p.plan.stream_id: {
            "source": p.plan.source,
            "tokens": {m: p.sent[m] for m in _ORDER if p.sent[m]},
            "media_s": round(p.media_s, 3),
            "complete": p.complete,
            "error": p.error,
            "perception_errors": list(p.perception_errors),
        } for p in progress},
        "tokens_published": tokens,
        "tokens_by_modality": {m: total[m] for m in _ORDER if total[m]},
        "acked": sum(stats.acked.values()),
        "failed": sum(stats.failed.values()),
        "undelivered": undelivered,
        "delivery": {m: {"sent": stats.sent.get(m, 0), "acked": stats.acked.get(m, 0),
                         "failed": stats.failed.get(m, 0)}
                     for m in _ORDER if stats.sent.get(m)},
        "delivery_line": stats.line(),
        "delivery_errors": list(stats.errors),
        "bytes": stats.bytes_sent,
        "seconds": round(seconds, 3),
        "tokens_per_s": round(tokens / elapsed, 1),
        "mb_per_s": round(stats.bytes_sent / elapsed / 1e6, 3),
        "publish_p50_ms": publish_ms[0] if publish_ms else None,
        "publish_p99_ms": publish_ms[1] if publish_ms else None,
        "perception": perception or {},
    }


def render_summary(report: dict[str, Any]) -> str:
    """The summary for people."""
    kinds = ", ".join(f"{n} {m}" for m, n in report["tokens_by_modality"].items()) or "nothing"
    lines = [f"published {kinds} ({report['tokens_published']} tokens) on "
             f"{len(report['streams'])} stream(s) in {report['seconds']:.2f} s "
             f"({report['tokens_per_s']:,.0f} tokens/s, {report['mb_per_s']:.2f} MB/s)"]
    for sid, s in report["streams"].items():
        counts = "  ".join(f"{m} {n}" for m, n in s["tokens"].items()) or "no tokens"
        problems = ([s["error"]] if s["error"] else []) + s["perception_errors"]
        state = "complete" if s["complete"] else f"INCOMPLETE: {'; '.join(problems)}"
        lines.append(f"  {sid}  {s['source']}  {counts}  ({s['media_s']:.2f} s media)  {state}")
    lines.append(f"acknowledged {report['acked']}, failed {report['failed']}, "
                 f"undelivered {report['undelivered']} ({report['delivery_line']})")
    if report["publish_p50_ms"] is not None:
        lines.append(f"publish latency (capture → ack) p50 {report['publish_p50_ms']} ms, "
                     f"p99 {report['publish_p99_ms']} ms")
    lines.extend(_perception_line(m, p) for m, p in report["perception"].items())
    lines.extend(f"  delivery error: {e}" for e in report["delivery_errors"])
    return "\n".join(lines)


_RUNS = {"ocr": "frames read", "asr": "utterances heard"}
_SKIPPED = {"ocr": "frames skipped while reading", "asr": "utterances dropped"}


def _perception_line(modality: str, p: dict[str, Any]) -> str:
    lag = (f"lag p50 {p['lag_p50_ms']} ms, p99 {p['lag_p99_ms']} ms, max {p['lag_max_ms']} ms"
           if p["lag_p50_ms"] is not None else "no lag measured")
    failed = f", {p['failed']} failed" if p["failed"] else ""
    return (f"perception {modality}: {p['runs']} {_RUNS.get(modality, 'runs')}, "
            f"{p['tokens']} tokens, {lag}; {p['skipped']} "
            f"{_SKIPPED.get(modality, 'skipped')}{failed}")
