"""The test rig, public: what a driver's distribution needs to test itself from an
installed wheeld, without the repository's own ``tests`` package.

``wheeld.testing.rig``: a mosquitto, a pty wheel, a daemon process, a subscriber,
a notify socket, free ports, every wait with a timeout. ``wheeld.testing.golden``:
captures replayed to their golden outputs. Imported by tests only: never by ``run``.
"""
