"""Optional CPU perception on generated media: OCR reads drawn captions, ASR hears speech.

The recognisers' tasks (what the perception child processes run) are driven in-process
here, on the tokens a :class:`MediaSource` publishes. The ``.[asr]`` and ``.[ocr]`` extras
come with ``.[dev]``. The ASR tests listen to tests/fixtures/emergency-stop.wav: "emergency
stop" spoken by espeak-ng 1.51 (``espeak-ng -s 140``), 16 kHz mono 16-bit PCM, made once and
committed so that the test needs no speech synthesiser.
"""

from __future__ import annotations

import sys
import wave
from pathlib import Path

import pytest

from lockstep.errors import ConfigError
from lockstep.media import recognizers as perception
from lockstep.media.patternclip import SynthSpec, write_media
from lockstep.media.recognizer_tasks import (
    AsrConfig,
    ChunkJob,
    FrameJob,
    Heard,
    HearSpeech,
    OcrConfig,
    Reading,
    ReadText,
    Skipped,
)
from lockstep.media.source import MediaOptions, MediaSource
from lockstep.topics.schemas import AudioToken, VideoToken

pytestmark = pytest.mark.unit

T0 = 1_800_000_000_000_000


def test_a_missing_extra_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in ("rapidocr_onnxruntime", "pocketsphinx"):
        monkeypatch.setitem(sys.modules, module, None)  # None in sys.modules: ImportError
    with pytest.raises(ConfigError, match=r"pip install -e '\.\[ocr\]' in the Lockstep checkout"):
        perception.require("rapidocr_onnxruntime")
    with pytest.raises(ConfigError, match=r"pip install -e '\.\[asr\]' in the Lockstep checkout"):
        perception.require("pocketsphinx")


def _readings(source: MediaSource, config: OcrConfig) -> list[Reading]:
    task = ReadText(config)
    found: list[Reading] = []
    for token in source.tokens("cam"):
        assert isinstance(token, VideoToken)
        found += task.handle(FrameJob(token.t_us, token.format, token.width, token.height,
                                      token.data, 0.0))
    source.close()
    return found


def test_ocr_reads_the_captions_of_frames_sampled_on_its_interval(tmp_path: Path) -> None:
    truth = write_media(tmp_path, SynthSpec(seconds=1.0, captions=("EXIT 12", "GATE 4")))
    source = MediaSource(str(truth.media), MediaOptions(anchor="file", audio=False))
    found = _readings(source, OcrConfig(every_us=500_000, change=0.0))
    assert [(r.t_us - T0, [b.text for b in r.boxes]) for r in found] == [
        (0, ["EXIT 12"]), (500_000, ["GATE 4"])]
    for reading in found:
        (box,) = reading.boxes
        assert box.confidence > 0.8
        x, y, w, h = box.bbox
        tx, ty, tw, th = truth.caption_boxes[box.text]
        assert abs(x - tx) < 0.05 and abs(y - ty) < 0.05
        assert abs(w - tw) < 0.1 and abs(h - th) < 0.1


def test_ocr_reads_a_new_caption_as_soon_as_the_picture_changes(tmp_path: Path) -> None:
    # captions change every 0.4 s, the interval is 10 s: only the changes trigger a read (a
    # new caption changes about a fifth of the picture; the moving square a few cells)
    truth = write_media(tmp_path, SynthSpec(seconds=1.2, captions=("EXIT 12", "GATE 4", "STOP"),
                                            caption_every_s=0.4))
    source = MediaSource(str(truth.media), MediaOptions(anchor="file", audio=False))
    found = _readings(source, OcrConfig(every_us=10_000_000, change=0.1))
    assert [(round((r.t_us - T0) / 1e6, 3), [b.text for b in r.boxes]) for r in found] == [
        (0.0, ["EXIT 12"]), (0.4, ["GATE 4"]), (0.8, ["STOP"])]


SPEECH = Path(__file__).resolve().parents[1] / "fixtures" / "emergency-stop.wav"


def _speech(path: Path) -> bytes:
    """16 kHz mono 16-bit PCM of a WAV file."""
    with wave.open(str(path), "rb") as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (16_000, 1, 2)
        return wav.readframes(wav.getnframes())


def _grammar(tmp_path: Path) -> Path:
    grammar = tmp_path / "commands.gram"
    grammar.write_text("#JSGF V1.0;\ngrammar commands;\n"
                       "public <command> = emergency stop | turn left | open the door;\n")
    return grammar


def test_asr_hears_a_command_with_the_confidence_of_its_words_and_when_it_was_said(
        tmp_path: Path) -> None:
    speech = _speech(SPEECH)
    truth = write_media(tmp_path, SynthSpec(seconds=3.0, tone_hz=0.0, speech=speech,
                                            speech_at_s=0.5))
    source = MediaSource(str(truth.media), MediaOptions(anchor="file", video=False))
    task = HearSpeech(AsrConfig(_grammar(tmp_path)))
    heard: list[object] = []
    chunks = 0
    for token in source.tokens("cam"):
        assert isinstance(token, AudioToken)
        chunks += 1
        heard += task.handle(ChunkJob(token.t_us, token.data, 0.0))
    heard += task.finish()
    source.close()
    assert chunks == truth.audio_chunks()
    (utterance,) = heard
    assert isinstance(utterance, Heard) and utterance.text == "emergency stop"
    # the sentence's own posterior splits over a trailing pause or none (about 0.49);
    # its words are certain
    assert utterance.confidence > 0.95
    recording_end_s = 0.5 + len(speech) / 2 / 16_000  # the recording ends in silence
    since_s, until_s = (utterance.since_us - T0) / 1e6, (utterance.until_us - T0) / 1e6
    assert 0.3 < since_s < 0.6 and since_s + 0.8 < until_s < recording_end_s + 0.3


def test_asr_without_a_grammar_is_not_confident_about_synthetic_speech(tmp_path: Path) -> None:
    task = HearSpeech(AsrConfig())
    pcm = bytes(16_000) + _speech(SPEECH) + bytes(32_000)
    heard = [r for i in range(0, len(pcm), 640)
             for r in task.handle(ChunkJob(T0 + i * 1_000_000 // 32_000, pcm[i:i + 640], 0.0))]
    heard += task.finish()
    assert heard and all(isinstance(h, Heard) and h.confidence < 0.3 for h in heard)


def test_a_gap_drops_the_utterance_it_cut_and_the_next_one_is_heard(tmp_path: Path) -> None:
    task = HearSpeech(AsrConfig(_grammar(tmp_path)))
    speech = _speech(SPEECH)
    half = bytes(16_000) + speech[:len(speech) // 2 // 640 * 640]
    results: list[object] = []
    for i in range(0, len(half), 640):
        results += task.handle(ChunkJob(T0 + i * 1_000_000 // 32_000, half[i:i + 640], 0.0))
    results += task.gap()
    resumed = T0 + 10_000_000
    whole = bytes(16_000) + speech + bytes(32_000)
    for i in range(0, len(whole), 640):
        results += task.handle(ChunkJob(resumed + i * 1_000_000 // 32_000, whole[i:i + 640],
                                        0.0))
    assert results[0] == Skipped("utterance")
    (heard,) = results[1:]
    assert isinstance(heard, Heard) and heard.text == "emergency stop"
    assert 0.3 < (heard.since_us - resumed) / 1e6 < 0.7  # timed from the audio after the gap
