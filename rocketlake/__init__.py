"""rocketlake: Apache RocketMQ topics landed in Delta Lake tables, orchestrated by Dagster, run by PySpark.

One import package. The repository keeps the design card's folders, installed as its subpackages:
``rocketlake.assets`` (Dagster assets, schedules, checks, executor), ``rocketlake.pipelines`` (the ingestion
engine, free of Dagster), ``rocketlake.resources`` (Spark, the RocketMQ wire client, the local runtime). The code
location (``rocketlake.definitions``), the ``rocketlake`` command (``rocketlake.cli``) and the demo
(``rocketlake.demo``) sit on top of all three.
"""

__version__ = "0.1.0"
