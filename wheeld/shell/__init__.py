"""The thin shell: the serial link, the journal, the broker, systemd and metrics.

It carries out what the table pipeline decides; it decides nothing itself.
"""
