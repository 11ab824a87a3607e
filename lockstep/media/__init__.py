"""Real media on the bus: PyAV decoding, JSONL sidecars, perception extras, a generator.

- :mod:`lockstep.media.timing`: pure pieces (PTS → capture time, frame sampling, audio
  chunking, pacing).
- :mod:`lockstep.media.source`: a PyAV source that yields video and audio tokens.
- :mod:`lockstep.media.sidecar`: OCR and sensor tokens from JSONL files (docs/media.md).
- :mod:`lockstep.media.recognizers`: optional ASR (pocketsphinx) and OCR (rapidocr).
- :mod:`lockstep.media.publishing`: several streams published in parallel.
- :mod:`lockstep.media.patternclip`: writes an mp4 plus sidecars with ground-truth timestamps.
"""
