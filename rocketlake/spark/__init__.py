"""The Spark side: the ``rocketmq`` data source (``source.py``), body decoding, the consume stage, the landing of a
window (``materialize.py``), sessions with Delta (``session.py``) and the Spark Connect server's driver program."""
