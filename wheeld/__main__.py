"""``python -m wheeld``."""

import sys

from wheeld.cli import main

sys.exit(main())
