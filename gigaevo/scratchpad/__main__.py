"""``python -m gigaevo.scratchpad``: see ``gigaevo.scratchpad.cli``."""

import sys

from gigaevo.scratchpad.cli import main

sys.exit(main())
