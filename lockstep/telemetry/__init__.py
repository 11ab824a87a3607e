"""The SLA metrics every stage records into, the SLO accounting, and the HTTP endpoint."""
