"""The thin shell: the daemon's life cycle, the serial link, the journal, the broker
(publisher, outbox drain, commands), systemd, HTTP, metrics and the periodic jobs.

It carries out what the table pipeline decides; it decides nothing itself.
Every timer is on one scheduler (``scheduler.py``), every callback handed one
clock (``clock.py``); the periodic jobs are units in ``jobs/``.
"""
