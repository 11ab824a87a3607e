"""Optional CPU perception on generated media: OCR reads drawn captions, ASR hears speech.

The ``.[asr]`` and ``.[ocr]`` extras come with ``.[dev]``. The ASR test listens to
tests/fixtures/emergency-stop.wav: "emergency stop" spoken by espeak-ng 1.51
(``espeak-ng -s 140``), 16 kHz mono 16-bit PCM, made once and committed so that the test
needs no speech synthesiser.
"""

from __future__ import annotations

import sys
import wave
from pathlib import Path

import pytest

from lockstep.errors import ConfigError
from lockstep.media import perception
from lockstep.media.source import MediaOptions, MediaSource, Perception
from lockstep.media.synth import SynthSpec, write_media
from lockstep.topics.schemas import AudioToken, OcrToken

pytestmark = pytest.mark.unit

T0 = 1_800_000_000_000_000


def test_a_missing_extra_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in ("rapidocr_onnxruntime", "pocketsphinx"):
        monkeypatch.setitem(sys.modules, module, None)  # None in sys.modules: ImportError
    with pytest.raises(ConfigError, match=r"pip install 'lockstep-stream\[ocr\]'"):
        perception.require("rapidocr_onnxruntime")
    with pytest.raises(ConfigError, match=r"pip install 'lockstep-stream\[asr\]'"):
        perception.require("pocketsphinx")


def test_ocr_reads_the_captions_drawn_into_sampled_frames(tmp_path: Path) -> None:
    truth = write_media(tmp_path, SynthSpec(seconds=1.0, captions=("EXIT 12", "GATE 4")))
    source = MediaSource(str(truth.media), MediaOptions(anchor="file", audio=False,
                                                        ocr_every_s=0.5))
    reader = perception.TextReader()
    found = [t for t in source.tokens("cam", Perception(ocr=reader)) if isinstance(t, OcrToken)]
    source.close()
    assert [(t.t_us - T0, t.text) for t in found] == [(0, "EXIT 12"), (500_000, "GATE 4")]
    assert [t.seq for t in found] == [0, 1]
    for token in found:
        assert token.confidence > 0.8
        x, y, w, h = token.bbox
        tx, ty, tw, th = truth.caption_boxes[token.text]
        assert abs(x - tx) < 0.05 and abs(y - ty) < 0.05
        assert abs(w - tw) < 0.1 and abs(h - th) < 0.1


SPEECH = Path(__file__).resolve().parents[1] / "fixtures" / "emergency-stop.wav"


def _speech(path: Path) -> bytes:
    """16 kHz mono 16-bit PCM of a WAV file."""
    with wave.open(str(path), "rb") as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (16_000, 1, 2)
        return wav.readframes(wav.getnframes())


def test_asr_puts_the_recognised_utterance_on_the_chunk_that_ends_it(tmp_path: Path) -> None:
    speech = _speech(SPEECH)
    truth = write_media(tmp_path, SynthSpec(seconds=3.0, tone_hz=0.0, speech=speech,
                                            speech_at_s=0.5))
    grammar = tmp_path / "commands.gram"
    grammar.write_text("#JSGF V1.0;\ngrammar commands;\n"
                       "public <command> = emergency stop | turn left | open the door;\n")
    source = MediaSource(str(truth.media), MediaOptions(anchor="file", video=False))
    asr = perception.SpeechRecognizer(grammar)
    chunks = [t for t in source.tokens("cam", Perception(asr=asr)) if isinstance(t, AudioToken)]
    source.close()
    heard = [c for c in chunks if c.asr_text]
    assert [c.asr_text for c in heard] == ["emergency stop"]
    (chunk,) = heard
    assert chunk.asr_confidence is not None and 0.0 < chunk.asr_confidence <= 1.0
    speech_end_s = 0.5 + len(speech) / 2 / 16_000
    assert speech_end_s - 0.1 < (chunk.t_us - T0) / 1e6 < speech_end_s + 1.0
    assert len(chunks) == truth.audio_chunks()
