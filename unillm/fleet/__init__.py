"""Replicas of one model behind one ``Client``: the ``Fleet`` and its replica picker."""
