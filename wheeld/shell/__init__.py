"""The thin shell: the serial link, the journal, the broker, systemd and metrics.

It carries out what the table pipeline decides; it decides nothing itself.
Every timer is on one scheduler (``scheduler.py``), every callback handed one
clock (``clock.py``); the periodic jobs are units in ``jobs/``.
"""
