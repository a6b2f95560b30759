"""The ``unillm`` command."""
