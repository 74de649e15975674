"""The Dagster side: the assets, checks, schedules, sensors and resources built from a configuration, the run guard
and executor, the warm run launcher, and what a deployment's instance says of an ingestion."""
