"""Configuration: loading (TOML, YAML, dicts, ``UNILLM_*`` overrides), checking against the
engine before running, and the semantic router's ``[router]`` table."""
