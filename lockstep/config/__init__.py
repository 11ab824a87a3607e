"""Settings: one pydantic-settings model (``LOCKSTEP_…``) and its sections."""
