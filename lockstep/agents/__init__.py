"""Thin Faust agents: decode, call the stage operator, produce."""
