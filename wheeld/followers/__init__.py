"""Those who follow a table from the broker: the marquee, the serial display, ``status``."""
