"""This repository's own Dagster code location (``workspace.yaml`` loads ``pipelines.definitions``): the assets of
``assets/`` on the resources of ``resources/``, run by rocketlake's executor. The library itself is the ``rocketlake``
package; these three folders import it exactly as a user's project does and are not part of the wheel."""
