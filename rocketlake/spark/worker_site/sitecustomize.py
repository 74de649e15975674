"""Run by Python's ``site`` at the start of each Python process Spark starts for rocketlake (its workers, their
daemons, the data source's planners): rocketlake puts this folder on their PYTHONPATH (``spark.session``).

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip) first on its Python processes' path. Python
compiles a zip's modules from source at every import (zipimport writes no bytecode): 1 CPU-second more than the
installed, byte-compiled PySpark for each daemon, and a Spark application starts four (benchmarks/README.md). When
that zip is the copy pip's PySpark carries of itself (``$SPARK_HOME`` is the installed ``pyspark`` package, whose
folder is on the path), the zips leave the path and the same modules come from the installed package. A Spark
distribution of its own (no package there) keeps its zips. Then the ``sitecustomize`` this one hides, if any, runs.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _installed_copies(path: list[str]) -> set[str]:
    """The entries of ``path`` that are the zips of a PySpark installed as a package on ``path``."""
    here = {os.path.abspath(p or os.curdir) for p in path}
    drop = set()
    for entry in path:
        if os.path.basename(entry) != "pyspark.zip":
            continue
        lib = os.path.dirname(entry)
        home = os.path.dirname(os.path.dirname(lib))  # $SPARK_HOME/python/lib/pyspark.zip
        site = os.path.dirname(home)
        if not (os.path.isfile(os.path.join(home, "__init__.py")) and os.path.abspath(site) in here):
            continue
        drop.add(entry)
        if os.path.isfile(os.path.join(site, "py4j", "__init__.py")):
            drop.update(p for p in path if os.path.dirname(p) == lib and os.path.basename(p).startswith("py4j-"))
    return drop


def _run_the_hidden_one() -> None:
    """The next ``sitecustomize`` on the path (a distribution's own), as ``site`` would have run it."""
    mine = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != mine]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules[__name__] = module
        spec.loader.exec_module(module)


if __name__ == "sitecustomize":  # as ``site`` imports it (not as rocketlake.spark.worker_site.sitecustomize)
    _dropped = _installed_copies(sys.path)
    if _dropped:
        sys.path[:] = [p for p in sys.path if p not in _dropped]
    _run_the_hidden_one()
