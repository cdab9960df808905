"""Fuzzing of the four extender verbs through the real aiohttp app.

``world`` builds the cluster the app answers for, ``corpus`` the well-formed requests mutations
start from, ``mutate`` the seeded structure-aware and byte-level mutator, ``oracle`` the protocol
checks on every answer, ``harness`` drives requests over a keep-alive loopback connection and
counts what went wrong, and ``run`` is the long-run entry point (``hack/fuzz.sh``).
"""
