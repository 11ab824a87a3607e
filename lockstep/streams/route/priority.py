"""Priority of routed work: semantic importance and SLA risk (part of the ``route`` stage).

Pure. ``priority = a·S + (1 - a)·R`` with ``a`` = 0.65 by default:

- ``S``, semantic importance in [0, 1], from the window's words (ASR and OCR text): each
  keyword of a domain adds the domain's weight (medical and finance 2.3, safety 1.5,
  commands 1.0 by default); ``S = 1 - exp(-total / 3)``, so one medical word gives 0.54 and
  a sentence of them approaches 1.
- ``R``, the risk of missing the SLA, from the budget left against what the rest of the
  pipeline takes now (the live P99 of queueing plus inference downstream): ``R`` = that P99
  over the remaining budget, capped at 1 (1 once the budget is gone).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lockstep.config.settings import Domain

_WORD = re.compile(r"[a-z0-9']+")


def words(texts: Iterable[str]) -> list[str]:
    """Lower-case words of some texts."""
    return [w for text in texts for w in _WORD.findall(text.lower())]


@dataclass(frozen=True)
class Lexicon:
    """The domains' keywords as sets, built once per configuration for the hot path.

    Attributes:
        domains: Each domain's weight and keywords, in the configuration's order.
        keywords: Every keyword of every domain.
    """

    domains: tuple[tuple[float, frozenset[str]], ...]
    keywords: frozenset[str]

    @classmethod
    def of(cls, domains: Mapping[str, Domain]) -> Lexicon:
        """The lexicon of some domains."""
        sets = tuple((d.weight, frozenset(d.keywords)) for d in domains.values())
        return cls(sets, frozenset().union(*(k for _, k in sets)))

    def importance(self, texts: Iterable[str]) -> float:
        """``S`` in [0, 1] from keyword hits weighted by domain."""
        keywords = self.keywords
        found = [w for text in texts for w in _words(text) if w in keywords]
        if not found:
            return 0.0  # what the sum below gives for no hit: 1 - exp(-0.0)
        total = sum(weight * sum(1 for w in found if w in keys) for weight, keys in self.domains)
        return 1.0 - math.exp(-total / 3.0)

    def has_intent(self, texts: Iterable[str]) -> bool:
        """Whether the text names anything a domain knows (a clear intent)."""
        keywords = self.keywords
        return any(w in keywords for text in texts for w in _words(text))


@functools.lru_cache(maxsize=1024)
def _words(text: str) -> tuple[str, ...]:
    # Captions and recognised phrases repeat from window to window.
    return tuple(_WORD.findall(text.lower()))


def sla_risk(remaining_us: int, downstream_p99_us: float) -> float:
    """``R`` in [0, 1]: the downstream P99 over the budget left (1 once it is gone)."""
    if remaining_us <= 0:
        return 1.0
    return min(1.0, max(0.0, downstream_p99_us / remaining_us))


def priority(importance: float, risk: float, weight: float) -> float:
    """``a·S + (1 - a)·R``, clamped to [0, 1]."""
    return min(1.0, max(0.0, weight * importance + (1.0 - weight) * risk))
