"""The body of ``lockstep publish --synthetic`` (part of the CLI's output layer).

Synthetic streams are published in real time at the wall clock. Their capture grid is
anchored at the Unix epoch, so ``seq = round(t_us / period)``: publishing again under the
same stream ids continues every ``seq`` where the clock says, with no state kept between
runs (the captures in between show as a gap, as a camera's frame counter would), and the
window keys (``window_seq`` = the anchor frame's ``seq``) never repeat. Unique ids per run
would do the same but break what follows a stream by its id (``subscribe --stream``,
dashboards).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

import click

from lockstep.agents.app import run_async
from lockstep.config.settings import Settings
from lockstep.errors import BrokerError, ConfigError
from lockstep.media.progress import progress_line, render_summary, summary
from lockstep.media.publishing import StreamPlan, StreamProgress
from lockstep.producer.checks import check_stream_ids
from lockstep.producer.publisher import PublishReport
from lockstep.producer.realtime import publish_synthetic
from lockstep.producer.synthetic import FrameFormat, SyntheticConfig
from lockstep.telemetry.metrics import Telemetry
from lockstep.topics.schemas import Modality

#: ``publish`` options that only apply to media SOURCEs (their parameter names).
MEDIA_ONLY = ("anchor", "sidecar_ocr", "sidecar_sensor", "asr", "asr_grammar", "ocr",
              "ocr_every", "input_format", "compression", "idempotence")
_CHANNELS = {"gray8": 1, "rgb24": 3}
#: Room in a record for everything but the frame's bytes.
_RECORD_OVERHEAD = 4096


def synthetic_ids(stream_ids: Sequence[str], streams: int, prefix: str) -> list[str]:
    """The stream ids: ``--stream`` (one per stream, or one numbered), else PREFIXcam<i>.

    Raises:
        ConfigError: The ids do not fit the streams, repeat, or break the wire contract.
    """
    if not stream_ids:
        ids = [f"{prefix}cam{i}" for i in range(streams)]
    elif len(stream_ids) == 1 and streams > 1:
        ids = [f"{stream_ids[0]}-{i}" for i in range(streams)]
    elif streams in (1, len(stream_ids)):
        ids = list(stream_ids)
    else:
        raise ConfigError(f"{len(stream_ids)} stream ids for {streams} streams: give one id "
                          "(numbered ID-0, ID-1...) or one per stream")
    if len(set(ids)) != len(ids):
        raise ConfigError(f"stream ids must differ: {ids}")
    check_stream_ids(ids)
    return ids


def synthetic_config(*, fps: float | None, width: int | None, height: int | None,
                     video_format: FrameFormat, jpeg_quality: int, chunk_ms: float,
                     video: bool, audio: bool, max_record_bytes: int) -> SyntheticConfig:
    """The streams' rates, frame size and encoding from the ``publish`` options.

    One of ``width`` and ``height`` alone keeps the default 4:3 aspect ratio.

    Raises:
        ConfigError: A raw frame of that size does not fit in a record.
    """
    default = SyntheticConfig()
    if width and not height:
        height = max(2, round(width * default.height / default.width))
    elif height and not width:
        width = max(2, round(height * default.width / default.height))
    w, h = width or default.width, height or default.height
    channels = _CHANNELS.get(video_format)
    if video and channels and w * h * channels > max_record_bytes - _RECORD_OVERHEAD:
        raise ConfigError(f"a {w}x{h} {video_format} frame is {w * h * channels:,} bytes, "
                          f"more than a record holds ({max_record_bytes:,} bytes, "
                          "kafka.max_record_bytes): use --format jpeg or a smaller size")
    withheld = frozenset(m for m, on in ((Modality.VIDEO, video), (Modality.AUDIO, audio))
                         if not on)
    return SyntheticConfig(fps=fps or default.fps, width=w, height=h, video_format=video_format,
                           jpeg_quality=jpeg_quality, audio_chunk_ms=chunk_ms,
                           withheld=withheld)


def publish_synthetic_command(settings: Settings, stream_ids: Sequence[str], seconds: float,
                              config: SyntheticConfig, *, delivery_timeout: float,
                              progress: bool | None, as_json: bool) -> dict[str, Any]:
    """Publish the streams in real time, show progress, print the summary; return it.

    Raises:
        BrokerError: The broker stayed unreachable (nothing was sent), or tokens were not
            acknowledged within ``delivery_timeout`` (after the summary).
    """
    telemetry = Telemetry()
    streams = {sid: StreamProgress(StreamPlan(sid, "synthetic"), declared_s=seconds)
               for sid in stream_ids}
    show = sys.stderr.isatty() if progress is None else progress

    def tick(report: PublishReport, elapsed: float) -> None:
        _follow(streams, report, min(elapsed, seconds), done=elapsed >= seconds)
        line = progress_line(list(streams.values()), elapsed, report.bytes_sent)
        click.echo(f"\r{line}", err=True, nl=False)

    report = run_async(publish_synthetic(settings.kafka, list(stream_ids), seconds, telemetry,
                                         config=config, delivery_timeout_s=delivery_timeout,
                                         epoch_us=0, on_tick=tick if show else None))
    if show:
        click.echo("", err=True)
    _follow(streams, report, seconds, done=True)
    stage = telemetry.stage_stats().get("publish")
    out = summary(list(streams.values()), report.stats(), 0, report.seconds,
                  (round(stage.p50_ms, 3), round(stage.p99_ms, 3)) if stage else None)
    out.update(
        sent=sum(report.sent.values()), retries=report.retries, refused=0, replay=[],
        replay_reason="",
        video={"format": config.video_format, "width": config.width, "height": config.height,
               "fps": config.fps} if Modality.VIDEO not in config.withheld else None,
        seq={sid: {m: list(span) for (s, m), span in sorted(report.seqs.items()) if s == sid}
             for sid in stream_ids})
    click.echo(json.dumps(out) if as_json else "\n".join([render_summary(out), *_notes(out)]))
    if not report.ok:
        first = f"; first error: {report.errors[0]}" if report.errors else ""
        raise BrokerError(f"{len(report.failed):,} of {sum(report.sent.values()):,} tokens "
                          f"not delivered ({report.line()}){first}")
    return out


def _follow(streams: dict[str, StreamProgress], report: PublishReport, media_s: float, *,
            done: bool) -> None:
    for sid, stream in streams.items():
        stream.sent = Counter(report.by_stream.get(sid, {}))
        stream.media_s = media_s
        stream.done = done


def _notes(out: dict[str, Any]) -> list[str]:
    video = out["video"]
    lines = [f"video {video['width']}x{video['height']} {video['format']} at "
             f"{video['fps']:g} fps"] if video else []
    spans = [f"{sid} {m} {first:,}-{last:,}" for sid, seqs in list(out["seq"].items())[:3]
             for m, (first, last) in seqs.items() if m == "video" or not video]
    if spans:
        more = ", …" if len(out["seq"]) > 3 else ""
        lines.append(f"seq from the capture clock (continues across runs under the same ids): "
                     f"{', '.join(spans[:3])}{more}")
    return lines
