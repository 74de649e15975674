"""``rocketlake demo`` and ``rocketlake ui``: the demo's project, its downstream assets, and the UI over it."""
