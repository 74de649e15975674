"""The ``rocketlake`` command: argument parsing and printing over the library's services."""
