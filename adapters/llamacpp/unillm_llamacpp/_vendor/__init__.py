"""Third-party code kept as it was published (see each module's notice)."""
