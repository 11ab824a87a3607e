"""The base of every settings section: frozen, and a key it does not know is an error."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A section of :class:`~lockstep.config.settings.Settings` (``LOCKSTEP_<SECTION>__…``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
