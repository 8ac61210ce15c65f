"""The Cammegh Slingshot 2 (SS2) driver for wheeld, a distribution of its own.

wheeld finds :data:`DRIVER` through the ``wheeld.drivers`` entry-point group
(``wheel.driver = "cammegh-ss2"``). The modules: ``decoder`` (the wheel's
lines into wheel events, and the encoder simulators use), ``control`` (which
command to send and when) and ``session`` (the declaration, the
``[wheel.control]`` model and live control behind the driver seam).
"""

from wheeld_cammegh.session import DRIVER

__all__ = ["DRIVER"]
