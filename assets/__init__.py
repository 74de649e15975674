"""rocketlake's Dagster assets, schedules, checks and executor, as builders over the configuration.

The code location itself is ``rocketlake.definitions``; nothing here reads ``rocketlake.yaml`` on import.
"""
