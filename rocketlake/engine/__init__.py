"""The ingestion engine: the configuration as a contract, windows, planning, the ledger, the accounting, offsets and
progress, orderly locks and the run in order. Free of Dagster, Spark and Delta (tests/unit/test_layers.py)."""
