"""Building a vision-language prompt from a window: shared by the cpu, trtllm and openai engines.

The frame becomes the image; ASR, OCR and sensor readings become text, each with the
confidence the gate saw, and the route tells the model what it is missing. The messages use
the Hugging Face chat format (``{"type": "image"}`` placeholders), which Qwen2.5-VL's chat
template, TensorRT-LLM's multimodal input loader and OpenAI-compatible servers all accept
(the last with the image inlined as a data URL by :func:`openai_messages`).
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from lockstep.engines.base import WorkItem
from lockstep.errors import EngineUnavailable, install_hint
from lockstep.topics.payloads import pixels
from lockstep.topics.schemas import VideoToken, Window

SYSTEM = ("You are the perception model of a real-time assistant. Describe what is happening "
          "in one short sentence, using every signal given and saying which are missing.")

Image = npt.NDArray[np.uint8]


@dataclass(frozen=True)
class Prompt:
    """A chat prompt: system text, the user's text and the images it refers to."""

    system: str
    text: str
    images: list[Image] = field(default_factory=list)
    #: Why an image could not be used (undecodable or inter-coded frame), if any.
    image_note: str = ""

    def messages(self) -> list[dict[str, Any]]:
        """Hugging Face chat messages, with one ``{"type": "image"}`` per image."""
        content: list[dict[str, Any]] = [{"type": "image"} for _ in self.images]
        content.append({"type": "text", "text": self.text})
        return [{"role": "system", "content": self.system},
                {"role": "user", "content": content}]


def build_prompt(item: WorkItem, max_pixels: int = 224 * 224) -> Prompt:
    """The prompt for one work item.

    Frames are resized to at most ``max_pixels``; a degraded item (``reduce_vision``) gets a
    quarter of that, so the vision encoder spends a quarter of the tokens.
    """
    request = item.request
    window = request.window
    images: list[Image] = []
    note = ""
    if window.video is not None and request.route != "text_only":
        budget = max_pixels // 4 if item.reduce_vision else max_pixels
        try:
            images.append(fit(decode_frame(window.video), budget))
        except ValueError as exc:
            note = f"frame unusable: {exc}"
    lines = [f"Stream {window.stream_id}, window {window.window_seq}, route {request.route}."]
    lines.extend(_signals(window, request.confidence))
    if window.missing:
        lines.append("Missing: " + ", ".join(m.value for m in window.missing) + ".")
    if note:
        lines.append(f"Video: {note}.")
    lines.append("What is happening?")
    return Prompt(SYSTEM, "\n".join(lines), images, note)


def _signals(window: Window, confidence: dict[str, float]) -> list[str]:
    lines = []
    speech = [(a.asr_text, a.asr_confidence) for a in window.audio if a.asr_text]
    if speech:
        text = " ".join(dict.fromkeys(t for t, _ in speech if t))
        conf = max((c for _, c in speech if c is not None), default=confidence.get("audio"))
        lines.append(f"Speech{_conf(conf)}: {text}")
    elif window.audio:
        lines.append(f"Audio: {len(window.audio)} chunks, no transcript.")
    texts = list(dict.fromkeys(o.text for o in window.ocr if o.text))
    if texts:
        conf = max(o.confidence for o in window.ocr)
        lines.append(f"On-screen text{_conf(conf)}: " + " | ".join(texts))
    for s in window.sensor:
        values = ", ".join(f"{v:.3g}" for v in s.values[:8])
        lines.append(f"Sensor {s.name} [{s.unit}]: {values}")
    return lines


def _conf(value: float | None) -> str:
    return "" if value is None else f" (confidence {value:.2f})"


def decode_frame(frame: VideoToken) -> Image:
    """A frame as an RGB uint8 array.

    Raises:
        ValueError: The frame cannot be decoded on its own (h264 carries inter-coded frames)
            or its bytes are corrupt.
        EngineUnavailable: JPEG/PNG decoding needs Pillow (the ``cpu`` extra).
    """
    raw = pixels(frame)
    if raw is not None:
        return np.repeat(raw[:, :, None], 3, axis=2) if raw.ndim == 2 else raw
    if frame.format not in ("jpeg", "png"):
        raise ValueError(f"{frame.format} frames are not decoded one by one")
    try:
        from PIL import Image as PILImage
        from PIL import UnidentifiedImageError
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise EngineUnavailable("decoding JPEG/PNG frames needs Pillow: "
                                + install_hint("cpu")) from exc
    try:
        with PILImage.open(io.BytesIO(frame.data)) as img:
            return np.asarray(img.convert("RGB"))
    except (UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"corrupt {frame.format} frame: {exc}") from exc


def fit(image: Image, max_pixels: int) -> Image:
    """Downscale (nearest neighbour, integer-free) so that height*width <= ``max_pixels``."""
    h, w = image.shape[:2]
    if h * w <= max_pixels:
        return image
    scale = (max_pixels / (h * w)) ** 0.5
    nh, nw = max(1, int(h * scale)), max(1, int(w * scale))
    rows = (np.arange(nh) * h // nh).astype(np.intp)
    cols = (np.arange(nw) * w // nw).astype(np.intp)
    return np.ascontiguousarray(image[rows][:, cols])


def png_data_url(image: Image) -> str:
    """An image as a ``data:image/png;base64,…`` URL (for OpenAI-compatible servers)."""
    try:
        from PIL import Image as PILImage
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise EngineUnavailable("encoding images needs Pillow: "
                                + install_hint("cpu")) from exc
    buf = io.BytesIO()
    PILImage.fromarray(image).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def openai_messages(prompt: Prompt) -> list[dict[str, Any]]:
    """The prompt as OpenAI chat messages, images inlined as data URLs."""
    content: list[dict[str, Any]] = [
        {"type": "image_url", "image_url": {"url": png_data_url(img)}} for img in prompt.images]
    content.append({"type": "text", "text": prompt.text})
    return [{"role": "system", "content": prompt.system},
            {"role": "user", "content": content}]
