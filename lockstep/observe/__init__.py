"""What the pipeline did, for people: scrapes, time series, the ledger, verdicts, reports."""
